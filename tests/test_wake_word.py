"""The wake word chosen in Home Assistant: a new assets pack, fetched by the device at a restart.

The simulated device keeps an assets partition as firmware 2.4.2 does (``xiaozhi_sim.assets``):
``self.assets.set_download_url`` stores a URL, the next boot fetches the pack before its OTA
check, checks its length and 16-bit sum, reads ``index.json`` and loads the WakeNet model its
``srmodels`` names; the wake word it then sends as ``listen detect`` text is that model's.
Models and the board's default pack come from a local folder (never the internet).
"""

from collections.abc import AsyncIterator, Iterator
import io
import json
from pathlib import Path
import shutil
from typing import Any
import zipfile

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import WebSocketGenerator
from yarl import URL

from custom_components.xiaozhi_local.const import CONF_WAKE_WORD_MODELS, CONF_WAKE_WORD_MODELS_URL
from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.protocol.assets import parse_models, parse_pack, read_index
from custom_components.xiaozhi_local.wake_words.files import CATALOG_BY_NAME, FOLDER
from custom_components.xiaozhi_local.wake_words.pack import AS_BUILT, make_pack
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.assets import default_pack
from xiaozhi_sim.firmware import build_image, flash_image

from .conftest import (
    CLIENT_ID,
    FAST,
    MAC,
    mqtt_in_conversation,
    mqtt_online,
    ota_url,
    served_hub,
    wait_for,
    wait_settled,
    ws_url,
)
from .esp_sr import BROKEN, MODES, EspSr, word_of
from .helpers import resources, wait_entity
from .internals import hub_of, text_waiting, wake_phrase_of
from .test_lifecycle import no_cyclic_gc, nothing_grew

ENTITY = "select.kitchen_wake_word"
FRENCH = "wn9l_fr_bonjouresp_tts3"
BOARD = "bread-compact-wifi"


def model_folder(folder: Path, name: str, info: str, size: int = 25600) -> None:
    """An esp-sr WakeNet model folder, as ``model/wakenet_model/<name>/`` holds it."""
    (folder / name).mkdir()
    (folder / name / "_MODEL_INFO_").write_text(info)
    (folder / name / "wn9_data").write_bytes(bytes(range(256)) * (size // 256))
    (folder / name / "wn9_index").write_bytes(b"\x07" * 64)


def wake_folder(hass: HomeAssistant, tmp_path: Path) -> Path:
    """The configuration directory (in tmp) with its wake word folder: the board's pack and "Hi ESP"."""
    hass.config.config_dir = str(tmp_path)
    folder = tmp_path / FOLDER
    folder.mkdir()
    (folder / f"{BOARD}.bin").write_bytes(default_pack())
    model_folder(folder, "wn9_hiesp", "wakeNet9_v1h24_Hi,ESP_3_0.63_0.635")
    return folder


@pytest.fixture
def wake_dir(hass: HomeAssistant, tmp_path: Path) -> Path:
    """The configuration directory's wake word folder: the board's default pack, "Hi ESP", "Hey Willow"."""
    folder = wake_folder(hass, tmp_path)
    model_folder(folder, "wn9_heywillow_tts", "wakeNet9_v1h24_Hey,Willow_3_0.6_0.6")
    return folder


@pytest.fixture(autouse=True)
async def websocket_api(hass: HomeAssistant) -> None:
    """Home Assistant's websocket API (the voice settings page's), set up before the test server starts."""
    assert await async_setup_component(hass, "websocket_api", {})


@pytest.fixture
async def hub(
    hass: HomeAssistant, wake_dir: Path, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> XiaozhiHub:
    """The hub, its device URLs on the test server (the UI's websocket API set up before the server)."""
    return await served_hub(hass, setup_integration, client)


@pytest.fixture
async def device(hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[SimulatedDevice]:
    """A stock device online over MQTT that restarts by itself; its Wake word select is there."""
    device = await mqtt_online(hub, client, reboots=True)
    await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
    yield device
    await device.drop()


async def changed(hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, option: str) -> XiaozhiDevice:
    """Choose ``option``; until the device has restarted (fetching its pack at boot) and is back."""
    boots = device.boots
    await choose(hass, option)
    await device.wait_boots(boots + 1, timeout=20)
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None)
    return xdev


async def detect(device: SimulatedDevice, text: str) -> None:
    """``listen detect``: the wake word the device heard (the firmware sends what its model names)."""
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "detect", "text": text})


async def choose(hass: HomeAssistant, option: str) -> None:
    await hass.services.async_call("select", "select_option", {"entity_id": ENTITY, "option": option}, blocking=True)


async def test_choosing_hi_esp_makes_the_device_wake_on_it(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], device: SimulatedDevice
) -> None:
    state = hass.states.get(ENTITY)
    assert state is not None
    assert "Hi ESP" in state.attributes["options"]
    assert device.wake_word == "你好小智"
    boots = device.boots
    await choose(hass, "Hi ESP")
    assert device.nvs["assets"]["download_url"].startswith("http")  # what the tool stored
    # Idle: restarted at once; it fetches the pack at boot, checks it and loads its model.
    await device.wait_boots(boots + 1, timeout=20)
    assert device.assets.downloads[-1]["result"] == "ok"
    assert device.assets.valid
    assert device.wake_word == "Hi,ESP"
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None)
    await wait_settled(xdev)
    assert (now := hass.states.get(ENTITY)) is not None
    assert now.attributes["phase"] == "verifying"
    # Its next wake word tells: the new one.
    await mqtt_in_conversation(hub, device)
    await detect(device, "Hi,ESP")
    now = await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "done")
    assert now.state == "Hi ESP"
    assert xdev.chosen_wake_word == "Hi ESP"
    assert xdev.as_cache()["wake_phrase"] == "Hi,ESP"  # kept across restarts
    async with client.get(URL(device.assets.downloads[-1]["url"]).path_qs) as response:  # HA is the server
        assert response.status == 404  # the URL was for one fetch


