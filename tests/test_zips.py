"""Zips that Python cannot read (Deflate64, encryption, corrupt deflate): a reason, never a traceback."""

import io
from pathlib import Path
import struct
from typing import Any
import zipfile

import pytest

from custom_components.xiaozhi_local.firmware.unpack import unpack
from custom_components.xiaozhi_local.protocol.assets import AssetFile, AssetsError, build_pack, parse_pack
from custom_components.xiaozhi_local.protocol.firmware import FirmwareError
from custom_components.xiaozhi_local.wake_words.disk import release_pack
from xiaozhi_sim.assets import default_pack
from xiaozhi_sim.firmware import build_image, flash_image


def _zip(method: int = zipfile.ZIP_STORED, *, flags: int = 0, corrupt: bool = False) -> bytes:
    """A release-like zip whose ``merged-binary.bin`` is stored with ``method`` (patched in) and ``flags``."""
    out = io.BytesIO()
    compression = zipfile.ZIP_DEFLATED if corrupt else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", compression) as archive:
        archive.writestr("merged-binary.bin", bytes(range(256)) * 512)
    data = bytearray(out.getvalue())
    if corrupt:
        start = 30 + len("merged-binary.bin")
        data[start : start + 64] = b"\xff" * 64  # the deflate stream, broken
    for signature, method_at, flags_at in ((b"PK\x03\x04", 8, 6), (b"PK\x01\x02", 10, 8)):
        at = data.find(signature)
        if method != zipfile.ZIP_STORED:
            struct.pack_into("<H", data, at + method_at, method)
        if flags:
            struct.pack_into("<H", data, at + flags_at, flags)
    return bytes(data)


BAD_ZIPS = {
    "deflate64": (_zip(9), "compression"),
    "encrypted": (_zip(flags=1), "encrypted"),
    "corrupt deflate": (_zip(corrupt=True), "cannot be unpacked"),
    "not a zip at the end": (_zip()[:-30], "cannot be unpacked"),
}


@pytest.mark.parametrize(("zipped", "reason"), BAD_ZIPS.values(), ids=BAD_ZIPS.keys())
def test_a_release_zip_for_a_wake_word_pack_says_why(tmp_path: Path, zipped: bytes, reason: str) -> None:
    path = tmp_path / "release.zip"
    path.write_bytes(zipped)
    with pytest.raises(AssetsError, match=reason):
        release_pack(path)


@pytest.mark.parametrize(("zipped", "reason"), BAD_ZIPS.values(), ids=BAD_ZIPS.keys())
def test_a_release_zip_for_firmware_says_why(tmp_path: Path, zipped: bytes, reason: str) -> None:
    path = tmp_path / "release.zip"
    path.write_bytes(zipped)
    facts: Any = None  # never reached: the zip fails first
    if not zipfile.is_zipfile(path):
        pytest.skip("not recognised as a zip: unpacked as a plain image (checked elsewhere)")
    with pytest.raises(FirmwareError, match=reason):
        unpack(path, tmp_path / "image.bin", facts, "2.4.2")
    assert not (tmp_path / "release.bin").exists()


def _release_with_index(index: bytes) -> bytes:
    """A release zip, deflated, whose board pack carries ``index`` as its ``index.json``."""
    files = parse_pack(default_pack())
    files["index.json"] = AssetFile("index.json", index)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        image = flash_image(build_image("2.4.2"), assets=build_pack(list(files.values())))
        archive.writestr("merged-binary.bin", image)
    return out.getvalue()


HOSTILE_INDEXES = {
    "large": (b'{"version":1,"x":[' + b"0," * 450_000 + b"0]}", "bytes"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
}


@pytest.mark.parametrize(("index", "reason"), HOSTILE_INDEXES.values(), ids=HOSTILE_INDEXES.keys())
def test_a_release_whose_pack_has_a_hostile_index_is_refused_before_it_is_kept(
    tmp_path: Path, index: bytes, reason: str
) -> None:
    """A small zip (a few KiB) whose board pack's index.json is too large or too deep: refused with
    the reason while it is read, before the pack is kept or rebuilt with a new wake word."""
    path = tmp_path / "release.zip"
    path.write_bytes(_release_with_index(index))
    assert path.stat().st_size < 64 * 1024
    with pytest.raises(AssetsError, match=reason):
        release_pack(path)
