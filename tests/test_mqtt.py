"""The MQTT+UDP transport: devices online from boot, through real TCP and UDP sockets.

The simulated device (``xiaozhi_sim.mqtt``) has its own MQTT and AES-CTR code, written from
the firmware's ``mqtt_protocol.cc``; it boots through the real OTA endpoint.
"""

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.const import EVENT_STATE_CHANGED, EVENT_STATE_REPORTED
from homeassistant.core import Event, HomeAssistant, callback
from homeassistant.helpers import entity_registry as er, issue_registry as ir
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.transport.mqtt import FAILED_LOGINS, MAX_UNAUTHENTICATED_PER_ADDRESS
from custom_components.xiaozhi_local.transport.mqtt_channel import MqttChannel
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.mqtt_wire import MqttRefused, mqtt_connect, mqtt_publish

from .conftest import (
    CLIENT_ID,
    CLIENT_ID2,
    FAST,
    MAC,
    MAC2,
    TOKEN,
    first_packets,
    mqtt_in_conversation,
    ota_url,
    served_hub,
    wait_for,
    wait_settled,
    ws_url,
)
from .helpers import announce, logged_by_us, next_answer, until
from .internals import hub_of
from .voice import Voice, loud_seconds, speech_pcm, speech_seconds

type MqttFactory = Callable[..., Awaitable[SimulatedDevice]]


def listening(hub: XiaozhiHub) -> bool:
    """Whether the hub's MQTT+UDP endpoint listens now."""
    return hub.mqtt is not None and hub.mqtt.listening