async def test_a_pack_too_big_for_the_partition_never_reaches_the_device(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    device = await mqtt_online(hub, client, reboots=True, assets_partition=len(default_pack()) + 1000)
    try:
        await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
        with pytest.raises(HomeAssistantError, match="larger than the assets partition"):
            await choose(hass, "Hi ESP")
        assert "download_url" not in device.nvs.get("assets", {})
        assert device.assets.downloads == []
        assert (now := hass.states.get(ENTITY)) is not None
        assert now.state == AS_BUILT
    finally:
        await device.drop()


@pytest.mark.parametrize("option", ["Hi ESP", AS_BUILT])
async def test_a_board_pack_with_a_broken_checksum_is_never_sent(
    hass: HomeAssistant, wake_dir: Path, device: SimulatedDevice, option: str
) -> None:
    pack = bytearray(default_pack())
    pack[200] ^= 0x10
    (wake_dir / f"{BOARD}.bin").write_bytes(bytes(pack))
    with pytest.raises(HomeAssistantError, match="checksum"):
        await choose(hass, option)
    assert "download_url" not in device.nvs.get("assets", {})
    assert device.wake_word == "你好小智"


async def test_a_model_not_in_the_folder_is_named(hass: HomeAssistant, device: SimulatedDevice) -> None:
    with pytest.raises(HomeAssistantError, match="wn9_alexa"):
        await choose(hass, "Alexa")
    assert device.assets.downloads == []


async def test_the_new_phrase_is_a_wake_word_not_a_question(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice
) -> None:
    """ "Hey,Willow" is no phrase the satellite knew: after the change it is the device's wake word."""
    xdev = await changed(hass, hub, device, "Hey Willow")
    assert device.wake_word == "Hey,Willow"
    assert xdev.expected_wake_word == "Hey,Willow"
    await mqtt_in_conversation(hub, device)
    await detect(device, "Hey,Willow")
    await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "done")
    assert xdev.chosen_wake_word == "Hey Willow"
    assert xdev.voice is not None
    assert wake_phrase_of(xdev) == "Hey,Willow"  # taken as the wake word, not typed text
    assert not text_waiting(xdev)


async def test_a_device_that_wakes_on_another_word_fails_the_change(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice
) -> None:
    """Its first wake after the restart is not the new word: the entity says so, the old choice is back."""
    xdev = await changed(hass, hub, device, "Hi ESP")
    assert xdev.as_cache()["wake_word"] == "Hi ESP"
    await mqtt_in_conversation(hub, device)
    await detect(device, "你好小智")
    now = await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "failed")
    assert now.state == AS_BUILT
    assert "你好小智" in now.attributes["error"]
    assert xdev.chosen_wake_word is None  # as before
    assert xdev.expected_wake_word is None


