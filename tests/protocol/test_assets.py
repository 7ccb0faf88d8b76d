"""The assets pack and ESP-SR's model pack, checked against the simulator's own reading of the firmware.

``xiaozhi_sim.assets`` is written from the firmware's source independently of
``protocol/assets.py``: a pack one side writes, the other must read, and the other way round.
"""

import json
import struct
import tracemalloc

import pytest

from custom_components.xiaozhi_local.protocol.assets import (
    MAX_INDEX,
    MAX_INDEX_DEPTH,
    AssetFile,
    AssetsError,
    assets_partition_size,
    build_models,
    build_pack,
    pack_in_flash_image,
    parse_models,
    parse_pack,
    read_index,
    wake_word_of,
)
from custom_components.xiaozhi_local.protocol.wake_pack import check_pack, pack_wake_word, with_wakenet
from xiaozhi_sim.assets import AssetsPartition, default_pack

HI_ESP = {
    "_MODEL_INFO_": b"wakeNet9_v1h24_Hi,ESP_3_0.63_0.635",
    "wn9_data": bytes(range(256)) * 40,
    "wn9_index": b"\x07" * 64,
}


def test_the_firmwares_default_pack_reads() -> None:
    files = parse_pack(default_pack())
    assert read_index(files)["srmodels"] == "srmodels.bin"
    found = pack_wake_word(files)
    assert (found.model, found.word) == ("wn9_nihaoxiaozhi_tts", "你好小智")


def test_a_pack_with_a_new_wake_word_is_what_the_firmware_loads() -> None:
    pack = with_wakenet(default_pack(), "wn9_hiesp", HI_ESP)
    assert check_pack(pack, 0x800000, word="Hi,ESP").model == "wn9_hiesp"
    before, after = parse_pack(default_pack()), parse_pack(pack)
    assert after["font_puhui_common_20_4.bin"] == before["font_puhui_common_20_4.bin"]  # the rest is kept
    assert after["happy.png"] == before["happy.png"]
    assert list(parse_models(after["srmodels.bin"].data)) == ["wn9_hiesp"]  # the old WakeNet model is gone
    device = AssetsPartition(0x800000, pack)  # the simulator, from the firmware's source
    assert device.valid
    assert device.wake_word == "Hi,ESP"


def test_packs_the_simulator_writes_and_reads_agree_byte_for_byte() -> None:
    files = parse_pack(default_pack())
    assert build_pack(list(files.values())) == default_pack()


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        (lambda p: p[:8], "truncated"),
        (lambda p: p[:-1], "truncated"),
        (lambda p: p[:100] + bytes([p[100] ^ 0x01]) + p[101:], "checksum"),
        (lambda p: struct.pack("<I", 100000) + p[4:], "bad_table"),
    ],
)
def test_a_damaged_pack_is_refused(damage: object, kind: str) -> None:
    assert callable(damage)
    with pytest.raises(AssetsError) as err:
        parse_pack(damage(default_pack()))
    assert err.value.kind == kind


def test_a_file_without_its_magic_is_refused() -> None:
    pack = bytearray(default_pack())
    count = struct.unpack_from("<I", pack)[0]
    offset = struct.unpack_from("<I", pack, 12 + 36)[0]  # the first file's offset
    at = 12 + 44 * count + offset
    pack[at] = ord("Y")
    body = bytes(pack[12:])
    pack[4:8] = struct.pack("<I", sum(body) & 0xFFFF)  # a right checksum: only the magic is wrong
    with pytest.raises(AssetsError) as err:
        parse_pack(bytes(pack))
    assert err.value.kind == "bad_magic"
    assert not AssetsPartition(0x800000, bytes(pack)).files.get("font_puhui_common_20_4.bin")


def test_a_pack_larger_than_the_partition_is_refused() -> None:
    pack = with_wakenet(default_pack(), "wn9_hiesp", HI_ESP)
    with pytest.raises(AssetsError) as err:
        check_pack(pack, len(pack) - 1)
    assert err.value.kind == "too_big"
    with pytest.raises(AssetsError):
        check_pack(pack, 0)


def test_models_round_trip_and_name_their_word() -> None:
    models = {"wn9_hiesp": HI_ESP, "mn6_en": {"_MODEL_INFO_": b"multinet6", "mn6_data": b"\x01" * 10}}
    packed = build_models(models)
    assert parse_models(packed) == models
    assert wake_word_of(HI_ESP) == "Hi,ESP"
    assert wake_word_of({"_MODEL_INFO_": "wakenet9l_tts1h8_你好小智_3_0.631_0.635\n".encode()}) == "你好小智"
    with pytest.raises(AssetsError):
        wake_word_of({"wn9_data": b""})
    with pytest.raises(AssetsError):
        parse_models(packed[:50])
    with pytest.raises(AssetsError):
        with_wakenet(default_pack(), "mn6_en", models["mn6_en"])  # not a WakeNet model


