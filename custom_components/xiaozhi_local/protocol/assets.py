"""The assets pack of stock firmware (wake word model, text font, emoji) and ESP-SR's model pack.

Read from the firmware's source (``main/assets.cc``, ``scripts/build_default_assets.py``) and
ESP-SR's ``pack_model.py``; see docs/protocol.md §16. All integers are little-endian.

The assets pack, written as it is into the partition labelled ``assets``::

    u32 file_count, u32 checksum, u32 length
    file_count × (name[32] NUL-padded, u32 size, u32 offset, u16 width, u16 height)
    the files, each preceded by the magic ``ZZ``; ``offset`` counts from the end of the table
    and points at the magic; ``checksum`` is the sum of the ``length`` bytes after the header
    (unsigned), masked to 16 bits.

``index.json`` (a file of the pack) names the ESP-SR model pack (``srmodels``) among others. The
model pack is ``u32 model_count``, then per model ``name[32], u32 file_count`` and per file
``name[32], u32 offset, u32 length`` (offsets from the pack's start), then the data. A WakeNet
model is a folder of ESP-SR's ``model/wakenet_model/``: its ``_MODEL_INFO_`` names the wake word,
which the firmware sends as the ``listen detect`` text when it hears it.

Parsing makes no copies: a file of a pack is a view of the pack's bytes, so a pack costs its own
size however its table is drawn. Entries must follow each other in order without overlapping, as
the firmware's tools write them (the firmware itself maps the partition and copies nothing); a
table that points many entries at the same bytes is refused instead of being read many times.
"""

from collections.abc import Mapping
from dataclasses import dataclass
import json
import re
import struct
from typing import Any, Final
import unicodedata

from .mcp import safe_name

HEADER: Final = struct.Struct("<III")
ENTRY: Final = struct.Struct("<32sIIHH")
MAGIC: Final = b"ZZ"
NAME_LENGTH: Final = 32
INDEX: Final = "index.json"
INDEX_VERSION: Final = 1
"""The newest ``index.json`` version the firmware reads ("please upgrade the firmware" above)."""
MAX_INDEX: Final = 256 * 1024
"""Bytes of ``index.json`` at most. The assets generator writes a few KiB (a MultiNet board's 200
commands, the most it takes, about 30 KiB); the firmware parses the whole file into its heap."""
MAX_INDEX_DEPTH: Final = 1000
"""Nesting of ``index.json`` at most: cJSON's ``CJSON_NESTING_LIMIT``, past which the firmware's
``cJSON_ParseWithLength`` fails ("The index.json file is not valid")."""
MAX_FILES: Final = 4096
MAX_MODELS: Final = 64
WAKENET_PREFIX: Final = "wn"
"""ESP-SR's ``ESP_WN_PREFIX``: the models the firmware's wake word engine picks from."""
MULTINET_PREFIX: Final = "mn"
MODEL_INFO: Final = "_MODEL_INFO_"
MAX_INFO: Final = 4096
"""Bytes of ``_MODEL_INFO_`` read at most (esp-sr's longest, with its comment line, are 175)."""
MAX_WORD: Final = 64
"""Characters of a wake word at most (esp-sr's longest, ``Hi,Wall,E or Hi,瓦力``, has 20)."""
type Bytes = bytes | memoryview


class AssetsError(ValueError):
    """A pack or model the firmware would refuse, with a kind for the log and the entity."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AssetFile:
    """One file of an assets pack (``width``/``height`` are set for images only)."""

    name: str
    data: Bytes
    """A view of the pack it was read from (no copy), or bytes of its own."""
    width: int = 0
    height: int = 0


def checksum(data: Bytes | bytearray) -> int:
    """The firmware's ``CalculateChecksum``: the sum of the bytes, masked to 16 bits."""
    return sum(data) & 0xFFFF


def _name(raw: Bytes) -> str:
    try:
        return bytes(raw).split(b"\0", 1)[0].decode()
    except UnicodeDecodeError:
        raise AssetsError("bad_name", "a file name is not UTF-8") from None


def _fixed(name: str) -> bytes:
    raw = name.encode()
    if not raw or len(raw) > NAME_LENGTH:
        raise AssetsError("bad_name", f"the name {name!r} does not fit {NAME_LENGTH} bytes")
    return raw.ljust(NAME_LENGTH, b"\0")


def _sort_key(file: AssetFile) -> tuple[str, str]:
    """As the firmware's pack tools order the files: by extension, then by name."""
    base, _, ext = file.name.rpartition(".")
    return (f".{ext}", base) if base else ("", file.name)


def build_pack(files: list[AssetFile]) -> bytes:
    """An assets pack of ``files``, as the firmware's tools write it."""
    if len({file.name for file in files}) != len(files):
        raise AssetsError("duplicate", "two files of the pack have the same name")
    table = bytearray()
    data = bytearray()
    for file in sorted(files, key=_sort_key):
        table += ENTRY.pack(_fixed(file.name), len(file.data), len(data), file.width, file.height)
        data += MAGIC + file.data
    body = bytes(table + data)
    return HEADER.pack(len(files), checksum(body), len(body)) + body