async def test_a_websocket_device_fetches_its_pack_when_its_conversation_ends(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """Per conversation: restarted as its conversation ends, it fetches the pack at boot."""
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client), "mqtt": False})
    await hass.async_block_till_done()
    device = SimulatedDevice(
        SimulatorOptions(url="", mac=MAC, client_id=CLIENT_ID, hello_timeout=5, upgrade_delay=0, reboots=True)
    )
    try:
        await device.boot(ota_url(client), timing=FAST)
        await device.connect()  # woken: a conversation
        xdev = hub.devices[MAC]
        await wait_for(xdev, lambda d: d.link is not None)
        await wait_settled(xdev)
        await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
        boots = device.boots
        await choose(hass, "Hi ESP")
        assert device.boots == boots  # not in the middle of its conversation
        link = xdev.link
        assert link is not None
        await link.async_end_conversation("idle")  # what the idle timer does
        await device.wait_boots(boots + 1, timeout=20)
        assert device.wake_word == "Hi,ESP"
        await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "verifying")
        assert xdev.chosen_wake_word == "Hi ESP"
    finally:
        await device.drop()


async def test_the_boards_pack_is_found_in_a_release_flash_image(
    hass: HomeAssistant, hub: XiaozhiHub, wake_dir: Path, device: SimulatedDevice
) -> None:
    """No ``<board>.bin``: the pack in the assets partition of the board's merged image is the base."""
    (wake_dir / f"{BOARD}.bin").unlink()
    firmware = wake_dir.parent / "xiaozhi_firmware"
    firmware.mkdir()
    (firmware / f"{BOARD}_2.5.0.bin").write_bytes(flash_image(build_image("2.5.0"), assets=default_pack("Hi,Lexin")))
    await changed(hass, hub, device, "Hi ESP")
    assert device.wake_word == "Hi,ESP"
    assert device.assets.files["font_puhui_common_20_4.bin"] == b"\xf0" * 3000  # the rest of the pack kept


async def test_without_the_boards_pack_nothing_is_sent(
    hass: HomeAssistant, wake_dir: Path, device: SimulatedDevice
) -> None:
    (wake_dir / f"{BOARD}.bin").unlink()
    with pytest.raises(HomeAssistantError, match=f"{BOARD}.bin"):
        await choose(hass, "Hi ESP")
    assert device.assets.downloads == []


@pytest.mark.usefixtures(no_cyclic_gc.__name__)
async def test_changing_the_wake_word_again_and_again_leaves_nothing_behind(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice
) -> None:
    """Eight changes, each fetched, confirmed by a wake and its conversation ended: nothing piles up."""
    baseline: dict[str, int] | None = None
    for round_ in range(8):
        option, word = ("Hi ESP", "Hi,ESP") if round_ % 2 == 0 else (AS_BUILT, "你好小智")
        xdev = await changed(hass, hub, device, option)
        assert device.wake_word == word
        await mqtt_in_conversation(hub, device)
        await detect(device, word)
        await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "done")
        await device.send_json({"session_id": device.session_id, "type": "goodbye"})
        await wait_for(xdev, lambda d: d.conversation is None)
        await wait_settled(xdev)
        await hass.async_block_till_done()
        if round_ == 1:
            baseline = resources()
    nothing_grew(baseline)
    assert len(hub.wake_words.jobs) == 1
    assert hub.wake_words._urls == {}  # every URL used once, none left
    assert [d["result"] for d in device.assets.downloads] == ["ok"] * 8


