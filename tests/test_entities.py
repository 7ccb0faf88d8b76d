"""Entities from device tools: how they behave (what they are: test_platforms.py's snapshots)."""

import asyncio
from typing import Any

from homeassistant.const import STATE_UNAVAILABLE, STATE_UNKNOWN
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed

from custom_components.xiaozhi_local.const import DOMAIN, EVENT_NOTIFICATION, PING_INTERVAL
from xiaozhi_sim import SimulatedDevice, ToolError

from .conftest import CLIENT_ID2, MAC, MAC2, TOKEN2, DeviceFactory, wait_for, wait_settled
from .helpers import EventWaiter, hub_device
from .internals import hub_of


def device_entities(hass: HomeAssistant, mac: str = MAC) -> list[er.RegistryEntry]:
    registry = er.async_get(hass)
    return sorted(
        (e for e in registry.entities.values() if e.unique_id.startswith(f"{mac}-")), key=lambda e: e.entity_id
    )


def entity_id(hass: HomeAssistant, unique_suffix: str, mac: str = MAC) -> str:
    found = er.async_get(hass).async_get_entity_id(
        unique_suffix.split(":", maxsplit=1)[0], DOMAIN, f"{mac}-{unique_suffix.split(':')[1]}"
    )
    assert found is not None, unique_suffix
    return found


def state_of(hass: HomeAssistant, unique_suffix: str) -> str:
    state = hass.states.get(entity_id(hass, unique_suffix))
    assert state is not None
    return state.state


async def connected(hass: HomeAssistant, make_device: DeviceFactory, **kwargs: Any) -> SimulatedDevice:
    device = await make_device(**kwargs)
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    return device


# -- settings -------------------------------------------------------------------------------


