"""Where new firmware comes from: local files, the vendor's OTA channel, the project's releases.

Each source answers one question for a device (its ``BoardFacts``): which firmware versions
exist for it. Nothing reaches a device from here: a binary is checked (``protocol.firmware``:
image, checksum, digest, chip, project and version) before it is offered or served.

- **Local files** (always on): ``<config>/xiaozhi_firmware/<board>_<version>.bin``, the naming
  of the xinnan server; a plain app image (``build/xiaozhi.bin``) or a merged flash image.
- **The vendor's channel** (an option, off by default): Home Assistant asks the device's vendor
  OTA service what firmware it has for the board, on the device's behalf but without its
  identity (see ``VendorChannel``), and keeps only the answer's ``firmware`` object.
- **The firmware project's releases** (an option, off by default): the per-board zip files of
  its GitHub releases (``v<version>_<board>.zip`` holding ``merged-binary.bin``), from which the
  app image is cut out at its partition.
"""

from dataclasses import dataclass, field
from enum import StrEnum
import hashlib
import logging
import os
from pathlib import Path
import re
import secrets
import shutil
import time
from typing import Any, Final
import uuid
import zipfile

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from .protocol.firmware import AppImage, BoardFacts, FirmwareError, find_app_image, is_newer, parse_version
from .protocol.messages import loads

_LOGGER = logging.getLogger(__name__)

LOCAL_FOLDER: Final = "xiaozhi_firmware"
"""In Home Assistant's configuration directory: ``<board>_<version>.bin`` files."""
DEFAULT_VENDOR_URL: Final = "https://api.tenclass.net/xiaozhi/ota/"
"""The firmware's ``CONFIG_OTA_URL``: where a stock device asks when nobody changed its OTA URL."""
DEFAULT_RELEASES_URL: Final = "https://api.github.com/repos/78/xiaozhi-esp32/releases"

CHECK_EVERY: Final = 6 * 3600.0
"""Seconds a remote source's answer is kept (per board and version for the vendor)."""
REFRESH_AT_MOST: Final = 60.0
"""An asked-for refresh reaches a remote source at most this often per question."""
REQUEST_TIMEOUT: Final = 20.0
MAX_ANSWER: Final = 1024 * 1024
"""Bytes of a vendor answer or a release list read at most."""
MAX_DOWNLOAD: Final = 64 * 1024 * 1024
"""Bytes of a firmware download (a release zip) read at most."""
DOWNLOAD_TIMEOUT: Final = 600.0
MAX_UNZIPPED: Final = 32 * 1024 * 1024
MAX_LOCAL_FILES: Final = 200
MAX_NOTES: Final = 20_000


class Source(StrEnum):
    """Where an offer comes from."""

    LOCAL = "local"
    VENDOR = "vendor"
    RELEASES = "releases"


class SourceUnavailable(Exception):
    """A remote source did not answer usefully (unreachable, an error status, nonsense)."""


@dataclass(frozen=True, slots=True)
class Offer:
    """One firmware version available for a device."""

    version: str
    source: Source
    summary: str | None = None
    notes: str | None = None
    release_url: str | None = None
    path: Path | None = None
    """A local file, checked already (``image`` says where the app image is in it)."""
    image: AppImage | None = None
    url: str | None = None
    """A remote binary (or release zip): fetched and checked when it is installed."""


@dataclass(frozen=True, slots=True)
class ImageFile:
    """A checked app image on disk: what is served to a device."""

    path: Path
    image: AppImage


# -- local files ------------------------------------------------------------------------------


@dataclass(slots=True)
class LocalFile:
    """One ``.bin`` of the folder: what its name says, and what checking it found."""

    name: str
    board: str
    version: str
    path: Path
    image: AppImage | None = None
    error: str | None = None


_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


def split_name(name: str) -> tuple[str, str] | None:
    """(board, version) of ``<board>_<version>.bin``; None for any other name."""
    if not name.endswith(".bin"):
        return None
    board, sep, version = name[:-4].rpartition("_")
    if not sep or not board or parse_version(version) is None:
        return None
    return board, version


def cache_name(board: str, version: str) -> str:
    """The file a fetched image is kept in: readable, but never a path of the device's making.

    The board's name comes from the device (``board.name``) and the version from a remote source:
    anything but letters, digits, ``.``, ``-`` and ``_`` becomes ``_``, and a digest of both keeps
    names that would clean up alike apart. ``../`` in a report cannot reach outside the cache.
    """
    digest = hashlib.sha256(f"{board}\0{version}".encode()).hexdigest()[:12]
    clean = _UNSAFE.sub("_", f"{board}_{version}").lstrip(".")[:80]
    return f"{clean}-{digest}.bin"