async def test_a_download_that_breaks_off_is_followed_by_the_old_pack(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], wake_dir: Path
) -> None:
    """Wi-Fi lost mid-way: the device has no wake word; once back, it is sent the pack it had."""
    model_folder(wake_dir, "wn9_jarvis_tts", "wakeNet9_v1h24_Jarvis_3_0.6_0.6", size=1_500_000)
    device = await mqtt_online(hub, client, reboots=True, assets_cut_after=64 * 1024)
    try:
        await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
        boots = device.boots
        await choose(hass, "Jarvis")
        await device.wait_boots(boots + 1, timeout=20)
        assert device.assets.downloads[0]["result"].startswith("Failed to read HTTP data")
        # Then restored: a second restart, the board's own pack, its own wake word again.
        await device.wait_boots(boots + 2, timeout=20)
        assert [d["result"] for d in device.assets.downloads] == [device.assets.downloads[0]["result"], "ok"]
        assert device.wake_word == "你好小智"
        now = await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "verifying")
        assert now.state == AS_BUILT
        assert "restoring" in now.attributes["error"]
    finally:
        await device.drop()


def cached(hub: XiaozhiHub) -> list[str]:
    """What the model cache holds (every entry, hidden ones included)."""
    cache = hub.wake_words.files.cache
    return sorted(path.name for path in cache.iterdir()) if cache.exists() else []


@pytest.fixture
async def esp_sr(hass: HomeAssistant, hub: XiaozhiHub, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[EspSr]:
    """A stand-in for esp-sr's model folders (never the internet): every catalog model, real sizes, pinned."""
    stand_in = EspSr.like_esp_sr()
    for name, model in stand_in.catalog.items():
        monkeypatch.setitem(CATALOG_BY_NAME, name, model)
    app = web.Application()
    app.router.add_get("/wakenet_model/{model}/{file}", stand_in.serve)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    options = {
        **hub.entry.options,
        CONF_WAKE_WORD_MODELS: True,
        CONF_WAKE_WORD_MODELS_URL: str(server.make_url("/wakenet_model")),
    }
    hass.config_entries.async_update_entry(hub.entry, options=options)
    await hass.async_block_till_done()
    yield stand_in
    await server.close()


async def test_a_catalog_model_is_downloaded_once_when_allowed(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr
) -> None:
    """Alexa is not in the folder: downloaded from esp-sr in many pieces, cached, used; then from the cache."""
    await changed(hass, hub, device, "Alexa")
    assert device.wake_word == "Alexa"
    assert esp_sr.asked == [f"wn9_alexa/{name}" for name in ("_MODEL_INFO_", "wn9_data", "wn9_index")]
    srmodels = device.assets.files[json.loads(device.assets.files["index.json"])["srmodels"]]
    assert esp_sr.files["wn9_alexa"]["wn9_data"] in srmodels  # byte for byte, all 289,638 bytes
    await changed(hass, hub, device, AS_BUILT)
    await changed(hass, hub, device, "Alexa")
    assert len(esp_sr.asked) == 3  # from the cache


async def test_nothing_is_downloaded_unless_allowed(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr
) -> None:
    options = {**hub.entry.options, CONF_WAKE_WORD_MODELS: False}
    hass.config_entries.async_update_entry(hub.entry, options=options)
    await hass.async_block_till_done()
    with pytest.raises(HomeAssistantError, match="downloading models is off"):
        await choose(hass, "Alexa")
    assert esp_sr.asked == []


@pytest.mark.parametrize("mode", MODES)
async def test_every_catalog_model_reaches_the_pack_whole(
    hub: XiaozhiHub, esp_sr: EspSr, wake_dir: Path, mode: str
) -> None:
    """All 70 models, sent whole, chunked or slowly: each pack carries the model byte for byte, parsed."""
    for local in ("wn9_hiesp", "wn9_heywillow_tts"):
        shutil.rmtree(wake_dir / local)  # the local folder would come first
    esp_sr.mode = mode
    base = default_pack()
    for model in esp_sr.models():
        chip = sorted(model.chips)[0]
        files = await hub.wake_words.files.async_model(model.name, chip)
        assert files == esp_sr.files[model.name]
        pack, word, before = make_pack(base, model.label, model.name, files, 0x800000)
        assert word == word_of(model).strip()
        assert before == "你好小智"
        parsed = parse_pack(pack)
        srmodels = parse_models(parsed[read_index(parsed)["srmodels"]].data)
        assert {name: bytes(data) for name, data in srmodels[model.name].items()} == esp_sr.files[model.name]
    assert len(esp_sr.asked) == 3 * 70
    assert cached(hub) == sorted(esp_sr.files)


@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.parametrize("file", ["wn9_data", "wn9_index"])
async def test_a_model_that_arrives_cut_or_lying_is_refused_and_not_cached(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr, broken: str, file: str
) -> None:
    """Closed half-way, a Content-Length that lies, no length and closed early, missing: never kept."""
    esp_sr.broken[f"wn9_jarvis_tts/{file}"] = broken
    with pytest.raises(HomeAssistantError, match="wn9_jarvis_tts could not be downloaded"):
        await choose(hass, "Jarvis")
    assert device.assets.downloads == []
    assert cached(hub) == []  # no model, no half-written folder
    esp_sr.broken.clear()  # the next try gets it whole
    await changed(hass, hub, device, "Jarvis")
    assert device.wake_word == "Jarvis"


async def test_jarvis_whose_model_info_starts_with_a_comment_works(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr
) -> None:
    """esp-sr's Jarvis: a comment line, then the model's line. Offered, downloaded, heard, confirmed."""
    assert esp_sr.files["wn9_jarvis_tts"]["_MODEL_INFO_"].startswith(b"# (neural network type)")
    assert (state := hass.states.get(ENTITY)) is not None
    assert "Jarvis" in state.attributes["options"]
    xdev = await changed(hass, hub, device, "Jarvis")
    assert device.wake_word == "Jarvis"
    await mqtt_in_conversation(hub, device)
    await detect(device, "Jarvis")
    now = await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "done")
    assert now.attributes["progress"] == 100
    assert now.state == "Jarvis"
    assert xdev.expected_wake_word == "Jarvis"