@pytest.fixture
async def hub(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> XiaozhiHub:
    """The hub, its URLs pointing at the test server (the MQTT endpoint is on by default)."""
    hub = await served_hub(hass, setup_integration, client)
    assert hub.mqtt is not None
    assert hub.mqtt.listening
    return hub


@pytest.fixture
async def make_mqtt(hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[MqttFactory]:
    """Boot simulated devices through OTA; they come online over MQTT as the firmware does."""
    devices: list[SimulatedDevice] = []

    async def factory(*, mac: str = MAC, client_id: str = CLIENT_ID, **kwargs: Any) -> SimulatedDevice:
        device = SimulatedDevice(
            SimulatorOptions(url="", mac=mac, client_id=client_id, hello_timeout=5, **kwargs), speaks_mqtt=True
        )
        devices.append(device)
        answer = await device.boot_mqtt(ota_url(client), timing=FAST)
        assert "mqtt" in answer
        return device

    yield factory
    for device in devices:
        await device.drop()


async def test_ota_hands_out_mqtt_and_the_device_stays_online(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    device = await make_mqtt()
    stored = device.nvs["mqtt"]
    # Every field py-xiaozhi insists on; the endpoint is built like the WebSocket URL's host.
    assert set(stored) >= {"endpoint", "client_id", "username", "password", "keepalive", "publish_topic"}
    assert stored["endpoint"] == f"127.0.0.1:{hub.mqtt.port}"  # type: ignore[union-attr]
    assert stored["password"] == TOKEN
    assert device.nvs["websocket"]["token"] == TOKEN  # the WebSocket settings are still sent
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    assert xdev.link is not None
    assert xdev.link.transport_name == "mqtt"
    assert "self.audio_speaker.set_volume" in xdev.tools
    assert not device.mqtt.subscribed
    assert not device.mqtt.audio_channel_open  # idle: no conversation, no UDP
    state = hass.states.get("binary_sensor.kitchen_connected")
    assert state is not None
    assert state.state == "on"

    # Idle, and still callable: an automation's call_tool reaches the device.
    result = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": xdev.device_id, "tool": "self.audio_speaker.set_volume", "arguments": {"volume": 33}},
        blocking=True,
        return_response=True,
    )
    assert result is not None
    assert result["text"] == "true"
    assert device.state.volume == 33
    # The number entity follows (the status was read again after the setting).
    await hass.services.async_call(
        "number", "set_value", {"entity_id": "number.kitchen_volume", "value": 55}, blocking=True
    )
    assert device.state.volume == 55
    state = hass.states.get("number.kitchen_volume")
    assert state is not None
    assert float(state.state) == 55


async def test_settings_made_while_away_reach_the_device_at_boot(
    hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.drop()  # powered off
    await wait_for(xdev, lambda d: d.link is None)
    # What it reported is stale now (unavailable); its settings still take a value that waits.
    assert hass.states.get("sensor.kitchen_battery").state == "unavailable"  # type: ignore[union-attr]
    assert hass.states.get("binary_sensor.kitchen_charging").state == "unavailable"  # type: ignore[union-attr]
    assert hass.states.get("binary_sensor.kitchen_connected").state == "off"  # type: ignore[union-attr]
    await hass.services.async_call(
        "number", "set_value", {"entity_id": "number.kitchen_volume", "value": 21}, blocking=True
    )
    assert xdev.values.pending
    await device.mqtt.start()  # powered on: online at boot, before anyone speaks
    await wait_for(xdev, lambda d: d.link is not None)
    await wait_settled(xdev)
    assert device.state.volume == 21
    assert not xdev.values.pending
    assert hass.states.get("sensor.kitchen_battery").state not in ("unavailable", "unknown")  # type: ignore[union-attr]


async def test_voice_turn_over_udp(hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    """Hello v3 opens an encrypted UDP channel; speech goes up, the answer comes down, decodable."""
    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.connect()  # the wake word: hello, server hello with udp, the UDP socket
    hello = device.server_hello
    assert hello is not None
    assert hello["transport"] == "udp"
    assert len(bytes.fromhex(hello["udp"]["key"])) == 16
    nonce = bytes.fromhex(hello["udp"]["nonce"])
    assert nonce[0] == 0x01
    assert hello["udp"]["port"] == hub.mqtt.udp_port  # type: ignore[union-attr]
    assert hello["session_id"] == device.session_id

    device.relisten = False
    await device.say(speech_pcm())
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
    stt = next(m for m in device.log if m["type"] == "stt")
    heard = float(stt["text"].split()[1])
    assert 1.0 <= heard <= 3.5  # the speech survived Opus and AES-CTR uplink
    played = len(device.speaker_pcm) / 2 / 24000
    expected = speech_seconds(ready.agent.reply)
    assert expected - 0.1 <= played <= expected + 0.2
    assert loud_seconds(bytes(device.speaker_pcm), 24000) > expected * 0.8
    assert device.mqtt.udp.datagrams_dropped == 0

    # A second conversation gets new keys.
    await device.mqtt.goodbye()
    await wait_for(xdev, lambda d: d.link is not None and not d.link.audio_open)
    await device.connect()
    assert device.server_hello is not None
    assert device.server_hello["udp"]["key"] != hello["udp"]["key"]
    assert device.server_hello["session_id"] != hello["session_id"]
    assert xdev.link is not None  # goodbye ended the conversation, not the link


async def test_announce_while_idle_is_an_alert(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    await announce(hass, "The laundry is done")
    alert = await device.wait_message(lambda m: m.get("type") == "alert")
    assert alert["message"] == "The laundry is done"
    assert isinstance(alert["status"], str)
    assert isinstance(alert["emotion"], str)  # the firmware ignores an alert missing any of the three
    # The action succeeds, and the log says what reached the device (a client may ignore alerts).
    assert "the announcement was shown as an alert (its text and a sound, not spoken" in caplog.text


async def test_server_goodbye_after_silence(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """Nobody speaks: the conversation ends with ``goodbye`` (the device goes idle, stays online)."""
    from datetime import timedelta

    from homeassistant.util import dt as dt_util
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    await device.connect()
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"})
    await until(lambda: (link := hub.devices[MAC].link) is not None and link.listen_mode == "auto")  # HA has it
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=60))
    goodbye = await device.wait_message(lambda m: m.get("type") == "goodbye")
    assert goodbye["session_id"] == device.session_id
    assert not device.mqtt.audio_channel_open
    assert device.mqtt.online.is_set()


async def test_restart_button(hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    await hass.services.async_call("button", "press", {"entity_id": "button.kitchen_restart"}, blocking=True)
    async with asyncio.timeout(5):
        await device.mqtt.wait_offline()
    assert device.rebooted


async def test_second_connection_replaces_the_first(hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    first = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    old = xdev.link
    second = await make_mqtt()
    async with asyncio.timeout(5):
        await first.mqtt.wait_offline()
    await wait_for(xdev, lambda d: d.link is not None and d.link is not old)
    assert second.mqtt.online.is_set()


async def test_two_devices_and_regenerated_token(hass: HomeAssistant, hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    """Each device has its own credentials; a new token ends the session of the old one."""
    kitchen = await make_mqtt()
    desk = await make_mqtt(mac=MAC2, client_id=CLIENT_ID2)
    assert kitchen.nvs["mqtt"]["password"] != desk.nvs["mqtt"]["password"]
    await wait_for(hub.devices[MAC2], lambda d: d.link is not None)
    entry = hub.entry
    sub = entry.subentries[hub.devices[MAC].subentry_id]
    hass.config_entries.async_update_subentry(entry, sub, data={**sub.data, "token": "new-token-" + "c" * 40})
    async with asyncio.timeout(5):
        await kitchen.mqtt.wait_offline()
    with pytest.raises(MqttRefused) as err:
        await kitchen.mqtt.start()  # the old password
    assert err.value.code == 4
    assert desk.mqtt.online.is_set()


async def test_wrong_credentials_are_refused_and_counted(hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    await device.drop()
    good = dict(device.nvs["mqtt"])
    for _ in range(FAILED_LOGINS):
        device.nvs["mqtt"] = {**good, "password": "guess"}
        with pytest.raises(MqttRefused) as err:
            await device.mqtt.start()
        assert err.value.code == 4  # bad user name or password
    await until(lambda: hub.devices[MAC].log.counts.get("token_guess", 0) >= FAILED_LOGINS)
    device.nvs["mqtt"] = good
    await device.mqtt.start()  # the right password is never refused (tests/test_mqtt_hostile.py: the rest)
    await wait_for(hub.devices[MAC], lambda d: d.link is not None)


async def test_mqtt_off_hands_out_websocket_only(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], make_mqtt: MqttFactory
) -> None:
    """Off: the endpoint stops, OTA gives only ``websocket``; the device goes back at its next boot."""
    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client), "mqtt": False})
    await hass.async_block_till_done()
    assert hub.mqtt is None
    async with asyncio.timeout(5):
        await device.mqtt.wait_offline()
    # Restarted on the way out: it would otherwise retry the gone endpoint until power-cycled.
    assert device.rebooted
    answer = await device.boot_mqtt(ota_url(client), timing=FAST)
    assert "mqtt" not in answer
    assert device.options.url == ws_url(client)
    # Per device: "mqtt" wins over the hub's choice (the endpoint starts for it).
    sub = hub.entry.subentries[hub.devices[MAC].subentry_id]
    hass.config_entries.async_update_subentry(hub.entry, sub, data={**sub.data, "transport": "mqtt"})
    await hass.async_block_till_done()
    assert listening(hub)
    answer = await device.boot_mqtt(ota_url(client), timing=FAST)
    assert "mqtt" in answer


async def test_port_in_use_raises_a_repair(
    hass: HomeAssistant,
    issue_registry: ir.IssueRegistry,
    hub: XiaozhiHub,
    client: TestClient[Any, Any],
    make_mqtt: MqttFactory,
) -> None:
    blocker = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = blocker.sockets[0].getsockname()[1]
    try:
        hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client), "mqtt_port": port})
        await hass.async_block_till_done()
        assert hub.mqtt is None
        issue = issue_registry.async_get_issue(DOMAIN, "mqtt_port_unavailable")
        assert issue is not None
        assert issue.translation_placeholders is not None
        assert issue.translation_placeholders["tcp"] == str(port)
        assert issue.translation_key == "mqtt_port_in_use"  # why, in the user's language
        # No mqtt in the OTA answer while nothing listens: the device keeps its WebSocket.
        device = SimulatedDevice(SimulatorOptions(url="", mac=MAC, client_id=CLIENT_ID), speaks_mqtt=True)
        answer = await device.boot_mqtt(ota_url(client), timing=FAST)
        assert "mqtt" not in answer
    finally:
        blocker.close()
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client)})
    await hass.async_block_till_done()
    assert listening(hub)
    assert issue_registry.async_get_issue(DOMAIN, "mqtt_port_unavailable") is None


