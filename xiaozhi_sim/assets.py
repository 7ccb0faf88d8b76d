"""The device's assets partition, as firmware 2.4.2 handles it (``main/assets.cc``).

``CheckAssetsVersion`` at boot: a download URL stored by ``self.assets.set_download_url`` is
erased from NVS and fetched (``Assets::Download``: status 200, a Content-Length > 0, >= 12 and
<= the partition, written sector by sector with the header last), then the partition is read
again (``InitializePartition``: the header's length and 16-bit sum) and applied (``Apply``:
``index.json``, its ``srmodels`` loaded as ESP-SR's ``srmodel_load`` does; the wake word engine
takes the first model whose name starts with ``wn`` and reports the word its ``_MODEL_INFO_``
names). Written here from the firmware's source, independently of the integration's own code.
"""

import json
import logging
import struct
from typing import Any

import aiohttp

_LOGGER = logging.getLogger(__name__)

SECTOR = 4096
ASSETS_PARTITION = 0x800000
"""The assets partition of the firmware's 16 MB layout."""


class AssetsFailed(Exception):
    """``Assets::Download`` returned false (its log line is the message)."""


def _pack(files: dict[str, bytes]) -> bytes:
    """A pack as ``build_default_assets.py`` writes it (files by extension, then name)."""
    names = sorted(files, key=lambda name: (("." + name.rsplit(".", 1)[1]) if "." in name else "", name))
    table, data = b"", b""
    for name in names:
        table += name.encode().ljust(32, b"\0") + struct.pack("<IIHH", len(files[name]), len(data), 0, 0)
        data += b"ZZ" + files[name]
    body = table + data
    return struct.pack("<III", len(names), sum(body) & 0xFFFF, len(body)) + body


def _models(models: dict[str, dict[str, bytes]]) -> bytes:
    """``pack_model.py``'s layout."""
    header_len = 4 + sum(36 + 40 * len(files) for files in models.values())
    head, data = struct.pack("<I", len(models)), b""
    for name, files in models.items():
        head += name.encode().ljust(32, b"\0") + struct.pack("<I", len(files))
        for file_name, content in files.items():
            head += file_name.encode().ljust(32, b"\0") + struct.pack("<II", header_len + len(data), len(content))
            data += content
    return head + data


def default_pack(word: str = "你好小智", *, multinet: bool = False, english: bool = False) -> bytes:
    """The board's default pack: the WakeNet model of ``word``, a font and an emoji.

    ``multinet``: a board built with the MultiNet "custom wake word" instead: a MultiNet model and
    ``word`` as the phrase of ``index.json`` (as ``build_default_assets.py`` writes it from the
    build's ``CONFIG_CUSTOM_WAKE_WORD``); ``english``: its model is ``mn7_en`` (English words),
    else ``mn6_cn`` (pinyin).
    """
    index: dict[str, Any] = {
        "version": 1,
        "srmodels": "srmodels.bin",
        "text_font": "font_puhui_common_20_4.bin",
        "emoji_collection": [{"name": "happy", "file": "happy.png"}],
    }
    if multinet:
        name, language, command = ("mn7_en", "en", "hey xiaozhi") if english else ("mn6_cn", "cn", "ni hao xiao zhi")
        model = {"_MODEL_INFO_": f"multinet{name[2]}_{language}".encode(), f"{name[:3]}_data": bytes(range(256)) * 32}
        index["multinet_model"] = {
            "language": language,
            "duration": 3000,
            "threshold": 0.2,
            "commands": [{"command": command, "text": word, "action": "wake"}],
        }
    else:
        name, model = (
            "wn9_nihaoxiaozhi_tts",
            {
                "_MODEL_INFO_": f"wakenet9l_tts1h8_{word}_3_0.631_0.635\n".encode(),
                "wn9_data": bytes(range(256)) * 64,
                "wn9_index": b"\x01\x02\x03\x04" * 16,
            },
        )
    return _pack(
        {
            "index.json": json.dumps(index, indent=4, ensure_ascii=False).encode(),
            "srmodels.bin": _models({name: model}),
            "font_puhui_common_20_4.bin": b"\xf0" * 3000,
            "happy.png": b"\x89PNG" + b"\x00" * 500,
        }
    )