def check_file(path: Path, version: str | None = None) -> AppImage:
    """The app image of a file (plain or a flash image), checked; FirmwareError otherwise."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        image = find_app_image(stream, size)
    if version is not None and image.version != version:
        raise FirmwareError(f"the file is named for version {version}, the image says {image.version}")
    return image


class LocalFolder:
    """The folder people who build their own firmware drop it into; checked once per file version."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._known: dict[str, tuple[tuple[int, int], LocalFile]] = {}
        self.refused: dict[str, str] = {}
        """File name (``<file> for <board>`` when only that board's devices refuse it) → why it is
        not offered (diagnostics). Each is logged once, until the file or the reason changes."""
        self._refused_as: dict[str, str] = {}
        """``<file> for <board>`` → the file name whose refusal it is: gone with the file."""

    def scan(self) -> list[LocalFile]:
        """Every well-named file of the folder, each checked (blocking: run it in the executor)."""
        try:
            entries = sorted(
                (
                    entry
                    for entry in os.scandir(self.folder)
                    if entry.name.endswith(".bin") and (entry.is_symlink() or entry.is_file())
                ),
                key=lambda entry: entry.name,
            )[:MAX_LOCAL_FILES]
        except OSError:
            return []  # no folder: no local firmware
        files: list[LocalFile] = []
        seen: set[str] = set()
        for entry in entries:
            seen.add(entry.name)
            if entry.is_symlink():  # it may lead anywhere on the machine: only the folder's own files
                self._refuse(entry.name, "a symbolic link, not a file of the folder")
                continue
            if not entry.name.isprintable():
                self._refuse(entry.name, "control characters in the name")
                continue
            named = split_name(entry.name)
            if named is None:
                self._refuse(entry.name, "not named <board>_<version>.bin")
                continue
            stat = entry.stat()
            stamp = (stat.st_size, stat.st_mtime_ns)
            known = self._known.get(entry.name)
            if known is None or known[0] != stamp:
                local = LocalFile(entry.name, named[0], named[1], Path(entry.path))
                try:
                    local.image = check_file(local.path, local.version)
                except (FirmwareError, OSError) as err:
                    local.error = str(err)
                known = self._known[entry.name] = (stamp, local)
                for key in [key for key, name in self._refused_as.items() if name == entry.name]:
                    del self._refused_as[key]  # a new file: its fit for each board is judged anew
                    self.refused.pop(key, None)
                if local.error is not None:
                    self._refuse(entry.name, local.error)
                else:
                    self.refused.pop(entry.name, None)
            files.append(known[1])
        for gone in [name for name in self._known if name not in seen]:
            del self._known[gone]
        for gone in [key for key in self.refused if self._refused_as.get(key, key) not in seen]:
            del self.refused[gone]
            self._refused_as.pop(gone, None)
        return files

    def current(self, path: Path, sha256: str) -> AppImage:
        """The file's image (blocking), still the one offered: read again only if it changed since."""
        stat = path.stat()
        stamp = (stat.st_size, stat.st_mtime_ns)
        known = self._known.get(path.name)
        if known is not None and known[0] == stamp and known[1].path == path and known[1].image is not None:
            image = known[1].image
        else:
            image = check_file(path)
        if image.sha256 != sha256:
            raise FirmwareError("the file changed since it was offered; refresh the update and try again")
        return image

    def _refuse(self, name: str, why: str) -> None:
        if self.refused.get(name) != why:
            _LOGGER.warning("Firmware file %r in %s is not offered to any device: %s", name, self.folder, why)
        self.refused[name] = why

    def offers(self, files: list[LocalFile], facts: BoardFacts) -> list[Offer]:
        """The checked files named for this device's board that are for its chip and project."""
        offers: list[Offer] = []
        for local in files:
            if local.board not in facts.names or local.image is None:
                continue
            try:
                facts.check(local.image)
            except FirmwareError as err:
                key = f"{local.name} for {facts.board}"
                if self.refused.get(key) != str(err):
                    _LOGGER.warning("Firmware file %r is not offered to %r devices: %s", local.name, facts.board, err)
                self.refused[key] = str(err)
                self._refused_as[key] = local.name
                continue
            offers.append(
                Offer(local.image.version, Source.LOCAL, summary=local.name, path=local.path, image=local.image)
            )
        return offers


