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
``generated_assets.bin``, renamed after the board). ``CATALOG`` names the models known to work,
with their chips, so the select offers them before any file is there.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
import logging
from pathlib import Path
import secrets
from typing import Any, Final

from aiohttp import web
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from homeassistant.util.hass_dict import HassKey

from .const import DOMAIN, WAKE_WORD_PATH
from .device import XiaozhiDevice
from .errors import translated_error
from .firmware.files import split_name
from .firmware.server import DownloadInterrupted, Sending
from .protocol.assets import (
    AssetsError,
    check_pack,
    pack_in_flash_image,
    wakenet_generation,
    with_wakenet,
)
from .protocol.firmware import parse_version, read_partition_table
from .protocol.mcp import McpError

_LOGGER = logging.getLogger(__name__)

FOLDER: Final = "xiaozhi_wake_words"
AS_BUILT: Final = "as_built"
SET_URL_TOOL: Final = "self.assets.set_download_url"
URL_LIFETIME: Final = 3600.0
"""Seconds a pack's URL stays valid: the device fetches it at its next boot."""
IDLE_WAIT: Final = 3600.0
"""Seconds to wait for the device's conversation to end before the change is given up."""
BOOT_WAIT: Final = 600.0
"""Seconds from the restart until the device has fetched its pack and is back."""
MAX_MODEL_FILE: Final = 8 * 1024 * 1024
MAX_PACK: Final = 32 * 1024 * 1024

CHIPS_BY_GENERATION: Final = {
    5: frozenset({"esp32"}),
    8: frozenset({"esp32s3"}),
    9: frozenset({"esp32s3", "esp32p4"}),
}
"""Which chips run a WakeNet generation (esp-sr's model table; WakeNet 10 is not offered yet)."""


@dataclass(frozen=True, slots=True)
class WakeModel:
    """A WakeNet model of esp-sr that the select can offer."""

    name: str
    """Its folder in esp-sr's ``model/wakenet_model/`` (and in ``xiaozhi_wake_words/``)."""
    label: str
    language: str
    generation: int = 9


CATALOG: Final = (
    WakeModel("wn9_hiesp", "Hi ESP", "en"),
    WakeModel("wn9_alexa", "Alexa", "en"),
    WakeModel("wn9_heywillow_tts", "Hey Willow", "en"),
    WakeModel("wn9_computer_tts", "Computer", "en"),
    WakeModel("wn9_jarvis_tts", "Jarvis", "en"),
    WakeModel("wn9_nihaoxiaozhi_tts", "你好小智", "zh"),
    WakeModel("wn9_hilexin", "Hi 乐鑫", "zh"),
    WakeModel("wn9_xiaoaitongxue", "小爱同学", "zh"),
)


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
    phase: Phase = Phase.WAITING
    progress: int = 0
    error: str | None = None
    url: str | None = None
    fetched: asyncio.Event = field(default_factory=asyncio.Event)
    previous: tuple[str | None, str | None] = (None, None)
    """The device's wake word before (option and phrase), kept again when the change fails."""
    task: asyncio.Task[None] | None = None


DATA_WAKE_WORDS: HassKey[WakeWords] = HassKey(f"{DOMAIN}_wake_words")


def _read_model(folder: Path) -> dict[str, bytes]:
    """Blocking: a model folder's files (bounded)."""
    files: dict[str, bytes] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.stat().st_size <= MAX_MODEL_FILE and len(files) < 16:
            files[path.name] = path.read_bytes()
    return files