async def test_a_changed_cached_model_is_fetched_again(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr
) -> None:
    await changed(hass, hub, device, "Alexa")
    cached = hub.wake_words.files.cache / "wn9_alexa" / "wn9_data"
    cached.write_bytes(cached.read_bytes()[:65536])  # what a one-read download once kept
    await changed(hass, hub, device, "Hey Kira")
    await changed(hass, hub, device, "Alexa")
    assert esp_sr.asked.count("wn9_alexa/wn9_data") == 2
    assert cached.read_bytes() == esp_sr.files["wn9_alexa"]["wn9_data"]


async def test_a_model_for_another_chip_is_refused_before_any_download(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr, wake_dir: Path
) -> None:
    """WakeNet 9s models are for the C3/C5/C6; a WakeNet 5 folder runs on no chip esp-sr 2 serves."""
    state = hass.states.get(ENTITY)
    assert state is not None
    options = state.attributes["options"]
    assert len(options) == 1 + sum(1 for m in esp_sr.models() if "esp32s3" in m.chips) == 66
    assert options[:2] == [AS_BUILT, "你好小智"]  # the board's own word first
    with pytest.raises(HomeAssistantError, match="does not run on the esp32s3 chip"):
        await hub.wake_words.files.async_model("wn9s_hiesp", "esp32s3")
    model_folder(wake_dir, "wn5_hilexin", "wakeNet5_v1_hilexin_5_0.95_0.90")
    with pytest.raises(HomeAssistantError, match="does not run"):
        await hub.wake_words.async_choose(hub.devices[MAC], "wn5_hilexin")  # a folder of its own
    assert esp_sr.asked == []
    assert cached(hub) == []


async def test_home_assistants_voice_settings_choose_the_wake_word(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, esp_sr: EspSr, hass_ws_client: WebSocketGenerator
) -> None:
    """Settings → Voice assistants lists the select's words; choosing one there changes the device."""
    satellite = "assist_satellite.kitchen"
    ws = await hass_ws_client(hass)
    await ws.send_json_auto_id({"type": "assist_satellite/get_configuration", "entity_id": satellite})
    config = (await ws.receive_json())["result"]
    ids = [word["id"] for word in config["available_wake_words"]]
    state = hass.states.get(ENTITY)
    assert state is not None
    assert len(ids) == len(state.attributes["options"])
    assert ids[:2] == [AS_BUILT, "wn9_nihaoxiaozhi_tts"]
    assert config["available_wake_words"][0]["wake_word"] == "你好小智 (As built)"  # the select's own words
    assert config["active_wake_words"] == [AS_BUILT]
    french = next(w for w in config["available_wake_words"] if w["id"] == FRENCH)
    assert french["trained_languages"] == ["fr"]
    boots = device.boots
    await ws.send_json_auto_id(
        {"type": "assist_satellite/set_wake_words", "entity_id": satellite, "wake_word_ids": [FRENCH]}
    )
    assert (await ws.receive_json())["success"]
    assert (state := hass.states.get(ENTITY)) is not None
    assert state.state == "Bonjour ESP"  # the select follows
    await device.wait_boots(boots + 1, timeout=20)
    assert device.wake_word == "Bonjour,ESP"
    await ws.send_json_auto_id({"type": "assist_satellite/get_configuration", "entity_id": satellite})
    assert (await ws.receive_json())["result"]["active_wake_words"] == [FRENCH]