def parse_pack(pack: Bytes, partition_size: int | None = None) -> dict[str, AssetFile]:
    """The files of a pack, checked as ``Assets::InitializePartition`` and ``GetAssetData`` do.

    Each file is a view of ``pack``; entries out of order, overlapping, or named twice are refused.
    """
    if len(pack) < HEADER.size:
        raise AssetsError("truncated", "the pack is shorter than its header")
    if partition_size is not None and len(pack) > partition_size:
        raise AssetsError(
            "too_big", f"the pack ({len(pack)} bytes) is larger than the assets partition ({partition_size})"
        )
    count, stored, length = HEADER.unpack_from(pack)
    if length > len(pack) - HEADER.size:
        raise AssetsError(
            "truncated", f"the header says {length} bytes of data, the pack has {len(pack) - HEADER.size}"
        )
    if count > MAX_FILES or HEADER.size + count * ENTRY.size > HEADER.size + length:
        raise AssetsError("bad_table", f"a table of {count} files does not fit the pack")
    view = memoryview(pack)
    body = view[HEADER.size : HEADER.size + length]
    if checksum(body) != stored:
        raise AssetsError("checksum", f"the checksum is {checksum(body):#06x}, the header says {stored:#06x}")
    files: dict[str, AssetFile] = {}
    start = HEADER.size + count * ENTRY.size
    free = start  # where the next entry may begin: entries follow each other, never overlap
    for index in range(count):
        raw_name, size, offset, width, height = ENTRY.unpack_from(view, HEADER.size + index * ENTRY.size)
        name = _name(raw_name)
        at = start + offset
        if at + len(MAGIC) + size > HEADER.size + length:
            raise AssetsError("bad_table", f"{name[:64]} runs past the end of the pack")
        if at < free or name in files:
            raise AssetsError("bad_table", f"{name[:64]} overlaps another file or repeats a name")
        if bytes(view[at : at + len(MAGIC)]) != MAGIC:
            raise AssetsError("bad_magic", f"{name[:64]} does not start with the magic ZZ")
        free = at + len(MAGIC) + size
        files[name] = AssetFile(name, view[at + len(MAGIC) : free], width, height)
    return files


_ESCAPES: Final = re.compile(rb"\\.", re.DOTALL)
_STRINGS: Final = re.compile(rb'"[^"]*"')
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(data: bytes) -> int:
    """How deeply ``data`` (JSON) nests its arrays and objects, counted without parsing it.

    Linear in the size: escapes go first (so a string holds no quote), then strings, then all
    but the brackets are dropped and counted.
    """
    brackets = _STRINGS.sub(b"", _ESCAPES.sub(b"", data)).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_index(files: dict[str, AssetFile]) -> dict[str, Any]:
    """The pack's ``index.json``, checked as ``Assets::Apply`` reads it.

    Its size and nesting are bounded before it is parsed: a pack may be as large as its partition,
    and an index that fills it would cost many times its size once parsed.
    """
    if INDEX not in files:
        raise AssetsError("no_index", "the pack has no index.json")
    if (size := len(files[INDEX].data)) > MAX_INDEX:  # refused before a byte of it is copied
        raise AssetsError("bad_index", f"index.json is {size} bytes (at most {MAX_INDEX})")
    data = bytes(files[INDEX].data)
    if json_depth(data) > MAX_INDEX_DEPTH:
        raise AssetsError("bad_index", f"index.json nests deeper than {MAX_INDEX_DEPTH} levels")
    try:
        index = json.loads(data)
    except ValueError, UnicodeDecodeError, RecursionError:
        raise AssetsError("bad_index", "index.json is not valid JSON") from None
    if not isinstance(index, dict):
        raise AssetsError("bad_index", "index.json is not an object")
    version = index.get("version")
    if isinstance(version, int | float) and not isinstance(version, bool) and version > INDEX_VERSION:
        raise AssetsError("bad_index", f"index.json version {version} needs newer firmware")
    return index


type Models = dict[str, dict[str, Bytes]]
"""ESP-SR models by name (``wn9_hiesp``), each its files by name (``wn9_data``)."""


def build_models(models: Mapping[str, Mapping[str, Bytes]]) -> bytes:
    """An ESP-SR model pack (``srmodels.bin``), as ``pack_model.py`` writes it."""
    files = sum(len(model) for model in models.values())
    header_length = 4 + len(models) * (NAME_LENGTH + 4) + files * (NAME_LENGTH + 8)
    header = bytearray(struct.pack("<I", len(models)))
    data = bytearray()
    for name, model in models.items():
        header += _fixed(name) + struct.pack("<I", len(model))
        for file_name, content in model.items():
            header += _fixed(file_name) + struct.pack("<II", header_length + len(data), len(content))
            data += content
    return bytes(header + data)


