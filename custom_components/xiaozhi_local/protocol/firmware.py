"""ESP app images, the payload of a xiaozhi firmware update: read, check, cut out of a flash image.

What the device flashes (``Ota::Upgrade``, ``esp_ota_write``/``esp_ota_end``) is an ESP-IDF app
image: an ``esp_image_header_t`` (24 bytes, magic ``0xE9``, chip id at bytes 12–13, segment count at
byte 1, "hash appended" at byte 23), its segments (an 8-byte header of load address and length,
then the data), padding up to a 16-byte boundary whose last byte is the XOR checksum of every
segment's data (seeded with ``0xEF``), and, with the hash flag, the SHA-256 of all of that. The
first segment starts with ``esp_app_desc_t`` (magic ``0xABCD5432``, then ``version[32]`` and
``project_name[32]`` at offsets 16 and 48 of it). A device only validates the image after it has
written the whole of it, so every check here runs before a byte is offered to one.

The firmware project publishes each board's build as a *merged flash image* (bootloader,
partition table at 0x8000, app …: ``merge-bin``), zipped. The app image is cut out of the first
app partition of the table, its length found by walking its segments, and checked like any
other; the rest of the partition must be erased flash (``0xFF``), as the vendor's own release
tooling checks.

Pure Python: files are any seekable binary stream; nothing here does I/O of its own.
"""

from collections.abc import Iterator
from dataclasses import dataclass
import hashlib
import itertools
import struct
from typing import BinaryIO, Final

from .partitions import APP_PARTITION_TYPE, c_string, read_partition_table

IMAGE_MAGIC: Final = 0xE9
APP_DESC_MAGIC: Final = 0xABCD5432
HEADER_SIZE: Final = 24
SEGMENT_HEADER_SIZE: Final = 8
APP_DESC_SIZE: Final = 256
DESC_OFFSET: Final = HEADER_SIZE + SEGMENT_HEADER_SIZE
"""Where ``esp_app_desc_t`` starts: at the beginning of the first segment's data."""
PREFIX_SIZE: Final = DESC_OFFSET + APP_DESC_SIZE
"""Bytes needed to read the header and the app description (what the firmware reads first)."""
MAX_SEGMENTS: Final = 16
"""``ESP_IMAGE_MAX_SEGMENTS``."""
MAX_IMAGE: Final = 16 * 1024 * 1024
"""No xiaozhi app partition is larger (16 MB flash, two app slots); anything bigger is refused."""
CHECKSUM_SEED: Final = 0xEF
DIGEST_SIZE: Final = 32

CHIP_IDS: Final = {
    "esp32": 0x0000,
    "esp32s2": 0x0002,
    "esp32c3": 0x0005,
    "esp32s3": 0x0009,
    "esp32c2": 0x000C,
    "esp32c6": 0x000D,
    "esp32h2": 0x0010,
    "esp32p4": 0x0012,
    "esp32c61": 0x0014,
    "esp32c5": 0x0017,
}
"""``esp_chip_id_t`` by the chip name a device reports (``chip_model_name``, ``CONFIG_IDF_TARGET``)."""

_CHUNK: Final = 64 * 1024


class FirmwareError(ValueError):
    """Not an app image this device could take; the message says why, for a user."""


@dataclass(frozen=True, slots=True)
class AppImage:
    """A checked app image: where it is in its file and what it says about itself."""

    offset: int
    """Where the image starts in its file (0, or the app partition of a flash image)."""
    size: int
    """Its length, checksum and digest included: the bytes a device is sent."""
    chip_id: int
    version: str
    project_name: str
    idf_version: str
    compile_date: str
    compile_time: str
    sha256: str
    """SHA-256 of the image as sent (hex): names it in logs and diagnostics."""

    @property
    def chip(self) -> str | None:
        """The chip's name (``esp32s3`` …), None for an id this module does not know."""
        return next((name for name, chip_id in CHIP_IDS.items() if chip_id == self.chip_id), None)


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise FirmwareError("the file ends inside the image (truncated)")
    return data


def _xor(data: bytes) -> int:
    """XOR of every byte of ``data`` (folded as one big integer: fast on megabytes)."""
    value, width = int.from_bytes(data, "little"), len(data)
    while width > 1:
        half = (width + 1) // 2
        value = (value >> (8 * half)) ^ (value & ((1 << (8 * half)) - 1))
        width = half
    return value & 0xFF


