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

from dataclasses import dataclass
from enum import StrEnum
import hashlib
import logging
import os
from pathlib import Path
import re
from typing import Final

from ..protocol.firmware import AppImage, BoardFacts, FirmwareError, find_app_image, parse_version

_LOGGER = logging.getLogger(__name__)

LOCAL_FOLDER: Final = "xiaozhi_firmware"
"""In Home Assistant's configuration directory: ``<board>_<version>.bin`` files."""
DEFAULT_VENDOR_URL: Final = "https://api.tenclass.net/xiaozhi/ota/"
"""The firmware's ``CONFIG_OTA_URL``: where a stock device asks when nobody changed its OTA URL."""
DEFAULT_RELEASES_URL: Final = "https://api.github.com/repos/78/xiaozhi-esp32/releases"

MAX_LOCAL_FILES: Final = 200


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
