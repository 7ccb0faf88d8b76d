"""Firmware updates against a real Home Assistant, with devices that upgrade as the firmware does.

The simulated devices (``xiaozhi_sim.firmware``) download, check, "flash" and reboot as
``Ota::Upgrade`` and ``Application::UpgradeFirmware`` do, and boot again by themselves: their
OTA check reports the version they run. The vendor's channel and the project's releases are
local stand-ins (never the internet).
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
import io
import json
from pathlib import Path
import re
from typing import Any
import zipfile

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from homeassistant.components.update import DATA_COMPONENT as UPDATE_COMPONENT
from homeassistant.core import HomeAssistant, State
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.event import async_track_state_change_event
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.firmware import installer as updates, run as install_run, server
from custom_components.xiaozhi_local.hub import XiaozhiHub
from xiaozhi_sim import SimulatedDevice, SimulatorOptions, ToolError
from xiaozhi_sim.firmware import build_image, flash_image

from .conftest import CLIENT_ID, CLIENT_ID2, FAST, MAC, MAC2, ota_url, served_hub, wait_for, wait_settled, ws_url
from .helpers import logged_by_us, wait_entity
from .internals import hub_of
from .voice import Voice, speech_pcm

ENTITY = "update.kitchen_firmware"
BOARD = "bread-compact-wifi"

type MqttFactory = Callable[..., Awaitable[SimulatedDevice]]


@pytest.fixture(autouse=True)
def every_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entity shows every new percent (a loopback download takes less than a second)."""
    monkeypatch.setattr(updates, "PROGRESS_EVERY", 0.0)


def firmware_folder(hass: HomeAssistant, tmp_path: Path) -> Path:
    """Home Assistant's configuration directory in tmp, with the local firmware folder."""
    hass.config.config_dir = str(tmp_path)
    folder = tmp_path / "xiaozhi_firmware"
    folder.mkdir()
    return folder


@pytest.fixture
def firmware_dir(hass: HomeAssistant, tmp_path: Path) -> Path:
    """Home Assistant's configuration directory in tmp, with the local firmware folder."""
    return firmware_folder(hass, tmp_path)


@pytest.fixture
async def hub(
    hass: HomeAssistant, firmware_dir: Path, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> XiaozhiHub:
    """The hub, its device URLs on the test server."""
    return await served_hub(hass, setup_integration, client)


@pytest.fixture
async def make_mqtt(hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[MqttFactory]:
    """Stock devices online over MQTT that reboot (and boot again) by themselves."""
    devices: list[SimulatedDevice] = []

    async def factory(*, mac: str = MAC, client_id: str = CLIENT_ID, **kwargs: Any) -> SimulatedDevice:
        options = {"hello_timeout": 5, "upgrade_delay": 0.0, "reboots": True} | kwargs
        device = SimulatedDevice(SimulatorOptions(url="", mac=mac, client_id=client_id, **options), speaks_mqtt=True)
        devices.append(device)
        await device.boot_mqtt(ota_url(client), timing=FAST)
        return device

    yield factory
    for device in devices:
        await device.drop()


@pytest.fixture
async def make_ws(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> AsyncIterator[Callable[[], Awaitable[SimulatedDevice]]]:
    """Per-conversation stock devices (the hub hands out WebSocket only), booted and idle."""
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client), "mqtt": False})
    await hass.async_block_till_done()
    devices: list[SimulatedDevice] = []

    async def factory() -> SimulatedDevice:
        device = SimulatedDevice(
            SimulatorOptions(url="", mac=MAC, client_id=CLIENT_ID, hello_timeout=5, upgrade_delay=0, reboots=True)
        )
        devices.append(device)
        await device.boot(ota_url(client), timing=FAST)  # idle afterwards: no socket
        return device

    yield factory
    for device in devices:
        await device.drop()


async def online(hub: XiaozhiHub, mac: str = MAC) -> None:
    """Until the device is connected, its tools known and its status read."""
    xdev = hub.devices[mac]
    await wait_for(xdev, lambda d: d.link is not None)
    await wait_settled(xdev)


def put(folder: Path, name: str, data: bytes) -> bytes:
    (folder / name).write_bytes(data)
    return data


async def offered(hass: HomeAssistant, version: str, entity_id: str = ENTITY) -> State:
    """Until the entity offers ``version`` (a refresh reads the sources now)."""
    await hass.services.async_call("homeassistant", "update_entity", {"entity_id": entity_id}, blocking=True)
    return await wait_entity(hass, entity_id, lambda s: s.attributes.get("latest_version") == version)


class Progress:
    """Every (in_progress, update_percentage) the entity showed."""

    def __init__(self, hass: HomeAssistant, entity_id: str = ENTITY) -> None:
        self.seen: list[tuple[bool, Any]] = []
        self.unsubscribe = async_track_state_change_event(hass, entity_id, self._changed)

    def _changed(self, event: Any) -> None:
        state = event.data["new_state"]
        if state is not None:
            self.seen.append((state.attributes.get("in_progress"), state.attributes.get("update_percentage")))

    @property
    def percentages(self) -> list[int]:
        return [p for _in_progress, p in self.seen if p is not None]