async def test_a_multinet_board_takes_a_phrase(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], wake_dir: Path
) -> None:
    """A board built with the MultiNet "custom wake word": a Wake phrase text instead of the select."""
    (wake_dir / f"{BOARD}.bin").write_bytes(default_pack("你好小智", multinet=True))
    device: SimulatedDevice = await mqtt_online(
        hub, client, reboots=True, assets_pack=default_pack("你好小智", multinet=True)
    )
    try:
        text = "text.kitchen_wake_phrase"
        state = await wait_entity(hass, text, lambda s: s.state == "")
        assert state.attributes["max"] == 140
        assert hass.states.get(ENTITY) is None  # no WakeNet model to choose
        assert device.wake_word == "你好小智"
        boots = device.boots
        await hass.services.async_call(
            "text", "set_value", {"entity_id": text, "value": "hai xiao ming | 嗨小明"}, blocking=True
        )
        await device.wait_boots(boots + 1, timeout=20)
        assert device.wake_word == "嗨小明"  # the phrase's text: what CustomWakeWord reports
        xdev = hub.devices[MAC]
        await wait_for(xdev, lambda d: d.link is not None)
        await mqtt_in_conversation(hub, device)
        await detect(device, "嗨小明")
        now = await wait_entity(hass, text, lambda s: s.attributes.get("phase") == "done")
        assert now.state == "hai xiao ming | 嗨小明"
        assert xdev.expected_wake_word == "嗨小明"
        phrases = json.loads(device.assets.files["index.json"])["multinet_model"]["commands"]
        assert phrases == [{"command": "hai xiao ming", "text": "嗨小明", "action": "wake"}]
        assert json.loads(device.assets.files["index.json"])["multinet_model"]["threshold"] == 0.2  # kept
        # The sensitivity: a third part, the threshold in percent (smaller hears more readily).
        await device.send_json({"session_id": device.session_id, "type": "goodbye"})
        await wait_for(xdev, lambda d: d.conversation is None)
        await wait_settled(xdev)
        boots = device.boots
        await hass.services.async_call(
            "text", "set_value", {"entity_id": text, "value": "hai xiao ming | 嗨小明 | 12"}, blocking=True
        )
        await device.wait_boots(boots + 1, timeout=20)
        assert json.loads(device.assets.files["index.json"])["multinet_model"]["threshold"] == 0.12
        with pytest.raises(HomeAssistantError, match="whole percent from 1 to 99"):
            await hass.services.async_call(
                "text", "set_value", {"entity_id": text, "value": "hai xiao ming | 嗨小明 | 150"}, blocking=True
            )
    finally:
        await device.drop()


async def test_a_pinyin_phrase_for_an_english_multinet_board_is_refused(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], wake_dir: Path
) -> None:
    """An English MultiNet model (mn7_en) never hears pinyin: refused with the reason, nothing sent."""
    pack = default_pack("Hey Xiaozhi", multinet=True, english=True)
    (wake_dir / f"{BOARD}.bin").write_bytes(pack)
    device: SimulatedDevice = await mqtt_online(hub, client, reboots=True, assets_pack=pack)
    try:
        text = "text.kitchen_wake_phrase"
        await wait_entity(hass, text, lambda s: s.state == "")
        with pytest.raises(HomeAssistantError, match="'hai xiao ming' is pinyin; mn7_en listens for English words"):
            await hass.services.async_call(
                "text", "set_value", {"entity_id": text, "value": "hai xiao ming | 嗨小明"}, blocking=True
            )
        with pytest.raises(HomeAssistantError, match="control, direction or emoji"):
            await hass.services.async_call(
                "text", "set_value", {"entity_id": text, "value": "hey tom | Tom\u202e"}, blocking=True
            )
        assert device.assets.downloads == []
        assert "download_url" not in device.nvs.get("assets", {})
    finally:
        await device.drop()