def describe(prefix: bytes) -> tuple[int, int, str, str, str, str, str]:
    """(segments, chip id, version, project, IDF version, date, time) from an image's first bytes.

    ``prefix`` is at least ``PREFIX_SIZE`` bytes. Raises FirmwareError for anything that is not
    the start of an ESP app image.
    """
    if len(prefix) < PREFIX_SIZE:
        raise FirmwareError("too short to be a firmware image")
    if prefix[0] != IMAGE_MAGIC:
        raise FirmwareError("not an ESP firmware image (no image magic)")
    segments = prefix[1]
    if not 1 <= segments <= MAX_SEGMENTS:
        raise FirmwareError(f"not an ESP firmware image ({segments} segments)")
    (chip_id,) = struct.unpack_from("<H", prefix, 12)
    (desc_magic,) = struct.unpack_from("<I", prefix, DESC_OFFSET)
    if desc_magic != APP_DESC_MAGIC:
        raise FirmwareError("an ESP image, but not an application (no app description)")
    desc = prefix[DESC_OFFSET : DESC_OFFSET + APP_DESC_SIZE]
    return (
        segments,
        chip_id,
        c_string(desc[16:48]),
        c_string(desc[48:80]),
        c_string(desc[112:144]),
        c_string(desc[96:112]),
        c_string(desc[80:96]),
    )


def read_app_image(stream: BinaryIO, offset: int = 0, limit: int = MAX_IMAGE) -> AppImage:
    """Check the app image at ``offset``: header, every segment in bounds, checksum and digest.

    This is what ``esp_ota_end`` verifies on the device, done before the device is asked: a
    truncated, corrupted or foreign file raises FirmwareError and is never offered. ``limit``
    bounds the image (the partition it sits in, or ``MAX_IMAGE``).
    """
    stream.seek(offset)
    prefix = stream.read(PREFIX_SIZE)
    segments, chip_id, version, project, idf, date, time = describe(prefix)
    if not version:
        raise FirmwareError("the image names no version")
    hash_appended = prefix[23] == 1
    digest = hashlib.sha256()
    stream.seek(offset)
    header = _read_exactly(stream, HEADER_SIZE)
    digest.update(header)
    position, checksum = HEADER_SIZE, CHECKSUM_SEED
    for _ in range(segments):
        segment_header = _read_exactly(stream, SEGMENT_HEADER_SIZE)
        (length,) = struct.unpack_from("<I", segment_header, 4)
        position += SEGMENT_HEADER_SIZE + length
        if position > limit:
            raise FirmwareError("a segment runs past the end of the file or partition (truncated or corrupted)")
        digest.update(segment_header)
        remaining = length
        while remaining:
            data = _read_exactly(stream, min(_CHUNK, remaining))
            checksum ^= _xor(data)
            digest.update(data)
            remaining -= len(data)
    padding = 15 - position % 16
    tail = _read_exactly(stream, padding + 1)
    if tail[-1] != checksum:
        raise FirmwareError("the image's checksum does not match (corrupted or truncated)")
    digest.update(tail)
    position += padding + 1
    if hash_appended:
        stored = _read_exactly(stream, DIGEST_SIZE)
        if stored != digest.digest():
            raise FirmwareError("the image's SHA-256 does not match (corrupted or truncated)")
        position += DIGEST_SIZE
    if position > limit:
        raise FirmwareError("the image is larger than its partition")
    whole = hashlib.sha256()
    stream.seek(offset)
    for chunk in _chunks(stream, position):
        whole.update(chunk)
    return AppImage(offset, position, chip_id, version, project, idf, date, time, whole.hexdigest())


def _chunks(stream: BinaryIO, size: int) -> Iterator[bytes]:
    """``size`` bytes of ``stream`` from where it is, in chunks."""
    while size > 0:
        data = stream.read(min(_CHUNK, size))
        if not data:
            return
        size -= len(data)
        yield data


def find_app_image(stream: BinaryIO, file_size: int) -> AppImage:
    """The app image of a file: a plain app image (``xiaozhi.bin``), or cut out of a flash image.

    For a flash image (``merged-binary.bin`` of a release), the first app partition of the table
    holds it, as the firmware's release tooling reads it; the rest of that partition must be
    erased flash. Raises FirmwareError with the reason either way.
    """
    stream.seek(0)
    try:
        return read_app_image(stream, 0, min(file_size, MAX_IMAGE))
    except FirmwareError as err:
        plain_error = err
    apps = [p for p in read_partition_table(stream) if p.type == APP_PARTITION_TYPE]
    if not apps:
        raise plain_error
    app = apps[0]
    if app.offset >= file_size:
        raise FirmwareError("the flash image ends before its app partition (truncated)")
    image = read_app_image(stream, app.offset, min(app.size, MAX_IMAGE))
    stream.seek(app.offset + image.size)
    rest = min(app.size, file_size - app.offset) - image.size
    for chunk in _chunks(stream, rest):
        if chunk.strip(b"\xff"):
            raise FirmwareError("unexpected data after the app image in its partition")
    return image


def parse_version(text: str) -> tuple[int, ...] | None:
    """A version as the firmware compares it (``Ota::ParseVersion``), or None where it would throw.

    Each dot-separated part is read by ``std::stoi``: its leading digits. A part without any
    (``abc``, ``""``) makes the firmware throw, uncaught: such a version is never sent.
    """
    numbers: list[int] = []
    for part in text.strip().split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part.lstrip("+-")))
        if not digits or len(digits) > 9:  # stoi: digits, and an int
            return None
        numbers.append(int(digits))
    return tuple(numbers)