async def install(hass: HomeAssistant, version: str | None = None, entity_id: str = ENTITY) -> None:
    data: dict[str, Any] = {"entity_id": entity_id}
    if version is not None:
        data["version"] = version
    await hass.services.async_call("update", "install", data, blocking=True)


# -- the two install paths ----------------------------------------------------------------------


async def test_a_local_file_is_offered_and_installed_through_the_devices_tool(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    client: TestClient[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=300_000))
    device = await make_mqtt()
    await online(hub)
    state = await offered(hass, "2.5.0")
    assert state.state == "on"
    assert state.attributes["installed_version"] == "2.4.2"
    assert state.attributes["release_summary"] == f"{BOARD}_2.5.0.bin"
    assert state.attributes["title"] == "xiaozhi"
    assert state.attributes["in_progress"] is False
    progress = Progress(hass)

    await install(hass)

    # The device was asked through its tool, downloaded the whole image in 4 KiB pages, flashed it,
    # rebooted and came back reporting the new version.
    calls = [args for name, args in device.mcp.calls if name == "self.upgrade_firmware"]
    assert len(calls) == 1
    url = calls[0]["url"]
    assert url.startswith(str(client.make_url("/api/xiaozhi_local/firmware/")))
    assert device.upgrades[0]["result"] == "ok"
    assert device.upgrades[0]["read"] == device.upgrades[0]["size"] == len(image)
    assert device.options.firmware_version == "2.5.0"
    await device.wait_boots(2)
    assert device.nvs["ota"]["running"] == "2.5.0"
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert state.state == "off"  # up to date
    assert state.attributes["in_progress"] is False
    assert state.attributes["update_percentage"] is None
    # Progress was shown while it read: several steps between 0 and 100, in order.
    assert [p for p in progress.percentages if 0 < p < 100], progress.seen
    assert progress.percentages == sorted(progress.percentages), progress.seen
    assert progress.percentages[-1] == 100, progress.seen
    progress.unsubscribe()
    # The URL was for one fetch.
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 404
    registry_version = hub.devices[MAC].facts
    assert registry_version is not None
    assert registry_version.version == "2.5.0"
    assert not hub.firmware.jobs
    await online(hub)
    await hass.async_block_till_done(wait_background_tasks=True)