async def test_a_second_choice_while_the_first_waits_replaces_it(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice
) -> None:
    """In a conversation the change waits; choosing again replaces it, and the first never arrives."""
    await mqtt_in_conversation(hub, device)
    await choose(hass, "Hi ESP")
    first = hub.wake_words.jobs[MAC]
    assert first.phase == "waiting"
    await choose(hass, "Hey Willow")
    second = hub.wake_words.jobs[MAC]
    assert first.task is not None
    assert first.task.cancelled() or first.task.cancelling()
    assert second.previous == (None, None)  # not the word of the change that never arrived
    boots = device.boots
    await device.send_json({"session_id": device.session_id, "type": "goodbye"})
    await device.wait_boots(boots + 1, timeout=20)
    assert len(device.assets.downloads) == 1  # only the second pack was fetched
    assert device.wake_word == "Hey,Willow"


async def test_the_boards_pack_comes_from_its_release_when_that_source_is_on(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], wake_dir: Path, device: SimulatedDevice
) -> None:
    """No local pack: the zip of the release the device runs (2.4.2) is fetched once, its pack kept."""
    (wake_dir / f"{BOARD}.bin").unlink()
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("merged-binary.bin", flash_image(build_image("2.4.2"), assets=default_pack()))
    fetched: list[str] = []

    async def releases(request: web.Request) -> web.Response:
        url = str(request.url.with_path(f"/download/v2.4.2_{BOARD}.zip"))
        asset = {"name": f"v2.4.2_{BOARD}.zip", "browser_download_url": url}
        return web.json_response([{"tag_name": "v2.4.2", "draft": False, "prerelease": False, "assets": [asset]}])

    async def download(request: web.Request) -> web.Response:
        fetched.append(request.path)
        return web.Response(body=zipped.getvalue())

    app = web.Application()
    app.router.add_get("/releases", releases)
    app.router.add_get("/download/{name}", download)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        with pytest.raises(HomeAssistantError, match=f"{BOARD}.bin"):
            await choose(hass, "Hi ESP")  # the source is off: nothing is fetched
        assert fetched == []
        options = {
            **hub.entry.options,
            "firmware_releases": True,
            "firmware_releases_url": str(server.make_url("/releases")),
        }
        hass.config_entries.async_update_entry(hub.entry, options=options)
        await hass.async_block_till_done()
        await changed(hass, hub, device, "Hi ESP")
        assert device.wake_word == "Hi,ESP"
        await changed(hass, hub, device, AS_BUILT)
        assert device.wake_word == "你好小智"
        assert fetched == [f"/download/v2.4.2_{BOARD}.zip"]  # once: the pack is kept
    finally:
        await server.close()


async def test_a_large_pack_tells_its_progress_once_per_percent(
    hass: HomeAssistant, hub: XiaozhiHub, wake_dir: Path, device: SimulatedDevice
) -> None:
    """Every chunk and acknowledgement reports progress: the entities hear of new percents only."""
    model_folder(wake_dir, "wn9_jarvis_tts", "wakeNet9_v1h24_Jarvis_3_0.6_0.6", size=3_000_000)
    xdev = hub.devices[MAC]
    seen: list[tuple[str, int]] = []
    remove = xdev.async_add_listener(
        lambda: seen.append((job.phase, job.progress)) if (job := hub.wake_words.jobs.get(MAC)) else None
    )
    try:
        await changed(hass, hub, device, "Jarvis")
    finally:
        remove()
    downloading = [progress for phase, progress in seen if phase == "downloading"]
    assert downloading  # it was followed
    # Each percent once; a few other changes of the device (its link, its values) may fall in between.
    assert len(downloading) <= len(set(downloading)) + 5
    assert device.wake_word == "Jarvis"


@pytest.fixture
def outside(wake_dir: Path) -> Iterator[Path]:
    """Packs outside the wake word folder: beside it, and at an absolute path."""
    (wake_dir.parent / "outside.bin").write_bytes(default_pack("Secret"))
    absolute = Path("/tmp/outside-abs.bin")
    absolute.write_bytes(default_pack("Secret"))
    yield absolute
    absolute.unlink(missing_ok=True)


