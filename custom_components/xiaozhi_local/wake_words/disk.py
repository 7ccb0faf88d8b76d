"""Blocking reads and writes of the wake word folder and the model cache (for the executor).

Files are found by listing their folder, never by a path made from a name a device reports; only
regular files count (a symlink is refused, whatever it points at), and every read is capped by
the bytes actually read, not by what ``stat`` says.
"""

import contextlib
import hashlib
import io
import os
from pathlib import Path
import secrets
import shutil
import stat
from typing import Final
import zipfile

from ..firmware.files import split_name
from ..firmware.unpack import MAX_UNZIPPED, ZIP_ERRORS, zip_error
from ..protocol.assets import AssetsError, pack_in_flash_image, parse_pack, read_index
from ..protocol.firmware import parse_version
from ..protocol.partitions import read_partition_table
from ..protocol.wake_pack import PackWakeWord, pack_engine, pack_wake_word
from .catalog import WakeModel
from .pack import ENGINE_WAKENET

MAX_MODEL_FILE: Final = 8 * 1024 * 1024
MAX_MODEL_FILES: Final = 16
MAX_PACK: Final = 32 * 1024 * 1024


class FileRefused(Exception):
    """A local file that is not read: a symlink, not a regular file, or larger than allowed."""


def entry(folder: Path, name: str) -> Path | None:
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


def is_folder(path: Path | None) -> bool:
    """Blocking: a real folder (not a link to one)."""
    try:
        return path is not None and stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def model_folder(parent: Path, name: str) -> Path | None:
    """Blocking: the real folder called ``name`` in ``parent`` that holds a model (its ``_MODEL_INFO_``)."""
    folder = entry(parent, name)
    if folder is None or not is_folder(folder) or entry(folder, "_MODEL_INFO_") is None:
        return None
    return folder


def read_model(folder: Path) -> dict[str, bytes]:
    """Blocking: a model folder's regular files (each at most ``MAX_MODEL_FILE``, at most 16)."""
    files: dict[str, bytes] = {}
    for path in sorted(folder.iterdir())[:MAX_MODEL_FILES]:
        files[path.name] = read_regular(path, MAX_MODEL_FILE)
    return files


def matches(model: WakeModel, files: dict[str, bytes]) -> str | None:
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


def write_model(cache: Path, name: str, files: dict[str, bytes]) -> None:
    """Blocking: a downloaded model into the cache, all or nothing (a folder written, then renamed)."""
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{name}.{secrets.token_hex(4)}.part"
    try:
        partial.mkdir()
        for file, data in files.items():
            (partial / file).write_bytes(data)
        final = cache / name
        if final.exists() or final.is_symlink():
            remove(final)
        partial.rename(final)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)


def remove(path: Path) -> None:
    """Blocking: a cached model (or whatever is in its place) removed."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def read_pack(folder: Path, firmware: Path, names: frozenset[str]) -> bytes | None:
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


def release_pack(download: Path) -> bytes:
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
    pack = pack_in_flash_image(image, partitions)
    read_index(parse_pack(pack))  # a pack the firmware would refuse is refused here, before it is kept or rebuilt
    return pack


def keep(path: Path, data: bytes) -> None:
    """Blocking: ``data`` into ``path``, whole (written, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(path)


def read_kept(path: Path) -> bytes | None:
    """A pack kept earlier (None: none, or not a regular file)."""
    try:
        return read_regular(path, MAX_PACK) if path.exists() else None
    except FileRefused:
        return None


def learn(pack: bytes | None) -> tuple[str, PackWakeWord | None]:
    """Blocking: the engine a board's pack is built for, and what it wakes on (if it says)."""
    if pack is None:
        return ENGINE_WAKENET, None
    with contextlib.suppress(AssetsError):
        files = parse_pack(pack)
        return pack_engine(files) or ENGINE_WAKENET, pack_wake_word(files)
    return ENGINE_WAKENET, None