def parse_models(pack: Bytes) -> Models:
    """The models of an ESP-SR model pack (``srmodel_load``), bounds checked; files are views of ``pack``.

    Files may not overlap each other or the header, and their sizes add up to at most the pack's.
    """
    view = memoryview(pack)
    spans: list[tuple[int, int, str]] = []
    try:
        (count,) = struct.unpack_from("<I", view)
        if count > MAX_MODELS:
            raise AssetsError("bad_models", f"the model pack says {count} models")
        at = 4
        models: Models = {}
        for _ in range(count):
            name = _name(view[at : at + NAME_LENGTH])
            (files,) = struct.unpack_from("<I", view, at + NAME_LENGTH)
            at += NAME_LENGTH + 4
            if files > MAX_FILES:
                raise AssetsError("bad_models", f"model {name[:64]} says {files} files")
            model: dict[str, Bytes] = {}
            for _ in range(files):
                file_name = _name(view[at : at + NAME_LENGTH])
                offset, length = struct.unpack_from("<II", view, at + NAME_LENGTH)
                at += NAME_LENGTH + 8
                if offset + length > len(view):
                    raise AssetsError("bad_models", f"{name[:64]}/{file_name[:64]} runs past the end of the model pack")
                model[file_name] = view[offset : offset + length]
                spans.append((offset, offset + length, name))
            models[name] = model
    except struct.error:
        raise AssetsError("bad_models", "the model pack is truncated") from None
    free = at  # the data begins after the header
    for start, end, name in sorted(spans):
        if start < free:
            raise AssetsError("bad_models", f"a file of model {name[:64]} overlaps the header or another file")
        free = max(free, end)
    return models


def model_info(model: Mapping[str, Bytes]) -> list[str]:
    """The fields of a WakeNet model's ``_MODEL_INFO_`` line: ``wakenet9l``, ``tts1h8``, ``Jarvis`` and so on.

    esp-sr writes one line, ``(network)_(data version)_(word)_(window)_(threshold 90 %)_(threshold 95 %)``,
    sometimes after a comment line that starts with ``#`` and with spaces or a newline after it.
    """
    info = model.get(MODEL_INFO) or model.get(f"{MODEL_INFO}p1")
    if info is None:
        raise AssetsError("bad_model", "the model has no _MODEL_INFO_")
    if len(info) > MAX_INFO:
        raise AssetsError("bad_model", f"its _MODEL_INFO_ is longer than {MAX_INFO} bytes")
    try:
        text = bytes(info).decode()
    except UnicodeDecodeError:
        raise AssetsError("bad_model", "its _MODEL_INFO_ is not text") from None
    for line in text.splitlines():
        fields = line.strip().split("_")
        if fields[0].lower().startswith("wakenet") and len(fields) >= 4:
            return fields
    raise AssetsError("bad_model", f"its _MODEL_INFO_ names no wake word: {text[:64]!r}")


def wake_word_of(model: Mapping[str, Bytes]) -> str:
    """The wake word a WakeNet model reports (``_MODEL_INFO_``: ``wakeNet9_v1h24_Hi,ESP_3_0.63_0.635``).

    A word with more than ``MAX_WORD`` characters, or with control or direction characters, is refused.
    """
    word = model_info(model)[2].strip()
    if not word or len(word) > MAX_WORD or not printable(word):
        raise AssetsError("bad_model", f"its _MODEL_INFO_ names no usable wake word: {word[:MAX_WORD]!r}")
    return word


def check_wakenet_model(model: Mapping[str, Bytes]) -> str:
    """The word of a WakeNet model that has what the engine loads (``_MODEL_INFO_`` and non-empty ``*_data``)."""
    word = wake_word_of(model)
    if not any(name.endswith("_data") and len(data) > 0 for name, data in model.items()):
        raise AssetsError("bad_model", "the model has no data file (wn9_data)")
    return word


def printable(text: str) -> bool:
    """Printable as device-given names must be (``mcp.safe_name``), and no emoji.

    No control, format or direction characters; no emoji either, since the device's font has none
    and a wake word is shown on its screen.
    """
    return safe_name(text) and all(unicodedata.category(ch) != "So" for ch in text)


def assets_partition_size(table: Any) -> int | None:
    """The size of the partition labelled ``assets`` in a reported ``partition_table``; None if absent."""
    if not isinstance(table, list):
        return None
    for entry in table[:64]:
        if isinstance(entry, dict) and entry.get("label") == "assets":
            size = entry.get("size")
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                return size
    return None


def pack_in_flash_image(image: Bytes, partitions: list[tuple[str, int, int]]) -> bytes:
    """The assets pack a merged flash image holds (``partitions``: label, offset, size of its table).

    A release's ``merged-binary.bin`` holds the board's default pack at its ``assets`` partition;
    the pack ends where its header says (the rest of the partition is erased flash).
    """
    for label, offset, size in partitions:
        if label != "assets":
            continue
        region = image[offset : offset + size]
        if len(region) < HEADER.size:
            raise AssetsError("no_pack", "the flash image ends before its assets partition")
        _count, _sum, length = HEADER.unpack_from(region)
        if length > len(region) - HEADER.size:
            raise AssetsError("no_pack", "the assets partition of the flash image holds no pack")
        return bytes(region[: HEADER.size + length])
    raise AssetsError("no_partition", "the flash image has no assets partition")
