"""A device's connection choice reaches it by itself: restarted onto the chosen transport when it can.

The devices are ``SimulatedDevice``s that speak both transports as the firmware does: each boot uses
the one its OTA answer picks (``mqtt`` wins, else ``websocket``), and they boot again by
themselves after a restart. Nobody touches a device in these tests: the only actions are the
user's (the Connection select, the hub option) and the device's own (talking, powering on).
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.hub import XiaozhiHub
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import CLIENT_ID, FAST, MAC, ota_url, served_hub, wait_for, wait_settled
from .helpers import wait_entity
from .internals import hello_of
from .voice import Voice

SENSOR = "sensor.kitchen_transport"
SELECT = "select.kitchen_connection"

type Factory = Callable[..., Awaitable[SimulatedDevice]]


@pytest.fixture
async def hub(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> XiaozhiHub:
    """The hub (MQTT on, its default); a silence of 0.3 s ends a conversation nobody speaks in."""
    return await served_hub(hass, setup_integration, client, silence_timeout=0.3)


@pytest.fixture
async def make_device(hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[Factory]:
    """Stock devices that boot through OTA and boot again by themselves after a restart."""
    devices: list[SimulatedDevice] = []

    async def factory(**kwargs: Any) -> SimulatedDevice:
        options = {"hello_timeout": 5, "reboots": True} | kwargs
        device = SimulatedDevice(SimulatorOptions(url="", mac=MAC, client_id=CLIENT_ID, **options), speaks_mqtt=True)
        devices.append(device)
        await device.boot_mqtt(ota_url(client), timing=FAST)
        return device

    yield factory
    for device in devices:
        await device.drop()


async def choose(hass: HomeAssistant, option: str) -> None:
    await hass.services.async_call("select", "select_option", {"entity_id": SELECT, "option": option}, blocking=True)


async def transport_state(hass: HomeAssistant, wanted: str) -> None:
    await wait_entity(hass, SENSOR, lambda s: s.state == wanted)


async def on_mqtt(hub: XiaozhiHub, device: SimulatedDevice) -> None:
    """Until the device is online over MQTT and settled."""
    await asyncio.wait_for(device.mqtt.online.wait(), 5)
    assert device.transport == "mqtt"
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None and d.link.transport_name == "mqtt")
    await wait_settled(xdev)


async def test_idle_devices_follow_the_choice_both_ways(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_device: Factory
) -> None:
    device = await make_device()
    await on_mqtt(hub, device)
    await transport_state(hass, "mqtt")

    # MQTT → WebSocket while idle: restarted at once; its OTA answer has no mqtt; it is on WebSocket.
    boots = device.boots
    await choose(hass, "websocket")
    await device.wait_boots(boots + 1)
    assert device.transport == "websocket"
    assert not device.is_connected  # per conversation: not connected while idle
    await transport_state(hass, "offline")

    # WebSocket → MQTT while it is idle (so unreachable): the change waits, and the page says so.
    await choose(hass, "mqtt")
    await transport_state(hass, "to_mqtt")
    assert device.transport == "websocket"
    # It connects for a conversation (its wake word); nobody speaks; Home Assistant ends the
    # conversation, and restarts it instead of closing: it boots onto MQTT by itself.
    boots = device.boots
    await device.connect()
    await transport_state(hass, "to_mqtt")  # during the conversation: not yet
    device.relisten = False
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"})
    await device.wait_boots(boots + 1)
    await on_mqtt(hub, device)
    assert device.rebooted
    await transport_state(hass, "mqtt")

    # MQTT → the hub's choice (MQTT): nothing to do.
    boots = device.boots
    await choose(hass, "hub")
    await transport_state(hass, "mqtt")
    assert device.boots == boots

    # The hub turns MQTT off: the device is restarted onto WebSocket; on again: back to MQTT when it
    # next talks.
    hass.config_entries.async_update_entry(hub.entry, options={**hub.entry.options, "mqtt": False})
    await hass.async_block_till_done()
    await device.wait_boots(boots + 1)
    assert device.transport == "websocket"
    hass.config_entries.async_update_entry(hub.entry, options={**hub.entry.options, "mqtt": True})
    await hass.async_block_till_done()
    await transport_state(hass, "to_mqtt")


async def test_a_device_in_a_conversation_is_restarted_once_it_is_over(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_device: Factory
) -> None:
    device = await make_device()
    await on_mqtt(hub, device)
    await device.connect()  # a conversation: the UDP channel is open
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None and hello_of(d.link) is not None)
    boots = device.boots
    await choose(hass, "websocket")
    await transport_state(hass, "to_websocket")
    assert not device.rebooted  # never in the middle of a conversation
    await device.mqtt.goodbye()  # the device ends it (button)
    await device.wait_boots(boots + 1)
    assert device.transport == "websocket"


async def test_a_device_that_is_off_follows_at_its_next_boot(
    hass: HomeAssistant, hub: XiaozhiHub, make_device: Factory, client: TestClient[Any, Any]
) -> None:
    device = await make_device()
    await on_mqtt(hub, device)
    await device.drop()  # switched off
    await wait_for(hub.devices[MAC], lambda d: d.link is None)
    await choose(hass, "websocket")
    await transport_state(hass, "to_websocket")
    await device.boot_mqtt(ota_url(client), timing=FAST)  # switched on: its OTA answer has no mqtt
    assert device.transport == "websocket"
    assert not device.rebooted
    await transport_state(hass, "offline")
    await choose(hass, "hub")  # the hub's choice is MQTT
    await transport_state(hass, "to_mqtt")
    await device.drop()
    await device.boot_mqtt(ota_url(client), timing=FAST)  # off and on again: on MQTT
    await on_mqtt(hub, device)
    await transport_state(hass, "mqtt")


async def test_a_client_that_picks_its_own_transport_is_never_restarted(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """py-xiaozhi in WebSocket mode reads only ``websocket`` from its OTA answer, whatever else it has."""
    device = SimulatedDevice(
        SimulatorOptions(url="", mac=MAC, client_id=CLIENT_ID, flavor="py-xiaozhi", hello_timeout=5)
    )
    try:
        answer = await device.check_ota(ota_url(client), FAST)
        assert "mqtt" in answer  # the hub's choice: MQTT
        device.use_websocket_settings()
        for _ in range(2):  # two conversations, each ended by Home Assistant
            await device.connect()
            await transport_state(hass, "websocket")
            await device.send_json({"session_id": "", "type": "listen", "state": "start", "mode": "auto"})
            await device.wait_closed()
            assert not device.rebooted
            assert not any(m.get("type") == "system" for m in device.log)
    finally:
        await device.drop()


async def test_py_xiaozhi_on_the_transport_it_was_told_is_not_restarted_either(
    hass: HomeAssistant, hub: XiaozhiHub, make_device: Factory
) -> None:
    """py-xiaozhi in MQTT mode is on MQTT by its own choice, not because the answer said so.

    Its OTA check has no partition table (it is no ESP32): the Connection select changing must
    not send it ``system reboot`` (its screen shows that as an error), nor promise a switch.
    """
    device = await make_device(flavor="py-xiaozhi")
    xdev = hub.devices[MAC]
    assert xdev.picks_transport
    for option in ("websocket", "mqtt", "websocket"):
        await device.connect()  # py-xiaozhi connects over MQTT when a conversation starts
        await wait_for(xdev, lambda d: d.conversation is not None)
        await choose(hass, option)
        await transport_state(hass, "mqtt")  # no "moves to WebSocket": it will not
        # Nobody speaks: the conversation ends (goodbye), which is when a stock device is restarted.
        marker = len(device.log)
        await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"})
        await device.wait_message(lambda m: m.get("type") == "goodbye", after=marker)
        await hass.async_block_till_done()
        assert not device.rebooted
        assert not any(m.get("type") == "system" for m in device.log)
    # Between conversations too: offline, never "moves to MQTT" or "to WebSocket".
    await device.drop()
    await wait_for(xdev, lambda d: d.link is None)
    for option in ("websocket", "hub"):
        await choose(hass, option)
        await transport_state(hass, "offline")


async def test_py_xiaozhi_between_conversations_is_away_not_off(
    hass: HomeAssistant, hub: XiaozhiHub, make_device: Factory
) -> None:
    """Told MQTT, py-xiaozhi still connects only per conversation: its values stay available."""
    device = await make_device(flavor="py-xiaozhi")
    xdev = hub.devices[MAC]
    await device.connect()
    await wait_for(xdev, lambda d: d.link is not None)
    await device.drop()
    await wait_for(xdev, lambda d: d.link is None)
    assert xdev.told_transport == "mqtt"
    assert not xdev.off
    states = [s for s in hass.states.async_all("sensor") if s.entity_id != SENSOR]
    assert all(s.state != "unavailable" for s in states), states


async def test_a_device_that_does_not_come_back_on_the_chosen_transport_is_restarted_once(
    hass: HomeAssistant, hub: XiaozhiHub, make_device: Factory, client: TestClient[Any, Any]
) -> None:
    """Its OTA check failed after the restart (it kept MQTT from flash): no restart loop."""
    device = await make_device()
    await on_mqtt(hub, device)
    device.options.reboots = False  # it reboots, but we boot it ourselves below
    await choose(hass, "websocket")
    async with asyncio.timeout(5):
        await device.mqtt.wait_offline()
    assert device.rebooted
    device.rebooted = False
    await device.mqtt.start()  # back on MQTT without asking OTA (the check failed, say)
    await wait_for(hub.devices[MAC], lambda d: d.link is not None)
    await wait_settled(hub.devices[MAC])
    assert not device.rebooted  # not restarted again before a new OTA answer
    await transport_state(hass, "mqtt")
