"""The firmware's own upgrade, and images to feed it.

How stock firmware 2.4.2 upgrades (``main/ota.cc`` ``Ota::Upgrade``, ``esp_ota_*`` of ESP-IDF):

- ``GET`` the URL (no redirects followed); anything but **200** fails ("Failed to get firmware,
  status code"), and so does a body without a **Content-Length** or with 0 ("Failed to get
  content length");
- read it in **4 KiB** pages until the end of the body; a read error fails ("Failed to read HTTP
  data"). Once the image header, first segment header and app description are in, it reads the
  description (it compares nothing in it) and begins writing;
- ``esp_ota_write`` refuses a first byte that is not the image magic ``0xE9``;
- ``esp_ota_end`` verifies the whole image: every segment in bounds, the XOR checksum, the
  appended SHA-256, and the chip id against its own chip ("Image validation failed");
- then it sets the boot partition and reboots into the new image, whose app description names
  the version it runs from then on.

This module has its own image code, written from ESP-IDF's formats (``esp_app_format.h``), not
the integration's parser: it is the other end of the wire.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
import hashlib
import socket
import struct
from typing import Any, Final

import aiohttp

PAGE_SIZE: Final = 4096
CHIP_IDS: Final = {"esp32": 0, "esp32s2": 2, "esp32c3": 5, "esp32s3": 9, "esp32c2": 12, "esp32c6": 13, "esp32p4": 18}


class UpgradeFailed(Exception):
    """The upgrade failed; the message is what the firmware logs."""


@dataclass(frozen=True, slots=True)
class FlashedImage:
    """What a verified image says about itself."""

    version: str
    project: str
    chip_id: int
    size: int


def _xor(data: bytes, seed: int) -> int:
    """``seed`` XOR every byte of ``data``: the image checksum (folded as an integer, for megabytes)."""
    value, width = int.from_bytes(data, "big"), len(data)
    while width > 1:
        shift = 8 * (width // 2)
        value, width = (value >> shift) ^ (value & ((1 << shift) - 1)), width - width // 2
    return (value & 0xFF) ^ seed


def _desc(version: str, project: str) -> bytes:
    """``esp_app_desc_t`` (256 bytes)."""
    desc = bytearray(256)
    struct.pack_into("<I", desc, 0, 0xABCD5432)
    desc[16 : 16 + len(version)] = version.encode()
    desc[48 : 48 + len(project)] = project.encode()
    desc[80:88] = b"10:00:00"
    desc[96:107] = b"Nov 20 2026"
    desc[112:118] = b"v6.0.2"
    return bytes(desc)


def build_image(
    version: str, *, project: str = "xiaozhi", chip: str = "esp32s3", size: int = 64 * 1024, hash_appended: bool = True
) -> bytes:
    """An app image as ``idf.py build`` makes one: header, two segments, checksum, SHA-256.

    ``size`` is about the length of the segments' data (a real image is 2–3 MB).
    """
    first = _desc(version, project) + bytes(range(256)) * 4
    second_length = max(16, size - len(first))
    second = (hashlib.sha256(version.encode()).digest() * (second_length // 32 + 1))[:second_length]
    header = bytearray(24)
    header[0] = 0xE9
    header[1] = 2  # segments
    header[2] = 2  # SPI mode DIO
    header[3] = 0x4F  # 16 MB, 80 MHz
    struct.pack_into("<I", header, 4, 0x40380000)  # entry address
    struct.pack_into("<H", header, 12, CHIP_IDS[chip])
    header[23] = 1 if hash_appended else 0
    body = bytearray(header)
    checksum = 0xEF
    for address, data in ((0x3C000020, first), (0x40380000, second)):
        body += struct.pack("<II", address, len(data)) + data
        checksum = _xor(data, checksum)
    body += bytes(15 - len(body) % 16) + bytes([checksum])
    if hash_appended:
        body += hashlib.sha256(body).digest()
    return bytes(body)


def flash_image(
    app: bytes, *, app_offset: int = 0x20000, app_size: int = 0x100000, assets: bytes | None = None
) -> bytes:
    """A merged flash image (``idf.py merge-bin``) with ``app`` in its first app partition.

    A stand-in bootloader image at 0 (it has no app description), the partition table at
    0x8000 (nvs, otadata, phy_init, ota_0, ota_1, assets), erased flash (``0xFF``) between.
    """
    bootloader = bytearray(b"\xe9\x03\x02\x4f" + bytes(20))
    bootloader += bytes(range(256)) * 8
    table = bytearray()
    for kind, subtype, offset, length, label in (
        (1, 2, 0x9000, 0x4000, "nvs"),
        (1, 0, 0xD000, 0x2000, "otadata"),
        (1, 1, 0xF000, 0x1000, "phy_init"),
        (0, 0x10, app_offset, app_size, "ota_0"),
        (0, 0x11, app_offset + app_size, app_size, "ota_1"),
        *([(1, 0x82, app_offset + 2 * app_size, 0x100000, "assets")] if assets is not None else []),
    ):
        table += b"\xaa\x50" + struct.pack("<BBII", kind, subtype, offset, length)
        table += label.encode().ljust(16, b"\0") + bytes(4)
    table += b"\xeb\xeb" + b"\xff" * 14 + hashlib.md5(bytes(table)).digest()  # as gen_esp32part
    image = bytearray(b"\xff" * (app_offset + len(app) + 4096))
    if assets is not None:  # the board's default pack in its assets partition (after both app slots)
        image = image.ljust(app_offset + 2 * app_size, b"\xff") + assets + b"\xff" * 4096
    image[0 : len(bootloader)] = bootloader
    image[0x8000 : 0x8000 + len(table)] = table
    image[app_offset : app_offset + len(app)] = app
    return bytes(image)


def verify(image: bytes, chip: str) -> FlashedImage:
    """``esp_ota_end``'s check of a written image; UpgradeFailed("Image validation failed …")."""
    failed = "Image validation failed, image is corrupted"
    if len(image) < 24 + 8 + 256 or image[0] != 0xE9:
        raise UpgradeFailed(failed)
    (chip_id,) = struct.unpack_from("<H", image, 12)
    if chip_id != CHIP_IDS.get(chip):
        raise UpgradeFailed(f"{failed} (mismatch chip ID, expected {CHIP_IDS.get(chip)}, found {chip_id})")
    position, checksum = 24, 0xEF
    for _ in range(image[1]):
        if position + 8 > len(image):
            raise UpgradeFailed(failed)
        (length,) = struct.unpack_from("<I", image, position + 4)
        data = image[position + 8 : position + 8 + length]
        if len(data) != length:
            raise UpgradeFailed(failed)
        checksum = _xor(data, checksum)
        position += 8 + length
    position += 15 - position % 16
    if position >= len(image) or image[position] != checksum:
        raise UpgradeFailed(failed)
    position += 1
    if image[23] == 1:
        if image[position : position + 32] != hashlib.sha256(image[:position]).digest():
            raise UpgradeFailed(failed)
        position += 32
    desc = image[32 : 32 + 256]
    if struct.unpack_from("<I", desc)[0] != 0xABCD5432:
        raise UpgradeFailed(failed)
    version = desc[16:48].split(b"\0", 1)[0].decode(errors="replace")
    project = desc[48:80].split(b"\0", 1)[0].decode(errors="replace")
    return FlashedImage(version, project, chip_id, position)


