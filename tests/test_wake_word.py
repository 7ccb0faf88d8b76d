"""The wake word chosen in Home Assistant: a new assets pack, fetched by the device at a restart.

The simulated device keeps an assets partition as firmware 2.4.2 does (``xiaozhi_sim.assets``):
``self.assets.set_download_url`` stores a URL, the next boot fetches the pack before its OTA
check, checks its length and 16-bit sum, reads ``index.json`` and loads the WakeNet model its
``srmodels`` names; the wake word it then sends as ``listen detect`` text is that model's.
Models and the board's default pack come from a local folder (never the internet).
"""

from collections.abc import AsyncIterator
import io
import json
from pathlib import Path
from typing import Any
import zipfile

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import CONF_WAKE_WORD_MODELS, CONF_WAKE_WORD_MODELS_URL
from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.wake_word_files import FOLDER
from custom_components.xiaozhi_local.wake_words import AS_BUILT
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.assets import default_pack
from xiaozhi_sim.firmware import build_image, flash_image
from xiaozhi_sim.mqtt import MqttDevice

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
from .helpers import resources, wait_entity
from .test_lifecycle import no_cyclic_gc, nothing_grew

ENTITY = "select.kitchen_wake_word"
BOARD = "bread-compact-wifi"


def model_folder(folder: Path, name: str, info: str, size: int = 25600) -> None:
    """An esp-sr WakeNet model folder, as ``model/wakenet_model/<name>/`` holds it."""
    (folder / name).mkdir()
    (folder / name / "_MODEL_INFO_").write_text(info)
    (folder / name / "wn9_data").write_bytes(bytes(range(256)) * (size // 256))
    (folder / name / "wn9_index").write_bytes(b"\x07" * 64)


@pytest.fixture
def wake_dir(hass: HomeAssistant, tmp_path: Path) -> Path:
    """The configuration directory's wake word folder: the board's default pack and "Hi ESP"."""
    hass.config.config_dir = str(tmp_path)
    folder = tmp_path / FOLDER
    folder.mkdir()
    (folder / f"{BOARD}.bin").write_bytes(default_pack())
    model_folder(folder, "wn9_hiesp", "wakeNet9_v1h24_Hi,ESP_3_0.63_0.635")
    model_folder(folder, "wn9_heywillow_tts", "wakeNet9_v1h24_Hey,Willow_3_0.6_0.6")
    return folder


@pytest.fixture
async def hub(
    hass: HomeAssistant, wake_dir: Path, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> XiaozhiHub:
    """The hub, its device URLs on the test server."""
    return await served_hub(hass, setup_integration, client)


@pytest.fixture
async def device(hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[MqttDevice]:
    """A stock device online over MQTT that restarts by itself; its Wake word select is there."""
    device = await mqtt_online(hub, client, reboots=True)
    await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
    yield device
    await device.drop()


async def changed(hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice, option: str) -> XiaozhiDevice:
    """Choose ``option``; until the device has restarted (fetching its pack at boot) and is back."""
    boots = device.boots
    await choose(hass, option)
    await device.wait_boots(boots + 1, timeout=20)
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.connection is not None)
    return xdev


async def detect(device: MqttDevice, text: str) -> None:
    """``listen detect``: the wake word the device heard (the firmware sends what its model names)."""
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "detect", "text": text})


async def choose(hass: HomeAssistant, option: str) -> None:
    await hass.services.async_call("select", "select_option", {"entity_id": ENTITY, "option": option}, blocking=True)


async def test_choosing_hi_esp_makes_the_device_wake_on_it(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], device: MqttDevice
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
    await wait_for(xdev, lambda d: d.connection is not None)
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
    async with client.session.get(device.assets.downloads[-1]["url"]) as response:
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
    hass: HomeAssistant, wake_dir: Path, device: MqttDevice, option: str
) -> None:
    pack = bytearray(default_pack())
    pack[200] ^= 0x10
    (wake_dir / f"{BOARD}.bin").write_bytes(bytes(pack))
    with pytest.raises(HomeAssistantError, match="checksum"):
        await choose(hass, option)
    assert "download_url" not in device.nvs.get("assets", {})
    assert device.wake_word == "你好小智"


async def test_a_model_not_in_the_folder_is_named(hass: HomeAssistant, device: MqttDevice) -> None:
    with pytest.raises(HomeAssistantError, match="wn9_alexa"):
        await choose(hass, "Alexa")
    assert device.assets.downloads == []


async def test_the_new_phrase_is_a_wake_word_not_a_question(
    hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice
) -> None:
    """ "Hey,Willow" is no phrase the satellite knew: after the change it is the device's wake word."""
    xdev = await changed(hass, hub, device, "Hey Willow")
    assert device.wake_word == "Hey,Willow"
    assert xdev.expected_wake_word == "Hey,Willow"
    await mqtt_in_conversation(hub, device)
    await detect(device, "Hey,Willow")
    await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "done")
    assert xdev.chosen_wake_word == "Hey Willow"
    satellite: Any = xdev.voice
    assert satellite is not None
    assert satellite._wake_phrase == "Hey,Willow"  # taken as the wake word, not typed text
    assert satellite._deferred_detect is None