# -- remote sources ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Cached:
    expires: float
    asked: float
    value: Any
    failures: int = 0


@dataclass(slots=True)
class _Memo:
    """Answers of a remote source by question, kept ``CHECK_EVERY`` seconds; refreshes spaced."""

    entries: dict[Any, _Cached] = field(default_factory=dict)

    def fresh(self, key: Any, *, refresh: bool) -> tuple[bool, Any]:
        """(True, value) when the kept answer may be used; (False, last value) to ask again."""
        entry = self.entries.get(key)
        if entry is None:
            return False, None
        now = time.monotonic()
        if now < entry.expires and not (refresh and now - entry.asked >= REFRESH_AT_MOST):
            return True, entry.value
        return False, entry.value

    def keep(self, key: Any, value: Any) -> None:
        now = time.monotonic()
        self.entries[key] = _Cached(now + CHECK_EVERY, now, value)

    def failed(self, key: Any) -> int:
        """Note a failure (the last answer stays); asks again after a while. The streak's length."""
        now = time.monotonic()
        entry = self.entries.get(key) or _Cached(0.0, 0.0, None)
        entry.failures += 1
        entry.asked = now
        entry.expires = now + min(CHECK_EVERY, 300.0 * 2 ** min(entry.failures, 6))
        self.entries[key] = entry
        return entry.failures

    def succeeded(self, key: Any) -> int:
        """The failures before this success (0: none)."""
        entry = self.entries.get(key)
        return entry.failures if entry is not None else 0


async def _read_json(response: aiohttp.ClientResponse) -> Any:
    if response.status != 200:
        raise SourceUnavailable(f"HTTP {response.status}")
    data = bytearray()
    async for chunk in response.content.iter_chunked(65536):
        data += chunk
        if len(data) > MAX_ANSWER:
            raise SourceUnavailable("answer too large")
    try:
        return loads(bytes(data))
    except ValueError, RecursionError:
        raise SourceUnavailable("answer is not JSON") from None


def _http_url(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith(("http://", "https://")) and len(value) < 2048 else None


class VendorChannel:
    """The device's vendor OTA service, asked on the device's behalf without its identity.

    The request is the firmware's own OTA check with what choosing firmware needs: the board
    (type, name, manufacturer), the chip, and the running firmware's project and version. The
    device's MAC, Client-Id, serial number, Wi-Fi name, addresses and hardware details are never
    sent: the ``Device-Id``/``Client-Id`` the service requires are made up once per Home
    Assistant and board (stable, so the service sees one asker, not a new device each time).
    Of the answer only ``firmware`` is used (never ``activation``, ``websocket`` or ``mqtt``).
    """

    def __init__(self, hass: HomeAssistant, url: str, seed: str) -> None:
        self.hass = hass
        self.url = url
        self._seed = seed
        self._memo = _Memo()

    def stand_in_identity(self, facts: BoardFacts) -> tuple[str, str]:
        """A made-up (MAC, Client-Id) for this Home Assistant and board: no device's own."""
        digest = hashlib.sha256(f"{self._seed}:{facts.board}:{facts.board_name}".encode()).digest()
        mac = ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))  # locally administered
        return mac, str(uuid.UUID(bytes=digest[8:24], version=4))

    def request(self, facts: BoardFacts, language: str) -> tuple[dict[str, str], dict[str, Any]]:
        """The headers and body sent (tests and the README describe exactly this)."""
        mac, client_id = self.stand_in_identity(facts)
        name = facts.board_name or facts.board
        headers = {
            "Activation-Version": "1",
            "Device-Id": mac,
            "Client-Id": client_id,
            "User-Agent": f"{name}/{facts.version}",
            "Accept-Language": language,
            "Content-Type": "application/json",
        }
        body = {
            "mac_address": mac,
            "uuid": client_id,
            "chip_model_name": facts.chip,
            "application": {"name": facts.project, "version": facts.version},
            "board": {"type": facts.board, "name": name, "manufacturer": facts.manufacturer},
        }
        return headers, body

    async def async_offers(self, facts: BoardFacts, *, refresh: bool = False) -> list[Offer]:
        """The vendor's firmware for this board, if newer; SourceUnavailable when it cannot say."""
        key = (facts.board, facts.board_name, facts.chip, facts.project, facts.version)
        usable, value = self._memo.fresh(key, refresh=refresh)
        if usable:
            return list(value or ())
        language = "zh-CN" if self.hass.config.language.lower().startswith("zh") else "en-US"
        headers, body = self.request(facts, language)
        try:
            async with async_get_clientsession(self.hass).post(
                self.url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
            ) as response:
                answer = await _read_json(response)
            offers = self._offers(answer, facts)
        except (SourceUnavailable, aiohttp.ClientError, TimeoutError) as err:
            failures = self._memo.failed(key)
            if failures == 1:
                _LOGGER.warning(
                    "The vendor's firmware channel %s did not answer for %s: %s", self.url, facts.board, err
                )
            raise SourceUnavailable(str(err) or type(err).__name__) from None
        if self._memo.succeeded(key):
            _LOGGER.info("The vendor's firmware channel answers again for %s", facts.board)
        self._memo.keep(key, offers)
        return offers

    def _offers(self, answer: Any, facts: BoardFacts) -> list[Offer]:
        if not isinstance(answer, dict):
            raise SourceUnavailable("the answer is not a JSON object")
        firmware = answer.get("firmware")
        if firmware is None:
            return []  # nothing for this board
        if not isinstance(firmware, dict):
            raise SourceUnavailable("its firmware is not an object")
        version, url = firmware.get("version"), _http_url(firmware.get("url"))
        if not isinstance(version, str) or parse_version(version) is None or url is None:
            raise SourceUnavailable(f"its firmware has no usable version and URL: {str(firmware)[:200]}")
        if not is_newer(facts.version, version):
            return []  # the device's own version, or older: the vendor says it is up to date
        return [Offer(version[:32], Source.VENDOR, url=url)]