class AssetsPartition:
    """The partition's bytes and what the firmware made of them at its last boot."""

    def __init__(self, size: int = ASSETS_PARTITION, pack: bytes | None = None) -> None:
        self.size = size
        self.flash = bytearray(pack if pack is not None else default_pack())
        self.valid = False
        self.wake_word: str | None = None
        """What the wake word engine reports (``listen detect`` text); None: no model loaded."""
        self.files: dict[str, bytes] = {}
        self.cut_after: int | None = None
        """The next download breaks off once this many bytes are written (Wi-Fi lost mid-way)."""
        self.downloads: list[dict[str, Any]] = []
        """Every download it tried: url, bytes written, result ("ok" or the firmware's error)."""
        self.apply()

    def _initialize(self) -> bool:
        """``InitializePartition``: header, length, checksum; the file table."""
        self.files = {}
        flash = bytes(self.flash)
        if len(flash) < 12:
            return False
        count, stored, length = struct.unpack_from("<III", flash)
        if length > self.size - 12 or 12 + length > len(flash):
            return False
        if sum(flash[12 : 12 + length]) & 0xFFFF != stored:
            _LOGGER.error("The calculated checksum does not match the stored checksum")
            return False
        table_end = 12 + 44 * count
        for i in range(count):
            raw, size, offset, _w, _h = struct.unpack_from("<32sIIHH", flash, 12 + 44 * i)
            at = table_end + offset
            if flash[at : at + 2] != b"ZZ":  # GetAssetData refuses it
                continue
            self.files[raw.split(b"\0", 1)[0].decode(errors="replace")] = flash[at + 2 : at + 2 + size]
        return True

    def apply(self) -> None:
        """``Apply``: ``index.json``; its srmodels give the wake word engine its model."""
        self.valid = self._initialize()
        self.wake_word = None
        if not self.valid or "index.json" not in self.files:
            return
        try:
            index = json.loads(self.files["index.json"])
        except ValueError:
            return
        if not isinstance(index, dict) or (isinstance(index.get("version"), int) and index["version"] > 1):
            return
        srmodels = index.get("srmodels")
        if not isinstance(srmodels, str) or srmodels not in self.files:
            return
        models = _load_models(self.files[srmodels])
        for name, model in models.items():
            if name.startswith("wn") and "_MODEL_INFO_" in model:
                # esp-sr skips the comment line some models start with (wn9_jarvis_tts: "# (neural network type)_…").
                lines = model["_MODEL_INFO_"].decode(errors="replace").splitlines()
                line = next((x.strip() for x in lines if x.strip() and not x.lstrip().startswith("#")), "")
                fields = line.split("_")
                self.wake_word = fields[2] if len(fields) > 2 else None
                return
        # A MultiNet ("custom wake word") board: the text of the phrase it hears (CustomWakeWord).
        multinet = index.get("multinet_model")
        commands = multinet.get("commands") if isinstance(multinet, dict) else None
        if any(name.startswith("mn") for name in models) and isinstance(commands, list):
            for command in commands:
                if (
                    isinstance(command, dict)
                    and command.get("action") == "wake"
                    and isinstance(command.get("text"), str)
                ):
                    self.wake_word = command["text"]
                    return

    async def download(self, url: str) -> None:
        """``Assets::Download``; raises AssetsFailed. The header is written last.

        A failure before writing (status, length) leaves the old pack; one after writing began
        leaves the partition without a valid header: no wake word until a good pack is written.
        """
        record: dict[str, Any] = {"url": url, "written": 0, "result": None}
        self.downloads.append(record)
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session,
                session.get(url, allow_redirects=False) as response,
            ):
                await self._write(response, record)
        except aiohttp.ClientError as err:
            record["result"] = f"Failed to read HTTP data: {err}"
            raise AssetsFailed(record["result"]) from None
        except AssetsFailed as err:
            record["result"] = str(err)
            raise
        record["result"] = "ok"
        self.apply()

    async def _write(self, response: aiohttp.ClientResponse, record: dict[str, Any]) -> None:
        if response.status != 200:
            raise AssetsFailed(f"Failed to get assets, status code: {response.status}")
        length = response.content_length or 0
        if length == 0:
            raise AssetsFailed("Failed to get content length")
        if length > self.size:
            raise AssetsFailed(f"Assets file size ({length}) is larger than partition size ({self.size})")
        if length < 12:
            raise AssetsFailed(f"Content length ({length}) is smaller than header size (12)")
        self.flash = bytearray(b"\xff" * 12)  # UnApplyPartition; the first sector erased
        self.valid, self.wake_word, self.files = False, None, {}
        header = b""
        while page := await response.content.read(SECTOR):
            take = min(len(page), 12 - len(header))
            header += page[:take]
            self.flash += page[take:]
            record["written"] = len(header) + len(self.flash) - 12
            if self.cut_after is not None and record["written"] >= self.cut_after:
                self.cut_after = None
                raise AssetsFailed("Failed to read HTTP data: the connection was lost")
        if len(header) + len(self.flash) - 12 != length:
            raise AssetsFailed("Downloaded size does not match expected size")
        self.flash[:12] = header


def _load_models(pack: bytes) -> dict[str, dict[str, bytes]]:
    """``srmodel_load``: the models of a pack_model.py file (nothing if it is malformed)."""
    try:
        (count,) = struct.unpack_from("<I", pack)
        at, models = 4, {}
        for _ in range(min(count, 64)):
            name = pack[at : at + 32].split(b"\0", 1)[0].decode(errors="replace")
            (files,) = struct.unpack_from("<I", pack, at + 32)
            at += 36
            model = {}
            for _ in range(min(files, 64)):
                file_name = pack[at : at + 32].split(b"\0", 1)[0].decode(errors="replace")
                offset, length = struct.unpack_from("<II", pack, at + 32)
                at += 40
                model[file_name] = pack[offset : offset + length]
            models[name] = model
    except struct.error:
        return {}
    return models
