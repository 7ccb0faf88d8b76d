"""ESP app images: checked the way the device checks them, before anything is offered.

Images are built by the simulator's own code (``xiaozhi_sim.firmware``, written from ESP-IDF's
formats), the integration's parser reads them: two sides, as on the wire.
"""

import contextlib
import hashlib
import io
import struct

from hypothesis import given, settings, strategies as st
import pytest

from custom_components.xiaozhi_local.protocol.firmware import (
    APP_DESC_MAGIC,
    CHIP_IDS,
    BoardFacts,
    FirmwareError,
    find_app_image,
    is_newer,
    leading_version,
    parse_version,
    read_app_image,
)
from custom_components.xiaozhi_local.protocol.partitions import read_partition_table
from xiaozhi_sim.firmware import build_image, flash_image, is_newer as firmware_is_newer, verify


def check(data: bytes) -> object:
    return find_app_image(io.BytesIO(data), len(data))


def test_a_built_image_is_read_as_the_device_reads_it() -> None:
    data = build_image("2.5.0", size=100_000)
    image = read_app_image(io.BytesIO(data))
    assert image.offset == 0
    assert image.size == len(data)
    assert image.version == "2.5.0"
    assert image.project_name == "xiaozhi"
    assert image.chip == "esp32s3"
    assert image.chip_id == CHIP_IDS["esp32s3"] == 9
    assert image.idf_version == "v6.0.2"
    assert image.compile_date == "Nov 20 2026"
    assert image.sha256 == hashlib.sha256(data).hexdigest()
    assert verify(data, "esp32s3").version == "2.5.0"  # and the simulated device takes it


def test_an_image_without_the_appended_hash_still_has_its_checksum_checked() -> None:
    data = bytearray(build_image("2.5.0", hash_appended=False))
    assert read_app_image(io.BytesIO(bytes(data))).size == len(data)
    data[100] ^= 0x01
    with pytest.raises(FirmwareError, match="checksum"):
        read_app_image(io.BytesIO(bytes(data)))


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: b"\x00" + d[1:], "no image magic"),
        (lambda d: d[:1] + b"\x00" + d[2:], "0 segments"),
        (lambda d: d[:1] + b"\x20" + d[2:], "32 segments"),
        (lambda d: d[:32] + b"\0\0\0\0" + d[36:], "not an application"),
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: d[:-1], "truncated"),
        (lambda d: d[:-40] + bytes([d[-40] ^ 1]) + d[-39:], "SHA-256"),
        (lambda d: d[:5000] + bytes([d[5000] ^ 0xFF]) + d[5001:], "checksum"),
        (lambda d: d[:24] + struct.pack("<II", 0x3C000020, 0x7FFFFFFF) + d[32:], "runs past the end"),
        (lambda d: b"", "too short"),
        (lambda d: b"PK\x03\x04" + d[4:], "no image magic"),
    ],
)
def test_anything_but_a_whole_image_is_refused_with_the_reason(mutate: object, reason: str) -> None:
    data = mutate(build_image("2.5.0"))  # type: ignore[operator]
    with pytest.raises(FirmwareError, match=reason):
        check(data)


def test_an_image_without_a_version_is_refused() -> None:
    data = bytearray(build_image("2.5.0"))
    data[32 + 16 : 32 + 48] = bytes(32)  # the description's version field
    with pytest.raises(FirmwareError):  # the checksum or digest fails first, or the empty version
        check(bytes(data))


def test_the_app_image_is_cut_out_of_a_merged_flash_image_at_its_partition() -> None:
    app = build_image("2.5.1", size=50_000)
    merged = flash_image(app, app_offset=0x20000, app_size=0x80000)
    table = read_partition_table(io.BytesIO(merged))
    assert [p.label for p in table] == ["nvs", "otadata", "phy_init", "ota_0", "ota_1"]
    image = check(merged)
    assert image.offset == 0x20000  # type: ignore[attr-defined]
    assert image.size == len(app)  # type: ignore[attr-defined]
    assert image.sha256 == hashlib.sha256(app).hexdigest()  # type: ignore[attr-defined]


def test_a_flash_image_with_data_after_the_app_in_its_partition_is_refused() -> None:
    app = build_image("2.5.1")
    merged = bytearray(flash_image(app))
    merged[0x20000 + len(app) + 10] = 0x00
    with pytest.raises(FirmwareError, match="after the app image"):
        check(bytes(merged))


def test_a_flash_image_cut_before_its_app_is_refused() -> None:
    merged = flash_image(build_image("2.5.1"))
    with pytest.raises(FirmwareError, match="truncated"):
        check(merged[: 0x20000 + 1000])
    with pytest.raises(FirmwareError, match="before its app partition"):
        check(merged[:0x10000])


def test_a_file_that_is_neither_says_why_the_plain_reading_failed() -> None:
    with pytest.raises(FirmwareError, match="no image magic"):
        check(b"\xff" * 0x9000)


