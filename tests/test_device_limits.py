"""What one paired device can do to Home Assistant: bounded, whatever it sends (issue: trust).

Each test is one row of the table "What one device can do to Home Assistant", through a real
WebSocket, with the firmware simulator or raw frames where the simulator would refuse.
"""

import asyncio
import base64
from datetime import timedelta
import logging
import os
import socket
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed

from custom_components.xiaozhi_local.const import (
    DOMAIN,
    EVENT_NOTIFICATION,
    MAX_REMOVED_RECORDS,
    MAX_TOOL_BUTTONS,
    NOTIFICATION_BURST,
    WS_PATH,
)
from custom_components.xiaozhi_local.transport import websocket as websocket_module
from xiaozhi_sim import Tool

from .conftest import MAC, MAC2, TOKEN, DeviceFactory, wait_for, wait_settled
from .helpers import EventWaiter
from .internals import hub_of
from .test_entities import entity_id


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


type Caplog = pytest.LogCaptureFixture


async def _true(_args: dict[str, Any]) -> bool:
    return True


def registry_entries(hass: HomeAssistant, mac: str = MAC) -> list[er.RegistryEntry]:
    return [e for e in er.async_get(hass).entities.values() if e.unique_id.startswith(f"{mac}-")]


def stored(hass_storage: dict[str, Any], entry: MockConfigEntry) -> dict[str, Any]:
    data: dict[str, Any] = hass_storage[f"{DOMAIN}.{entry.entry_id}"]["data"]
    return data


async def test_a_value_beyond_64_bits_never_stops_saving(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
    hass_storage: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A status of 2**64 is bounded at the edge; the other device's offline setting still reaches disk."""
    hub = hub_of(setup_integration)
    device = await make_device(connect=False)
    device.state.volume = 2**64
    await device.connect()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    assert xdev.queries["self.get_device_status"]["audio_speaker"]["volume"] == float(2**64)
    await hub.devices[MAC2].values.async_set("volume", "self.audio_speaker.set_volume", {"volume": 30}, 30)
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=11))
    await hass.async_block_till_done()
    data = stored(hass_storage, setup_integration)
    assert data[MAC2]["pending"]["volume"]["value"] == 30
    assert data[MAC]["queries"]["self.get_device_status"]["audio_speaker"]["volume"] == float(2**64)
    assert errors_logged(caplog) == []