@pytest.mark.usefixtures("outside")
@pytest.mark.parametrize("board", ["../outside", "/tmp/outside-abs", "../../outside", "sub/../../outside"])
async def test_a_board_named_as_a_path_reads_no_file(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], board: str
) -> None:
    """A paired device reporting ``board.type`` as a path: no pack outside the folder is read or served."""
    device = await mqtt_online(hub, client, reboots=True, board=board)
    try:
        await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
        with pytest.raises(HomeAssistantError, match="No default assets pack"):
            await hub.wake_words.async_choose(hub.devices[MAC], "Hi ESP")
        assert device.assets.downloads == []
        assert await hub.wake_words.files.async_board_pack(frozenset({board})) is None
    finally:
        await device.drop()


async def test_symlinked_files_are_refused(
    hass: HomeAssistant, hub: XiaozhiHub, device: SimulatedDevice, wake_dir: Path
) -> None:
    """A model file linked to ``/proc/self/environ`` (st_size 0) or a pack linked elsewhere is never read."""
    (wake_dir / "wn9_hiesp" / "wn9_data").unlink()
    (wake_dir / "wn9_hiesp" / "wn9_data").symlink_to("/proc/self/environ")
    with pytest.raises(HomeAssistantError, match="wn9_data is not a regular file"):
        await choose(hass, "Hi ESP")
    elsewhere = wake_dir.parent / "elsewhere.bin"
    (wake_dir / f"{BOARD}.bin").rename(elsewhere)
    (wake_dir / f"{BOARD}.bin").symlink_to(elsewhere)
    assert await hub.wake_words.files.async_board_pack(frozenset({BOARD})) is None
    assert device.assets.downloads == []


async def test_a_device_naming_a_new_board_each_time_does_not_grow_the_board_table(
    hass: HomeAssistant, setup_integration: MockConfigEntry
) -> None:
    """What each board's default pack is built for is kept per board, at most ``MAX_BOARDS`` of them:
    a client that names another board at every OTA check ages the oldest out."""
    from custom_components.xiaozhi_local.protocol.firmware import BoardFacts
    from custom_components.xiaozhi_local.wake_words.files import MAX_BOARDS

    hub = hub_of(setup_integration)
    device = hub.devices[MAC]
    files = hub.wake_words.files
    for index in range(MAX_BOARDS * 2):
        device.async_set_facts(BoardFacts(f"board-{index}", "esp32s3", "2.4.2"))
        files.engine(device)
        await hass.async_block_till_done(wait_background_tasks=True)
        assert files.engine(device) == "wakenet"  # learned: no pack counts as WakeNet
    assert files.boards_known == MAX_BOARDS


@pytest.mark.parametrize(
    ("index", "reason"),
    [(b"[" * 100_000 + b"]" * 100_000, "nests deeper"), (b'{"x":"' + b"y" * 300_000 + b'"}', "bytes")],
    ids=["deep", "large"],
)
async def test_a_board_pack_with_a_hostile_index_is_refused_with_its_reason(
    hass: HomeAssistant,
    wake_dir: Path,
    hub: XiaozhiHub,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
    index: bytes,
    reason: str,
) -> None:
    """The board's pack in the folder has an index.json the firmware would refuse: the wake word
    entity is there all the same, a choice is refused with the reason, and nothing escapes as a
    traceback (a deep one was a RecursionError in a background task)."""
    from custom_components.xiaozhi_local.protocol.assets import AssetFile, build_pack

    files = parse_pack(default_pack())
    files["index.json"] = AssetFile("index.json", index)
    (wake_dir / f"{BOARD}.bin").write_bytes(build_pack(list(files.values())))
    device = await mqtt_online(hub, client, reboots=True)
    try:
        await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
        await hass.async_block_till_done()
        with pytest.raises(HomeAssistantError, match=reason):
            await choose(hass, "Hi ESP")
        assert device.boots == 1  # nothing reached the device
    finally:
        await device.drop()
    assert [r for r in caplog.records if r.exc_info or "Task exception" in r.getMessage()] == []