async def test_a_device_that_wakes_on_another_word_fails_the_change(
    hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice
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
        await wait_for(xdev, lambda d: d.connection is not None)
        await wait_settled(xdev)
        await wait_entity(hass, ENTITY, lambda s: s.state == AS_BUILT)
        boots = device.boots
        await choose(hass, "Hi ESP")
        assert device.boots == boots  # not in the middle of its conversation
        link = xdev.connection
        assert link is not None
        await link.async_end_conversation("idle")  # what the idle timer does
        await device.wait_boots(boots + 1, timeout=20)
        assert device.wake_word == "Hi,ESP"
        await wait_entity(hass, ENTITY, lambda s: s.attributes.get("phase") == "verifying")
        assert xdev.chosen_wake_word == "Hi ESP"
    finally:
        await device.drop()


async def test_the_boards_pack_is_found_in_a_release_flash_image(
    hass: HomeAssistant, hub: XiaozhiHub, wake_dir: Path, device: MqttDevice
) -> None:
    """No ``<board>.bin``: the pack in the assets partition of the board's merged image is the base."""
    (wake_dir / f"{BOARD}.bin").unlink()
    firmware = wake_dir.parent / "xiaozhi_firmware"
    firmware.mkdir()
    (firmware / f"{BOARD}_2.5.0.bin").write_bytes(flash_image(build_image("2.5.0"), assets=default_pack("Hi,Lexin")))
    await changed(hass, hub, device, "Hi ESP")
    assert device.wake_word == "Hi,ESP"
    assert device.assets.files["font_puhui_common_20_4.bin"] == b"\xf0" * 3000  # the rest of the pack kept


async def test_without_the_boards_pack_nothing_is_sent(hass: HomeAssistant, wake_dir: Path, device: MqttDevice) -> None:
    (wake_dir / f"{BOARD}.bin").unlink()
    with pytest.raises(HomeAssistantError, match=f"{BOARD}.bin"):
        await choose(hass, "Hi ESP")
    assert device.assets.downloads == []


@pytest.mark.usefixtures(no_cyclic_gc.__name__)
async def test_changing_the_wake_word_again_and_again_leaves_nothing_behind(
    hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice
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


@pytest.fixture
async def esp_sr(hass: HomeAssistant, hub: XiaozhiHub) -> AsyncIterator[list[str]]:
    """A stand-in for esp-sr's model folders on GitHub (never the internet); the paths asked for."""
    asked: list[str] = []
    models = {
        "wn9_alexa": {"_MODEL_INFO_": b"wakeNet9l_v2h24_alexa_3_0.585_0.605\n", "wn9_data": b"\x05" * 50_000},
        "wn9_computer_tts": {"_MODEL_INFO_": b"not a model", "wn9_data": b"\x05" * 10},
    }

    async def serve(request: web.Request) -> web.Response:
        asked.append(request.path)
        data = models.get(request.match_info["model"], {}).get(request.match_info["file"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    app = web.Application()
    app.router.add_get("/wakenet_model/{model}/{file}", serve)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    options = {
        **hub.entry.options,
        CONF_WAKE_WORD_MODELS: True,
        CONF_WAKE_WORD_MODELS_URL: str(server.make_url("/wakenet_model")),
    }
    hass.config_entries.async_update_entry(hub.entry, options=options)
    await hass.async_block_till_done()
    yield asked
    await server.close()


async def test_a_catalog_model_is_downloaded_once_when_allowed(
    hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice, esp_sr: list[str]
) -> None:
    """Alexa is not in the folder: downloaded from esp-sr, cached, and used; the next time from the cache."""
    await changed(hass, hub, device, "Alexa")
    assert device.wake_word == "alexa"
    assert esp_sr == [f"/wakenet_model/wn9_alexa/{name}" for name in ("_MODEL_INFO_", "wn9_data", "wn9_index")]
    await changed(hass, hub, device, AS_BUILT)
    await changed(hass, hub, device, "Alexa")
    assert len(esp_sr) == 3  # from the cache
    with pytest.raises(HomeAssistantError, match="wn9_computer_tts could not be downloaded"):
        await choose(hass, "Computer")  # what came is no model: refused, not kept
    assert not (hub.wake_words.files.cache / "wn9_computer_tts").exists()


async def test_nothing_is_downloaded_unless_allowed(
    hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice, esp_sr: list[str]
) -> None:
    options = {**hub.entry.options, CONF_WAKE_WORD_MODELS: False}
    hass.config_entries.async_update_entry(hub.entry, options=options)
    await hass.async_block_till_done()
    with pytest.raises(HomeAssistantError, match="downloading models is off"):
        await choose(hass, "Alexa")
    assert esp_sr == []


async def test_a_multinet_board_takes_a_phrase(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], wake_dir: Path
) -> None:
    """A board built with the MultiNet "custom wake word": a Wake phrase text instead of the select."""
    (wake_dir / f"{BOARD}.bin").write_bytes(default_pack("你好小智", multinet=True))
    device: MqttDevice = await mqtt_online(
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
        await wait_for(xdev, lambda d: d.connection is not None)
        await mqtt_in_conversation(hub, device)
        await detect(device, "嗨小明")
        now = await wait_entity(hass, text, lambda s: s.attributes.get("phase") == "done")
        assert now.state == "hai xiao ming | 嗨小明"
        assert xdev.expected_wake_word == "嗨小明"
        phrases = json.loads(device.assets.files["index.json"])["multinet_model"]["commands"]
        assert phrases == [{"command": "hai xiao ming", "text": "嗨小明", "action": "wake"}]
    finally:
        await device.drop()


async def test_a_second_choice_while_the_first_waits_replaces_it(
    hass: HomeAssistant, hub: XiaozhiHub, device: MqttDevice
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
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], wake_dir: Path, device: MqttDevice
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
    hass: HomeAssistant, hub: XiaozhiHub, wake_dir: Path, device: MqttDevice
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