BOARD_RECEIVE_WINDOW = 5760
"""lwIP's TCP receive window on the boards (``CONFIG_LWIP_TCP_WND_DEFAULT``): what the device's
stack acknowledges beyond what the firmware has read is this little, not a PC's megabytes."""


def _board_socket(addr_info: Any) -> socket.socket:
    """The download's socket, with the board's small receive buffer (so reading slowly is seen)."""
    family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BOARD_RECEIVE_WINDOW)
    return sock


async def download_and_flash(
    url: str,
    chip: str,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    fail_flash: bool = False,
    read_delay: float = 0.0,
    frozen: asyncio.Event | None = None,
    partition: int | None = None,
) -> FlashedImage:
    """``Ota::Upgrade``: GET, 200 and a Content-Length, 4 KiB pages, magic on the first write, verify.

    ``fail_flash`` makes ``esp_ota_end`` fail whatever was written (a flash that went bad).
    ``read_delay`` slows each page (a device on weak Wi-Fi), so that a test can act mid-download.
    Once ``frozen`` is set the device reads nothing more and sends nothing (its power was cut):
    the socket stays as it was until the caller cancels.
    """
    written = bytearray()
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=600, sock_read=60),
                connector=aiohttp.TCPConnector(socket_factory=_board_socket),
                read_bufsize=PAGE_SIZE,  # what the client buffers ahead of the firmware's reads: little
            ) as session,
            session.get(url, allow_redirects=False) as response,
        ):
            if response.status != 200:
                raise UpgradeFailed(f"Failed to get firmware, status code: {response.status}")
            total = response.content_length or 0
            if total == 0:
                raise UpgradeFailed("Failed to get content length")
            while True:
                page = await response.content.read(PAGE_SIZE)
                if not written and page and page[0] != 0xE9:
                    raise UpgradeFailed("Failed to write OTA data: ESP_ERR_OTA_VALIDATE_FAILED")
                written += page
                if partition is not None and len(written) > partition:  # esp_ota_write past the slot
                    raise UpgradeFailed("Failed to write OTA data: ESP_ERR_INVALID_SIZE")
                if on_progress is not None:
                    on_progress(len(written), total)
                if not page:
                    break
                if read_delay:
                    await asyncio.sleep(read_delay)
                if frozen is not None and frozen.is_set():
                    await asyncio.Event().wait()  # powered off: silent until cancelled
    except aiohttp.ClientError as err:
        raise UpgradeFailed(f"Failed to read HTTP data: {err}") from None
    if fail_flash:
        raise UpgradeFailed("Failed to end OTA: ESP_FAIL")
    return verify(bytes(written), chip)


