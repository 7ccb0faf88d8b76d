"""ESP partition tables: the one in a merged flash image, and the one a device reports.

A table sits at 0x8000 of flash: 32-byte entries (magic ``0xAA50``, type, subtype, offset, size,
a 16-byte label) ended by ``0xFF`` padding or an MD5 entry (``0xEBEB``). A device reports its own
in its OTA request (``partition_table``) with the label of the slot it runs (``ota.label``).

Pure Python: streams are any seekable binary stream; nothing here does I/O of its own.
"""

from dataclasses import dataclass
import struct
from typing import Any, BinaryIO, Final

PARTITION_TABLE_OFFSET: Final = 0x8000
PARTITION_TABLE_SIZE: Final = 0xC00
PARTITION_ENTRY_SIZE: Final = 32
PARTITION_MAGIC: Final = b"\xaa\x50"
PARTITION_MD5_MAGIC: Final = b"\xeb\xeb"
APP_PARTITION_TYPE: Final = 0x00


def c_string(raw: bytes) -> str:
    """A fixed-size C string (an app description, a partition label)."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Partition:
    """One entry of an ESP partition table."""

    type: int
    subtype: int
    offset: int
    size: int
    label: str


def read_partition_table(stream: BinaryIO) -> list[Partition]:
    """The partition table of a merged flash image (at 0x8000); [] when there is none."""
    stream.seek(PARTITION_TABLE_OFFSET)
    table = stream.read(PARTITION_TABLE_SIZE)
    found: list[Partition] = []
    for start in range(0, len(table) - PARTITION_ENTRY_SIZE + 1, PARTITION_ENTRY_SIZE):
        entry = table[start : start + PARTITION_ENTRY_SIZE]
        if entry[:2] != PARTITION_MAGIC:
            break  # 0xFF padding ends the table; the MD5 entry (0xEBEB) too
        kind, subtype, offset, size = struct.unpack_from("<BBII", entry, 2)
        found.append(Partition(kind, subtype, offset, size, c_string(entry[12:28])))
    return found


OTA_SUBTYPES: Final = range(0x10, 0x20)
"""App partitions ``ota_0`` … ``ota_15``: the slots an update is written to."""


def update_slot_size(table: Any, running: Any) -> int | None:
    """The size of the app partition an update will be written to, from what the device reports.

    ``table`` is the ``partition_table`` of its OTA request (``label``, ``type``, ``subtype``,
    ``size`` each), ``running`` its ``ota.label``. As ``esp_ota_get_next_update_partition`` picks
    it: the OTA slot after the running one, in subtype order (the first one when it runs from
    ``factory``). None when the report does not say (not stock firmware, or a malformed table).
    """
    if not isinstance(table, list):
        return None
    slots: list[tuple[int, str, int]] = []
    for entry in table[:64]:
        if not isinstance(entry, dict):
            continue
        kind, subtype, size, label = entry.get("type"), entry.get("subtype"), entry.get("size"), entry.get("label")
        if kind != APP_PARTITION_TYPE or not isinstance(subtype, int) or subtype not in OTA_SUBTYPES:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            continue
        slots.append((subtype, label if isinstance(label, str) else "", size))
    if not slots:
        return None
    slots.sort()
    labels = [label for _subtype, label, _size in slots]
    index = labels.index(running) + 1 if isinstance(running, str) and running in labels else 0
    return slots[index % len(slots)][2]
