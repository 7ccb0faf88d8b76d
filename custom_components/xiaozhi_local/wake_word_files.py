"""Where wake word packs and models come from, and which engine a board's pack is built for.

- **The board's default pack**: ``<config>/xiaozhi_wake_words/<board>.bin`` (the firmware build's
  ``generated_assets.bin``), else the assets partition of the board's merged flash image in
  ``xiaozhi_firmware/`` (``<board>_<version>.bin``, a release's ``merged-binary.bin``).
- **Models**: folders of esp-sr's ``model/wakenet_model/`` in ``xiaozhi_wake_words/``, or the cache
  of those downloaded from esp-sr on GitHub (only the catalog's, only when the user allows it).
- ``CATALOG`` names the WakeNet models known to work, with their languages and WakeNet generation
  (which says the chips), so the select offers them before any file is there.
"""

from collections.abc import Callable
import contextlib
from dataclasses import dataclass
import io
import logging
from pathlib import Path
from typing import Any, Final
import zipfile

from aiohttp import ClientError, ClientTimeout
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from .const import CONF_WAKE_WORD_MODELS, CONF_WAKE_WORD_MODELS_URL, DEFAULT_WAKE_WORD_MODELS_URL, DOMAIN
from .device import XiaozhiDevice
from .errors import translated_error
from .firmware.files import SourceUnavailable, cache_name, split_name
from .firmware.remote import MAX_UNZIPPED, ProjectReleases, async_download
from .protocol.assets import AssetsError, pack_engine, pack_in_flash_image, parse_pack, wake_word_of
from .protocol.firmware import BoardFacts, parse_version, read_partition_table

_LOGGER = logging.getLogger(__name__)

FOLDER: Final = "xiaozhi_wake_words"
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


ENGINE_WAKENET: Final = "wakenet"
ENGINE_MULTINET: Final = "multinet"
PHRASE_SEPARATOR: Final = "|"

MODEL_FILES: Final = ("_MODEL_INFO_", "wn9_data", "wn9_index")
"""A WakeNet 9 model's files in esp-sr (some models have no ``wn9_index``)."""
DOWNLOAD_TIMEOUT: Final = 120.0


def _write_model(folder: Path, files: dict[str, bytes]) -> None:
    """Blocking: a downloaded model into the cache (whole files only: written, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        partial = folder / f"{name}.part"
        partial.write_bytes(data)
        partial.replace(folder / name)


def _model_folder(*candidates: Path) -> Path | None:
    """Blocking: the first folder that holds a model (its ``_MODEL_INFO_``)."""
    return next((path for path in candidates if (path / "_MODEL_INFO_").is_file()), None)


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


def _release_pack(download: Path) -> bytes:
    """Blocking: the assets pack in a release zip's ``merged-binary.bin``; AssetsError when it has none."""
    try:
        with zipfile.ZipFile(download) as archive:
            member = next((m for m in archive.infolist() if m.filename.endswith("merged-binary.bin")), None)
            if member is None or member.file_size > MAX_UNZIPPED:
                raise AssetsError("no_pack", "the release zip holds no merged-binary.bin of a sane size")
            image = archive.read(member)
    except zipfile.BadZipFile as err:
        raise AssetsError("no_pack", f"the release zip is damaged: {err}") from None
    partitions = [(p.label, p.offset, p.size) for p in read_partition_table(io.BytesIO(image))]
    return pack_in_flash_image(image, partitions)


def _keep(path: Path, data: bytes) -> None:
    """Blocking: ``data`` into ``path``, whole (written, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(path)


def _read_kept(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


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

    async def async_model(self, name: str, *, known: bool) -> dict[str, bytes]:
        """A model's files: from the local folder, the cache, or (a catalog model, if allowed) esp-sr."""
        found = await self.hass.async_add_executor_job(_model_folder, self.folder / name, self.cache / name)
        if found is not None:
            return await self.hass.async_add_executor_job(_read_model, found)
        if not known or self.download_from is None:
            raise translated_error("wake_word_no_model", model=name, folder=FOLDER)
        session = async_get_clientsession(self.hass)
        files: dict[str, bytes] = {}
        try:
            for file in MODEL_FILES:
                async with session.get(
                    f"{self.download_from}/{name}/{file}",
                    timeout=ClientTimeout(total=DOWNLOAD_TIMEOUT),
                    allow_redirects=False,
                ) as response:
                    if response.status == 404 and file != MODEL_FILES[0]:
                        continue  # not every model has every file
                    if response.status != 200:
                        raise translated_error("wake_word_download", model=name, reason=f"HTTP {response.status}")
                    data = await response.content.read(MAX_MODEL_FILE + 1)
                    if len(data) > MAX_MODEL_FILE:
                        raise translated_error("wake_word_download", model=name, reason=f"{file} is too large")
                    files[file] = data
        except (ClientError, TimeoutError) as err:
            raise translated_error("wake_word_download", model=name, reason=str(err) or type(err).__name__) from None
        try:
            wake_word_of(files)
        except AssetsError as err:
            raise translated_error("wake_word_download", model=name, reason=err.detail) from None
        await self.hass.async_add_executor_job(_write_model, self.cache / name, files)
        _LOGGER.info("Downloaded the wake word model %s (%d bytes)", name, sum(map(len, files.values())))
        return files

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

    async def _async_learn(self, device: XiaozhiDevice, key: frozenset[str]) -> None:
        try:
            base = await self.async_board_pack(key)
            engine = ENGINE_WAKENET
            if base is not None:
                with contextlib.suppress(AssetsError):
                    engine = pack_engine(parse_pack(base)) or ENGINE_WAKENET
            self._engines[key] = engine
        finally:
            self._learning.discard(key)
        device.async_changed()