def test_an_index_of_a_newer_version_is_refused() -> None:
    files = parse_pack(default_pack())
    files["index.json"] = AssetFile("index.json", json.dumps({"version": 2}).encode())
    with pytest.raises(AssetsError):
        read_index(files)
    with pytest.raises(AssetsError):
        read_index({"index.json": AssetFile("index.json", b"{")})


def with_index(index: bytes) -> dict[str, AssetFile]:
    """The default pack's files with ``index`` as its ``index.json``, as a pack on flash holds them."""
    files = parse_pack(default_pack())
    files["index.json"] = AssetFile("index.json", index)
    return parse_pack(build_pack(list(files.values())))


def test_an_index_bomb_is_refused_before_it_is_parsed() -> None:
    """A 30 MiB index (as large as a pack may be) took HA to 1.3 GB: refused by its size, before a
    byte of it is copied or parsed; the largest index a real board could carry still reads."""
    bomb = with_index(b'{"version":1,"emoji_collection":[' + b"{},[0]," * (30 * 1024 * 1024 // 7) + b"0]}")
    tracemalloc.start()
    try:
        with pytest.raises(AssetsError, match=f"at most {MAX_INDEX}"):
            read_index(bomb)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    with pytest.raises(AssetsError, match="bytes"):
        read_index(with_index(b" " * (MAX_INDEX + 1)))
    commands = [{"command": f"command number {n}", "text": f"命令 {n}", "action": "wake"} for n in range(1000)]
    largest = json.dumps({"version": 1, "multinet_model": {"commands": commands}}, ensure_ascii=False, indent=4)
    assert 4 * 30 * 1024 < len(largest.encode()) <= MAX_INDEX  # 1,000 commands: five times MultiNet's 200
    assert len(read_index(with_index(largest.encode()))["multinet_model"]["commands"]) == 1000


@pytest.mark.parametrize("depth", [MAX_INDEX_DEPTH + 1, 10_000, MAX_INDEX // 2 - 16])
def test_a_deep_index_is_refused_with_a_reason(depth: int) -> None:
    """Nesting past cJSON's limit (the firmware refuses it) is refused before parsing: a reason,
    never a RecursionError; at the limit it reads, as on the device."""
    deep = b'{"version":1,"x":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    with pytest.raises(AssetsError, match="nests deeper"):
        read_index(with_index(deep))
    at_limit = b'{"version":1,"x":' + b"[" * (MAX_INDEX_DEPTH - 1) + b"]" * (MAX_INDEX_DEPTH - 1) + b"}"
    assert read_index(with_index(at_limit))["version"] == 1
    # Brackets inside strings, escaped quotes among them, are text: they nest nothing.
    text = '\\"' + "[" * 5000 + '"'
    assert read_index(with_index(json.dumps({"version": 1, "text": text}).encode()))["text"] == text


def test_a_pack_without_models_gets_them() -> None:
    files = parse_pack(default_pack())
    index = read_index(files)
    del index["srmodels"]
    files["index.json"] = AssetFile("index.json", json.dumps(index).encode())
    del files["srmodels.bin"]
    pack = with_wakenet(build_pack(list(files.values())), "wn9_hiesp", HI_ESP)
    assert pack_wake_word(parse_pack(pack)).word == "Hi,ESP"
    assert AssetsPartition(0x800000, pack).wake_word == "Hi,ESP"


def test_the_assets_partition_from_a_report_and_a_flash_image() -> None:
    table = [{"label": "ota_0", "size": 1}, {"label": "assets", "type": 1, "size": 0x800000}]
    assert assets_partition_size(table) == 0x800000
    assert assets_partition_size([{"label": "assets", "size": "8M"}]) is None
    assert assets_partition_size(None) is None
    pack = default_pack()
    image = b"\xff" * 0x1000 + pack + b"\xff" * 0x100
    assert pack_in_flash_image(image, [("assets", 0x1000, len(pack) + 0x100)]) == pack
    with pytest.raises(AssetsError):
        pack_in_flash_image(image, [("model", 0x1000, 0x100)])


# -- the real forms of esp-sr's files, and packs drawn to cost more than their size ----------------

COMMENT = b"# (neural network type)_(model data version)_(lable1_detection windown length_threshold)_...\n"


@pytest.mark.parametrize(
    ("info", "word"),
    [
        (b"wakeNet9_v1h24_Hi,ESP_3_0.63_0.635", "Hi,ESP"),  # one line, nothing after it
        (b"wakenet9l_tts1h8_Alexa_3_0.640_0.650\n", "Alexa"),  # a newline
        (COMMENT + b"wakenet9l_tts1h8_Jarvis_3_0.627_0.632\n", "Jarvis"),  # a comment line first
        (b"wakenet9_tts3h12_Hi,Stack Chan_3_0.585_0.590  \n", "Hi,Stack Chan"),  # spaces and a comma
        ("wakenet9l_tts1h8_Hi,Lily or Hi,莉莉_3_0.633_0.639\n".encode(), "Hi,Lily or Hi,莉莉"),  # alternatives
        (b"wakenet9_tts2h12_Ni3Hao3Xiao3Rui4_3_0.610_0.619", "Ni3Hao3Xiao3Rui4"),  # pinyin with tones
        (b"wakenet9s_tts2h8_hitelly_3_0.630_0.635\r\n", "hitelly"),
        (b"wakeNet5_v1_hilexin_5_0.95_0.90", "hilexin"),
    ],
)
def test_every_form_of_model_info_names_its_word(info: bytes, word: str) -> None:
    assert wake_word_of({"_MODEL_INFO_": info}) == word


@pytest.mark.parametrize(
    "info",
    [
        COMMENT,  # only the comment
        b"",
        b"not a model",
        b"wakenet9l_tts1h8_" + b"A" * 60_000 + b"_3_0.6_0.6",  # a word of 60,000 characters
        "wakenet9l_tts1h8_Hi\u202eESP_3_0.6_0.6".encode(),  # a direction mark
        b"wakenet9l_tts1h8_Hi\x00ESP_3_0.6_0.6",
        "wakenet9l_tts1h8_Hi 😀_3_0.6_0.6".encode(),
        b"\xff\xfe",
    ],
)
def test_a_model_info_without_a_usable_word_is_refused(info: bytes) -> None:
    with pytest.raises(AssetsError) as caught:
        wake_word_of({"_MODEL_INFO_": info})
    assert len(str(caught.value)) < 200  # what reaches the entity and the log is short


def test_a_model_without_its_data_cannot_go_into_a_pack() -> None:
    with pytest.raises(AssetsError, match="no data file"):
        with_wakenet(default_pack(), "wn9_hiesp", {"_MODEL_INFO_": HI_ESP["_MODEL_INFO_"], "wn9_index": b"\x07"})


def _table_pack(entries: list[tuple[str, int, int]], data: bytes) -> bytes:
    """A pack whose table is drawn by hand: (name, size, offset) entries over ``data``."""
    table = b"".join(
        struct.pack("<32sIIHH", name.encode().ljust(32, b"\0"), size, offset, 0, 0) for name, size, offset in entries
    )
    body = table + data
    return struct.pack("<III", len(entries), sum(body) & 0xFFFF, len(body)) + body


def test_a_pack_whose_entries_overlap_is_refused_without_reading_them_again() -> None:
    """2,500 entries over one MiB (1.04 MiB once cost 1,172 MiB to parse): refused, a few MB at most."""
    import tracemalloc

    data = b"ZZ" + bytes(1024 * 1024)
    pack = _table_pack([(f"f{i}", len(data) - 2, 0) for i in range(2500)], data)
    tracemalloc.start()
    try:
        with pytest.raises(AssetsError, match="overlaps"):
            parse_pack(pack)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024


def test_a_pack_is_read_as_views_of_itself() -> None:
    """An 8 MB pack: its files are views, nothing is copied."""
    import tracemalloc

    big = bytes(8 * 1024 * 1024)
    pack = build_pack([AssetFile("index.json", b"{}"), AssetFile("font.bin", big)])
    tracemalloc.start()
    try:
        files = parse_pack(pack)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024
    assert isinstance(files["font.bin"].data, memoryview)
    assert files["font.bin"].data == big


@pytest.mark.parametrize(
    "entries",
    [
        [("a", 10, 12), ("b", 10, 0)],  # out of order
        [("a", 10, 0), ("a", 10, 12)],  # a name twice
    ],
)
def test_entries_out_of_order_or_repeated_are_refused(entries: list[tuple[str, int, int]]) -> None:
    data = (b"ZZ" + bytes(10)) * 2
    with pytest.raises(AssetsError, match="overlaps another file or repeats"):
        parse_pack(_table_pack(entries, data))


def test_models_whose_files_overlap_are_refused() -> None:
    pack = bytearray(build_models({"wn9_hiesp": HI_ESP}))
    # point the third file at the second one's bytes
    header = 4 + 32 + 4
    second, third = header + 40, header + 80
    pack[third + 32 : third + 36] = pack[second + 32 : second + 36]
    with pytest.raises(AssetsError, match="overlaps"):
        parse_models(bytes(pack))