async def test_a_huge_number_in_a_hello_is_refused_cleanly(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ws = await client.ws_connect(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
    digits = "9" * 5000
    await ws.send_str(
        f'{{"type":"hello","version":"{digits}","audio_params":{{"sample_rate":{digits},"frame_duration":1e999}}}}'
    )
    hello = await ws.receive_json()
    assert hello["type"] == "hello"
    await ws.send_str(
        f'{{"type":"mcp","payload":{{"jsonrpc":"2.0","method":"notifications/x","params":{{"n":{digits}}}}}}}'
    )
    await ws.close()
    assert errors_logged(caplog) == []
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


async def test_new_tool_names_on_every_connection_leave_the_registry_bounded(
    hass: HomeAssistant,
    entity_registry: er.EntityRegistry,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reconnects, each with a hundred tools never seen before: the registry does not grow with them."""
    caplog.set_level(logging.INFO)
    xdev = hub_of(setup_integration).devices[MAC]
    device = await make_device(connect=False)
    common = list(device.mcp.tools)
    for round_ in range(5):
        device.mcp.tools = common + [Tool(f"x.r{round_}.t{i:03d}", "a tool", [], _true) for i in range(100)]
        await device.connect()
        await wait_for(xdev, lambda d, r=round_: f"x.r{r}.t000" in d.tools)  # type: ignore[misc]
        await wait_settled(xdev)
        await device.drop()
        await wait_for(xdev, lambda d: d.link is None)
    tool_buttons = [e for e in registry_entries(hass) if e.unique_id.startswith(f"{MAC}-tool-x.")]
    assert len(tool_buttons) == MAX_TOOL_BUTTONS
    assert all(e.unique_id.startswith(f"{MAC}-tool-x.r4.") for e in tool_buttons)  # the last list's, no others
    assert len(registry_entries(hass)) < 30 + MAX_TOOL_BUTTONS
    assert "no longer has the tools x.r0.t000" in caplog.text  # the user can follow what went
    # What the registry keeps of removed buttons is bounded too: the newest records, no others.
    removed = [r for r in entity_registry.deleted_entities.values() if r.unique_id.startswith(f"{MAC}-tool-x.")]
    assert len(removed) == MAX_REMOVED_RECORDS < 4 * MAX_TOOL_BUTTONS  # four lists were replaced
    assert {r.unique_id.split(".")[1] for r in removed} == {"r2", "r3"}


async def test_notifications_are_bounded_in_rate_and_size(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    device = await make_device()
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_settled(xdev)
    events = EventWaiter(hass, EVENT_NOTIFICATION)
    for _ in range(100):
        await device.send_notification("notifications/message", {"blob": "x" * 30_000})
    for i in range(200):
        await device.send_notification("notifications/message", {"i": i})
    # Every frame was read once a ping is answered.
    await (await device.connection.ping())
    await hass.async_block_till_done()
    assert NOTIFICATION_BURST <= len(events.events) <= NOTIFICATION_BURST + 2
    assert all("blob" not in e.data["params"] for e in events.events)
    assert xdev.notifications.dropped == 300 - len(events.events)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("params of" in w for w in warnings) == 1  # logged once, then counted
    assert sum("notifications a second; dropping" in w for w in warnings) == 1


async def test_tool_and_code_names_with_control_characters_never_reach_the_registry(
    hass: HomeAssistant, setup_integration: MockConfigEntry, make_device: DeviceFactory
) -> None:
    device = await make_device(connect=False, ir=True)
    bad = ("nul\x00name", "esc\x1b[31mred", "new\nline", "rtl\u202eexe.txt", "zero\u200bwidth", " padded")
    for name in (*bad, "fine.tool"):
        device.mcp.add_tool(Tool(name, "a tool", [], _true))
    device.state.ir_codes = {"tv\x00power": "20DF10EF", "ac\u202eoff": "1", "fan": "2"}
    await device.connect()
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_settled(xdev)
    assert "fine.tool" in xdev.tools
    assert not set(bad) & set(xdev.tools)
    ids = [e.unique_id for e in registry_entries(hass)] + [e.entity_id for e in registry_entries(hass)]
    assert any(uid.endswith("-ir-fan") for uid in ids)
    assert all(ch.isprintable() for uid in ids for ch in uid)
    assert sum(xdev.log.counts[k] for k in ("bad_tool",)) >= len(bad)


def _masked(payload: bytes) -> bytes:
    """One client→server text frame (clients mask theirs)."""
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big"))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_a_device_that_stops_reading_is_dropped_within_a_bounded_time(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replies pile up unread; closing it still completes, and calls waiting on it end."""
    monkeypatch.setattr(websocket_module, "CLOSE_TIMEOUT", 0.3)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    assert client.server.port is not None
    await loop.sock_connect(sock, ("127.0.0.1", client.server.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET {WS_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Device-Id: {MAC}\r\n\r\n".encode()
    )
    assert b" 101 " in await reader.readuntil(b"\r\n\r\n")
    writer.write(_masked(b'{"type":"hello","transport":"websocket"}'))  # no MCP: nothing asked at connect
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None)
    # From now on it reads nothing: calls with large arguments fill every buffer on the way.
    calls = [
        hass.async_create_task(
            hass.services.async_call(
                DOMAIN,
                "call_tool",
                {"device_id": xdev.device_id, "tool": "self.x", "arguments": {"blob": "x" * 60_000}, "timeout": 60},
                blocking=True,
                return_response=True,
            )
        )
        for _ in range(120)
    ]
    await asyncio.sleep(0)
    connection = xdev.link
    assert connection is not None
    await asyncio.wait_for(connection.async_close("no answer to pings"), 5)
    await wait_for(xdev, lambda d: d.link is None)
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert all(isinstance(r, HomeAssistantError) for r in results)
    await asyncio.wait_for(hub_of(setup_integration).async_wait_no_connections(), 5)
    writer.close()


async def test_a_setting_made_while_the_device_is_away_reaches_disk_within_a_second(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
    hass_storage: dict[str, Any],
) -> None:
    hub = hub_of(setup_integration)
    device = await make_device()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.drop()
    await wait_for(xdev, lambda d: d.link is None)
    await hass.services.async_call(
        "number", "set_value", {"entity_id": entity_id(hass, "number:volume"), "value": 35}, blocking=True
    )
    hub.storage.async_schedule_save()  # does not push the user's save back to ten seconds
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=1.5))
    await hass.async_block_till_done()
    assert stored(hass_storage, setup_integration)[MAC]["pending"]["volume"]["value"] == 35