async def test_progress_is_shown_at_most_every_second(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every state change goes to the recorder: a quick download shows its start and its end only."""
    monkeypatch.setattr(updates, "PROGRESS_EVERY", 3600.0)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=300_000))
    await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.0")
    progress = Progress(hass)
    await install(hass)
    assert progress.percentages == [0, 100], progress.seen
    progress.unsubscribe()


async def test_a_device_without_the_tool_gets_firmware_in_its_next_ota_answer(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path, client: TestClient[Any, Any]
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    device.mcp.tools = [tool for tool in device.mcp.tools if tool.name != "self.upgrade_firmware"]
    await device.drop()  # it boots again: its tool list no longer has the tool
    await device.boot_mqtt(ota_url(client), timing=FAST)
    await online(hub)
    assert "self.upgrade_firmware" not in hub.devices[MAC].tools
    await offered(hass, "2.5.0")

    await install(hass)

    # Restarted by HA, it checked OTA: the answer carried the firmware (no force: it is newer).
    assert device.rebooted
    assert device.upgrades[0]["version"] == "2.5.0"
    assert device.upgrades[0]["result"] == "ok"
    assert device.options.firmware_version == "2.5.0"
    assert device.ota is not None
    assert "firmware" not in device.ota.log.responses[-1]  # after the reboot: none any more
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert state.state == "off"
    assert not [name for name, _args in device.mcp.calls if name == "self.upgrade_firmware"]
    await online(hub)


async def test_a_websocket_device_is_upgraded_at_its_next_boot(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    firmware_dir: Path,
    make_ws: Callable[[], Awaitable[SimulatedDevice]],
    client: TestClient[Any, Any],
) -> None:
    """A device that connects only to talk: the install waits until it boots (or talks)."""
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_ws()
    assert not device.is_connected
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: s.attributes["in_progress"] is True)
    assert hub.firmware.jobs[MAC].phase == "waiting"
    # Switched off and on: its boot-time check gets the firmware.
    await device.boot(ota_url(client), timing=FAST)
    await task
    assert device.upgrades[0]["result"] == "ok"
    await device.wait_boots(2)  # the upgrade restarted the check: that boot reports 2.5.0
    assert device.options.firmware_version == "2.5.0"
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert state.state == "off"


async def test_a_websocket_device_in_a_conversation_is_upgraded_through_its_tool(
    hass: HomeAssistant, hub: XiaozhiHub, firmware_dir: Path, make_ws: Callable[[], Awaitable[SimulatedDevice]]
) -> None:
    """It closes its socket to upgrade, then reboots and checks OTA with the new version."""
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_ws()
    await device.connect()  # woken
    await online(hub)
    await offered(hass, "2.5.0")
    await install(hass)
    assert [name for name, _ in device.mcp.calls].count("self.upgrade_firmware") == 1
    assert device.upgrades[0]["result"] == "ok"
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert state.state == "off"


async def test_a_device_in_a_conversation_is_upgraded_once_the_turn_is_over(
    hass: HomeAssistant, firmware_dir: Path, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.0")
    await device.connect()  # the wake word: a conversation
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "manual"})
    await wait_entity(hass, "assist_satellite.kitchen", lambda s: s.state == "listening")
    xdev = hub.devices[MAC]
    assert xdev.voice is not None
    assert xdev.exchanging
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: s.attributes["in_progress"] is True)
    assert hub.firmware.jobs[MAC].phase == "waiting"
    assert not device.mcp.calls or all(name != "self.upgrade_firmware" for name, _ in device.mcp.calls)
    # The user finishes the question; the answer plays; then, idle, the device is upgraded.
    device.relisten = False
    await device.say(speech_pcm(), mode="manual", start=False)
    await task
    log = device.log
    stop_at = next(i for i, m in enumerate(log) if m.get("type") == "tts" and m.get("state") == "stop")
    assert stop_at >= 0  # the answer was over before the upgrade was asked for
    assert device.upgrades[0]["result"] == "ok"
    await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")


async def test_a_device_refusing_through_its_tool_ends_the_install(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    tool = device.mcp.find("self.upgrade_firmware")
    assert tool is not None

    async def busy(_args: dict[str, Any]) -> Any:
        raise ToolError("Another upgrade is in progress")

    tool.callback = busy
    await online(hub)
    await offered(hass, "2.5.0")
    with pytest.raises(
        HomeAssistantError, match=re.escape("refused to update to 2.5.0: Another upgrade is in progress")
    ):
        await install(hass)
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["in_progress"] is False


async def test_a_websocket_device_that_talks_before_it_boots_is_upgraded_through_its_tool(
    hass: HomeAssistant,
    firmware_dir: Path,
    make_ws: Callable[[], Awaitable[SimulatedDevice]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(install_run, "CONNECT_GRACE", 0.1)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_ws()
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: s.attributes["in_progress"] is True)
    await device.connect()  # woken before it was ever restarted
    await task
    assert [name for name, _ in device.mcp.calls].count("self.upgrade_firmware") == 1
    assert device.upgrades[0]["result"] == "ok"


async def test_files_that_are_not_for_the_device_are_never_offered(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    put(firmware_dir, f"{BOARD}_2.6.0.bin", build_image("2.6.0", chip="esp32c3"))  # another chip
    put(firmware_dir, f"{BOARD}_2.7.0.bin", b"not an image" * 100)
    put(firmware_dir, f"{BOARD}_2.8.0.bin", build_image("2.8.0")[:-500])  # truncated
    put(firmware_dir, f"{BOARD}_2.9.0.bin", build_image("2.9.1"))  # the name says another version
    put(firmware_dir, f"{BOARD}_3.0.0.bin", build_image("3.0.0", project="other"))
    put(firmware_dir, "other-board_9.0.0.bin", build_image("9.0.0"))  # another board: not for it
    put(firmware_dir, "firmware.bin", build_image("9.0.1"))  # no board and version in the name
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    await online(hub)
    state = await offered(hass, "2.5.0")
    assert state.state == "on"
    refused = hub.firmware.catalog.local.refused
    assert "esp32c3" in refused[f"{BOARD}_2.6.0.bin for {BOARD}"]
    assert "no image magic" in refused[f"{BOARD}_2.7.0.bin"]
    assert "truncated" in refused[f"{BOARD}_2.8.0.bin"]
    assert "2.9.1" in refused[f"{BOARD}_2.9.0.bin"]
    assert "project 'other'" in refused[f"{BOARD}_3.0.0.bin for {BOARD}"]
    assert "not named" in refused["firmware.bin"]
    assert "other-board_9.0.0.bin" not in refused
    diagnostics = hub.firmware.diagnostics(hub.devices[MAC])
    assert diagnostics["facts"]["version"] == "2.4.2"
    assert diagnostics["offers"] == [{"version": "2.5.0", "source": "local", "summary": f"{BOARD}_2.5.0.bin"}]
    assert logged_by_us(caplog).count(f"{BOARD}_2.7.0.bin") == 1  # said once, not at every check
    await offered(hass, "2.5.0")
    assert logged_by_us(caplog).count(f"{BOARD}_2.7.0.bin") == 1
    # Refused for this board's chip or project: also said once per file, not at every rescan.
    assert logged_by_us(caplog).count(f"{BOARD}_2.6.0.bin") == 1
    assert logged_by_us(caplog).count(f"{BOARD}_3.0.0.bin") == 1
    assert "esp32c3" in refused[f"{BOARD}_2.6.0.bin for {BOARD}"]  # still in the diagnostics
    for version in ("2.6.0", "2.7.0", "2.8.0", "3.0.0", "9.0.0"):
        with pytest.raises(HomeAssistantError, match=f"No firmware source offers version {version}"):
            await install(hass, version)
    assert not device.upgrades  # nothing was sent


async def test_a_file_changed_after_it_was_checked_is_checked_again_before_it_is_sent(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.0")
    # Overwritten after the check: truncated (a copy that has not finished, say).
    (firmware_dir / f"{BOARD}_2.5.0.bin").write_bytes(build_image("2.5.0")[:1000])
    with pytest.raises(HomeAssistantError, match="refused and not sent"):
        await install(hass)
    assert not device.upgrades
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["in_progress"] is False
    assert "refused and not sent" in state.attributes["release_summary"]  # the entity says why


async def test_no_downgrade_unless_an_older_local_file_is_chosen(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path
) -> None:
    put(firmware_dir, f"{BOARD}_2.3.0.bin", build_image("2.3.0"))
    device = await make_mqtt()
    await online(hub)
    await hass.services.async_call("homeassistant", "update_entity", {"entity_id": ENTITY}, blocking=True)
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.state == "off"  # 2.3.0 is older: up to date
    assert state.attributes["latest_version"] == "2.4.2"
    with pytest.raises(HomeAssistantError, match="No update available"):  # HA's own check
        await install(hass)
    with pytest.raises(HomeAssistantError, match="newest firmware known"):  # ours, behind it
        await hub.firmware.async_install(hub.devices[MAC], None)
    # Chosen explicitly: installed (the firmware's force, since it is not newer).
    await install(hass, "2.3.0")
    assert device.upgrades[0]["result"] == "ok"
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.3.0")
    assert state.state == "off"


async def test_a_device_on_a_low_battery_is_not_upgraded(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    device.state.battery_level = 12
    await online(hub)
    await hub.devices[MAC].values.async_read()
    await offered(hass, "2.5.0")
    with pytest.raises(HomeAssistantError, match="battery of Kitchen is at 12 %"):
        await install(hass)
    assert not device.upgrades
    device.state.charging = True  # plugged in: fine
    await hub.devices[MAC].values.async_read()
    await install(hass)
    assert device.upgrades[0]["result"] == "ok"


async def test_an_always_connected_device_that_is_off_gets_it_when_switched_on(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path, client: TestClient[Any, Any]
) -> None:
    """Off: the install waits, visibly, and its boot-time OTA answer carries the firmware."""
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.0")
    await device.drop()  # switched off
    await wait_for(hub.devices[MAC], lambda d: not d.connected)
    task = hass.async_create_task(install(hass))
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["in_progress"] is True)
    assert hub.firmware.jobs[MAC].phase == "waiting"
    assert "next start" in state.attributes["release_summary"]  # the entity says what it waits for
    boots = device.boots
    await device.boot_mqtt(ota_url(client), timing=FAST)  # switched on: the OTA check installs it
    await task
    assert device.upgrades[-1]["result"] == "ok"
    await device.wait_boots(boots + 1)  # its check after the flash reports 2.5.0
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert state.state == "off"
    assert "next start" not in (state.attributes["release_summary"] or "")


async def test_removing_a_device_ends_its_waiting_install_and_forgets_it(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path
) -> None:
    """Nothing of a removed device stays behind: its install ends, its offers and listeners go."""
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.0")
    await device.drop()  # switched off: the install waits for it
    await wait_for(hub.devices[MAC], lambda d: not d.connected)
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: s.attributes["in_progress"] is True)
    entry = hass.config_entries.async_entries(DOMAIN)[0]
    subentry = next(sub for sub in entry.subentries.values() if sub.unique_id == MAC)
    hass.config_entries.async_remove_subentry(entry, subentry.subentry_id)
    with pytest.raises(HomeAssistantError, match="stopped"):
        await task
    await hass.async_block_till_done()
    firmware = hub.firmware
    assert MAC not in firmware.jobs
    assert MAC not in firmware.catalog.offers
    assert MAC not in firmware.last_error  # the cancelled install is no news for a device that is gone
    assert MAC not in firmware._listeners
    assert hass.states.get(ENTITY) is None


# -- failures ---------------------------------------------------------------------------------


async def test_a_failing_flash_is_reported_and_the_device_restarted(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    client: TestClient[Any, Any],
) -> None:
    """Started from idle, a failed upgrade leaves the firmware "upgrading": HA restarts it."""
    monkeypatch.setattr(install_run, "REFUSE_GRACE", 0.5)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt(fail_flash=True)
    await online(hub)
    await offered(hass, "2.5.0")
    with pytest.raises(HomeAssistantError, match="did not install it"):
        await install(hass)
    assert device.upgrades[0]["result"] == "Failed to end OTA: ESP_FAIL"
    assert device.options.firmware_version == "2.4.2"
    await device.wait_boots(2)  # restarted (out of its "upgrading" state), it booted again
    await online(hub)
    assert device.device_state == "idle"
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["in_progress"] is False
    assert state.attributes["installed_version"] == "2.4.2"
    assert "did not install it" in state.attributes["release_summary"]
    # The update dialog shows the release notes, not the summary: the reason heads them.
    entity = hass.data[UPDATE_COMPONENT].get_entity(ENTITY)
    assert entity is not None
    notes = await entity.async_release_notes()
    assert notes is not None
    assert notes.startswith("**Kitchen downloaded firmware 2.5.0 but did not install it")
    # Nothing retries by itself: no firmware in its OTA answers, no new upgrade.
    assert len(device.upgrades) == 1
    assert device.ota is not None
    assert all("firmware" not in answer for answer in device.ota.log.responses)
    # Later it comes back on another version (flashed by hand, say): the failure is no longer news.
    await device.drop()
    device.options.firmware_version = "2.5.0"
    device.system_info["application"]["version"] = "2.5.0"
    await device.boot_mqtt(ota_url(client), timing=FAST)
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert "did not install it" not in (state.attributes["release_summary"] or "")
    assert MAC not in hub.firmware.last_error


async def test_a_device_that_never_downloads_ends_the_install(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(install_run, "FETCH_TIMEOUT", 0.3)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt(upgrade_delay=30.0)  # it says true, then takes its time
    await online(hub)
    await offered(hass, "2.5.0")
    with pytest.raises(HomeAssistantError, match=re.escape("did not download firmware 2.5.0")):
        await install(hass)
    url = device.upgrades[0]["url"]
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 404  # the URL is gone with the install
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["in_progress"] is False


async def test_a_device_vanishing_mid_download_ends_the_install(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A power cut mid-download: nothing more arrives from the device (no close, no reset)."""
    monkeypatch.setattr(server, "STALL_TIMEOUT", 0.5)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=1_500_000))
    device = await make_mqtt(download_delay=0.002, reboots=False)
    await online(hub)
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: (s.attributes.get("update_percentage") or 0) > 10)
    device.power_cut.set()
    await device.mqtt.drop_mqtt()  # its MQTT connection goes silent too
    with pytest.raises(HomeAssistantError, match="was interrupted"):
        await task
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["in_progress"] is False
    assert state.attributes["installed_version"] == "2.4.2"
    assert "stalled" in state.attributes["release_summary"]
    assert not hub.firmware.jobs
    assert not hub.firmware.downloads._data
    await device.drop()
    await hass.async_block_till_done(wait_background_tasks=True)