def _read_pack(folder: Path, firmware: Path, names: frozenset[str]) -> bytes | None:
    """Blocking: the board's default pack, ``<board>.bin`` under any name the board goes by.

    Else the pack in the assets partition of a merged flash image of the board in the firmware
    folder (``<board>_<version>.bin``, a release's ``merged-binary.bin``), the newest first.
    """
    for name in sorted(names):
        path = folder / f"{name}.bin"
        if path.is_file() and path.stat().st_size <= MAX_PACK:
            return path.read_bytes()
    images = [
        (parse_version(parts[1]) or (), path)
        for path in (firmware.glob("*.bin") if firmware.is_dir() else ())
        if (parts := split_name(path.name)) is not None and parts[0] in names and path.is_file()
    ]
    for _version, path in sorted(images, reverse=True):
        with path.open("rb") as stream:
            partitions = [(p.label, p.offset, p.size) for p in read_partition_table(stream)]
            assets = next(((offset, size) for label, offset, size in partitions if label == "assets"), None)
            if assets is None or assets[1] > MAX_PACK:
                continue
            stream.seek(assets[0])
            region = stream.read(assets[1])
        try:
            return pack_in_flash_image(region, [("assets", 0, len(region))])
        except AssetsError:
            continue
    return None


class WakeWords:
    """The hub's wake word changes: one job per device, their one-time URLs."""

    def __init__(self, hass: HomeAssistant, folder: Path, firmware_folder: Path, url_of: Callable[[str], str]) -> None:
        self.hass = hass
        self.folder = folder
        self.firmware_folder = firmware_folder
        self._url_of = url_of
        self.jobs: dict[str, WakeWordJob] = {}  # by MAC
        self._urls: dict[str, tuple[WakeWordJob, float]] = {}

    @staticmethod
    def offers(device: XiaozhiDevice) -> list[str]:
        """What the select offers a device: ``as_built`` and the catalog's models for its chip."""
        chip = device.facts.chip.lower() if device.facts is not None else ""
        return [AS_BUILT] + [model.label for model in CATALOG if chip in CHIPS_BY_GENERATION.get(model.generation, ())]

    @staticmethod
    def supported(device: XiaozhiDevice) -> bool:
        """Whether the device can change its wake word: an assets partition and the tool."""
        return device.facts is not None and device.facts.assets_size > 0 and SET_URL_TOOL in device.tools

    async def async_choose(self, device: XiaozhiDevice, option: str) -> None:
        """Build and check the pack, hand its URL to the device, restart it when idle (in the background).

        Raises a translated HomeAssistantError when the pack cannot be made or would be refused:
        nothing reaches the device then.
        """
        facts = device.facts
        if facts is None or not self.supported(device):
            raise translated_error("wake_word_unsupported", device=device.name)
        base = await self.hass.async_add_executor_job(_read_pack, self.folder, self.firmware_folder, facts.names)
        if base is None:
            raise translated_error("wake_word_no_pack", board=facts.board_name or facts.board, folder=FOLDER)
        try:
            if option == AS_BUILT:
                pack = base
            else:
                model = next((m for m in CATALOG if m.label == option), None)
                name = model.name if model is not None else option
                folder = self.folder / name
                if not name.startswith("wn") or not await self.hass.async_add_executor_job(folder.is_dir):
                    raise translated_error("wake_word_no_model", model=name, folder=FOLDER)
                files = await self.hass.async_add_executor_job(_read_model, folder)
                generation = wakenet_generation(files)
                if facts.chip.lower() not in CHIPS_BY_GENERATION.get(generation or 0, ()):
                    raise translated_error("wake_word_chip", model=name, chip=facts.chip)
                pack = with_wakenet(base, name, files)  # refuses a model that names no wake word
            found = check_pack(pack, facts.assets_size)
        except AssetsError as err:
            raise translated_error("wake_word_refused", device=device.name, reason=err.detail) from None
        self.async_cancel(device)
        job = WakeWordJob(device, option, found.word, pack)
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
        device.expected_wake_word = job.word  # its first wake after the restart is no typed question
        job.task = device.async_create_task(
            self._async_follow(job), f"xiaozhi_local wake word {device.mac}", background=True
        )
        _LOGGER.info(
            "%s: wake word %s is ready for it (%d bytes); restarting it when idle", device.name, option, len(pack)
        )

    @callback
    def async_cancel(self, device: XiaozhiDevice) -> None:
        """A change under way for the device ends (a new choice, or the device removed)."""
        device.assets_at_end = False
        if (job := self.jobs.pop(device.mac, None)) is not None:
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
        remove = job.device.async_add_listener(changed.set)
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
        link = device.connection
        per_conversation = link is not None and link.conversation_is_connection
        if per_conversation:
            # WebSocket: the end of its conversation is the one moment it can be restarted (transport.py).
            device.assets_at_end = True
        elif not await self._async_wait(job, lambda: device.conversation is None, IDLE_WAIT):
            self._fail(job, "the device was never idle")
            return
        job.phase = Phase.RESTARTING
        device.async_changed()
        if not per_conversation and not await device.async_restart_quietly():
            self._fail(job, "the device could not be told to restart")
            return
        try:
            async with asyncio.timeout(IDLE_WAIT + BOOT_WAIT if per_conversation else BOOT_WAIT):
                await job.fetched.wait()
        except TimeoutError:
            self._fail(job, "the device did not fetch the pack after its restart")
            return
        if job.error is not None:
            return
        # Back: connected again (MQTT); a WebSocket device is back at its next conversation.
        if not per_conversation and not await self._async_wait(job, lambda: device.connection is not None, BOOT_WAIT):
            self._fail(job, "the device did not come back after it fetched the pack")
            return
        # It has the pack: kept from now on (a restart of Home Assistant meanwhile included).
        job.phase = Phase.VERIFYING
        device.async_set_wake_word(None if job.option == AS_BUILT else job.option, job.word)
        await self._async_wait(job, lambda: device.heard_wake_words != heard_before, None)
        heard = device.last_wake_word
        if job.word is not None and heard != job.word:
            self._fail(job, f"the device woke on {heard!r}, not on {job.word!r}")
            return
        job.phase = Phase.DONE
        device.async_changed()

    def _fail(self, job: WakeWordJob, why: str) -> None:
        _LOGGER.warning("%s: changing its wake word to %s failed: %s", job.device.name, job.option, why)
        job.phase, job.error = Phase.FAILED, why
        job.device.async_set_wake_word(*job.previous)
        self._forget_urls(job)

    def on_progress(self, job: WakeWordJob, sent: int) -> None:
        """Bytes of the pack the device has read."""
        job.phase = Phase.DOWNLOADING
        job.progress = sent * 100 // max(1, len(job.pack))
        job.device.async_changed()