@given(st.binary(max_size=2048), st.integers(min_value=0, max_value=0x9000))
@settings(max_examples=300, deadline=None)
def test_random_bytes_raise_only_firmware_errors(noise: bytes, where: int) -> None:
    base = bytearray(flash_image(build_image("2.5.0", size=4096), app_size=0x10000))
    base[where : where + len(noise)] = noise
    with contextlib.suppress(FirmwareError):
        check(bytes(base))


@pytest.mark.parametrize(
    ("current", "candidate", "newer"),
    [
        ("2.4.2", "2.5.0", True),
        ("2.4.2", "2.4.2", False),
        ("2.5.0", "2.4.9", False),
        ("2.4", "2.4.0", True),  # equal parts: the longer is newer (as the firmware compares)
        ("2.4.0", "2.4", False),
        ("2.10.0", "2.9.9", False),
        ("2.4.2-beta", "2.4.3", True),  # stoi reads the leading digits
        ("2.4.2", "v2.5.0", False),  # stoi would throw: never offered
        ("2.4.2", "", False),
        ("2.4.2", "2..5", False),
    ],
)
def test_versions_compare_as_the_firmware_compares_them(current: str, candidate: str, newer: bool) -> None:
    assert is_newer(current, candidate) is newer
    if parse_version(candidate) is not None:
        assert firmware_is_newer(current, candidate) is newer  # the simulator's reading of Ota.cc


def test_versions_the_firmware_cannot_read_are_none() -> None:
    assert parse_version("2.5.0") == (2, 5, 0)
    assert parse_version("2.5.0-rc1") == (2, 5, 0)
    assert parse_version("abc") is None
    assert parse_version("2.x") is None
    assert parse_version("1" * 12) is None  # past an int


def test_board_facts_name_the_release_file_as_the_build_tool_does() -> None:
    assert BoardFacts("bread-compact-wifi", "esp32s3", "2.4.2").release_name == "bread-compact-wifi"
    box = BoardFacts("esp-box-3", "esp32s3", "2.4.2", board_name="esp-box-3", manufacturer="espressif")
    assert box.release_name == "espressif-esp-box-3"
    assert box.names == {"esp-box-3", "espressif-esp-box-3"}
    already = BoardFacts("x", "esp32s3", "2.4.2", board_name="waveshare-s3-touch", manufacturer="waveshare")
    assert already.release_name == "waveshare-s3-touch"
    p4x = BoardFacts("x", "esp32p4", "2.4.2", board_name="esp32-p4-wifi6-touch-lcd-p4x", manufacturer="waveshare")
    assert p4x.release_name == "waveshare-esp32-p4x-wifi6-touch-lcd"


def test_board_facts_check_chip_project_and_version() -> None:
    facts = BoardFacts("bread-compact-wifi", "esp32s3", "2.4.2")
    image = read_app_image(io.BytesIO(build_image("2.5.0")))
    facts.check(image, "2.5.0")
    with pytest.raises(FirmwareError, match=r"not 2\.6\.0"):
        facts.check(image, "2.6.0")
    with pytest.raises(FirmwareError, match="for esp32c3, the device is esp32s3"):
        facts.check(read_app_image(io.BytesIO(build_image("2.5.0", chip="esp32c3"))))
    with pytest.raises(FirmwareError, match="project 'other'"):
        facts.check(read_app_image(io.BytesIO(build_image("2.5.0", project="other"))))
    with pytest.raises(FirmwareError, match="not known"):
        BoardFacts("b", "esp8266", "1.0").check(image)


def test_board_facts_round_trip_and_refuse_what_cannot_be_checked() -> None:
    facts = BoardFacts("b", "esp32c3", "2.4.2", "xiaozhi", "b-name", "maker")
    assert BoardFacts.from_dict(facts.as_dict()) == facts
    assert BoardFacts.from_dict({"board": "b", "chip": "esp8266", "version": "1.0"}) is None
    assert BoardFacts.from_dict({"board": "b", "chip": "esp32", "version": "abc"}) is None
    assert BoardFacts.from_dict({"board": "b", "chip": "esp32", "version": 2}) is None
    assert BoardFacts.from_dict({"board": None, "chip": "esp32", "version": "2.0"}) is None
    assert BoardFacts.from_dict("nonsense") is None
    assert BoardFacts.from_dict({"board": "b", "chip": "ESP32S3", "version": "2.0"}) is not None


def test_the_app_description_magic_is_the_idf_one() -> None:
    assert APP_DESC_MAGIC == 0xABCD5432
    assert struct.unpack_from("<I", build_image("1.0.0"), 32)[0] == APP_DESC_MAGIC


def test_leading_version_reads_the_numbers_a_version_starts_with() -> None:
    assert leading_version("2.5.0") == (2, 5, 0)
    assert leading_version("2.5.0-rc1") == (2, 5, 0)
    assert leading_version("1.9.x") == (1, 9)
    assert leading_version("v2") == ()
    assert leading_version("") == ()
