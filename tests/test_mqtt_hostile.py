"""The MQTT endpoint on a hostile LAN: floods, guessers, peers that stop reading, forged audio.

Real sockets throughout. Half-open connections come from many loopback addresses (Linux routes
all of 127.0.0.0/8 to the loopback interface, so a client may bind any of them).
"""

import asyncio
from collections.abc import Callable
from datetime import timedelta
import random
import socket
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed

from custom_components.xiaozhi_local.const import PING_INTERVAL
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.transport.mqtt import (
    FAILED_LOGINS,
    MAX_UNAUTHENTICATED,
    MAX_UNAUTHENTICATED_PER_ADDRESS,
    source_of,
)
from custom_components.xiaozhi_local.transport.mqtt_channel import MAX_KEEPALIVE, UNANSWERED_LIMIT
from xiaozhi_sim.mqtt_wire import mqtt_connect

from .conftest import CLIENT_ID, MAC, TOKEN, mqtt_online, served_hub, wait_for
from .helpers import next_answer, until
from .internals import mcp_of, session_id_of
from .voice import Voice

CONNACK_ACCEPTED = bytes([0x20, 2, 0, 0])
CONNACK_BAD_CREDENTIALS = bytes([0x20, 2, 0, 4])


@pytest.fixture
async def hub(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> XiaozhiHub:
    hub = await served_hub(hass, setup_integration, client)
    assert hub.mqtt is not None
    assert hub.mqtt.listening
    return hub


async def connect_from(
    hub: XiaozhiHub, address: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection to the MQTT port from a given local address."""
    assert hub.mqtt is not None
    return await asyncio.open_connection("127.0.0.1", hub.mqtt.port, local_addr=(address, 0))


def test_sources_group_an_ipv6_host() -> None:
    """One IPv6 host has a /64 of addresses: they count as one source; IPv4 addresses each alone."""
    assert source_of("2001:db8::1") == source_of("2001:db8::ffff:1234") == "2001:db8::/64"
    assert source_of("2001:db8:0:1::1") != source_of("2001:db8::1")
    assert source_of("::ffff:192.168.1.5") == "192.168.1.5"
    assert source_of("192.168.1.5") != source_of("192.168.1.6")
    assert source_of("not an address") == "not an address"


@pytest.mark.parametrize("addresses", [256, 3 * MAX_UNAUTHENTICATED])
async def test_a_flood_of_half_open_connections_cannot_keep_a_device_out(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    client: TestClient[Any, Any],
    addresses: int,
) -> None:
    """Connections that never send CONNECT, three times the global bound: from 256 addresses (a
    new connection takes the place of the busiest source's oldest), or each from an address of
    its own (the oldest silent one goes). The paired device still connects."""
    held: list[asyncio.StreamWriter] = []
    try:
        for index in range(3 * MAX_UNAUTHENTICATED):
            spread = index % addresses
            _reader, writer = await connect_from(hub, f"127.0.{1 + spread // 256}.{spread % 256}")
            held.append(writer)
        assert hub.mqtt is not None
        await until(lambda: hub.mqtt is not None and hub.mqtt.pending_count == MAX_UNAUTHENTICATED, 30)
        device = await asyncio.wait_for(mqtt_online(hub, client), 30)  # a guard against a hang
        assert hub.devices[MAC].link is not None
        await device.drop()
    finally:
        for writer in held:
            writer.close()


class Guessers:
    """Clients that send wrong CONNECTs as fast as they are answered, ``per_source`` at once from
    each of ``sources``: the guesser behind a home's NAT, or a few hosts of the LAN."""

    def __init__(self, hub: XiaozhiHub, sources: list[str], per_source: int) -> None:
        self.hub = hub
        self.answers: dict[bytes, int] = {}
        self.sent = 0
        self._running = True
        self._tasks = [asyncio.create_task(self._guess(source)) for source in sources for _ in range(per_source)]

    async def _guess(self, source: str) -> None:
        while self._running:
            try:
                reader, writer = await connect_from(self.hub, source)
            except OSError:
                await asyncio.sleep(0.01)  # the loopback's ephemeral ports may run short for a moment
                continue
            try:
                writer.write(mqtt_connect("guesser", MAC, "guess", 60))
                self.sent += 1
                answer = await next_answer(reader, 30)
                self.answers[answer] = self.answers.get(answer, 0) + 1
            except TimeoutError, ConnectionError, asyncio.IncompleteReadError:
                self.answers[b""] = self.answers.get(b"", 0) + 1
            finally:
                writer.close()

    async def stop(self) -> None:
        self._running = False
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def device_connects(hub: XiaozhiHub, address: str) -> bool:
    """The paired device's CONNECT from ``address``: whether it was let in (within 10 s)."""
    try:
        reader, writer = await connect_from(hub, address)
    except OSError:
        return False
    try:
        writer.write(mqtt_connect(CLIENT_ID, MAC, TOKEN, 60))
        return await next_answer(reader, 10) == CONNACK_ACCEPTED
    except TimeoutError, ConnectionError, asyncio.IncompleteReadError:
        return False
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("sources", "per_source", "device_from"),
    [
        (["127.0.0.1"], 2 * MAX_UNAUTHENTICATED_PER_ADDRESS, "127.0.0.1"),  # a NAT: the guesser is a neighbour
        ([f"127.0.4.{i}" for i in range(10)], MAX_UNAUTHENTICATED_PER_ADDRESS, "127.0.5.1"),  # 10 hosts, one new
    ],
    ids=["one-source", "ten-sources"],
)
async def test_a_flood_of_wrong_connects_cannot_keep_a_device_out(
    hub: XiaozhiHub, sources: list[str], per_source: int, device_from: str
) -> None:
    """Wrong CONNECTs, each sent the moment the last was answered, from twice the per-source bound of
    clients at once behind one NAT (thousands a second where 13 a second locked a home out), or the
    per-source bound from each of 10 hosts (more than the global bound): every wrong one is answered
    at once, so none holds a slot, and the device gets in every time (20 of 20)."""
    loop = asyncio.get_running_loop()
    debug = loop.get_debug()
    loop.set_debug(False)  # the test kit's slow-callback tracing would slow the flood tenfold
    guessers = Guessers(hub, sources, per_source)
    clients = per_source * len(sources)
    try:
        await until(lambda: guessers.sent >= 2 * clients, 120)  # the flood is on
        results = [await device_connects(hub, device_from) for _ in range(20)]
        await until(lambda: guessers.sent >= 4 * clients, 120)  # and it kept going
    finally:
        await guessers.stop()
        loop.set_debug(debug)
    assert results == [True] * 20
    # Refused, or (past the source's bound, before its CONNECT was in) pushed out for a newer one.
    assert set(guessers.answers) <= {CONNACK_BAD_CREDENTIALS, b""}
    assert guessers.answers[CONNACK_BAD_CREDENTIALS] >= clients
    assert hub.mqtt is not None
    await until(lambda: hub.mqtt is not None and hub.mqtt.pending_count == 0)


async def test_a_wrong_connect_is_answered_at_once(hub: XiaozhiHub) -> None:
    """Well past the free guesses of a minute and the address's failures, a wrong CONNECT is
    answered and closed at once (a held refusal is a slot the neighbours' devices need), while the
    clock stands still; the guesses are counted and the right password still gets in."""
    for index in range(5 * FAILED_LOGINS):
        reader, writer = await connect_from(hub, f"127.0.3.{index % 2}")
        writer.write(mqtt_connect("guesser", MAC, "guess", 60))
        assert await next_answer(reader, 5) == CONNACK_BAD_CREDENTIALS
        assert await asyncio.wait_for(reader.read(), 5) == b""  # and closed
        writer.close()
    assert hub.mqtt is not None
    assert hub.mqtt.pending_count == 0
    await until(lambda: hub.devices[MAC].log.counts.get("token_guess", 0) == 5 * FAILED_LOGINS)
    assert await device_connects(hub, "127.0.3.0")


async def test_a_link_without_keepalive_still_ends_when_silent(hass: HomeAssistant, hub: XiaozhiHub) -> None:
    """Keepalive 0 asks for no deadline; a silent link still ends after the longest one honoured."""
    reader, writer = await connect_from(hub)
    writer.write(mqtt_connect(CLIENT_ID, MAC, TOKEN, 0))
    assert await asyncio.wait_for(next_answer(reader), 5) == CONNACK_ACCEPTED
    await wait_for(hub.devices[MAC], lambda d: d.link is not None)
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=MAX_KEEPALIVE * 1.5 + 1))
    await wait_for(hub.devices[MAC], lambda d: d.link is None)
    writer.close()