async def test_set_volume_online(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await connected(hass, make_device)
    assert state_of(hass, "number:volume") == "70.0"
    await hass.services.async_call(
        "number", "set_value", {"entity_id": entity_id(hass, "number:volume"), "value": 35}, blocking=True
    )
    assert ("self.audio_speaker.set_volume", {"volume": 35}) in device.mcp.calls
    assert device.state.volume == 35
    assert state_of(hass, "number:volume") == "35.0"


async def test_settings_made_offline_are_applied_on_connect(
    hass: HomeAssistant, make_device: DeviceFactory, hass_storage: dict[str, Any]
) -> None:
    device = await connected(hass, make_device)
    await device.drop()
    await wait_for(hub_device(hass), lambda d: d.link is None)
    assert state_of(hass, "binary_sensor:connected") == "off"
    # A device that connects per conversation is away by design: what it reported stays shown.
    assert state_of(hass, "sensor:battery") not in ("unavailable", "unknown")
    for value in (20, 25):  # the latest value wins
        await hass.services.async_call(
            "number", "set_value", {"entity_id": entity_id(hass, "number:volume"), "value": value}, blocking=True
        )
    await hass.services.async_call(
        "select", "select_option", {"entity_id": entity_id(hass, "select:theme"), "option": "dark"}, blocking=True
    )
    assert state_of(hass, "number:volume") == "25.0"  # the requested value is shown
    assert state_of(hass, "select:theme") == "dark"
    # ... and goes to disk at once (no time passes here): a crash now does not lose what is shown.
    for _ in range(3):  # the store's write is scheduled, not waited for
        await asyncio.sleep(0)
        await hass.async_block_till_done(wait_background_tasks=True)
    stored = hass_storage[f"{DOMAIN}.{hub_device(hass).entry_id}"]["data"][MAC]["pending"]
    assert stored["volume"]["value"] == 25
    assert stored["theme"]["value"] == "dark"
    for key in ("number:volume", "select:theme", "media_player:speaker"):  # and that it waits
        assert hass.states.get(entity_id(hass, key)).attributes.get("waiting_for_device") is True  # type: ignore[union-attr]
    assert device.mcp.calls == [c for c in device.mcp.calls if c[0] != "self.audio_speaker.set_volume"]
    # Reconnect (a new conversation): the settings reach the device.
    again = await connected(hass, make_device)
    assert [c for c in again.mcp.calls if c[0].startswith("self.audio") or c[0].startswith("self.screen")] == [
        ("self.audio_speaker.set_volume", {"volume": 25}),
        ("self.screen.set_theme", {"theme": "dark"}),
    ]
    assert hub_device(hass).values.pending == {}
    assert state_of(hass, "number:volume") == "25.0"
    assert "waiting_for_device" not in hass.states.get(entity_id(hass, "number:volume")).attributes  # type: ignore[union-attr]
    assert state_of(hass, "binary_sensor:connected") == "on"


async def test_device_refuses_a_setting(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device(connect=False)
    theme_tool = device.mcp.find("self.screen.set_theme")
    assert theme_tool is not None

    async def refuse(_args: dict[str, Any]) -> bool:
        return False  # the firmware's answer to a theme it does not know

    theme_tool.callback = refuse
    await device.connect()
    await wait_settled(hub_device(hass))
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            "select", "select_option", {"entity_id": entity_id(hass, "select:theme"), "option": "dark"}, blocking=True
        )
    assert err.value.translation_key == "setting_refused"
    assert state_of(hass, "select:theme") == "light"  # back to the device's real value
    volume_tool = device.mcp.find("self.audio_speaker.set_volume")
    assert volume_tool is not None

    async def broken(_args: dict[str, Any]) -> bool:
        raise ToolError("Speaker is busy")

    volume_tool.callback = broken
    with pytest.raises(HomeAssistantError, match="Speaker is busy") as err:
        await hass.services.async_call(
            "number", "set_value", {"entity_id": entity_id(hass, "number:volume"), "value": 10}, blocking=True
        )
    assert err.value.translation_key == "device_error"
    assert state_of(hass, "number:volume") == "70.0"


async def test_malformed_status_means_unknown(
    hass: HomeAssistant, entity_registry: er.EntityRegistry, make_device: DeviceFactory
) -> None:
    device = await make_device(connect=False)
    weird = {
        "audio_speaker": {"volume": "loud"},
        "screen": "off",
        "battery": {"level": 50, "charging": "yes"},
        "network": {"type": "carrier-pigeon", "signal": "very weak", "ssid": 5},
        "chip": {"temperature": True},
    }
    device.state.status = lambda: weird  # type: ignore[method-assign]
    await device.connect()
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    assert state_of(hass, "number:volume") == STATE_UNKNOWN
    assert state_of(hass, "select:theme") == STATE_UNKNOWN
    assert state_of(hass, "sensor:battery") == "50"
    assert state_of(hass, "sensor:network_type") == STATE_UNKNOWN
    assert state_of(hass, "sensor:signal") == "very_weak"
    assert entity_registry.async_get_entity_id("binary_sensor", DOMAIN, f"{MAC}-charging") is None
    assert entity_registry.async_get_entity_id("sensor", DOMAIN, f"{MAC}-chip_temperature") is None
    # A later status that is not JSON at all changes nothing and breaks nothing.
    device.state.status = lambda: "not json"  # type: ignore[method-assign,assignment,return-value]
    await hub_device(hass).values.async_read()
    assert state_of(hass, "sensor:battery") == "50"


async def test_status_is_read_on_an_interval_while_connected(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await connected(hass, make_device)
    device.state.battery_level = 42  # changed on the device (not through HA)
    xdev = hub_device(hass)
    for _ in range(2):
        async_fire_time_changed(hass, dt_util.utcnow() + PING_INTERVAL, fire_all=True)
    await wait_for(xdev, lambda d: d.queries["self.get_device_status"]["battery"]["level"] == 42)
    await hass.async_block_till_done()
    assert state_of(hass, "sensor:battery") == "42"


async def test_status_reads_are_spread_over_the_interval(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    """Many devices are not all asked in the same moment: one after another, within the interval."""
    from custom_components.xiaozhi_local.const import REFRESH_SPREAD

    first = await connected(hass, make_device)
    second = await make_device(mac=MAC2, token=TOKEN2, client_id=CLIENT_ID2)
    await wait_settled(hub_device(hass, MAC2))
    first.state.battery_level = second.state.battery_level = 42
    level = lambda mac: hub_device(hass, mac).queries["self.get_device_status"]["battery"]["level"]  # noqa: E731
    now = dt_util.utcnow()
    for sweep in (1, 2):  # the second sweep reads the status
        async_fire_time_changed(hass, now + PING_INTERVAL * sweep)
    await wait_for(hub_device(hass, MAC), lambda _d: level(MAC) == 42)
    await hass.async_block_till_done()
    assert level(MAC2) != 42  # its turn comes later
    async_fire_time_changed(hass, now + PING_INTERVAL * 2 + PING_INTERVAL * REFRESH_SPREAD / 2)
    await wait_for(hub_device(hass, MAC2), lambda _d: level(MAC2) == 42)


# -- light, buttons, IR -----------------------------------------------------------------------


async def test_lamp(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await connected(hass, make_device, lamp=True)
    light = entity_id(hass, "light:lamp")
    assert hass.states.get(light).state == "off"  # type: ignore[union-attr]
    await hass.services.async_call("light", "turn_on", {"entity_id": light}, blocking=True)
    assert device.state.lamp_on
    assert hass.states.get(light).state == "on"  # type: ignore[union-attr]
    await hass.services.async_call("light", "turn_off", {"entity_id": light}, blocking=True)
    assert hass.states.get(light).state == "off"  # type: ignore[union-attr]


async def test_buttons(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await connected(hass, make_device, ir=True)
    await hass.services.async_call(
        "button", "press", {"entity_id": entity_id(hass, "button:ir-tv_power")}, blocking=True
    )
    assert ("self.ir.send_named", {"name": "tv_power"}) in device.mcp.calls
    await hass.services.async_call("button", "press", {"entity_id": entity_id(hass, "button:reboot")}, blocking=True)
    await device.wait_closed()
    assert device.rebooted
    # The firmware's own command (every version obeys it), not the self.reboot tool of newer ones.
    assert not any(name == "self.reboot" for name, _args in device.mcp.calls)
    await wait_for(hub_device(hass), lambda d: d.link is None)
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            "button", "press", {"entity_id": entity_id(hass, "button:ir-tv_power")}, blocking=True
        )
    assert err.value.translation_key == "device_offline"


async def test_failed_button_press(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    await connected(hass, make_device, ir=True)
    hub_device(hass).queries["self.ir.list_codes"] = {"codes": ["tv_power", "gone"]}
    hub_device(hass).async_changed()
    await hass.async_block_till_done()
    with pytest.raises(HomeAssistantError, match="未找到红外编码: gone"):
        await hass.services.async_call(
            "button", "press", {"entity_id": entity_id(hass, "button:ir-gone")}, blocking=True
        )


async def test_ir_list_changes_between_connections(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await connected(hass, make_device, ir=True)
    assert {e.unique_id for e in device_entities(hass) if "-ir-" in e.unique_id} == {
        f"{MAC}-ir-ac_off",
        f"{MAC}-ir-tv_power",
    }
    await device.drop()
    again = await make_device(connect=False, ir=True)
    again.state.ir_codes = {"tv_power": "20DF10EF", "fan": "A1B2"}
    await again.connect()
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    assert {e.unique_id for e in device_entities(hass) if "-ir-" in e.unique_id} == {
        f"{MAC}-ir-fan",
        f"{MAC}-ir-tv_power",
    }


# -- dynamic entities, restore, removal ---------------------------------------------------------


async def test_new_tools_appear_and_missing_ones_go_unavailable(
    hass: HomeAssistant, entity_registry: er.EntityRegistry, make_device: DeviceFactory
) -> None:
    device = await connected(hass, make_device)
    assert entity_registry.async_get_entity_id("light", DOMAIN, f"{MAC}-lamp") is None
    # The device adds tools and says so: a light appears, without a reload.
    from xiaozhi_sim.tools import add_lamp_tools

    add_lamp_tools(device.mcp, device.state)
    await device.send_notification("notifications/tools/list_changed")
    await wait_for(hub_device(hass), lambda d: "self.lamp.get_state" in d.queries)  # listed again, then read
    await hass.async_block_till_done()
    assert state_of(hass, "light:lamp") == "off"
    # Next time it lacks the brightness tool: that entity is unavailable, not deleted.
    await device.drop()
    again = await make_device(connect=False)
    again.mcp.tools = [t for t in again.mcp.tools if t.name != "self.screen.set_brightness"]
    await again.connect()
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    assert state_of(hass, "number:screen_brightness") == STATE_UNAVAILABLE
    assert state_of(hass, "light:lamp") == STATE_UNAVAILABLE


async def test_state_is_restored_after_restart(
    hass: HomeAssistant, setup_integration: MockConfigEntry, make_device: DeviceFactory
) -> None:
    device = await connected(hass, make_device, lamp=True)
    await device.drop()
    await wait_for(hub_device(hass), lambda d: d.link is None)
    await hass.services.async_call(
        "number", "set_value", {"entity_id": entity_id(hass, "number:volume"), "value": 15}, blocking=True
    )
    assert await hass.config_entries.async_reload(setup_integration.entry_id)
    await hass.async_block_till_done()
    # The device is away; its entities show what it last said, and the setting still waits.
    assert state_of(hass, "sensor:battery") == "85"
    assert state_of(hass, "select:theme") == "light"
    assert state_of(hass, "light:lamp") == "off"
    assert state_of(hass, "number:volume") == "15.0"
    assert state_of(hass, "binary_sensor:connected") == "off"
    again = await connected(hass, make_device, lamp=True)
    assert ("self.audio_speaker.set_volume", {"volume": 15}) in again.mcp.calls


async def test_removed_device_loses_its_entities(
    hass: HomeAssistant, setup_integration: MockConfigEntry, make_device: DeviceFactory
) -> None:
    await connected(hass, make_device)
    assert device_entities(hass)
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    hass.config_entries.async_remove_subentry(setup_integration, sub.subentry_id)
    await hass.async_block_till_done()
    assert device_entities(hass) == []


# -- notifications ------------------------------------------------------------------------------


async def test_notification_fires_event_entity_and_bus_event(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await connected(hass, make_device)
    event = entity_id(hass, "event:notification")
    assert hass.states.get(event).state == STATE_UNKNOWN  # type: ignore[union-attr]
    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    await device.send_notification("notifications/state_changed", {"state": "speaking"})
    await device.send_notification("custom/thing", {"x": 1})
    await waiter.wait(2)
    await hass.async_block_till_done()
    state = hass.states.get(event)
    assert state is not None
    assert state.attributes["event_type"] == "other"
    assert state.attributes["method"] == "custom/thing"
    assert state.attributes["params"] == {"x": 1}
    assert waiter.events[0].data["method"] == "notifications/state_changed"


async def test_entities_follow_a_device_added_later(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: Any
) -> None:
    from homeassistant.config_entries import ConfigSubentry
    from homeassistant.const import CONF_MAC, CONF_TOKEN

    from custom_components.xiaozhi_local.const import SUBENTRY_DEVICE

    from .conftest import ws_url

    mac = "aa:bb:cc:00:11:22"
    hass.config_entries.async_add_subentry(
        setup_integration,
        ConfigSubentry(
            data={CONF_MAC: mac, CONF_TOKEN: "t" * 43},  # type: ignore[arg-type]
            subentry_type=SUBENTRY_DEVICE,
            title="Later",
            unique_id=mac,
        ),
    )
    await hass.async_block_till_done()
    assert {e.unique_id for e in device_entities(hass, mac)} == {
        f"{mac}-{key}"
        for key in (
            "connected",
            "notification",
            "assist_satellite",
            "pipeline",
            "vad_sensitivity",
            "reboot",
            "transport",
            "transport_state",
            "response_time",
            "speaker",
            "reply_speaker",
            "duck_room",
        )
    }
    from xiaozhi_sim import SimulatorOptions

    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token="t" * 43, mac=mac))
    await device.connect()
    await wait_settled(hub_of(setup_integration).devices[mac])
    await hass.async_block_till_done()
    assert any(e.unique_id == f"{mac}-volume" for e in device_entities(hass, mac))
    await device.drop()
    await asyncio.sleep(0)


async def test_generic_buttons_are_disabled_by_default(
    hass: HomeAssistant,
    entity_registry: er.EntityRegistry,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
) -> None:
    from xiaozhi_sim import Tool

    device = await make_device(connect=False)
    pressed: list[str] = []

    def tool(name: str) -> Tool:
        async def run(_args: dict[str, Any]) -> bool:
            pressed.append(name)
            return True

        return Tool(name, f"{name} (board tool)", [], run)

    device.mcp.add_tool(tool("self.dog.sit"))
    device.mcp.add_tool(tool("self.system.reconfigure_wifi"))
    device.mcp.add_tool(tool("self.dog.get_pose"))  # reads only: no button
    await device.connect()
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    registry = entity_registry
    sit = registry.async_get_entity_id("button", DOMAIN, f"{MAC}-tool-self.dog.sit")
    wifi = registry.async_get_entity_id("button", DOMAIN, f"{MAC}-reconfigure_wifi")
    assert sit is not None
    assert wifi is not None
    assert registry.async_get_entity_id("button", DOMAIN, f"{MAC}-tool-self.dog.get_pose") is None
    assert registry.async_get_entity_id("button", DOMAIN, f"{MAC}-tool-self.upgrade_firmware") is None
    for entity in (sit, wifi):
        entry = registry.async_get(entity)
        assert entry is not None
        assert entry.disabled_by is er.RegistryEntryDisabler.INTEGRATION
        registry.async_update_entity(entity, disabled_by=None)
    assert await hass.config_entries.async_reload(setup_integration.entry_id)
    await hass.async_block_till_done()
    await device.drop()
    again = await make_device(connect=False)
    again.mcp.add_tool(tool("self.dog.sit"))
    again.mcp.add_tool(tool("self.system.reconfigure_wifi"))
    await again.connect()
    await wait_settled(hub_device(hass))
    state = hass.states.get(sit)
    assert state is not None
    assert state.attributes["friendly_name"] == "Kitchen Tool self.dog.sit"
    await hass.services.async_call("button", "press", {"entity_id": sit}, blocking=True)
    await hass.services.async_call("button", "press", {"entity_id": wifi}, blocking=True)
    assert pressed == ["self.dog.sit", "self.system.reconfigure_wifi"]


async def test_refused_offline_setting_and_failing_status(
    hass: HomeAssistant, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = await connected(hass, make_device)
    await device.drop()
    await wait_for(hub_device(hass), lambda d: d.link is None)
    await hass.services.async_call(
        "number", "set_value", {"entity_id": entity_id(hass, "number:volume"), "value": 5}, blocking=True
    )
    again = await make_device(connect=False)
    volume = again.mcp.find("self.audio_speaker.set_volume")
    status = again.mcp.find("self.get_device_status")
    assert volume is not None
    assert status is not None

    async def broken(_args: dict[str, Any]) -> bool:
        raise ToolError("Speaker is busy")

    volume.callback = broken
    status.callback = broken
    await again.connect()
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    assert "refused the setting volume made while it was away" in caplog.text
    assert "self.get_device_status failed" in caplog.text
    assert hub_device(hass).values.pending == {}  # tried once, not forever
    assert state_of(hass, "number:volume") == "70.0"  # the last value the device reported
