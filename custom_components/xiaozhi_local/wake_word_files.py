"""Where wake word packs and models come from, and which engine a board's pack is built for.

- **The board's default pack**: ``<config>/xiaozhi_wake_words/<board>.bin`` (the firmware build's
  ``generated_assets.bin``), else the assets partition of the board's merged flash image in
  ``xiaozhi_firmware/`` (``<board>_<version>.bin``, a release's ``merged-binary.bin``).
- **Models**: folders of esp-sr's ``model/wakenet_model/`` in ``xiaozhi_wake_words/``, or the cache
  of those downloaded from esp-sr on GitHub (only the catalog's, only when the user allows it).
  ``wake_word_catalog.CATALOG`` pins every file of every model (size, SHA-256): a download is
  kept only whole and matching, and a cached model is checked again before it is used.

Files are found by listing their folder, never by a path made from a name a device reports; only
regular files count (a symlink is refused, whatever it points at), and every read is capped by
the bytes actually read, not by what ``stat`` says.
"""

from collections.abc import Callable
import contextlib
import hashlib
import io
import logging
import os
from pathlib import Path
import secrets
import shutil
import stat
from typing import Any, Final
import zipfile

from aiohttp import ClientTimeout
from homeassistant.core import HomeAssistant, callback

from .const import CONF_WAKE_WORD_MODELS, CONF_WAKE_WORD_MODELS_URL, DEFAULT_WAKE_WORD_MODELS_URL, DOMAIN
from .device import XiaozhiDevice
from .errors import translated_error
from .firmware.fetch import async_read_whole
from .firmware.files import SourceUnavailable, cache_name, split_name
from .firmware.remote import MAX_UNZIPPED, ZIP_ERRORS, ProjectReleases, async_download, zip_error
from .protocol.assets import (
    AssetsError,
    PackWakeWord,
    check_wakenet_model,
    pack_engine,
    pack_in_flash_image,
    pack_wake_word,
    parse_pack,
)
from .protocol.firmware import BoardFacts, parse_version, read_partition_table
from .wake_word_catalog import CATALOG, WakeModel

_LOGGER = logging.getLogger(__name__)

FOLDER: Final = "xiaozhi_wake_words"
MAX_BOARDS: Final = 64
"""Boards whose default pack's engine and word are kept (the oldest read goes first): a home has a
few; a client that names another board at each OTA check must not grow the table."""
MAX_MODEL_FILE: Final = 8 * 1024 * 1024
MAX_MODEL_FILES: Final = 16
MAX_PACK: Final = 32 * 1024 * 1024

ENGINE_WAKENET: Final = "wakenet"
ENGINE_MULTINET: Final = "multinet"
DOWNLOAD_TIMEOUT: Final = ClientTimeout(total=120.0, sock_read=30.0)

CATALOG_BY_NAME: Final = {model.name: model for model in CATALOG}


class FileRefused(Exception):
    """A local file that is not read: a symlink, not a regular file, or larger than allowed."""


def _entry(folder: Path, name: str) -> Path | None:
    """Blocking: ``folder``'s entry called exactly ``name`` (listed, not joined: no ``..`` or ``/``)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return None
    try:
        return next((path for path in folder.iterdir() if path.name == name), None)
    except OSError:
        return None


def read_regular(path: Path, limit: int) -> bytes:
    """Blocking: a regular file's bytes, at most ``limit`` (FileRefused otherwise; symlinks refused).

    Opened without following a link and checked on the open file, so nothing swapped in between
    the check and the read is read; a FIFO or device is refused before it could block the open.
    """
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            raise FileRefused(f"{path.name[:64]} is not a regular file (links are not followed)")
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb", buffering=0) as stream:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise FileRefused(f"{path.name[:64]} is not a regular file")
            data = stream.read(limit + 1)
    except OSError as err:
        raise FileRefused(f"{path.name[:64]} cannot be read: {err.strerror or err}") from None
    if len(data) > limit:
        raise FileRefused(f"{path.name[:64]} is larger than {limit} bytes")
    return data


def _is_folder(path: Path | None) -> bool:
    """Blocking: a real folder (not a link to one)."""
    try:
        return path is not None and stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _model_folder(parent: Path, name: str) -> Path | None:
    """Blocking: the real folder called ``name`` in ``parent`` that holds a model (its ``_MODEL_INFO_``)."""
    folder = _entry(parent, name)
    if folder is None or not _is_folder(folder) or _entry(folder, "_MODEL_INFO_") is None:
        return None
    return folder


def _read_model(folder: Path) -> dict[str, bytes]:
    """Blocking: a model folder's regular files (each at most ``MAX_MODEL_FILE``, at most 16)."""
    files: dict[str, bytes] = {}
    for path in sorted(folder.iterdir())[:MAX_MODEL_FILES]:
        files[path.name] = read_regular(path, MAX_MODEL_FILE)
    return files


def _matches(model: WakeModel, files: dict[str, bytes]) -> str | None:
    """Why ``files`` are not esp-sr's ``model`` (None: every pinned file, of its size and digest)."""
    for pin in model.files:
        data = files.get(pin.name)
        if data is None:
            return f"{pin.name} is missing"
        if len(data) != pin.size:
            return f"{pin.name} has {len(data)} bytes, esp-sr's has {pin.size}"
        if hashlib.sha256(data).hexdigest() != pin.sha256:
            return f"{pin.name} differs from esp-sr's (SHA-256)"
    return None


