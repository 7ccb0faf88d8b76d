"""Where wake word packs and models come from, and which engine a board's pack is built for.

- **The board's default pack**: ``<config>/xiaozhi_wake_words/<board>.bin`` (the firmware build's
  ``generated_assets.bin``), else the assets partition of the board's merged flash image in
  ``xiaozhi_firmware/`` (``<board>_<version>.bin``, a release's ``merged-binary.bin``).
- **Models**: folders of esp-sr's ``model/wakenet_model/`` in ``xiaozhi_wake_words/``, or the cache
  of those downloaded from esp-sr on GitHub (only the catalog's, only when the user allows it).
  ``catalog.CATALOG`` pins every file of every model (size, SHA-256): a download is
  kept only whole and matching, and a cached model is checked again before it is used.

Files are found by listing their folder, never by a path made from a name a device reports; only
regular files count (a symlink is refused, whatever it points at), and every read is capped by
the bytes actually read, not by what ``stat`` says.
"""

from collections.abc import Callable
import logging
from pathlib import Path
from typing import Any, Final

from aiohttp import ClientTimeout
from homeassistant.core import HomeAssistant, callback

from ..const import CONF_WAKE_WORD_MODELS, CONF_WAKE_WORD_MODELS_URL, DEFAULT_WAKE_WORD_MODELS_URL, DOMAIN
from ..device import XiaozhiDevice
from ..errors import translated_error
from ..firmware.fetch import async_read_whole
from ..firmware.files import SourceUnavailable, cache_name
from ..firmware.remote import ProjectReleases
from ..firmware.unpack import async_download
from ..protocol.assets import AssetsError, check_wakenet_model
from ..protocol.firmware import BoardFacts
from ..protocol.wake_pack import PackWakeWord
from .catalog import CATALOG, WakeModel
from .disk import (
    FileRefused,
    keep,
    learn,
    matches,
    model_folder,
    read_kept,
    read_model,
    read_pack,
    release_pack,
    remove,
    write_model,
)

_LOGGER = logging.getLogger(__name__)

FOLDER: Final = "xiaozhi_wake_words"
MAX_BOARDS: Final = 64
"""Boards whose default pack's engine and word are kept (the oldest read goes first): a home has a
few; a client that names another board at each OTA check must not grow the table."""
DOWNLOAD_TIMEOUT: Final = ClientTimeout(total=120.0, sock_read=30.0)

CATALOG_BY_NAME: Final = {model.name: model for model in CATALOG}