def leading_version(text: str) -> tuple[int, ...]:
    """The numbers a version starts with (``2.5.0-rc1`` → (2, 5, 0)); () when it has none."""
    numbers: list[int] = []
    for part in text.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def is_newer(current: str, candidate: str) -> bool:
    """Whether the firmware would take ``candidate`` over ``current`` (``IsNewVersionAvailable``).

    Parts are compared left to right; with equal leading parts, the longer version is newer.
    False when either cannot be read.
    """
    old, new = parse_version(current), parse_version(candidate)
    if old is None or new is None:
        return False
    for a, b in zip(old, new, strict=False):
        if b != a:
            return b > a
    return len(new) > len(old)


@dataclass(frozen=True, slots=True)
class BoardFacts:
    """What a stock device says about its firmware at its OTA check: enough to choose an image.

    ``board`` is ``board.type`` (the firmware's ``BOARD_TYPE``), ``board_name`` the build's name
    (``BOARD_NAME``, also in its User-Agent) and ``manufacturer`` ``BOARD_MANUFACTURER``;
    ``chip`` is ``chip_model_name``; ``project`` and ``version`` are ``application.name`` and
    ``.version``, read from the running image's app description.
    """

    board: str
    chip: str
    version: str
    project: str = "xiaozhi"
    board_name: str = ""
    manufacturer: str = ""
    app_slot: int = 0
    """Bytes of the app partition an update goes to (``update_slot_size``); 0 when not reported."""
    assets_size: int = 0
    """Bytes of its ``assets`` partition (wake word, font, emoji: protocol/assets.py); 0: it has none."""

    @property
    def chip_id(self) -> int | None:
        """The chip id an image for this device must carry; None for a chip not known here."""
        return CHIP_IDS.get(self.chip.lower())

    @property
    def release_name(self) -> str:
        """The name of this board's files in the firmware project's releases (``v<ver>_<name>.zip``).

        The build's name, prefixed with the manufacturer unless it already starts with it, as
        the project's build tool names its artifacts (P4X boards as a ``-p4x-`` chip family).
        """
        name = self.board_name or self.board
        if name.endswith("-p4x") and "-p4-" in name[:-4]:
            name = name[:-4].replace("-p4-", "-p4x-", 1)
        prefix = f"{self.manufacturer}-" if self.manufacturer else ""
        return name if not prefix or name.startswith(prefix) else prefix + name

    @property
    def names(self) -> frozenset[str]:
        """Every name this board goes by: a local file named after any of them is for it."""
        return frozenset(name for name in (self.board, self.board_name, self.release_name) if name)

    def check(self, image: AppImage, version: str | None = None) -> None:
        """Raise FirmwareError unless the image is for this device (chip, project, ``version``)."""
        if self.chip_id is None:
            raise FirmwareError(f"the device's chip {self.chip!r} is not known; nothing can be checked for it")
        if image.chip_id != self.chip_id:
            raise FirmwareError(f"the image is for {image.chip or f'chip {image.chip_id}'}, the device is {self.chip}")
        if image.project_name != self.project:
            raise FirmwareError(f"the image is of project {image.project_name!r}, the device runs {self.project!r}")
        if version is not None and image.version != version:
            raise FirmwareError(f"the image says version {image.version}, not {version}")
        if self.app_slot and image.size > self.app_slot:
            raise FirmwareError(
                f"the image ({image.size} bytes) is larger than the device's app partition ({self.app_slot} bytes)"
            )

    def as_dict(self) -> dict[str, str | int]:
        """As stored."""
        return {
            "board": self.board,
            "chip": self.chip,
            "version": self.version,
            "project": self.project,
            "board_name": self.board_name,
            "manufacturer": self.manufacturer,
            "app_slot": self.app_slot,
            "assets_size": self.assets_size,
        }

    @classmethod
    def from_dict(cls, raw: object) -> BoardFacts | None:
        """From the store (or a report); None unless it names a board, a known chip and a version."""
        if not isinstance(raw, dict):
            return None
        values = {key: raw.get(key) for key in ("board", "chip", "version", "project", "board_name", "manufacturer")}
        if not all(isinstance(value, str) for value in values.values() if value is not None):
            return None
        board, chip, version = values["board"], values["chip"], values["version"]
        if not board or not chip or not version or parse_version(version) is None:
            return None
        slot = raw.get("app_slot")
        assets = raw.get("assets_size")
        facts = cls(
            board=board,
            chip=chip,
            version=version,
            project=values["project"] or "xiaozhi",
            board_name=values["board_name"] or "",
            manufacturer=values["manufacturer"] or "",
            app_slot=slot if isinstance(slot, int) and not isinstance(slot, bool) and 0 < slot <= MAX_IMAGE else 0,
            assets_size=assets
            if isinstance(assets, int) and not isinstance(assets, bool) and 0 < assets < 1 << 32
            else 0,
        )
        return facts if facts.chip_id is not None else None
