"""The device's wake word, chosen in Home Assistant: a new assets pack, served once, checked after.

Stock firmware loads its WakeNet model from the pack in its ``assets`` partition (protocol/assets.py).
Choosing a wake word builds a pack from the board's default pack with the model replaced, checks
it (format, checksum, fits the partition, a model for this chip), makes a one-time URL bound to
the device, calls ``self.assets.set_download_url`` and restarts the device once no conversation
runs. At its next boot the firmware fetches and writes the pack before its OTA check; then the
first ``listen detect`` it sends says whether it wakes on the new word.

What is needed comes from ``<config>/xiaozhi_wake_words/``: a folder per ESP-SR WakeNet model
(``wn9_hiesp/`` with ``_MODEL_INFO_``, ``wn9_data``, ``wn9_index``, as in esp-sr's
``model/wakenet_model/``) and the board's default pack, ``<board>.bin`` (the firmware build's
``generated_assets.bin``, renamed after the board). ``catalog.CATALOG`` names esp-sr's
models with their chips and languages, so the select and Home Assistant's voice settings offer
them before any file is there.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
import logging
import secrets
from typing import Any, Final

from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util.hass_dict import HassKey

from ..const import DOMAIN
from ..device import XiaozhiDevice
from ..errors import translated_error
from ..protocol.assets import AssetsError
from ..protocol.mcp import McpError
from ..restarts import Reason
from .catalog import CATALOG, WakeModel, chips_of
from .files import FOLDER, WakeWordFiles
from .pack import AS_BUILT, ENGINE_MULTINET, engine_of, make_pack, same_word

_LOGGER = logging.getLogger(__name__)

SET_URL_TOOL: Final = "self.assets.set_download_url"
URL_LIFETIME: Final = 3600.0
"""Seconds a pack's URL stays valid: the device fetches it at its next boot."""
IDLE_WAIT: Final = 3600.0
"""Seconds to wait for the device's conversation to end before the change is given up."""
BOOT_WAIT: Final = 600.0
"""Seconds from the restart until the device has fetched its pack and is back."""
LANGUAGES: Final = ("en", "zh", "fr", "ja")
"""The catalog's languages, in the order other languages follow Home Assistant's own in the list."""
MAX_ERROR: Final = 500
"""Characters of an error shown on the entity at most (a state's attributes go to the recorder)."""


class Phase(StrEnum):
    """Where a change of wake word is."""

    WAITING = "waiting"  # for the conversation to end
    RESTARTING = "restarting"  # told to restart; it fetches the pack at boot
    DOWNLOADING = "downloading"
    VERIFYING = "verifying"  # back; its next wake word tells
    DONE = "done"
    FAILED = "failed"


@dataclass(eq=False)
class WakeWordJob:
    """One change of one device's wake word."""

    device: XiaozhiDevice
    option: str
    word: str | None
    """What the device should send as ``listen detect`` text once the pack is in."""
    pack: bytes
    before: str | None = None
    """What the device woke on before (its old pack's word): hearing it after the restart fails the change."""
    phase: Phase = Phase.WAITING
    progress: int = 0
    error: str | None = None
    url: str | None = None
    fetched: asyncio.Event = field(default_factory=asyncio.Event)
    broken: bool = False
    """The download broke off after the device began writing: it has no valid pack now."""
    cause: str | None = None
    """Why this job runs when it restores a pack after a broken download."""
    previous: tuple[str | None, str | None] = (None, None)
    """The device's wake word before (option and phrase), kept again when the change fails."""
    task: asyncio.Task[None] | None = None


DATA_WAKE_WORDS: HassKey[WakeWords] = HassKey(f"{DOMAIN}_wake_words")


