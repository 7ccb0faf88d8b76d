"""The assets pack and ESP-SR's model pack, checked against the simulator's own reading of the firmware.

``xiaozhi_sim.assets`` is written from the firmware's source independently of
``protocol/assets.py``: a pack one side writes, the other must read, and the other way round.
"""

import json
import struct

import pytest

from custom_components.xiaozhi_local.protocol.assets import (
    AssetFile,
    AssetsError,
    assets_partition_size,
    build_models,
    build_pack,
    check_pack,
    pack_in_flash_image,
    pack_wake_word,
    parse_models,
    parse_pack,
    read_index,
    wake_word_of,
    wakenet_generation,
    with_wakenet,
)
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
    assert wakenet_generation(HI_ESP) == 9
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
