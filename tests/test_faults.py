"""Faults: devices vanishing mid-upload, audio floods, reloads with devices connected."""

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.const import EVENT_HOMEASSISTANT_STOP
from homeassistant.core import HomeAssistant
from homeassistant.helpers import entity_registry as er
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from websockets.exceptions import ConnectionClosed, InvalidStatus

from custom_components.xiaozhi_local.const import DOMAIN, VISION_PATH
from xiaozhi_sim.camera import BOUNDARY

from .conftest import MAC, MAC2, TOKEN, TOKEN2, DeviceFactory, wait_settled
from .internals import hub_of
from .test_vision import camera


async def test_device_vanishes_mid_upload(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Half a photo, then the TCP connection is reset: nothing kept, nothing logged as an error."""
    sim = await camera(hass, setup_integration, client)
    device = hub_of(setup_integration).devices[MAC]
    url = client.make_url(VISION_PATH)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = (
        f"POST {VISION_PATH} HTTP/1.1\r\nHost: {url.host}\r\nAuthorization: Bearer {sim.mcp.vision_token}\r\n"
        f"Device-Id: {MAC}\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    part = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="question"\r\n\r\nwhat is this?\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="camera.jpg"\r\n'
            "Content-Type: image/jpeg\r\n\r\n"
        ).encode()
        + b"\xff\xd8\xff\xe0"
        + bytes(3000)
    )
    writer.write(head.encode() + f"{len(part):x}\r\n".encode() + part + b"\r\n")
    await writer.drain()
    await reader.read(0)
    writer.transport.abort()  # gone mid-photo: no last chunk, no FIN handshake
    await hass.async_block_till_done()
    # The endpoint is free for the next upload, and nothing of the half photo was kept.
    resp = await client.post(VISION_PATH, data=b"", headers={"Authorization": "Bearer x", "Device-Id": MAC})
    assert resp.status == 401
    assert device.photo is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await sim.drop()


async def test_audio_flood_is_cut_off_without_starving_others(
    hass: HomeAssistant, make_device: DeviceFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A device that streams binary frames without end (far over 17 a second) is closed (1008)."""
    from custom_components.xiaozhi_local.transport import websocket as connection

    monkeypatch.setattr(connection, "FRAME_RATE", 0.0)  # frame counts decide, not this machine's speed
    monkeypatch.setattr(connection, "FRAME_BURST", 60.0)
    monkeypatch.setattr(connection, "FLOOD_LIMIT", 200)
    flooder = await make_device()
    other = await make_device(mac=MAC2, token=TOKEN2)
    xdev = hub_of(hass).devices[MAC]
    await wait_settled(xdev)
    with contextlib.suppress(ConnectionClosed):
        for _ in range(10_000):
            await flooder.send_raw(bytes(200))
    await flooder.wait_closed()
    assert "floods its connection" in caplog.text
    result: Any = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": hub_of(hass).devices[MAC2].device_id,
         "tool": "self.get_device_status"},
        blocking=True,
        return_response=True,
    )  # fmt: skip
    assert result["data"]["battery"]["level"] == 85
    assert not other.closed.is_set()


async def test_reload_with_devices_connected_and_reconnecting(
    hass: HomeAssistant,
    entity_registry: er.EntityRegistry,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
) -> None:
    """Reload (as a restart does) while devices are connected: sessions end, they come back whole."""
    registry = entity_registry
    one = await make_device(ir=True)
    two = await make_device(mac=MAC2, token=TOKEN2)
    await wait_settled(hub_of(setup_integration).devices[MAC])
    before = {e.entity_id: e.unique_id for e in er.async_entries_for_config_entry(registry, setup_integration.entry_id)}
    assert await hass.config_entries.async_reload(setup_integration.entry_id)
    await one.wait_closed()
    await two.wait_closed()
    # Before they reconnect: entities are back from the cache (not unknown), marked not connected.
    device = hub_of(setup_integration).devices[MAC]
    assert device.link is None
    assert "self.ir.send_named" in device.tools
    assert device.token == TOKEN
    state = hass.states.get("binary_sensor.kitchen_connected")
    assert state is not None
    assert state.state == "off"
    # They reconnect at once with the same tokens and get the same entities.
    again = await make_device(ir=True)
    await make_device(mac=MAC2, token=TOKEN2)
    await wait_settled(device)
    after = {e.entity_id: e.unique_id for e in er.async_entries_for_config_entry(registry, setup_integration.entry_id)}
    assert after == before
    state = hass.states.get("binary_sensor.kitchen_connected")
    assert state is not None
    assert state.state == "on"
    await hass.services.async_call(
        "number", "set_value", {"entity_id": "number.kitchen_volume", "value": 44}, blocking=True
    )
    assert again.state.volume == 44


async def test_home_assistant_stopping_says_goodbye(
    hass: HomeAssistant, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """HA stopping closes every device socket with 1001 at once (HA's HTTP shutdown would wait for
    them for seconds) and refuses new ones with 503, so the devices come back once HA has restarted."""
    first = await make_device()
    second = await make_device(mac=MAC2, token=TOKEN2)
    hub = hub_of(hass)
    await wait_settled(hub.devices[MAC])
    waiting = await make_device(connect=False, mac=MAC2, token=TOKEN2)
    await waiting.open()  # a socket still waiting for its hello is closed too
    await (await waiting.connection.ping())  # answered by its running connection (autoping is off)
    assert len(hub.links) == 3
    hass.bus.async_fire(EVENT_HOMEASSISTANT_STOP)
    for device in (first, second, waiting):
        async with asyncio.timeout(5):
            await device.connection.wait_closed()
        assert device.connection.close_code == 1001
        assert device.connection.close_reason == "Home Assistant is stopping"
    assert hub.links == set()
    with pytest.raises(InvalidStatus) as refused:
        await make_device()
    assert refused.value.response.status_code == 503
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