RELEASE_ASSET: Final = re.compile(r"^v(?P<version>[0-9][0-9A-Za-z.+-]*)_(?P<name>[a-z0-9.-]+)\.zip$")


class ProjectReleases:
    """The firmware project's GitHub releases: a zip per board and version.

    One listing serves every device (kept ``CHECK_EVERY`` seconds); drafts and pre-releases
    are left out. A release is offered to a device when it has the zip of its board.
    """

    def __init__(self, hass: HomeAssistant, url: str) -> None:
        self.hass = hass
        self.url = url
        self._memo = _Memo()

    async def async_offers(self, facts: BoardFacts, *, refresh: bool = False) -> list[Offer]:
        """The newer releases that have this board's zip; SourceUnavailable when unreadable."""
        usable, releases = self._memo.fresh(self.url, refresh=refresh)
        if not usable:
            try:
                async with async_get_clientsession(self.hass).get(
                    self.url,
                    params={"per_page": "20"},
                    headers={"Accept": "application/vnd.github+json"},
                    timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
                ) as response:
                    releases = _releases(await _read_json(response))
            except (SourceUnavailable, aiohttp.ClientError, TimeoutError) as err:
                if self._memo.failed(self.url) == 1:
                    _LOGGER.warning("The firmware releases at %s could not be read: %s", self.url, err)
                raise SourceUnavailable(str(err) or type(err).__name__) from None
            if self._memo.succeeded(self.url):
                _LOGGER.info("The firmware releases at %s can be read again", self.url)
            self._memo.keep(self.url, releases)
        offers = []
        for release in releases or ():
            url = release["assets"].get((release["version"], facts.release_name))
            if url is not None and is_newer(facts.version, release["version"]):
                offers.append(
                    Offer(
                        release["version"],
                        Source.RELEASES,
                        summary=release["title"],
                        notes=release["notes"],
                        release_url=release["page"],
                        url=url,
                    )
                )
        return offers


def _releases(answer: Any) -> list[dict[str, Any]]:
    """The usable releases of a GitHub release list (anything malformed is skipped)."""
    if not isinstance(answer, list):
        raise SourceUnavailable("the release list is not a JSON array")
    releases = []
    for release in answer[:50]:
        if not isinstance(release, dict) or release.get("draft") is not False or release.get("prerelease"):
            continue
        assets: dict[tuple[str, str], str] = {}
        for asset in release.get("assets") or ():
            if not isinstance(asset, dict) or not isinstance(asset.get("name"), str):
                continue
            match = RELEASE_ASSET.match(asset["name"])
            url = _http_url(asset.get("browser_download_url"))
            if match is not None and url is not None and parse_version(match["version"]) is not None:
                assets[(match["version"], match["name"])] = url
        versions = {version for version, _name in assets}
        if len(versions) != 1:
            continue  # a release's zips all carry its one version
        title, notes, page = release.get("name"), release.get("body"), _http_url(release.get("html_url"))
        releases.append(
            {
                "version": versions.pop(),
                "title": title[:255] if isinstance(title, str) else None,
                "notes": notes[:MAX_NOTES] if isinstance(notes, str) else None,
                "page": page,
                "assets": assets,
            }
        )
    return releases