async def test_a_burst_of_entry_updates_starts_the_endpoint_once(
    hass: HomeAssistant,
    issue_registry: ir.IssueRegistry,
    hub: XiaozhiHub,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """New ports, then the entry updated again and again before the endpoint is up (a pairing, the
    tokens leaving their subentries): each update calls the listener, and each used to start an
    endpoint of its own on the same ports. All but one failed with "address in use" and raised a
    repair for a port the hub itself held."""
    port = free_port()
    hass.config_entries.async_update_entry(
        hub.entry, options={"websocket_url": ws_url(client), "mqtt_port": port, "udp_port": port}
    )
    for index in range(8):
        sub = hub.entry.subentries[hub.devices[MAC].subentry_id]
        hass.config_entries.async_update_subentry(hub.entry, sub, title=f"Kitchen {index}")
    await hass.async_block_till_done()
    assert "Cannot listen" not in logged_by_us(caplog)
    assert issue_registry.async_get_issue(DOMAIN, "mqtt_port_unavailable") is None
    assert hub.mqtt is not None
    assert listening(hub)
    assert (hub.mqtt.port, hub.mqtt.udp_port) == (port, port)


async def test_an_endpoint_started_while_the_hub_unloads_is_closed(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The listener's start was under way when the hub unloaded: the endpoint it opened used to be
    kept by a hub nobody stops any more, its ports bound until Home Assistant restarted."""
    port = free_port()
    hass.config_entries.async_update_entry(
        hub.entry, options={"websocket_url": ws_url(client), "mqtt_port": port, "udp_port": port}
    )
    assert await hass.config_entries.async_unload(hub.entry.entry_id)
    await hass.async_block_till_done()
    assert hub.mqtt is None
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    freed = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", port)  # both ports are free again
    freed.close()
    udp, _ = await asyncio.get_running_loop().create_datagram_endpoint(asyncio.DatagramProtocol, ("127.0.0.1", port))
    udp.close()
    assert "Cannot listen" not in logged_by_us(caplog)


# -- hostile input ------------------------------------------------------------------------------


async def _raw(hub: XiaozhiHub) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert hub.mqtt is not None
    return await asyncio.open_connection("127.0.0.1", hub.mqtt.port)


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the endpoint sends until it closes the connection."""
    async with asyncio.timeout(5):
        return await reader.read()


@pytest.mark.parametrize("at", [1, 2, 5, 30])
async def test_a_connect_split_across_tcp_segments_is_accepted(hub: XiaozhiHub, at: int) -> None:
    """Slow links and Wi-Fi split segments: only the connection's first byte must say CONNECT."""
    reader, writer = await _raw(hub)
    connect = mqtt_connect(CLIENT_ID, MAC, TOKEN, 240)
    writer.write(connect[:at])
    await writer.drain()
    await asyncio.sleep(0.05)  # not a wait for a result: the two parts travel as two segments
    writer.write(connect[at:])
    await writer.drain()
    async with asyncio.timeout(5):
        assert await reader.readexactly(4) == bytes([0x20, 2, 0, 0])  # CONNACK: accepted
    writer.close()


@pytest.mark.parametrize(
    "data",
    [
        mqtt_publish("x", b'{"type":"hello"}'),  # a packet before CONNECT
        bytes([0x10, 0x80, 0x80, 0x80, 0x01]),  # CONNECT announcing 256 MB
        bytes([0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),  # a remaining length of five bytes
        bytes([0x10, 0x04, 0x00, 0x09, 0x41, 0x42]),  # a field running past its packet
        bytes([0x00, 0x00]),  # a reserved packet type
        b"GET / HTTP/1.1\r\n\r\n",
    ],
)
async def test_malformed_before_connect_is_refused(hub: XiaozhiHub, data: bytes) -> None:
    reader, writer = await _raw(hub)
    writer.write(data)
    await writer.drain()
    assert await _closed(reader) in (b"", bytes([0x20, 2, 0, 1]))
    writer.close()
    assert not hub.links


async def test_malformed_packet_after_connect_ends_only_that_link(hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.mqtt.send_mqtt_raw(bytes([0x30, 0x80, 0x80, 0x80, 0x01]))  # a 256 MB PUBLISH
    async with asyncio.timeout(5):
        await device.mqtt.wait_offline()
    await wait_for(xdev, lambda d: d.link is None)
    await device.mqtt.start()  # it reconnects, as the firmware does after 60 s
    await wait_for(xdev, lambda d: d.link is not None)


async def test_connect_flood_is_bounded(hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    """Connections that never send CONNECT: past the bound the oldest goes; real devices still get in."""
    held = [await _raw(hub) for _ in range(MAX_UNAUTHENTICATED_PER_ADDRESS)]
    assert hub.mqtt is not None
    await until(lambda: hub.mqtt is not None and hub.mqtt.pending_count == MAX_UNAUTHENTICATED_PER_ADDRESS)
    _reader, writer = await _raw(hub)  # one more: the oldest silent one gives way, at once
    assert await _closed(held[0][0]) == b""
    assert hub.mqtt is not None
    assert hub.mqtt.pending_count == MAX_UNAUTHENTICATED_PER_ADDRESS
    writer.close()
    for _reader, held_writer in held:
        held_writer.close()
    await until(lambda: hub.mqtt is not None and hub.mqtt.pending_count == 0)
    device = await make_mqtt()
    await wait_for(hub.devices[MAC], lambda d: d.link is not None)
    assert device.mqtt.online.is_set()


async def test_sockets_kept_topped_up_from_the_devices_address_never_keep_it_out(
    hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """A host behind the device's NAT keeps 200 idle sockets open and keeps them young: it closes its
    oldest and opens a new one without pause, so none is ever a second old (the round-five attack).
    The device's CONNECT gets in every time, and no slot is taken from a connection that sent one."""
    assert hub.mqtt is not None
    held: collections.deque[asyncio.StreamWriter] = collections.deque()
    stop = asyncio.Event()

    async def keep_young() -> None:
        while not stop.is_set():
            held.append((await _raw(hub))[1])
            while len(held) > 200:
                held.popleft().close()
            await asyncio.sleep(0.002)

    flooder = asyncio.create_task(keep_young())
    try:
        while len(held) < 200:  # noqa: ASYNC110 - the flood builds up first
            await asyncio.sleep(0.01)
        for _ in range(5):
            async with asyncio.timeout(10):
                device = await make_mqtt()
                await wait_for(hub.devices[MAC], lambda d: d.link is not None)
            assert device.mqtt.online.is_set()
            await device.drop()
            await wait_for(hub.devices[MAC], lambda d: d.link is None)
        assert hub.mqtt.pending_count <= MAX_UNAUTHENTICATED_PER_ADDRESS
    finally:
        stop.set()
        await flooder
        for writer in held:
            writer.close()


async def test_subscribe_and_qos1_are_answered(hub: XiaozhiHub) -> None:
    """py-xiaozhi's paho subscribes (QoS 1) and may publish with QoS 1: both get their answer."""
    reader, writer = await _raw(hub)
    writer.write(mqtt_connect("c", MAC, TOKEN, 60))
    assert await next_answer(reader) == bytes([0x20, 2, 0, 0])
    writer.write(bytes([0x82, 0x07, 0x00, 0x05, 0x00, 0x02]) + b"t/" + bytes([0x01]))
    assert await next_answer(reader) == bytes([0x90, 0x03, 0x00, 0x05, 0x01])
    body = b"\x00\x01t\x00\x09" + b'{"type":"x"}'
    writer.write(bytes([0x32, len(body)]) + body)
    assert await next_answer(reader) == bytes([0x40, 0x02, 0x00, 0x09])
    writer.write(bytes([0xA2, 0x05, 0x00, 0x0A, 0x00, 0x01]) + b"t")  # UNSUBSCRIBE
    assert await next_answer(reader) == bytes([0xB0, 0x02, 0x00, 0x0A])
    writer.write(bytes([0xC0, 0x00]))  # PINGREQ
    assert await next_answer(reader) == bytes([0xD0, 0x00])
    writer.write(bytes([0xE0, 0x00]))  # DISCONNECT
    await _closed(reader)
    writer.close()


async def test_packets_sent_with_the_connect_are_not_left_waiting(hub: XiaozhiHub) -> None:
    """MQTT lets a client send on before the CONNACK: a packet in the CONNECT's segment is answered
    at once, not only when the client sends something else."""
    reader, writer = await _raw(hub)
    writer.write(mqtt_connect("c", MAC, TOKEN, 60) + bytes([0xC0, 0x00]))  # CONNECT and PINGREQ together
    assert await next_answer(reader) == bytes([0x20, 2, 0, 0])
    assert await next_answer(reader) == bytes([0xD0, 0x00])
    writer.close()


async def test_udp_garbage_replays_and_spoofing(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """Only datagrams that prove the session count; nothing is sent to an address that did not."""
    assert hub.mqtt is not None
    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.connect()
    link = xdev.link
    assert link is not None
    channel = link.channel
    assert isinstance(channel, MqttChannel)
    loop = asyncio.get_running_loop()
    received: list[bytes] = []

    class Catch(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: Any) -> None:
            received.append(data)

    spoof, _ = await loop.create_datagram_endpoint(Catch, remote_addr=("127.0.0.1", hub.mqtt.udp_port))
    try:
        refused = hub.mqtt.refused
        spoof.sendto(b"\x00" * 3)
        spoof.sendto(b"\x01" * 200)
        await until(lambda: hub.mqtt is not None and hub.mqtt.refused == refused + 2)  # no session: dropped
        assert not link.audio_open  # no address proved yet: no audio goes anywhere

        from xiaozhi_sim.voice import MicEncoder

        packets = list(MicEncoder(60).packets(speech_pcm()[:32000]))
        genuine = device.mqtt.udp.send_datagram(packets[0])
        await wait_for(xdev, lambda _d: link.audio_open)
        frames = link.audio_frames
        peer = channel.peer
        # The same datagram again, from another address: a replay, refused.
        spoof.sendto(genuine)
        # The session's header, a sequence far ahead and a payload nobody encrypted: refused (however
        # it decrypts), the address is not moved, and the device's next sequence numbers still count.
        forged = bytearray(genuine)
        forged[12:16] = (10_000).to_bytes(4)
        spoof.sendto(bytes(forged))
        # The device goes on: its next genuine packet is taken. Sent after the two above on
        # loopback, it is handled after them: once it counts, they were refused.
        device.mqtt.udp.send_datagram(packets[1])
        await until(lambda: link.audio_frames == frames + 1)
        assert channel.peer == peer
        assert received == []
        device.mqtt.udp.send_datagram(packets[2])
        await until(lambda: link.audio_frames == frames + 2)
        assert channel.peer == peer
    finally:
        spoof.close()


async def test_timer_rings_on_an_idle_device(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """ "Set a timer for 2 minutes" spoken to the device works, and the finished timer reaches it idle."""
    from datetime import timedelta

    from homeassistant.helpers import intent
    from homeassistant.util import dt as dt_util
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    # What the conversation agent runs for the sentence (before: "timers are not supported").
    response = await intent.async_handle(
        hass, "test", intent.INTENT_START_TIMER, {"minutes": {"value": 2}}, device_id=xdev.device_id
    )
    assert response.response_type == intent.IntentResponseType.ACTION_DONE
    assert not device.mqtt.audio_channel_open  # idle all the while
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(minutes=2, seconds=1))
    alert = await device.wait_message(lambda m: m.get("type") == "alert")
    assert alert["message"] == "Timer done: 2 min"
    assert alert["status"] == "Timer"


def test_timer_text_in_both_languages() -> None:
    from custom_components.xiaozhi_local.protocol.voice import timer_finished

    assert timer_finished(None, 5400, "en")["message"] == "Timer done: 1 h 30 min"
    assert timer_finished(None, 90, "zh-CN")["message"] == "计时结束：1分钟30秒"
    assert timer_finished("pasta", 600, "en")["message"] == "Timer done: pasta"


async def test_py_xiaozhi_over_mqtt(hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    """py-xiaozhi's MQTT mode: MQTT per conversation, a subscription, 20 ms frames, its own headers."""
    device = await make_mqtt(flavor="py-xiaozhi")
    xdev = hub.devices[MAC]
    assert not device.mqtt.online.is_set()  # it connects when a conversation starts, not at boot
    assert xdev.link is None
    await device.connect()  # CONNECT, SUBSCRIBE, then hello at once
    await wait_settled(xdev)
    assert device.mqtt.subscribed
    assert device.mqtt.subacks == 1
    assert xdev.find_tool("self.audio_speaker.set_volume") is not None
    await hass.services.async_call(
        "number", "set_value", {"entity_id": "number.kitchen_volume", "value": 42}, blocking=True
    )
    assert device.state.volume == 42
    device.relisten = False
    await device.say(speech_pcm())
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
    stt = next(m for m in device.log if m["type"] == "stt")
    assert 1.0 <= float(stt["text"].split()[1]) <= 3.5
    assert loud_seconds(bytes(device.speaker_pcm), 24000) > speech_seconds(ready.agent.reply) * 0.8
    # Its goodbye ends the MQTT session too (``_handle_goodbye``): the device is offline until asked again.
    await device.mqtt.goodbye()
    async with asyncio.timeout(5):
        await device.mqtt.wait_offline()
    await wait_for(xdev, lambda d: d.link is None)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_every_device_comes_back_after_a_restart(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], make_mqtt: MqttFactory
) -> None:
    """Home Assistant restarts (the entry reloads): each device reconnects on its own, as the firmware does."""
    port = free_port()
    hass.config_entries.async_update_entry(
        hub.entry, options={"websocket_url": ws_url(client), "mqtt_port": port, "udp_port": port}
    )
    await hass.async_block_till_done()
    kitchen = await make_mqtt()
    desk = await make_mqtt(mac=MAC2, client_id=CLIENT_ID2)
    tasks = [asyncio.create_task(device.mqtt.stay_online(reconnect_interval=0.05)) for device in (kitchen, desk)]
    try:
        await wait_for(hub.devices[MAC2], lambda d: d.link is not None)
        assert await hass.config_entries.async_reload(hub.entry.entry_id)
        await hass.async_block_till_done()
        new_hub: XiaozhiHub = hub_of(hub.entry)
        assert new_hub is not hub
        for mac in (MAC, MAC2):
            await wait_for(new_hub.devices[mac], lambda d: d.link is not None, timeout=10)
            await wait_settled(new_hub.devices[mac])
        assert {link.device.mac for link in new_hub.links} == {MAC, MAC2}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_blocked_udp_raises_a_repair(
    hass: HomeAssistant, issue_registry: ir.IssueRegistry, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """The device talks but no datagram arrives (a firewall): a repair names the port; audio clears it."""
    from datetime import timedelta

    from homeassistant.util import dt as dt_util
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    from custom_components.xiaozhi_local.transport.mqtt_channel import UDP_DEADLINE

    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.connect()
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "manual"})
    await until(lambda: xdev.link is not None and xdev.link.listen_mode == "manual")  # its datagrams are lost
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=UDP_DEADLINE + 1))
    await hass.async_block_till_done()
    issue = issue_registry.async_get_issue(DOMAIN, "udp_blocked")
    assert issue is not None
    assert issue.translation_placeholders == {"device": "Kitchen", "port": str(hub.mqtt.udp_port)}  # type: ignore[union-attr]
    from xiaozhi_sim.voice import MicEncoder

    device.mqtt.udp.send_datagram(next(iter(MicEncoder(60).packets(speech_pcm()[:8000]))))
    await wait_for(xdev, lambda d: d.link is not None and d.link.audio_open)
    assert issue_registry.async_get_issue(DOMAIN, "udp_blocked") is None


async def test_announce_while_idle_on_firmware_25_is_spoken(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """2.5 plays ``notify``: it fetches the announcement (Ogg Opus) from a one-time URL; the action waits."""
    device = await make_mqtt(firmware_version="2.5.0")
    await wait_settled(hub.devices[MAC])
    assert hub.devices[MAC].plays_notify
    await announce(hass, "The laundry is done")
    notify = next(m for m in device.log if m["type"] == "notify")
    assert notify["subtitles"] == [{"start_ms": 0, "text": "The laundry is done"}]
    assert notify["audio_url"].startswith("http://127.0.0.1:")
    await asyncio.gather(*device.notify_tasks)
    assert device.notify_status == [200]
    played = len(device.notify_pcm) / 2 / 24000
    expected = speech_seconds("The laundry is done")
    assert expected - 0.1 <= played <= expected + 0.2
    assert loud_seconds(bytes(device.notify_pcm), 24000) > expected * 0.8
    assert not any(m["type"] == "alert" for m in device.log)
    assert not device.mqtt.audio_channel_open  # no conversation was opened for it
    # The URL served once: a second fetch (a replay by anyone who saw it) finds nothing.
    from aiohttp import ClientSession

    async with ClientSession() as session, session.get(notify["audio_url"]) as response:
        assert response.status == 404


async def test_notify_not_fetched_falls_back_to_an_alert(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2.5 device that is busy ignores ``notify``: after a while the text is shown instead."""
    from custom_components.xiaozhi_local.sound import speaker

    monkeypatch.setattr(speaker, "NOTIFY_FETCH_TIMEOUT", 0.2)
    device = await make_mqtt(firmware_version="2.5.0")
    await wait_settled(hub.devices[MAC])
    device.device_state = "listening"  # (busy: the firmware ignores notify)
    await announce(hass, "Back in five")
    alert = await device.wait_message(lambda m: m.get("type") == "alert")
    assert alert["message"] == "Back in five"
    assert device.notify_status == []


async def test_a_device_that_stops_reading_is_dropped(hub: XiaozhiHub) -> None:
    """Messages pile up unread: past the write bound the link is dropped, not buffered without end."""
    import socket

    assert hub.mqtt is not None
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", hub.mqtt.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(mqtt_connect("c", MAC, TOKEN, 60))
    assert await next_answer(reader) == bytes([0x20, 2, 0, 0])
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None)
    link = xdev.link
    assert link is not None
    # From now on it reads nothing.
    sent = 0
    async with asyncio.timeout(10):
        while await link.async_send_json({"type": "custom", "payload": {"blob": "x" * 60_000}}):
            sent += 1
    assert 4 < sent < 200  # bounded: neither refused at once nor buffered without end
    await wait_for(xdev, lambda d: d.link is None)
    writer.close()


async def test_timer_is_spoken_on_firmware_25(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    from datetime import timedelta

    # (The clock jumps 2 minutes below: within the tests' keepalive, conftest.py.)
    from homeassistant.helpers import intent
    from homeassistant.util import dt as dt_util
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    device = await make_mqtt(firmware_version="2.5.0")
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await intent.async_handle(
        hass, "test", intent.INTENT_START_TIMER, {"name": {"value": "pasta"}, "minutes": {"value": 2}},
        device_id=xdev.device_id,
    )  # fmt: skip
    # (Within the device's keepalive: the simulated clock jumps, the device's pings do not.)
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(minutes=2, seconds=1))
    notify = await device.wait_message(lambda m: m.get("type") == "notify")
    assert notify["subtitles"][0]["text"] == "Timer done: pasta"
    await asyncio.gather(*device.notify_tasks)  # started when the notify arrived
    assert loud_seconds(bytes(device.notify_pcm), 24000) > speech_seconds("Timer done: pasta") * 0.8
    await hass.async_block_till_done()


async def test_connection_select_moves_a_device_off_mqtt_at_once(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], make_mqtt: MqttFactory
) -> None:
    """Per device: "Per conversation (WebSocket)" restarts it, and its next OTA answer has no mqtt."""
    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    state = hass.states.get("select.kitchen_connection")
    assert state is not None
    assert state.state == "hub"
    await hass.services.async_call(
        "select", "select_option", {"entity_id": "select.kitchen_connection", "option": "websocket"}, blocking=True
    )
    async with asyncio.timeout(5):
        await device.mqtt.wait_offline()
    assert device.rebooted
    assert hub.mqtt is not None  # the hub still serves the others
    answer = await device.boot_mqtt(ota_url(client), timing=FAST)
    assert "mqtt" not in answer
    state = hass.states.get("select.kitchen_connection")
    assert state is not None
    assert state.state == "websocket"


async def test_typed_text_before_any_audio_is_answered_as_text(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A client types over MQTT right after its hello, before its microphone proved its UDP address:
    no audio can reach it yet, so the answer is shown, and nothing says "the device is gone"."""
    device = await make_mqtt()
    await wait_settled(hub.devices[MAC])
    await device.connect()  # the hello: a channel, no datagram yet
    link = hub.devices[MAC].link
    assert link is not None
    assert not link.audio_open
    await device.type_text("what time is it")
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 15)
    shown = [m["text"] for m in device.log if m.get("state") == "sentence_start"]
    assert shown == ["The kitchen light is on.", "Anything else?"]
    assert device.audio == []
    assert "gone" not in logged_by_us(caplog)
    assert "no audio channel yet; its answer is shown as text" in caplog.text  # debug
    assert hub.devices[MAC].link is link  # still connected


async def test_an_announcement_address_serves_only_its_device(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """The one-time URL of an idle announcement (notify) is bound to the device's address, as a
    firmware URL is: another address is refused and does not use it up."""
    import aiohttp

    device = await make_mqtt(firmware_version="2.5.0")
    await wait_settled(hub.devices[MAC])
    device.device_state = "speaking"  # it leaves the notify alone: the test fetches in its place
    marker = len(device.log)
    task = hass.async_create_task(announce(hass, "The laundry is done"))
    notify = await device.wait_message(lambda m: m.get("type") == "notify", after=marker)
    url = notify["audio_url"]
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=connector) as other, other.get(url) as response:
        assert response.status == 404  # a neighbour who saw the URL
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200  # the device's own address: still valid
        assert (await response.read()).startswith(b"OggS")
    await task


async def test_a_host_holding_idle_sockets_cannot_lock_out_its_lan(hub: XiaozhiHub, make_mqtt: MqttFactory) -> None:
    """One host of the LAN (the same address here; a /64 or a NAT alike) holds every half-open slot
    of its source, and keeps opening more: a device of the same source still gets in, each time."""
    held = [await _raw(hub) for _ in range(MAX_UNAUTHENTICATED_PER_ADDRESS)]
    try:
        for _ in range(3):
            held += [await _raw(hub) for _ in range(5)]  # the flood goes on
            device = await make_mqtt()
            await wait_for(hub.devices[MAC], lambda d: d.link is not None)
            assert device.mqtt.online.is_set()
            await device.drop()
            await wait_for(hub.devices[MAC], lambda d: d.link is None)
        assert hub.mqtt is not None
        assert hub.mqtt.pending_count <= MAX_UNAUTHENTICATED_PER_ADDRESS  # still bounded
        assert await _closed(held[0][0]) == b""  # the oldest idle ones gave way
    finally:
        for _reader, writer in held:
            writer.close()


async def broadcast(hass: HomeAssistant, text: str) -> dict[str, Any]:
    """What a household says to Assist (the built-in agent's HassBroadcast)."""
    result = await hass.services.async_call(
        "conversation", "process", {"text": text, "language": "en"}, blocking=True, return_response=True
    )
    assert result is not None
    response = result["response"]
    assert isinstance(response, dict)
    return response


async def test_broadcast_with_one_device_off_reaches_the_others(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """Desk is unplugged: its satellite is unavailable, HA's broadcast skips it, Kitchen shows the
    message, and the household hears no "unexpected error"."""
    kitchen = await make_mqtt()
    desk = await make_mqtt(mac=MAC2, client_id=CLIENT_ID2)
    await wait_for(hub.devices[MAC2], lambda d: d.link is not None)
    await desk.drop()
    await wait_for(hub.devices[MAC2], lambda d: d.link is None)
    await hass.async_block_till_done()
    state = hass.states.get("assist_satellite.desk")
    assert state is not None
    assert state.state == "unavailable"
    response = await broadcast(hass, "broadcast dinner is ready")
    assert response["response_type"] == "action_done", response
    assert response["data"]["failed"] == []
    alert = await kitchen.wait_message(lambda m: m.get("type") == "alert")
    assert "dinner is ready" in alert["message"].lower()


async def test_conversations_do_not_rewrite_the_devices_entities(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory, entity_registry: er.EntityRegistry
) -> None:
    """An always-connected device opens and closes its audio channel at every conversation. Only
    the entities that show what runs in one (the speaker, the satellite) follow that: the others
    are not written again, not even as "reported" (each write reaches the recorder)."""
    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await hass.async_block_till_done(wait_background_tasks=True)  # what its OTA check started (its pack read)
    ours = {e.entity_id for e in er.async_entries_for_device(entity_registry, xdev.device_id)}
    speaker = next(e for e in ours if e.startswith("media_player."))
    written: collections.Counter[str] = collections.Counter()

    @callback
    def mine(data: Mapping[str, Any]) -> bool:
        return data["entity_id"] in ours

    @callback
    def count(event: Event[Any]) -> None:
        written[event.data["entity_id"]] += 1

    removes = [hass.bus.async_listen(kind, count, mine) for kind in (EVENT_STATE_REPORTED, EVENT_STATE_CHANGED)]
    try:
        for _ in range(3):
            await device.connect()
            await wait_for(xdev, lambda d: d.conversation is not None)
            await device.mqtt.goodbye()
            await wait_for(xdev, lambda d: d.conversation is None)
        await hass.async_block_till_done()
    finally:
        for remove in removes:
            remove()
    assert written[speaker] >= 6  # the speaker follows each opening and closing: the count sees writes
    rewritten = {entity: n for entity, n in written.items() if not entity.startswith(("media_player.", "assist_"))}
    assert rewritten == {}


async def test_a_device_whose_power_is_cut_is_shown_off_within_its_keepalive(
    hass: HomeAssistant,
    ready: Voice,
    hub: XiaozhiHub,
    make_mqtt: MqttFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its socket stays open and silent (no FIN): the keepalive handed out ends it; an announcement
    meanwhile is not reported as delivered (it is written, but nothing answers after it)."""
    from homeassistant.exceptions import HomeAssistantError

    from custom_components.xiaozhi_local.transport import mqtt

    monkeypatch.setattr(mqtt, "KEEPALIVE", 2)  # the device pings every 2 s; dead after 3 s without
    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    assert device.mqtt.settings["keepalive"] == 2
    device.mqtt.lose_power()  # its socket stays open and silent (drop ends it)
    with pytest.raises(HomeAssistantError) as raised:
        await announce(hass, "The laundry is done")
    assert raised.value.translation_key == "announcement_not_delivered"
    await wait_for(xdev, lambda d: d.off, timeout=10)
    assert not any(m.get("type") == "alert" for m in device.log)  # it read nothing after the cut


async def test_the_wake_audio_waiting_on_the_socket_is_taken_before_listen_detect(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_mqtt: MqttFactory
) -> None:
    """The firmware sends its wake audio over UDP just before ``listen detect`` over MQTT; whatever
    of it still waits in the socket's buffer when the detect is handled is read first and kept as
    the wake word's (here the socket is read by nothing else, so only that read can take it)."""
    from .internals import udp_reader_paused, wake_audio_taken

    device = await make_mqtt()
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await mqtt_in_conversation(hub, device)
    resume = udp_reader_paused(hub)
    try:
        burst = first_packets(60) * 4  # 12 packets of 60 ms
        for packet in burst:
            device.mqtt.udp.send_datagram(packet)
        await device.send_json(
            {"session_id": device.session_id, "type": "listen", "state": "detect", "text": "你好小智"}
        )
        await until(lambda: wake_audio_taken(xdev) > 0)
        # (with the 3 packets that opened the channel: also just before the detect)
        assert wake_audio_taken(xdev) == len(first_packets(60)) + len(burst)
    finally:
        resume()