class WakeWordFiles:
    """The board packs and models of the hub's wake word changes."""

    def __init__(
        self,
        hass: HomeAssistant,
        folder: Path,
        firmware_folder: Path,
        releases: Callable[[], ProjectReleases | None] = lambda: None,
    ) -> None:
        self.hass = hass
        self.folder = folder
        self.firmware_folder = firmware_folder
        self._releases = releases
        """The firmware project's releases, when the user turned that source on (firmware/catalog.py)."""
        self.cache = Path(hass.config.cache_path(DOMAIN, "wake_words"))
        self.download_from: str | None = None
        """Where the catalog's models are downloaded from (esp-sr on GitHub); None: never."""
        self._engines: dict[frozenset[str], str] = {}  # by the names of a board: what its pack is built for
        self._words: dict[frozenset[str], PackWakeWord | None] = {}  # by the names of a board: what it wakes on
        self._learning: set[frozenset[str]] = set()

    async def async_board_pack(self, names: frozenset[str]) -> bytes | None:
        """The board's default pack from local files (None when there is none)."""
        return await self.hass.async_add_executor_job(read_pack, self.folder, self.firmware_folder, names)

    async def async_release_pack(self, facts: BoardFacts) -> bytes | None:
        """The board's default pack from the release it runs, when the releases source is on; kept.

        The zip of that release (``v<version>_<board>.zip``) is downloaded once; its flash image's
        assets partition is the pack the board shipped with. None when the source is off or has no
        zip for the board and version.
        """
        releases = self._releases()
        if releases is None:
            return None
        kept = self.cache / "packs" / cache_name(facts.release_name, facts.version)
        if (pack := await self.hass.async_add_executor_job(read_kept, kept)) is not None:
            return pack
        try:
            url = await releases.async_zip_url(facts)
            if url is None:
                return None
            await self.hass.async_add_executor_job(lambda: kept.parent.mkdir(parents=True, exist_ok=True))
            download = kept.with_suffix(".zip")
            try:
                await async_download(self.hass, url, download)
                pack = await self.hass.async_add_executor_job(release_pack, download)
            finally:
                await self.hass.async_add_executor_job(lambda: download.unlink(missing_ok=True))
        except (SourceUnavailable, AssetsError) as err:
            raise translated_error("wake_word_no_release", board=facts.release_name, reason=str(err)) from None
        await self.hass.async_add_executor_job(keep, kept, pack)
        _LOGGER.info(
            "Took the assets pack of %s %s from its release (%d bytes)", facts.release_name, facts.version, len(pack)
        )
        return pack

    @callback
    def async_configure(self, options: dict[str, Any]) -> None:
        """The hub's options: whether models may be downloaded, and from where."""
        url = (options.get(CONF_WAKE_WORD_MODELS_URL) or "").strip() or DEFAULT_WAKE_WORD_MODELS_URL
        self.download_from = url.rstrip("/") if options.get(CONF_WAKE_WORD_MODELS) else None

    async def async_model(self, name: str, chip: str) -> dict[str, bytes]:
        """A model's files for a device with ``chip``, checked.

        From the local folder (the user's own files, taken as they are), else the cache or esp-sr
        (a catalog model only, every file matching its pin). A catalog model that does not run on
        ``chip`` is refused before anything is downloaded or cached.
        """
        try:
            local = await self.hass.async_add_executor_job(model_folder, self.folder, name)
            if local is not None:
                return await self.hass.async_add_executor_job(read_model, local)
        except FileRefused as err:
            raise translated_error("wake_word_download", model=name[:64], reason=str(err)) from None
        model = CATALOG_BY_NAME.get(name)
        if model is None:
            raise translated_error("wake_word_no_model", model=name[:64], folder=FOLDER)
        if chip.lower() not in model.chips:
            raise translated_error("wake_word_chip", model=name, chip=chip)
        if (kept := await self.hass.async_add_executor_job(self._read_cached, model)) is not None:
            return kept
        if self.download_from is None:
            raise translated_error("wake_word_no_model", model=name, folder=FOLDER)
        files: dict[str, bytes] = {}
        try:
            for pin in model.files:
                url = f"{self.download_from}/{name}/{pin.name}"
                files[pin.name] = await async_read_whole(
                    self.hass, url, limit=pin.size, timeout=DOWNLOAD_TIMEOUT, expected=pin.size
                )
        except SourceUnavailable as err:
            raise translated_error("wake_word_download", model=name, reason=str(err)) from None
        if (why := await self.hass.async_add_executor_job(matches, model, files)) is not None:
            raise translated_error("wake_word_download", model=name, reason=why)
        try:
            check_wakenet_model(files)
        except AssetsError as err:
            raise translated_error("wake_word_download", model=name, reason=err.detail) from None
        await self.hass.async_add_executor_job(write_model, self.cache, name, files)
        _LOGGER.info("Downloaded the wake word model %s (%d bytes)", name, sum(map(len, files.values())))
        return files

    def _read_cached(self, model: WakeModel) -> dict[str, bytes] | None:
        """Blocking: a cached catalog model, if it is still esp-sr's; a changed one is removed."""
        folder = model_folder(self.cache, model.name)
        if folder is None:
            return None
        try:
            files = read_model(folder)
        except FileRefused as err:
            why: str | None = str(err)
        else:
            if (why := matches(model, files)) is None:
                return files
        _LOGGER.warning("The cached wake word model %s is not esp-sr's (%s): it is downloaded again", model.name, why)
        remove(folder)
        return None

    @callback
    def engine(self, device: XiaozhiDevice) -> str | None:
        """``wakenet`` or ``multinet``, as the board's default pack says; None until it has been read.

        The firmware does not say which engine it was built with; its board's pack does. Read once
        per board in the background (the device is told when it is known: its entities follow); a
        board whose pack is not there yet counts as WakeNet, the default of the boards with PSRAM.
        """
        if device.facts is None:
            return None
        key = device.facts.names
        if key in self._engines:
            return self._engines[key]
        if key not in self._learning:
            self._learning.add(key)
            device.async_create_task(
                self._async_learn(device, key), f"xiaozhi_local engine {device.mac}", background=True
            )
        return None

    @property
    def boards_known(self) -> int:
        """Boards whose engine and word are kept (at most ``MAX_BOARDS``)."""
        return len(self._engines)

    @callback
    def board_word(self, device: XiaozhiDevice) -> PackWakeWord | None:
        """What the board's default pack wakes on (model and word), once read (``engine``)."""
        return self._words.get(device.facts.names) if device.facts is not None else None

    async def _async_learn(self, device: XiaozhiDevice, key: frozenset[str]) -> None:
        try:
            base = await self.async_board_pack(key)
            self._engines[key], self._words[key] = await self.hass.async_add_executor_job(learn, base)
            while len(self._engines) > MAX_BOARDS:  # dicts keep insertion order: the oldest first
                oldest = next(iter(self._engines))
                del self._engines[oldest]
                self._words.pop(oldest, None)
        finally:
            self._learning.discard(key)
        device.async_changed()