# -- fetching a remote binary -----------------------------------------------------------------


async def async_fetch(hass: HomeAssistant, offer: Offer, facts: BoardFacts, cache: Path) -> ImageFile:
    """The offer's binary, downloaded, unpacked (a release zip) and checked, kept in ``cache``.

    Raises FirmwareError (not an image for this device) or SourceUnavailable (not downloadable).
    A file kept from an earlier fetch is checked again and reused.
    """
    assert offer.url is not None
    final = cache / cache_name(facts.release_name, offer.version)
    if await hass.async_add_executor_job(final.exists):
        try:
            image = await hass.async_add_executor_job(check_file, final, offer.version)
            facts.check(image, offer.version)
            return ImageFile(final, image)
        except (FirmwareError, OSError) as err:
            _LOGGER.info("Fetching %s again: the kept copy is unusable (%s)", final.name, err)
    await hass.async_add_executor_job(lambda: cache.mkdir(parents=True, exist_ok=True))
    download = cache / f".download-{secrets.token_hex(8)}"
    try:
        await _async_download(hass, offer.url, download)
        return await hass.async_add_executor_job(_unpack, download, final, facts, offer.version)
    finally:
        await hass.async_add_executor_job(lambda: download.unlink(missing_ok=True))


async def _async_download(hass: HomeAssistant, url: str, target: Path) -> None:
    try:
        async with async_get_clientsession(hass).get(
            url, timeout=aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT, sock_read=REQUEST_TIMEOUT)
        ) as response:
            if response.status != 200:
                raise SourceUnavailable(f"HTTP {response.status} for {url}")
            if (response.content_length or 0) > MAX_DOWNLOAD:
                raise SourceUnavailable(f"{url} is larger than {MAX_DOWNLOAD // 1048576} MB")
            stream = await hass.async_add_executor_job(target.open, "wb")
            try:
                size = 0
                async for chunk in response.content.iter_chunked(256 * 1024):
                    size += len(chunk)
                    if size > MAX_DOWNLOAD:
                        raise SourceUnavailable(f"{url} is larger than {MAX_DOWNLOAD // 1048576} MB")
                    await hass.async_add_executor_job(stream.write, chunk)
            finally:
                await hass.async_add_executor_job(stream.close)
    except (aiohttp.ClientError, TimeoutError) as err:
        raise SourceUnavailable(f"could not download {url}: {err or type(err).__name__}") from None


def _unpack(download: Path, final: Path, facts: BoardFacts, version: str) -> ImageFile:
    """Blocking: the app image of a download (a zip's ``.bin``, or the file itself), checked."""
    source = download
    unzipped = download.with_suffix(".bin")
    try:
        if zipfile.is_zipfile(download):
            with zipfile.ZipFile(download) as archive:
                members = [m for m in archive.infolist() if m.filename.endswith(".bin") and not m.is_dir()]
                member = next((m for m in members if m.filename.endswith("merged-binary.bin")), None)
                if member is None and len(members) == 1:
                    member = members[0]
                if member is None:
                    raise FirmwareError("the release zip holds no merged-binary.bin")
                if member.file_size > MAX_UNZIPPED:
                    raise FirmwareError("the release zip's image is too large")
                with archive.open(member) as packed, unzipped.open("wb") as out:
                    shutil.copyfileobj(packed, out, 256 * 1024)
            source = unzipped
        image = check_file(source)
        facts.check(image, version)
        temporary = final.with_suffix(".part")
        with source.open("rb") as stream, temporary.open("wb") as out:
            stream.seek(image.offset)
            remaining = image.size
            while remaining:
                chunk = stream.read(min(remaining, 256 * 1024))
                if not chunk:
                    raise FirmwareError("the file ends inside the image (truncated)")
                out.write(chunk)
                remaining -= len(chunk)
        temporary.replace(final)
        return ImageFile(final, check_file(final, version))
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        raise FirmwareError(f"the release zip is damaged: {err}") from None
    finally:
        unzipped.unlink(missing_ok=True)
