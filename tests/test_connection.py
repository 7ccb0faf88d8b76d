"""The device endpoint over real WebSockets into the test HA."""

import asyncio
import contextlib
import json
import logging
from types import MappingProxyType
from typing import Any

from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient
from homeassistant.config_entries import ConfigEntryState, ConfigSubentry
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed
from websockets.exceptions import ConnectionClosed

from custom_components.xiaozhi_local.const import DOMAIN, EVENT_NOTIFICATION, PING_INTERVAL, WS_PATH
from custom_components.xiaozhi_local.protocol import session as proto_session
from xiaozhi_sim import DeviceCrashed, HelloTimeout, SimulatedDevice, SimulatorOptions

from .conftest import MAC, MAC2, TOKEN, TOKEN2, DeviceFactory, device_subentry, wait_for, ws_url
from .helpers import EventWaiter, hub_device
from .internals import hub_of


def headers(mac: str = MAC, token: str = TOKEN, version: str = "1") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Device-Id": mac, "Client-Id": "c1", "Protocol-Version": version}


async def test_firmware_hello_and_discovery(
    hass: HomeAssistant,
    device_registry: dr.DeviceRegistry,
    make_device: DeviceFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    device = await make_device(extra_tools=60, ir=True)
    hello = device.server_hello
    assert hello is not None
    assert hello["transport"] == "websocket"
    assert hello["session_id"] == device.session_id
    assert hello["audio_params"] == {"format": "opus", "sample_rate": 24000, "channels": 1, "frame_duration": 60}
    xdev = hub_device(hass)
    await xdev.async_wait_ready(5)
    # initialize first, then tools/list pages (≥ 3) with withUserTools, every id a number.
    methods = [p["method"] for p in device.mcp_requests]
    assert methods[0] == "initialize"
    assert methods.count("tools/list") >= 3
    assert all(isinstance(p["id"], int) for p in device.mcp_requests)
    assert [t.name for t in xdev.tools.values()] == [t.name for t in device.mcp.tools]
    assert xdev.tools["self.reboot"].user_only
    assert xdev.tools["self.upgrade_firmware"].user_only
    assert not xdev.tools["self.get_device_status"].user_only
    entry = device_registry.async_get(xdev.device_id)
    assert isinstance(entry, dr.DeviceEntry)
    assert (entry.model, entry.sw_version, entry.manufacturer) == ("bread-compact-wifi", "2.4.2", "Xiaozhi")
    assert entry.name == "Kitchen"
    assert (dr.CONNECTION_NETWORK_MAC, MAC) in entry.connections
    # The device's Bearer token is not an HA token: it must not count as a failed HA login (ip-ban).
    assert not [r for r in caplog.records if r.name == "homeassistant.components.http.ban"]


async def test_tools_are_listed_again_on_every_connection(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    first = await make_device()
    xdev = hub_device(hass)
    await xdev.async_wait_ready(5)
    assert "self.ir.send_named" not in xdev.tools
    await first.drop()
    await wait_for(xdev, lambda d: d.link is None)
    second = await make_device(ir=True)
    await wait_for(xdev, lambda d: "self.ir.send_named" in d.tools)
    assert [p["method"] for p in second.mcp_requests][:2] == ["initialize", "tools/list"]


async def test_minimal_hello(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    async with client.ws_connect(WS_PATH, headers=headers()) as ws:
        await ws.send_str('{"type":"hello","features":{"mcp":false}}')
        reply = json.loads((await ws.receive()).data)
        assert reply["type"] == "hello"
        assert reply["transport"] == "websocket"
        xdev = hub_device(hass)
        conn = await xdev.async_wait_ready(5)
        assert conn.client.client_id == "c1"
        assert xdev.tools == {}


async def test_browser_client_query_parameters(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    url = f"{WS_PATH}?device-id={MAC.upper()}&client_id=web&authorization=Bearer%20{TOKEN}&Protocol-Version=3"
    async with client.ws_connect(url) as ws:
        await ws.send_str('{"type":"hello"}')
        assert json.loads((await ws.receive()).data)["transport"] == "websocket"
        conn = await hub_device(hass).async_wait_ready(5)
        assert (conn.client.client_id, conn.client.protocol_version) == ("web", 3)


@pytest.mark.parametrize(
    "hdrs",
    [
        pytest.param(headers(mac="cc:ba:97:00:00:00"), id="unknown device"),
        pytest.param(headers(token="wrong"), id="wrong token"),
        pytest.param(headers(token=TOKEN2), id="another device's token"),
        pytest.param({"Device-Id": MAC}, id="no token"),
        pytest.param({"Authorization": f"Bearer {TOKEN}"}, id="no device id"),
        pytest.param(headers(mac="not-a-mac"), id="bad device id"),
    ],
)
async def test_auth_refused(
    hass: HomeAssistant, client: TestClient[Any, Any], hdrs: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "custom_components.xiaozhi_local")
    resp = await client.get(
        WS_PATH,
        headers={
            **hdrs,
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert resp.status == 401
    assert "refused device" in caplog.text.lower() or "refused a device request" in caplog.text.lower()
    assert hub_device(hass).link is None


async def test_refused_guesses_leave_the_warning_to_home_assistant(
    client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Home Assistant warns of each failed login itself: ours says it once an hour, counts the rest."""
    from custom_components.xiaozhi_local.transport.endpoint import GUESSES

    before = GUESSES.counts["guess"]
    for index in range(20):
        resp = await client.get(WS_PATH, headers=headers(mac=f"cc:ba:97:00:01:{index:02x}", token="guess"))
        assert resp.status == 401
    assert GUESSES.counts["guess"] == before + 20
    ours = [r for r in caplog.records if r.name.startswith("custom_components.xiaozhi_local")]
    assert len([r for r in ours if r.levelno >= logging.WARNING]) <= 1


async def test_auth_failures_go_through_ip_ban(
    hass: HomeAssistant, client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # HA's ban middleware handles the raised HTTPUnauthorized (process_wrong_login): it logs the
    # attempt and counts it toward a ban where login_attempts_threshold is set.
    await client.get(WS_PATH, headers=headers(token="wrong"))
    records = [r for r in caplog.records if r.name == "homeassistant.components.http.ban"]
    assert len(records) == 1
    assert "invalid authentication" in records[0].getMessage()
    assert WS_PATH in records[0].getMessage()


async def test_simulator_refused_with_wrong_token(make_device: DeviceFactory) -> None:
    with pytest.raises(Exception, match="401"):
        await make_device(token="wrong")


async def test_no_hello_closes(
    hass: HomeAssistant, client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(proto_session, "HELLO_TIMEOUT", 0.05)
    async with client.ws_connect(WS_PATH, headers=headers()) as ws:
        msg = await ws.receive()
        assert msg.type is WSMsgType.CLOSE
        assert msg.data == 4000
    assert "sent no hello" in caplog.text
    assert hub_device(hass).link is None


async def test_simulator_dies_on_hello_without_transport(
    hass: HomeAssistant, client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The simulator must catch what would crash real firmware.
    from custom_components.xiaozhi_local.protocol import messages

    real = messages.server_hello

    def broken(session_id: str, sample_rate: int = 24000) -> dict[str, Any]:
        hello = real(session_id, sample_rate)
        del hello["transport"]
        return hello

    monkeypatch.setattr(proto_session, "server_hello", broken)
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, hello_timeout=5))
    with pytest.raises(DeviceCrashed):
        await device.connect()
    monkeypatch.setattr(proto_session, "server_hello", lambda s, r=24000: {**real(s, r), "transport": "udp"})
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, hello_timeout=0.2))
    with pytest.raises(HelloTimeout):
        await device.connect()
    await wait_for(hub_device(hass), lambda d: d.link is None)


async def test_notification_becomes_event(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    device = await make_device()
    await device.send_notification("notifications/state_changed", {"state": "listening", "old": "idle"})
    await device.send_notification("notifications/ping")
    events = await waiter.wait(2)
    xdev = hub_device(hass)
    assert events[0].data == {
        "device_id": xdev.device_id,
        "mac": MAC,
        "method": "notifications/state_changed",
        "params": {"state": "listening", "old": "idle"},
    }
    assert events[1].data["params"] is None


async def test_garbage_frames_survive(
    hass: HomeAssistant, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = await make_device()
    xdev = hub_device(hass)
    await xdev.async_wait_ready(5)
    caplog.clear()
    caplog.set_level(logging.DEBUG, "custom_components.xiaozhi_local")
    garbage: list[str | bytes] = [
        "not json",
        "not json either",
        "[1, 2, 3]",
        '{"no": "type"}',
        '{"type": 7}',
        '{"type": "mcp", "payload": "x"}',
        '{"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 999, "result": {}}}',
        '{"type": "mcp", "payload": {"jsonrpc": "2.0"}}',
        '{"type": "mcp", "payload": {"jsonrpc": "2.0", "method": 5}}',
        '{"type": "hello", "version": "x"}',
        "x" * 1_000_000,
        b"\x00" * 20_000,
        "[" * 200_000,
        '{"type": "listen", "state": "bogus"}',
        b"\x01\x02",
    ]
    for frame in garbage:
        await device.send_raw(frame)
    # A device request for a method we do not serve gets a JSON-RPC error, not silence.
    answered = asyncio.Event()
    device.on_mcp_request = lambda p: answered.set() if p.get("id") == 7 and "error" in p else None
    await device.send_json({"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}})
    await asyncio.wait_for(answered.wait(), 5)
    reply = next(p for p in device.mcp_requests if p.get("id") == 7)
    assert reply["error"]["code"] == -32601
    # Still connected and working.
    result: Any = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": xdev.device_id, "tool": "self.get_device_status"},
        blocking=True,
        return_response=True,
    )
    assert result["data"]["audio_speaker"]["volume"] == 70
    assert xdev.link is not None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    kinds = [r.getMessage().rsplit("(", 1)[-1].rstrip(")") for r in warnings]
    for kind in ("not_json", "not_object", "no_type", "bad_field", "unknown_id", "bad_jsonrpc", "too_large"):
        assert kinds.count(kind) == 1, kind
    assert all(MAC in r.getMessage() for r in warnings)
    assert xdev.log.counts["not_json"] == 2  # counted every time, logged once
    assert xdev.link.audio_frames == 1  # the 20 000-byte one was over the limit
    # Once per device, not per connection: after a reconnect the same garbage is not logged again.
    await device.drop()
    await wait_for(xdev, lambda d: d.link is None)
    caplog.clear()
    again = await make_device()
    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    await again.send_raw("not json")
    await again.send_notification("notifications/x")  # frames are handled in order: this comes after
    await waiter.wait()
    assert xdev.log.counts["not_json"] == 3
    assert not [r for r in caplog.records if r.levelno == logging.WARNING and "not_json" in r.getMessage()]


async def test_frames_before_hello_are_dropped(
    hass: HomeAssistant, client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with client.ws_connect(WS_PATH, headers=headers()) as ws:
        await ws.send_bytes(b"\x01\x02\x03")
        await ws.send_str('{"type":"listen","state":"start"}')
        await ws.send_str('{"type":"hello","features":{}}')
        reply = json.loads((await ws.receive()).data)
        assert reply["type"] == "hello"
        conn = await hub_device(hass).async_wait_ready(5)
        assert conn.audio_frames == 0
        # A second hello is answered with the same session id.
        await ws.send_str('{"type":"hello","features":{}}')
        again = json.loads((await ws.receive()).data)
        assert again["session_id"] == reply["session_id"]
    assert "binary_before_hello" in caplog.text
    assert "before_hello" in caplog.text


async def test_huge_message_closes_connection(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    async with client.ws_connect(WS_PATH, headers=headers()) as ws:
        await ws.send_str('{"type":"hello"}')
        await ws.receive()
        await ws.send_str("x" * (3 * 1024 * 1024))
        msg = await ws.receive()
        assert msg.type is WSMsgType.CLOSE
        assert msg.data == 1009  # message too big
    await wait_for(hub_device(hass), lambda d: d.link is None)


async def test_reconnect_replaces_old_connection(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    first = await make_device()
    xdev = hub_device(hass)
    old = await xdev.async_wait_ready(5)
    second = await make_device()
    await first.wait_closed()
    assert xdev.link is not old
    await xdev.async_wait_ready(5)
    assert xdev.link is not None
    assert not second.closed.is_set()


async def test_two_devices_are_independent(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    one = await make_device()
    two = await make_device(mac=MAC2, token=TOKEN2)
    assert one.session_id != two.session_id
    await one.drop()
    await wait_for(hub_device(hass), lambda d: d.link is None)
    assert hub_device(hass, MAC2).link is not None


async def test_unload_closes_sessions_and_endpoint_goes_inert(
    hass: HomeAssistant, setup_integration: MockConfigEntry, make_device: DeviceFactory, client: TestClient[Any, Any]
) -> None:
    device = await make_device()
    await hub_device(hass).async_wait_ready(5)
    assert await hass.config_entries.async_unload(setup_integration.entry_id)
    assert setup_integration.state is ConfigEntryState.NOT_LOADED
    await device.wait_closed()
    resp = await client.get(WS_PATH, headers=headers())
    assert resp.status == 404


async def test_an_unload_that_fails_keeps_the_hub_reachable(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A platform that fails to unload leaves the entry loaded: its devices still get in."""
    from custom_components.xiaozhi_local import async_unload_entry
    from custom_components.xiaozhi_local.hub import DATA_HUB

    async def refuse(*_args: Any) -> bool:
        return False

    with monkeypatch.context() as patched:
        patched.setattr(hass.config_entries, "async_unload_platforms", refuse)
        assert not await async_unload_entry(hass, setup_integration)
    assert hass.data[DATA_HUB] is hub_of(setup_integration)
    device = await make_device()  # the WebSocket view still finds the hub
    await hub_device(hass).async_wait_ready(5)
    assert device.session_id


async def test_subentries_added_changed_removed_at_runtime(
    hass: HomeAssistant, setup_integration: MockConfigEntry, make_device: DeviceFactory
) -> None:
    hub = hub_of(setup_integration)
    kitchen = await make_device()
    desk = await make_device(mac=MAC2, token=TOKEN2)
    new_mac = "cc:ba:97:04:92:99"
    data = device_subentry(new_mac, "new-token")
    hass.config_entries.async_add_subentry(
        setup_integration,
        ConfigSubentry(
            data=MappingProxyType(dict(data["data"])),
            subentry_type=data["subentry_type"],
            title=data["title"],
            unique_id=data["unique_id"],
        ),
    )
    await hass.async_block_till_done()
    assert new_mac in hub.devices
    await make_device(mac=new_mac, token="new-token")
    # A changed token ends the session opened with the old one.
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    hass.config_entries.async_update_subentry(setup_integration, sub, data={**sub.data, "token": "rotated"})
    await hass.async_block_till_done()
    await kitchen.wait_closed()
    assert hub.devices[MAC].token == "rotated"
    # A removed device is disconnected and forgotten.
    sub2 = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC2)
    hass.config_entries.async_remove_subentry(setup_integration, sub2.subentry_id)
    await hass.async_block_till_done()
    await desk.wait_closed()
    assert MAC2 not in hub.devices


async def test_silent_connections_are_closed(
    hass: HomeAssistant, client: TestClient[Any, Any], make_device: DeviceFactory
) -> None:
    device = await make_device()  # answers pings, as the firmware does
    xdev = hub_device(hass)
    async with client.ws_connect(WS_PATH, headers=headers(MAC2, TOKEN2), autoping=False) as ws:
        await ws.send_str('{"type":"hello"}')
        await ws.receive()
        for _ in range(3):
            async_fire_time_changed(hass, dt_util.utcnow() + PING_INTERVAL, fire_all=True)
            msg = await ws.receive()
            if msg.type is WSMsgType.PING:
                continue  # not answered: a device gone without a TCP close
            break
        assert msg.type is WSMsgType.CLOSE
    await wait_for(hub_device(hass, MAC2), lambda d: d.link is None)
    assert xdev.link is not None
    assert not device.closed.is_set()


async def test_client_ping_is_answered(client: TestClient[Any, Any]) -> None:
    async with client.ws_connect(WS_PATH, headers=headers(), autoping=False) as ws:
        await ws.send_str('{"type":"hello"}')
        await ws.receive()
        await ws.ping(b"hi")
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.PONG, b"hi")


async def test_a_flood_is_cut_off_without_starving_others(
    hass: HomeAssistant, make_device: DeviceFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from custom_components.xiaozhi_local.transport import websocket as connection

    # No refill: the outcome depends on frame counts, not on how fast this machine sends.
    monkeypatch.setattr(connection, "FRAME_RATE", 0.0)
    monkeypatch.setattr(connection, "FRAME_BURST", 60.0)
    monkeypatch.setattr(connection, "FLOOD_LIMIT", 200)
    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    flooder = await make_device()
    other = await make_device(mac=MAC2, token=TOKEN2)
    frame = json.dumps({"type": "mcp", "payload": {"jsonrpc": "2.0", "method": "notifications/spam"}})
    with contextlib.suppress(ConnectionClosed):
        for _ in range(10_000):
            await flooder.send_raw(frame)
    await flooder.wait_closed()  # cut off (the client may have queued all its frames by then)
    assert "floods its connection" in caplog.text
    await hass.async_block_till_done()
    assert len(waiter.events) < 60  # what was over budget never reached the bus
    # The other device was not starved.
    result: Any = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": hub_device(hass, MAC2).device_id, "tool": "self.get_device_status"},
        blocking=True,
        return_response=True,
    )
    assert result["data"]["battery"]["level"] == 85
    assert not other.closed.is_set()


async def test_removing_the_integration_closes_every_session(
    hass: HomeAssistant, setup_integration: MockConfigEntry, make_device: DeviceFactory
) -> None:
    one = await make_device()
    two = await make_device(mac=MAC2, token=TOKEN2)
    assert await hass.config_entries.async_remove(setup_integration.entry_id)
    await one.wait_closed()
    await two.wait_closed()
    assert hass.config_entries.async_entries(DOMAIN) == []