@dataclass(frozen=True, slots=True)
class FirmwareOffer:
    """``firmware`` of an OTA answer, as ``Ota::CheckVersion`` reads it."""

    version: str
    url: str
    force: bool


def parse_version(version: str) -> list[int]:
    """``Ota::ParseVersion``: ``std::stoi`` of each dot-separated part (ValueError where it throws)."""
    numbers = []
    for part in version.split("."):
        digits = ""
        for char in part.lstrip():
            if char.isdigit() or (not digits and char in "+-"):
                digits += char
            else:
                break
        numbers.append(int(digits))  # ValueError: stoi throws (uncaught on the device)
    return numbers


def is_newer(current: str, candidate: str) -> bool:
    """``Ota::IsNewVersionAvailable``."""
    old, new = parse_version(current), parse_version(candidate)
    for a, b in zip(old, new, strict=False):
        if b != a:
            return b > a
    return len(new) > len(old)


def firmware_offer(answer: dict[str, object], current: str) -> FirmwareOffer | None:
    """The new version an OTA answer offers (newer, or ``force`` 1), or None ("latest version")."""
    firmware = answer.get("firmware")
    if not isinstance(firmware, dict):
        return None  # "No firmware section found!"
    version, url, force = firmware.get("version"), firmware.get("url"), firmware.get("force")
    if not isinstance(version, str) or not isinstance(url, str):
        return None
    forced = isinstance(force, (int, float)) and not isinstance(force, bool) and int(force) == 1
    if is_newer(current, version) or forced:
        return FirmwareOffer(version, url, forced)
    return None