async def test_a_device_that_pings_but_never_reads_is_closed(hass: HomeAssistant, hub: XiaozhiHub) -> None:
    """It keeps the link alive with PINGREQ and reads nothing: after requests it leaves
    unanswered, the liveness sweep closes its link (calls would each wait their full timeout)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    assert hub.mqtt is not None
    await loop.sock_connect(sock, ("127.0.0.1", hub.mqtt.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(mqtt_connect(CLIENT_ID, MAC, TOKEN, 60))
    assert await asyncio.wait_for(next_answer(reader), 5) == CONNACK_ACCEPTED
    xdev = hub.devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None)
    link = xdev.link
    assert link is not None
    pinging = True

    async def ping() -> None:
        while pinging:
            writer.write(bytes([0xC0, 0x00]))
            await asyncio.sleep(0.05)

    pinger = asyncio.create_task(ping())
    try:
        for _ in range(UNANSWERED_LIMIT):
            with pytest.raises(Exception, match="no answer"):
                await mcp_of(link).request("tools/call", {"name": "self.get_device_status"}, timeout=0.1)
        assert xdev.link is link  # its pings keep it "alive"
        async_fire_time_changed(hass, dt_util.utcnow() + PING_INTERVAL)
        await wait_for(xdev, lambda d: d.link is None)
    finally:
        pinging = False
        await pinger
        writer.close()


async def test_forged_audio_cannot_move_the_devices_audio(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """Where the device's audio goes moves only as a NAT's new mapping looks.

    Datagrams of the session that decrypt to the device's packets (here: really its keys, the
    strongest forgery) from another host, or from another port while the device streams from its
    own, move nothing; the device's own from a new port, at its next turn, do. A thousand guesses
    without the key from a port of its address at a new turn move nothing either.
    """
    from custom_components.xiaozhi_local.protocol.udp import MOVE_EVIDENCE, MOVE_GUESSES
    from custom_components.xiaozhi_local.transport.mqtt_channel import MqttChannel
    from xiaozhi_sim.voice import MicEncoder

    from .conftest import mqtt_in_conversation

    device = await mqtt_online(hub, client)
    await mqtt_in_conversation(hub, device)
    link = hub.devices[MAC].link
    assert link is not None
    channel = link.channel
    assert isinstance(channel, MqttChannel)
    assert hub.mqtt is not None
    peer = channel.peer
    assert peer is not None
    packets = iter(MicEncoder(60).packets(bytes(32000 * 8)))
    loop = asyncio.get_running_loop()
    elsewhere, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=("127.0.0.2", 0), remote_addr=("127.0.0.1", hub.mqtt.udp_port)
    )
    other_port, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=("127.0.0.1", hub.mqtt.udp_port)
    )
    listen_start = {"session_id": session_id_of(link), "type": "listen", "state": "start", "mode": "auto"}

    def new_turn() -> bool:
        """Home Assistant has taken the listen start: nothing came from the device's port since."""
        return channel.audio is not None and not channel.audio.heard_this_turn

    try:
        frames = link.audio_frames
        for _ in range(5):
            elsewhere.sendto(device.mqtt.udp.seal(next(packets)))  # another host, however genuine
        for _ in range(2 * MOVE_EVIDENCE):
            other_port.sendto(device.mqtt.udp.seal(next(packets)))  # another port while the device streams
        device.mqtt.udp.send_datagram(next(packets))  # the device goes on from where it was
        await until(lambda: link.audio_frames == frames + 1)
        assert channel.peer == peer

        await device.send_json(listen_start)  # its next turn: its NAT mapped it anew meanwhile
        await until(new_turn)  # (its microphone's audio follows the listen start by a frame or more)
        await device.mqtt.udp.open()
        for _ in range(MOVE_EVIDENCE):
            device.mqtt.udp.send_datagram(next(packets))
        await until(lambda: channel.peer != peer)
        assert channel.peer is not None
        assert channel.peer[0] == peer[0]
        assert link.audio_frames == frames + 1 + MOVE_EVIDENCE  # none of its audio was lost
        moved = channel.peer

        await device.send_json(listen_start)  # the next turn: a neighbour of its address guesses
        await until(new_turn)
        header = device.mqtt.udp.seal(next(packets))[:16]  # what an observer of the path has seen
        guesses = random.Random(7)
        first = device.mqtt.udp.local_sequence + 1

        def refused(count: int) -> Callable[[], bool]:
            return lambda: sum(link.log.counts.values()) == count

        for batch in range(10):  # in batches the socket's buffer holds, consecutive sequence numbers
            expected = sum(link.log.counts.values()) + 100
            for index in range(batch * 100, batch * 100 + 100):
                sequence = (first + index).to_bytes(4)
                other_port.sendto(header[:2] + (61).to_bytes(2) + header[4:12] + sequence + guesses.randbytes(61))
            await until(refused(expected))
        device.mqtt.udp.send_datagram(next(packets))  # sent after the guesses: handled after them
        await until(lambda: link.audio_frames == frames + 2 + MOVE_EVIDENCE)
        assert channel.peer == moved
        assert channel.audio is not None
        assert channel.audio.guesses == MOVE_GUESSES
    finally:
        elsewhere.close()
        other_port.close()
        await device.drop()