async def test_reloading_mid_update_leaves_nothing_in_progress(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path, client: TestClient[Any, Any]
) -> None:
    """Home Assistant restarting (here: the integration reloading) forgets the install."""
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=600_000))
    device = await make_mqtt(download_delay=0.01, reboots=False)
    await online(hub)
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: (s.attributes.get("update_percentage") or 0) > 5)
    assert await hass.config_entries.async_reload(hub.entry.entry_id)
    await hass.async_block_till_done()
    with pytest.raises(HomeAssistantError):
        await task
    new_hub: XiaozhiHub = hub_of(hub.entry)
    assert new_hub is not hub
    assert not new_hub.firmware.jobs
    await device.drop()
    await device.boot_mqtt(ota_url(client), timing=FAST)
    assert device.ota is not None
    assert "firmware" not in device.ota.log.responses[-1]
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes.get("in_progress") is False)
    assert state.attributes["installed_version"] == "2.4.2"
    await device.drop()


# -- the download URL -------------------------------------------------------------------------


async def test_the_download_url_is_for_its_device_once_and_in_time(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    client: TestClient[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(install_run, "REFUSE_GRACE", 0.2)
    image = put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt(upgrade_delay=30.0)  # it never gets to download: the test does
    await online(hub)
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await asyncio.wait_for(device.upgrade_started.wait(), 5)
    url = device.upgrades[0]["url"]
    base = str(client.make_url("/api/xiaozhi_local/firmware/"))
    async with aiohttp.ClientSession() as session:
        # Another device (another address) asking for it: refused, and the URL stays valid.
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(connector=connector) as other, other.get(url) as response:
            assert response.status == 404
        async with session.get(base + "not-a-token.bin") as response:
            assert response.status == 404
        async with session.get(url) as response:  # the device's address: served
            assert response.status == 200
            assert response.content_length == len(image)
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert await response.read() == image
        async with session.get(url) as response:  # once only
            assert response.status == 404
    with pytest.raises(HomeAssistantError):
        await task  # downloaded by someone, but the device never came back with it
    await hass.async_block_till_done(wait_background_tasks=True)


async def test_an_expired_url_is_refused(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    firmware_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_mqtt(upgrade_delay=30.0)
    await online(hub)
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await asyncio.wait_for(device.upgrade_started.wait(), 5)
    for download in hub.firmware.downloads._downloads.values():
        download.expires = hass.loop.time() - 1
    async with aiohttp.ClientSession() as session, session.get(device.upgrades[0]["url"]) as response:
        assert response.status == 404
    hub.firmware.async_cancel_all()
    with pytest.raises(HomeAssistantError, match="stopped"):
        await task


# -- the vendor's channel and the project's releases (local stand-ins) -----------------------


class StandIn:
    """The vendor's OTA service and GitHub, on loopback."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], Any]] = []
        self.answer: Any = {}
        self.status = 200
        self.files: dict[str, bytes] = {}
        self.releases: Any = []
        self.release_reads = 0
        app = web.Application()
        app.router.add_post("/xiaozhi/ota/", self.ota)
        app.router.add_get("/bin/{name}", self.file)
        app.router.add_get("/repos/78/xiaozhi-esp32/releases", self.list_releases)
        app.router.add_get("/download/{name}", self.redirect)
        self.server = TestServer(app, host="127.0.0.1")

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def ota(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.json()))
        if isinstance(self.answer, str):
            return web.Response(text=self.answer, status=self.status)
        return web.json_response(self.answer, status=self.status)

    async def file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def list_releases(self, request: web.Request) -> web.Response:
        self.release_reads += 1
        return web.json_response(self.releases)

    async def redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(self.url(f"/bin/{request.match_info['name']}"))  # as GitHub does


@pytest.fixture
async def stand_in() -> AsyncIterator[StandIn]:
    server = StandIn()
    await server.server.start_server()
    yield server
    await server.server.close()


async def use_sources(hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], **options: Any) -> None:
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client), **options})
    await hass.async_block_till_done()


async def test_the_vendors_channel_is_asked_without_the_devices_identity(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    stand_in: StandIn,
    client: TestClient[Any, Any],
) -> None:
    image = build_image("2.5.3", size=200_000)
    stand_in.files["v253.bin"] = image
    stand_in.answer = {
        "firmware": {"version": "2.5.3", "url": stand_in.url("/bin/v253.bin")},
        # Never used: these stay Home Assistant's.
        "activation": {"code": "123456", "message": "bind me", "challenge": "x"},
        "websocket": {"url": "wss://api.tenclass.net/xiaozhi/v1/", "token": "cloud"},
        "mqtt": {"endpoint": "mqtt.xiaozhi.me", "username": "u", "password": "p"},
    }
    await use_sources(hass, hub, client, firmware_vendor=True, firmware_vendor_url=stand_in.url("/xiaozhi/ota/"))
    device = await make_mqtt()
    await online(hub)
    state = await offered(hass, "2.5.3")
    assert state.state == "on"
    # What went to the vendor: the board, the chip and the firmware, under a made-up identity.
    headers, body = stand_in.requests[-1]
    text = json.dumps(body) + json.dumps(headers)
    for secret in (MAC, CLIENT_ID, "MyWiFi", "192.168.1.50", device.system_info["uuid"]):
        assert secret not in text
    assert body["application"] == {"name": "xiaozhi", "version": "2.4.2"}
    assert body["board"] == {"type": BOARD, "name": BOARD, "manufacturer": ""}
    assert body["chip_model_name"] == "esp32s3"
    assert headers["User-Agent"] == f"{BOARD}/2.4.2"
    assert headers["Device-Id"] == body["mac_address"] != MAC
    assert set(body) == {"mac_address", "uuid", "chip_model_name", "application", "board"}
    # The answer is kept: a second device of the same board and version is not asked again.
    asked = len(stand_in.requests)
    await hub.firmware.catalog.async_check(hub.devices[MAC])
    assert len(stand_in.requests) == asked

    await install(hass)

    assert device.upgrades[0]["result"] == "ok"
    assert device.upgrades[0]["url"].startswith(
        ws_url(client).replace("ws://", "http://").split("/api/", maxsplit=1)[0]
    )
    assert device.options.firmware_version == "2.5.3"
    # The device's OTA answers never carried the vendor's websocket, mqtt or activation.
    assert device.ota is not None
    for answer in device.ota.log.responses:
        assert "activation" not in answer
        assert answer["websocket"]["url"] == ws_url(client)
        assert "xiaozhi.me" not in json.dumps(answer)
    await wait_entity(hass, ENTITY, lambda s: s.state == "off" and s.attributes["installed_version"] == "2.5.3")


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (500, {"error": "down"}),
        (200, "<html>not json</html>"),
        (200, ["an", "array"]),
        (200, {"firmware": "2.5.0"}),
        (200, {"firmware": {"version": 250, "url": "http://x/y.bin"}}),
        (200, {"firmware": {"version": "v2.5", "url": "http://x/y.bin"}}),
        (200, {"firmware": {"version": "2.5.0", "url": "ftp://x/y.bin"}}),
    ],
)
async def test_a_vendor_answering_nonsense_leaves_the_entity_as_it_was(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    stand_in: StandIn,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
    status: int,
    answer: Any,
) -> None:
    stand_in.files["v253.bin"] = build_image("2.5.3")
    stand_in.answer = {"firmware": {"version": "2.5.3", "url": stand_in.url("/bin/v253.bin")}}
    await use_sources(hass, hub, client, firmware_vendor=True, firmware_vendor_url=stand_in.url("/xiaozhi/ota/"))
    await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.3")
    stand_in.status, stand_in.answer = status, answer
    for _ in range(3):
        await hass.services.async_call("homeassistant", "update_entity", {"entity_id": ENTITY}, blocking=True)
        for entry in hub.firmware.catalog.vendor._memo.entries.values():  # type: ignore[union-attr]
            entry.asked = 0.0  # as if the spacing between refreshes had passed
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["latest_version"] == "2.5.3"  # as it was
    assert logged_by_us(caplog).count("did not answer for") == 1  # one log line, not one per check
    assert not ir_issues(hass)


def ir_issues(hass: HomeAssistant) -> list[Any]:
    from homeassistant.helpers import issue_registry as ir

    return [issue for (domain, _id), issue in ir.async_get(hass).issues.items() if domain == "xiaozhi_local"]


async def test_an_unreachable_vendor_changes_nothing(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, client: TestClient[Any, Any], firmware_dir: Path
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    await use_sources(hass, hub, client, firmware_vendor=True, firmware_vendor_url="http://127.0.0.1:9/ota/")
    await make_mqtt()
    await online(hub)
    state = await offered(hass, "2.5.0")  # the local file still counts
    assert state.state == "on"


async def test_a_vendor_binary_for_another_chip_is_refused_and_never_sent(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    stand_in: StandIn,
    client: TestClient[Any, Any],
) -> None:
    stand_in.files["v253.bin"] = build_image("2.5.3", chip="esp32c3")
    stand_in.answer = {"firmware": {"version": "2.5.3", "url": stand_in.url("/bin/v253.bin")}}
    await use_sources(hass, hub, client, firmware_vendor=True, firmware_vendor_url=stand_in.url("/xiaozhi/ota/"))
    device = await make_mqtt()
    await online(hub)
    await offered(hass, "2.5.3")
    with pytest.raises(HomeAssistantError, match="is for esp32c3, the device is esp32s3"):
        await install(hass)
    assert not device.upgrades
    # A binary that is no image at all, and one that cannot be downloaded.
    stand_in.files["v253.bin"] = b"<html>a captive portal</html>"
    with pytest.raises(HomeAssistantError, match="refused and not sent"):
        await install(hass)
    del stand_in.files["v253.bin"]
    with pytest.raises(HomeAssistantError, match="could not be downloaded"):
        await install(hass)
    assert not device.upgrades


def release_zip(app: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("merged-binary.bin", flash_image(app))
    return out.getvalue()


async def test_a_published_release_is_cut_out_of_its_flash_image_and_installed(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    stand_in: StandIn,
    client: TestClient[Any, Any],
) -> None:
    app = build_image("2.6.0", size=150_000)
    stand_in.files[f"v2.6.0_{BOARD}.zip"] = release_zip(app)
    stand_in.files["v2.7.0_other-board.zip"] = release_zip(build_image("2.7.0"))
    stand_in.releases = [
        {  # a newer release without this board's file: not offered
            "tag_name": "v2.7.0",
            "name": "2.7.0",
            "draft": False,
            "prerelease": False,
            "body": "Other boards",
            "html_url": "https://github.com/78/xiaozhi-esp32/releases/tag/v2.7.0",
            "assets": [
                {
                    "name": "v2.7.0_other-board.zip",
                    "browser_download_url": stand_in.url("/download/v2.7.0_other-board.zip"),
                }
            ],
        },
        {"tag_name": "v2.8.0", "draft": False, "prerelease": True, "assets": []},
        {
            "tag_name": "v2.6.0",
            "name": "Xiaozhi 2.6.0",
            "draft": False,
            "prerelease": False,
            "body": "## What's new\n- notify playback",
            "html_url": "https://github.com/78/xiaozhi-esp32/releases/tag/v2.6.0",
            "assets": [
                {"name": f"v2.6.0_{BOARD}.zip", "browser_download_url": stand_in.url(f"/download/v2.6.0_{BOARD}.zip")},
                {"name": "v2.6.0_other-board.zip", "browser_download_url": "https://example.invalid/x.zip"},
                "nonsense",
            ],
        },
        "nonsense",
    ]
    await use_sources(
        hass,
        hub,
        client,
        firmware_releases=True,
        firmware_releases_url=stand_in.url("/repos/78/xiaozhi-esp32/releases"),
    )
    device = await make_mqtt()
    await online(hub)
    state = await offered(hass, "2.6.0")
    assert state.attributes["release_summary"] == "Xiaozhi 2.6.0"
    assert state.attributes["release_url"] == "https://github.com/78/xiaozhi-esp32/releases/tag/v2.6.0"
    entity = hass.data[UPDATE_COMPONENT].get_entity(ENTITY)
    assert entity is not None
    assert await entity.async_release_notes() == "## What's new\n- notify playback"
    reads = stand_in.release_reads

    await install(hass)

    assert device.upgrades[0]["result"] == "ok"
    assert device.upgrades[0]["size"] == len(app)  # the app image only, not the flash image
    assert device.options.firmware_version == "2.6.0"
    from custom_components.xiaozhi_local.firmware.files import cache_name

    cached = Path(hass.config.cache_path("xiaozhi_local", "firmware", cache_name(BOARD, "2.6.0")))
    assert cached.name.startswith(f"{BOARD}_2.6.0-")
    assert await hass.async_add_executor_job(cached.read_bytes) == app
    assert stand_in.release_reads == reads  # one listing serves every check for hours
    await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.6.0" and s.state == "off")


# -- two devices at once ------------------------------------------------------------------------


async def test_two_devices_install_at_once_from_one_shared_copy(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path
) -> None:
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=400_000))
    first = await make_mqtt(download_delay=0.002)
    second = await make_mqtt(mac=MAC2, client_id=CLIENT_ID2, download_delay=0.002)
    await online(hub)
    await online(hub, MAC2)
    await offered(hass, "2.5.0")
    await offered(hass, "2.5.0", "update.desk_firmware")
    one = hass.async_create_task(install(hass))
    two = hass.async_create_task(install(hass, entity_id="update.desk_firmware"))
    await asyncio.gather(one, two)
    assert hub.firmware.downloads.images_read == 1  # one copy of the image served both downloads
    assert first.options.firmware_version == second.options.firmware_version == "2.5.0"
    assert not hub.firmware.downloads._data  # released after the last download


async def test_an_image_larger_than_the_devices_app_partition_is_never_offered_or_sent(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The device reports its partition table at every OTA check: an image that cannot fit its next
    app slot is refused before anything is sent, with the reason; one that fits is offered."""
    put(firmware_dir, f"{BOARD}_2.6.0.bin", build_image("2.6.0", size=200_000))
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=90_000))
    device = await make_mqtt(app_partition=128 * 1024)
    await online(hub)
    facts = hub.devices[MAC].facts
    assert facts is not None
    assert facts.app_slot == 128 * 1024
    await offered(hass, "2.5.0")  # the newest that fits, not 2.6.0
    reason = hub.firmware.catalog.local.refused[f"{BOARD}_2.6.0.bin for {BOARD}"]
    assert "larger than the device's app partition (131072 bytes)" in reason
    assert f"'{BOARD}_2.6.0.bin' is not offered to '{BOARD}' devices: the image (" in caplog.text
    with pytest.raises(HomeAssistantError, match=r"No firmware source offers version 2\.6\.0"):
        await install(hass, "2.6.0")
    assert not device.upgrades  # nothing was sent
    await install(hass, "2.5.0")
    assert device.upgrades[-1]["result"] == "ok"


async def test_a_device_that_stops_reading_is_reported_as_a_stall_at_the_stall(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It stops reading after its first page, connected: the kernel's buffers still take what is
    sent, and acknowledge it. Not an image it rejected: a stall, said when it stalls."""
    monkeypatch.setattr(server, "STALL_TIMEOUT", 0.5)
    monkeypatch.setattr(install_run, "REFUSE_GRACE", 1.0)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=300_000))
    device = await make_mqtt(reboots=False)
    await online(hub)
    await offered(hass, "2.5.0")
    device.power_cut.set()  # set before: it reads one page, then nothing more (its socket stays)
    with pytest.raises(HomeAssistantError, match="was interrupted") as err:
        await install(hass)
    assert "stalled" in str(err.value)
    assert "rejected" not in str(err.value)
    state = hass.states.get(ENTITY)
    assert state is not None
    assert state.attributes["in_progress"] is False
    assert "stalled" in state.attributes["release_summary"]
    await device.drop()
    await hass.async_block_till_done(wait_background_tasks=True)


async def test_a_websocket_device_gets_waiting_firmware_at_the_end_of_a_normal_conversation(
    hass: HomeAssistant,
    firmware_dir: Path,
    ready: Voice,
    hub: XiaozhiHub,
    make_ws: Callable[[], Awaitable[SimulatedDevice]],
) -> None:
    """Installed while it was away; then it is woken and talked to in auto mode, and nobody says
    more: Home Assistant ends that conversation by restarting it, and its boot installs."""
    from .helpers import Clock

    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0"))
    device = await make_ws()
    await offered(hass, "2.5.0")
    task = hass.async_create_task(install(hass))
    await wait_entity(hass, ENTITY, lambda s: s.attributes["in_progress"] is True)
    await device.connect()  # the wake word
    marker = len(device.log)
    await device.say(speech_pcm())  # a question, answered; it listens again, and nobody speaks
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)
    clock = Clock(hass)
    try:
        await clock.advance(30)  # the silence timeout
        await device.wait_message(lambda m: m.get("type") == "system", after=marker)  # restarted, not closed
    finally:
        clock.restore()
    await task
    assert device.upgrades[-1]["result"] == "ok"
    state = await wait_entity(hass, ENTITY, lambda s: s.attributes["installed_version"] == "2.5.0")
    assert state.state == "off"


async def test_progress_is_shown_at_a_boards_speed(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory, firmware_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in the demo: a board reading at about 130 KB/s, and the entity's step of one second. The
    device's stack acknowledges little beyond what it has read (the simulator's small receive
    window), so what the entity shows between 0 and 100 is what the device has."""
    monkeypatch.setattr(updates, "PROGRESS_EVERY", 1.0)
    put(firmware_dir, f"{BOARD}_2.5.0.bin", build_image("2.5.0", size=300_000))
    device = await make_mqtt(download_delay=0.03)
    await online(hub)
    await offered(hass, "2.5.0")
    progress = Progress(hass)
    await install(hass)
    assert [p for p in progress.percentages if 0 < p < 100], progress.seen
    assert device.upgrades[-1]["result"] == "ok"
    progress.unsubscribe()