class WakeWords:
    """The hub's wake word changes: one job per device, their one-time URLs."""

    def __init__(self, hass: HomeAssistant, files: WakeWordFiles, url_of: Callable[[str], str]) -> None:
        self.hass = hass
        self.files = files
        self._url_of = url_of
        self.jobs: dict[str, WakeWordJob] = {}  # by MAC
        self._urls: dict[str, tuple[WakeWordJob, float]] = {}

    def offers(self, device: XiaozhiDevice) -> list[WakeModel]:
        """The catalog's models for the device's chip: the board's own first, then Home Assistant's language."""
        chip = device.facts.chip.lower() if device.facts is not None else ""
        board = self.files.board_word(device)
        language = self.hass.config.language.split("-")[0].lower()

        def rank(model: WakeModel) -> tuple[int, int, str]:
            own = board is not None and model.name == board.model
            first = language if language in model.languages else model.languages[0]
            group = LANGUAGES.index(first) if first in LANGUAGES else len(LANGUAGES)
            return (0 if own else 1 if language in model.languages else 2, group, model.label.casefold())

        return sorted((model for model in CATALOG if chip in model.chips), key=rank)

    def current(self, device: XiaozhiDevice) -> str:
        """The option being installed on the device, else the one it has (``as_built``: the board's own)."""
        job = self.jobs.get(device.mac)
        if job is not None and job.phase not in (Phase.DONE, Phase.FAILED):
            return job.option
        return device.chosen_wake_word or AS_BUILT

    def options(self, device: XiaozhiDevice) -> list[str]:
        """What the select offers a device: ``as_built`` and the catalog's models for its chip, in order."""
        return [AS_BUILT, *(model.label for model in self.offers(device))]

    def model_of(self, device: XiaozhiDevice, option: str) -> str:
        """The model folder an option names: a catalog label for the device's chip, else the folder itself."""
        chip = device.facts.chip.lower() if device.facts is not None else ""
        model = next((m for m in CATALOG if m.label == option and chip in m.chips), None)
        model = model or next((m for m in CATALOG if m.label == option), None)
        return model.name if model is not None else option

    def option_of(self, device: XiaozhiDevice, model_id: str) -> str | None:
        """The select's option for a model folder (Home Assistant's voice settings name models by folder)."""
        if model_id == AS_BUILT:
            return AS_BUILT
        return next((m.label for m in self.offers(device) if m.name == model_id), None)

    @staticmethod
    def supported(device: XiaozhiDevice) -> bool:
        """Whether the device can change its wake word: an assets partition and the tool."""
        return device.facts is not None and device.facts.assets_size > 0 and SET_URL_TOOL in device.tools

    async def async_choose(self, device: XiaozhiDevice, option: str, *, cause: str | None = None) -> None:
        """Build and check the pack, hand its URL to the device, restart it when idle (in the background).

        Raises a translated HomeAssistantError when the pack cannot be made or would be refused:
        nothing reaches the device then.
        """
        facts = device.facts
        if facts is None or not self.supported(device):
            raise translated_error("wake_word_unsupported", device=device.name)
        base = await self.files.async_board_pack(facts.names) or await self.files.async_release_pack(facts)
        if base is None:
            raise translated_error("wake_word_no_pack", board=facts.board_name or facts.board, folder=FOLDER)
        name, files = None, None
        if option != AS_BUILT and await self.hass.async_add_executor_job(engine_of, base) != ENGINE_MULTINET:
            name = self.model_of(device, option)
            if not name.startswith("wn") or "/" in name or name.startswith(".") or len(name) > 31:
                raise translated_error("wake_word_no_model", model=name[:64], folder=FOLDER)
            if facts.chip.lower() not in chips_of(name):
                raise translated_error("wake_word_chip", model=name, chip=facts.chip)
            files = await self.files.async_model(name, facts.chip)
        try:
            pack, word, before = await self.hass.async_add_executor_job(
                make_pack, base, option, name, files, facts.assets_size
            )
        except AssetsError as err:
            raise translated_error("wake_word_refused", device=device.name, reason=err.detail) from None
        self.async_cancel(device)
        job = WakeWordJob(device, option, word, pack, before=device.expected_wake_word or before, cause=cause)
        token = secrets.token_urlsafe(24)
        self._urls[token] = (job, self.hass.loop.time() + URL_LIFETIME)
        job.url = self._url_of(token)
        try:
            result = await device.async_call_tool(SET_URL_TOOL, {"url": job.url}, 10.0)
        except McpError as err:
            self._forget_urls(job)
            raise translated_error("wake_word_refused", device=device.name, reason=str(err)) from None
        if result.text.strip() != "true":
            self._forget_urls(job)
            raise translated_error("wake_word_refused", device=device.name, reason=result.text[:200])
        self.jobs[device.mac] = job
        job.previous = (device.chosen_wake_word, device.expected_wake_word)
        device.expect_wake_word(job.word)  # its first wake after the restart is no typed question
        job.task = device.async_create_task(
            self._async_follow(job), f"xiaozhi_local wake word {device.mac}", background=True
        )
        _LOGGER.info(
            "%s: wake word %s is ready for it (%d bytes); restarting it when idle", device.name, option, len(pack)
        )
        device.async_changed()  # the select and the voice settings show the change under way

    @callback
    def async_cancel(self, device: XiaozhiDevice) -> None:
        """A change under way for the device ends (a new choice, or the device removed)."""
        device.restarts.settle(Reason.WAKE_WORD)
        if (job := self.jobs.pop(device.mac, None)) is not None:
            if job.phase in (Phase.WAITING, Phase.RESTARTING, Phase.DOWNLOADING):
                device.expect_wake_word(job.previous[1])  # the new pack never arrived
            self._forget_urls(job)
            if job.task is not None:
                job.task.cancel()

    def _forget_urls(self, job: WakeWordJob) -> None:
        for token in [t for t, (j, _) in self._urls.items() if j is job]:
            del self._urls[token]

    def take(self, token: str, address: str | None) -> WakeWordJob | None:
        """The job a one-time URL is for, fetched by its device (from the address it last came from)."""
        entry = self._urls.get(token)
        if entry is None:
            return None
        job, expires = entry
        if expires <= self.hass.loop.time():
            del self._urls[token]
            return None
        if job.device.address is not None and address != job.device.address:
            _LOGGER.warning("Refused the wake word pack of %s to %s", job.device.name, address)
            return None
        del self._urls[token]
        return job

    async def _async_wait(self, job: WakeWordJob, done: Callable[[], bool], timeout: float | None) -> bool:
        """Until ``done()`` holds (checked at each change of the device); False on timeout."""
        changed = asyncio.Event()
        remove = job.device.async_add_listener(changed.set, activity=True)
        try:
            async with asyncio.timeout(timeout):
                while not done():
                    changed.clear()
                    await changed.wait()
        except TimeoutError:
            return False
        finally:
            remove()
        return True

    async def _async_follow(self, job: WakeWordJob) -> None:
        """Restart when idle, see the pack fetched, see the device back, then its first wake word."""
        device = job.device
        heard_before = device.heard_wake_words
        link = device.link
        per_conversation = link is not None and link.conversation_is_connection
        if per_conversation:
            # WebSocket: the end of its conversation is the one moment it can restart (transport_choice.py).
            device.restarts.owe(Reason.WAKE_WORD)
        elif not await self._async_wait(job, lambda: device.idle, IDLE_WAIT):
            self.async_fail(job, "the device was never idle")
            return
        job.phase = Phase.RESTARTING
        device.async_changed()
        if not per_conversation and not await device.async_restart_quietly():
            self.async_fail(job, "the device could not be told to restart")
            return
        try:
            async with asyncio.timeout(IDLE_WAIT + BOOT_WAIT if per_conversation else BOOT_WAIT):
                await job.fetched.wait()
        except TimeoutError:
            self.async_fail(job, "the device did not fetch the pack after its restart")
            return
        if job.error is not None:
            if job.broken and job.cause is None:
                await self._async_restore(job)
            return
        # Back: connected again (MQTT); a WebSocket device is back at its next conversation.
        if not per_conversation and not await self._async_wait(job, lambda: device.link is not None, BOOT_WAIT):
            self.async_fail(job, "the device did not come back after it fetched the pack")
            return
        # It has the pack: kept from now on (a restart of Home Assistant meanwhile included).
        job.phase = Phase.VERIFYING
        device.async_set_wake_word(None if job.option == AS_BUILT else job.option, job.word)
        await self._async_wait(job, lambda: device.heard_wake_words != heard_before, None)
        heard = device.last_wake_word
        if job.word is not None and not same_word(heard, job.word):
            if heard is None or job.before is None or same_word(heard, job.before):
                self.async_fail(job, f"the device woke on {(heard or '')[:64]!r}, not on {job.word!r}")
                return
            # Not its old word: the device's own report is the truth (esp-sr names words in a binary library).
            _LOGGER.debug("%s: the new model reports %r where its _MODEL_INFO_ says %r", device.name, heard, job.word)
            job.word = heard
            device.async_set_wake_word(None if job.option == AS_BUILT else job.option, heard)
        job.phase, job.progress = Phase.DONE, 100
        device.async_changed()

    async def _async_restore(self, job: WakeWordJob) -> None:
        """The download broke off mid-way: once the device is back, the pack it had is sent again.

        The firmware erases the partition as it writes: until a whole pack is written, the device
        has no wake word (its button still works). Restored once; a failing restore is said on the
        entity, and choosing again is up to the user.
        """
        device = job.device
        if not await self._async_wait(job, lambda: device.link is not None, BOOT_WAIT):
            return
        if self.jobs.get(device.mac) is job:
            del self.jobs[device.mac]  # replaced by the restore (which must not cancel this task)
        option = job.previous[0] or AS_BUILT
        _LOGGER.info("%s: restoring its wake word %s after the broken download", device.name, option)
        try:
            await self.async_choose(device, option, cause=job.error)
        except HomeAssistantError as err:
            self.jobs[device.mac] = job
            job.error = f"{job.error}; the previous pack could not be sent again: {err}"
            device.async_changed()

    @callback
    def async_fail(self, job: WakeWordJob, why: str) -> None:
        """The change ended without the new word: the device's choice is what it was before."""
        why = why[:MAX_ERROR]
        _LOGGER.warning("%s: changing its wake word to %s failed: %s", job.device.name, job.option[:64], why)
        job.phase, job.error = Phase.FAILED, why
        job.device.async_set_wake_word(*job.previous)
        self._forget_urls(job)

    @callback
    def async_progress(self, job: WakeWordJob, sent: int) -> None:
        """Bytes of the pack the device has read: its entities are told at each new percent only."""
        progress = sent * 100 // max(1, len(job.pack))
        if job.phase is Phase.DOWNLOADING and progress == job.progress:
            return  # every chunk and acknowledgement reports: most change no percent
        job.phase, job.progress = Phase.DOWNLOADING, progress
        job.device.async_changed()


def describe(job: WakeWordJob | None) -> dict[str, Any]:
    """The select's attributes: where a change is, and why it failed (or why a pack is restored)."""
    if job is None:
        return {}
    error = job.error or (f"restoring the previous wake word: {job.cause}" if job.cause else None)
    progress = 100 if job.phase is Phase.DONE else job.progress
    return {"phase": job.phase.value, "progress": progress, "error": error[:MAX_ERROR] if error else None}