def _write_model(cache: Path, name: str, files: dict[str, bytes]) -> None:
    """Blocking: a downloaded model into the cache, all or nothing (a folder written, then renamed)."""
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{name}.{secrets.token_hex(4)}.part"
    try:
        partial.mkdir()
        for file, data in files.items():
            (partial / file).write_bytes(data)
        final = cache / name
        if final.exists() or final.is_symlink():
            _remove(final)
        partial.rename(final)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)


def _remove(path: Path) -> None:
    """Blocking: a cached model (or whatever is in its place) removed."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _read_pack(folder: Path, firmware: Path, names: frozenset[str]) -> bytes | None:
    """Blocking: the board's default pack, ``<board>.bin`` under any name the board goes by.

    Else the pack in the assets partition of a merged flash image of the board in the firmware
    folder (``<board>_<version>.bin``, a release's ``merged-binary.bin``), the newest first. The
    names are looked up among the folder's entries: a board named ``../x`` or ``/etc/x`` finds none.
    """
    listing = {path.name: path for path in folder.iterdir()} if folder.is_dir() else {}
    for name in sorted(names):
        if (path := listing.get(f"{name}.bin")) is not None:
            with contextlib.suppress(FileRefused):
                return read_regular(path, MAX_PACK)
    images = [
        (parse_version(parts[1]) or (), path)
        for path in (firmware.iterdir() if firmware.is_dir() else ())
        if path.suffix == ".bin"
        and (parts := split_name(path.name)) is not None
        and parts[0] in names
        and stat.S_ISREG(path.lstat().st_mode)
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


def _release_pack(download: Path) -> bytes:
    """Blocking: the assets pack in a release zip's ``merged-binary.bin``; AssetsError when it has none."""
    try:
        with zipfile.ZipFile(download) as archive:
            member = next((m for m in archive.infolist() if m.filename.endswith("merged-binary.bin")), None)
            if member is None or member.file_size > MAX_UNZIPPED:
                raise AssetsError("no_pack", "the release zip holds no merged-binary.bin of a sane size")
            with archive.open(member) as packed:
                image = packed.read(MAX_UNZIPPED + 1)
            if len(image) > MAX_UNZIPPED:
                raise AssetsError("no_pack", "the release zip's merged-binary.bin is larger than it says")
        partitions = [(p.label, p.offset, p.size) for p in read_partition_table(io.BytesIO(image))]
    except ZIP_ERRORS as err:
        raise AssetsError("no_pack", f"the release zip cannot be unpacked: {zip_error(err)}") from None
    return pack_in_flash_image(image, partitions)


def _keep(path: Path, data: bytes) -> None:
    """Blocking: ``data`` into ``path``, whole (written, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(path)


def _read_kept(path: Path) -> bytes | None:
    try:
        return read_regular(path, MAX_PACK) if path.exists() else None
    except FileRefused:
        return None


def _learn(pack: bytes | None) -> tuple[str, PackWakeWord | None]:
    """Blocking: the engine a board's pack is built for, and what it wakes on (if it says)."""
    if pack is None:
        return ENGINE_WAKENET, None
    with contextlib.suppress(AssetsError):
        files = parse_pack(pack)
        return pack_engine(files) or ENGINE_WAKENET, pack_wake_word(files)
    return ENGINE_WAKENET, None


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
        return await self.hass.async_add_executor_job(_read_pack, self.folder, self.firmware_folder, names)

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
        if (pack := await self.hass.async_add_executor_job(_read_kept, kept)) is not None:
            return pack
        try:
            url = await releases.async_zip_url(facts)
            if url is None:
                return None
            await self.hass.async_add_executor_job(lambda: kept.parent.mkdir(parents=True, exist_ok=True))
            download = kept.with_suffix(".zip")
            try:
                await async_download(self.hass, url, download)
                pack = await self.hass.async_add_executor_job(_release_pack, download)
            finally:
                await self.hass.async_add_executor_job(lambda: download.unlink(missing_ok=True))
        except (SourceUnavailable, AssetsError) as err:
            raise translated_error("wake_word_no_release", board=facts.release_name, reason=str(err)) from None
        await self.hass.async_add_executor_job(_keep, kept, pack)
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
            local = await self.hass.async_add_executor_job(_model_folder, self.folder, name)
            if local is not None:
                return await self.hass.async_add_executor_job(_read_model, local)
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
        if (why := await self.hass.async_add_executor_job(_matches, model, files)) is not None:
            raise translated_error("wake_word_download", model=name, reason=why)
        try:
            check_wakenet_model(files)
        except AssetsError as err:
            raise translated_error("wake_word_download", model=name, reason=err.detail) from None
        await self.hass.async_add_executor_job(_write_model, self.cache, name, files)
        _LOGGER.info("Downloaded the wake word model %s (%d bytes)", name, sum(map(len, files.values())))
        return files

    def _read_cached(self, model: WakeModel) -> dict[str, bytes] | None:
        """Blocking: a cached catalog model, if it is still esp-sr's; a changed one is removed."""
        folder = _model_folder(self.cache, model.name)
        if folder is None:
            return None
        try:
            files = _read_model(folder)
        except FileRefused as err:
            why: str | None = str(err)
        else:
            if (why := _matches(model, files)) is None:
                return files
        _LOGGER.warning("The cached wake word model %s is not esp-sr's (%s): it is downloaded again", model.name, why)
        _remove(folder)
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
            self._engines[key], self._words[key] = await self.hass.async_add_executor_job(_learn, base)
            while len(self._engines) > MAX_BOARDS:  # dicts keep insertion order: the oldest first
                oldest = next(iter(self._engines))
                del self._engines[oldest]
                self._words.pop(oldest, None)
        finally:
            self._learning.discard(key)
        device.async_changed()