class XiaozhiWakeWordView(HomeAssistantView):
    """``GET /api/xiaozhi_local/assets/{token}.bin``: a device fetches its new pack, once."""

    url = WAKE_WORD_PATH + "/{token}.bin"
    name = "api:xiaozhi_local:assets"
    requires_auth = False  # the device has no Home Assistant login; the one-time token is the secret

    async def get(self, request: web.Request, token: str) -> web.StreamResponse:
        """200 with a Content-Length (the firmware refuses a body without one)."""
        words = request.app[KEY_HASS].data.get(DATA_WAKE_WORDS)
        job = words.take(token, request.remote) if words is not None else None
        if words is None or job is None:
            raise web.HTTPNotFound
        sending = Sending(request, job.pack, lambda sent: words.on_progress(job, sent))
        try:
            await sending.async_run()
        except DownloadInterrupted as err:
            words._fail(job, str(err))
            if request.transport is not None:
                request.transport.abort()
        except asyncio.CancelledError:
            if sending.written < len(job.pack):
                words._fail(job, f"the device closed the connection at {sending.written} of {len(job.pack)} bytes")
            raise
        finally:
            job.fetched.set()
        return sending.response


def describe(job: WakeWordJob | None) -> dict[str, Any]:
    """The select's attributes: where a change is."""
    if job is None:
        return {}
    return {"phase": job.phase.value, "progress": job.progress, "error": job.error}
