"""The MQTT+UDP transport: a small MQTT endpoint and one UDP audio socket inside Home Assistant.

A stock device given ``mqtt`` at its OTA check connects here at boot and stays connected:
its tools are callable, its settings applied and its status read while it is idle. It
publishes every JSON message and never subscribes, so this endpoint is no broker: each
authenticated client is one device link, and what is published to it is simply written to its
socket. Audio flows over UDP, encrypted, only while a conversation is open (the device's hello
opens one, ``goodbye`` closes it). See docs/protocol.md §3.

Credentials are the device's own: user name its MAC, password its token (handed out only to
the paired device, bound to its identity, see ota.py), so "Regenerate token" also ends an MQTT
session. Anything else is refused, counted per address, and logged once.
"""

import asyncio
import contextlib
import ipaddress
import logging
import secrets
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from .const import MQTT_PUBLISH_TOPIC, mqtt_topic
from .device import XiaozhiDevice
from .hub import Refused, XiaozhiHub
from .limits import SlidingWindow, Strikes
from .link import ClientInfo, DeviceLink
from .protocol import mqtt as codec
from .protocol.logs import OnceLogger
from .protocol.messages import ClientHello, ControlMessage, normalize_mac, server_hello
from .protocol.udp import AudioChannel, AudioPeer, UdpError, ssrc_of
from .repairs import async_udp_arrived, async_udp_blocked

_LOGGER = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 10.0
"""Seconds a new TCP connection has to send its CONNECT."""
SILENT_GRACE: Final = 1.0
"""Seconds a connection without CONNECT keeps its place when the table is full of single ones."""
MAX_UNAUTHENTICATED: Final = 1024
"""Connections at once that have not yet sent a valid CONNECT. A new one past it takes the place
of the oldest one of the source that holds the most: a flood crowds out itself, not a device."""
MAX_UNAUTHENTICATED_PER_ADDRESS: Final = 128
"""The same from one source (an IPv4 address, an IPv6 /64: one host has many addresses in it).
Devices connect at once after a power cut, each from its own address. Past it the source's oldest
silent connection gives way to the new one: devices behind the same NAT or in the same /64 as a
flooding host still get in."""
MAX_WRITE_BUFFER: Final = 256 * 1024
"""Bytes queued for a device that does not read before its link is dropped."""
WRITE_TIMEOUT: Final = 2.0
"""Seconds a write may wait for a device to read."""
FAILED_LOGINS: Final = 5
"""Wrong credentials from one address before its further wrong ones are answered slowly, for
``LOCKOUT`` s. Right credentials are never refused: the neighbours behind the same NAT guess."""
LOCKOUT: Final = 600.0
FREE_GUESSES: Final = 20
"""Wrong credentials a minute, from anywhere, answered at once; past it every wrong one waits."""
GUESS_DELAY: Final = 0.5
"""Seconds each wrong guess past the free ones adds to the wait for a refusal (at most ``MAX_GUESS_DELAY``)."""
MAX_GUESS_DELAY: Final = 10.0
DEFAULT_KEEPALIVE: Final = 240
"""The firmware's keepalive (NVS ``mqtt/keepalive``); we hand it out explicitly."""
MAX_KEEPALIVE: Final = 300
"""The longest keepalive honoured: a client asking for none (0) or for hours gets this one, so a
silent link still ends (1.5 times it without a packet)."""
UNANSWERED_LIMIT: Final = 3
"""Requests in a row a device may leave unanswered before its link is closed: one that keeps
pinging but no longer reads what is sent to it would hold every call for its full timeout."""
READ_SIZE: Final = 16384
UDP_DEADLINE: Final = 10.0
"""Seconds after ``listen start`` within which a device's first audio datagram must arrive."""


def source_of(address: str) -> str:
    """Whom a connection counts against: its IPv4 address, or its IPv6 /64 (one host's range)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return address


class MqttLink(DeviceLink):
    """One device connected over MQTT, with its UDP audio channel while a conversation is open."""

    transport_name = "mqtt"
    audio_in_order = False  # UDP beside MQTT
    conversation_is_connection = False  # each hello opens one, goodbye ends it

    def __init__(
        self,
        hass: HomeAssistant,
        endpoint: MqttEndpoint,
        device: XiaozhiDevice,
        client: ClientInfo,
        *,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        decoder: codec.PacketDecoder,
        keepalive: int,
        vision_url: str | None,
    ) -> None:
        self.endpoint = endpoint
        self.reader = reader
        self.writer = writer
        self.decoder = decoder
        self.keepalive = keepalive
        self.topic = mqtt_topic(device.mac)
        self.audio: AudioPeer | None = None  # the conversation's UDP channel and where its audio goes
        self.closing = False
        self._cancel_udp_check: CALLBACK_TYPE | None = None
        super().__init__(hass, device, client, vision_url)
        self.session.hello_reply = self._hello_reply

    # -- the link ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The device is in from its CONNECT: discovery starts now, then packets until it leaves."""
        try:
            await self.session.start_without_hello()
            # The firmware pings every keepalive seconds; 1.5 times that without a packet is a dead link.
            # Keepalive 0 ("none") or an absurd one is not honoured: a silent link would stay forever.
            keepalive = self.keepalive if 0 < self.keepalive <= MAX_KEEPALIVE else MAX_KEEPALIVE
            timeout = keepalive * 1.5
            data = b""  # first what came with the CONNECT (a client may send on before the CONNACK)
            while not self.closing:
                for packet in self.decoder.feed(data):
                    if not await self._async_handle(packet):
                        return
                async with asyncio.timeout(timeout):
                    data = await self.reader.read(READ_SIZE)
                if not data:
                    return
        except TimeoutError:
            _LOGGER.info("Device %s sent nothing within its keepalive; closing its MQTT link", self.device.mac)
        except codec.MqttError as err:
            self.log.report(f"mqtt_{err.kind}", f"closed its MQTT link: {err.detail}")
        except (ConnectionError, RuntimeError) as err:
            _LOGGER.debug("Device %s: MQTT link lost: %s", self.device.mac, err)
        finally:
            self._close_channel()
            self._cleanup()
            self.writer.close()
            self.endpoint.links.discard(self)

    async def _async_handle(self, packet: codec.Packet) -> bool:
        """One packet from the device; False ends the link."""
        kind = packet.type
        if kind == codec.PacketType.PUBLISH:
            publish = codec.parse_publish(packet)
            if publish.qos == 1 and publish.packet_id is not None:
                await self._async_write(codec.acknowledge(codec.PacketType.PUBACK, publish.packet_id))
            elif publish.qos == 2 and publish.packet_id is not None:
                await self._async_write(codec.acknowledge(codec.PacketType.PUBREC, publish.packet_id))
            try:
                text = publish.payload.decode()
            except UnicodeDecodeError:
                self.log.report("not_text", "dropped an MQTT message that is not UTF-8")
                return True
            await self.session.handle_text(text)
        elif kind == codec.PacketType.PINGREQ:
            await self._async_write(codec.PINGRESP)
        elif kind == codec.PacketType.SUBSCRIBE:  # py-xiaozhi subscribes; delivery needs none
            packet_id, topics = codec.parse_subscribe(packet.body)
            await self._async_write(codec.suback(packet_id, [qos for _topic, qos in topics]))
        elif kind == codec.PacketType.UNSUBSCRIBE:
            await self._async_write(codec.acknowledge(codec.PacketType.UNSUBACK, codec.parse_packet_id(packet.body)))
        elif kind == codec.PacketType.PUBREL:
            await self._async_write(codec.acknowledge(codec.PacketType.PUBCOMP, codec.parse_packet_id(packet.body)))
        elif kind == codec.PacketType.DISCONNECT:
            return False
        elif kind in (codec.PacketType.PUBACK, codec.PacketType.PUBREC, codec.PacketType.PUBCOMP):
            pass  # we publish with QoS 0 only: nothing to acknowledge
        else:  # a second CONNECT, or a packet only servers send
            raise codec.MqttError("unexpected", f"packet type {kind} from a connected client")
        return True

    async def _async_write(self, data: bytes) -> None:
        """Write, bounded: a device that stops reading is dropped instead of filling memory."""
        if self.closing or self.writer.is_closing():
            raise ConnectionError("the MQTT link is closed")
        self.writer.write(data)
        drained = self.writer.transport.get_write_buffer_size() <= MAX_WRITE_BUFFER
        if drained:
            try:
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await self.writer.drain()
            except TimeoutError:
                drained = False
        if not drained:
            _LOGGER.info("Device %s does not read what is sent to it; dropping its MQTT link", self.device.mac)
            self.writer.transport.abort()
            raise ConnectionError("the device does not read")

    async def _async_send_text(self, text: str) -> None:
        await self._async_write(codec.publish(self.topic, text.encode()))

    async def async_close(self, reason: str, code: int = 1000) -> None:
        """MQTT 3.1.1 has no server DISCONNECT: the socket is closed (the device reconnects in 60 s)."""
        _LOGGER.debug("Closing the MQTT link of %s: %s", self.device.mac, reason)
        self.closing = True
        self.session.close(reason)
        self.writer.close()
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await self.writer.wait_closed()
        except TimeoutError:
            self.writer.transport.abort()
        except ConnectionError, RuntimeError:
            pass

    @callback
    def async_check_alive(self, missed_allowed: int) -> None:
        """The keepalive deadline in ``run`` watches that packets come; this, that the device reads.

        MQTT has no server ping. A device that pings but answers none of our last requests has
        stopped reading (or its firmware hangs): its link is closed, as an unanswered WebSocket
        ping closes a connection.
        """
        if self.session.mcp.unanswered_in_a_row >= UNANSWERED_LIMIT and not self.closing:
            _LOGGER.info(
                "Device %s answered none of its last %d requests; closing its MQTT link",
                self.device.mac,
                UNANSWERED_LIMIT,
            )
            self.hass.async_create_task(self.async_close("answers no request"), eager_start=True)

    # -- the audio channel ---------------------------------------------------------------------

    @property
    def audio_open(self) -> bool:
        """Audio reaches the device only through a channel it opened and proved (a datagram)."""
        return self.channel is not None and self.peer is not None

    def _hello_reply(self, hello: ClientHello) -> dict[str, Any]:
        """A device hello opens a conversation: new keys, a new session id, the UDP address."""
        self._close_channel()
        channel = AudioChannel(frame_ms=hello.audio_params.frame_duration)
        while channel.ssrc in self.endpoint.channels:  # the tag routes datagrams: unique
            channel = AudioChannel(frame_ms=hello.audio_params.frame_duration)
        self.audio = AudioPeer(channel)
        self.endpoint.channels[channel.ssrc] = self
        self.session.session_id = secrets.token_hex(8)
        reply = server_hello(self.session.session_id, self.session.sample_rate)
        reply["transport"] = "udp"
        reply["udp"] = channel.hello_fields(self.endpoint.udp_host(self.writer), self.endpoint.udp_port)
        self.device.async_open_conversation(self)  # a new one: nothing of the last (its silence) carries over
        return reply

    def _close_channel(self) -> None:
        if self._cancel_udp_check is not None:
            self._cancel_udp_check()
            self._cancel_udp_check = None
        if self.audio is None:
            return
        if self.endpoint.channels.get(self.audio.channel.ssrc) is self:
            del self.endpoint.channels[self.audio.channel.ssrc]
        self.audio = None
        self.device.async_end_conversation(self)
        self.device.async_link_changed()

    @property
    def channel(self) -> AudioChannel | None:
        """The open conversation's keys and counters."""
        return self.audio.channel if self.audio is not None else None

    @property
    def peer(self) -> tuple[str, int] | None:
        """Where the channel's audio goes: an address that proved the session (``AudioPeer``)."""
        return self.audio.address if self.audio is not None else None

    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        """An uplink datagram naming this link's channel: audio only if it proves the session."""
        audio = self.audio
        if audio is None:
            return
        was = audio.address
        try:
            packets = audio.receive(data, addr)
        except UdpError as err:
            self.log.report(f"udp_{err.kind}", f"dropped a datagram from {addr[0]}: {err.detail}")
            return
        if audio.address != was:
            if was is None and self.endpoint.udp_blocked:
                self.endpoint.udp_blocked = False
                async_udp_arrived(self.hass)
            if was is not None:
                _LOGGER.debug("Device %s now sends audio from %s", self.device.mac, addr)
            self.device.async_link_changed()
        for packet in packets:
            self.audio_frames += 1
            self._deliver_audio(packet)

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One Opus packet over UDP; False while no proved channel is open."""
        channel, peer = self.channel, self.peer
        if channel is None or peer is None or self.closing:
            return False
        try:
            datagram = channel.seal(packet, timestamp)
        except UdpError as err:
            self.log.report(f"udp_{err.kind}", err.detail)
            return False
        return self.endpoint.send_datagram(datagram, peer)

    def on_control(self, message: ControlMessage) -> None:
        """``goodbye`` ends the conversation (the link stays); the rest goes to the satellite."""
        if message.type == "listen" and message.data.get("state") == "start":
            if self.audio is not None:
                self.audio.new_turn()
            self._expect_audio()
        if message.type == "goodbye":
            self._close_channel()
            if (voice := self.device.voice) is not None:
                voice.on_disconnect(self)
            return
        super().on_control(message)

    @callback
    def _expect_audio(self) -> None:
        """The device streams its microphone now: its first datagram should arrive soon."""
        if self.peer is not None or self._cancel_udp_check is not None or self.channel is None:
            return

        @callback
        def check(_now: Any) -> None:
            self._cancel_udp_check = None
            if self.channel is not None and self.peer is None and not self.closing:
                _LOGGER.warning(
                    "Device %s talks, but none of its audio reached UDP port %s: a firewall, or Docker "
                    "without host networking, blocks it",
                    self.device.mac,
                    self.endpoint.udp_port,
                )
                self.endpoint.udp_blocked = True
                async_udp_blocked(self.hass, self.device.name, self.endpoint.udp_port)

        self._cancel_udp_check = async_call_later(self.hass, UDP_DEADLINE, check)

    async def async_end_conversation(self, reason: str) -> None:
        """``goodbye``: the device closes its audio channel and goes idle; the link stays."""
        if self.channel is None:
            return
        _LOGGER.debug("Ending the conversation of %s: %s", self.device.mac, reason)
        session_id = self.session.session_id
        self._close_channel()
        await self.async_send_json({"type": "goodbye", "session_id": session_id})


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, endpoint: MqttEndpoint) -> None:
        self.endpoint = endpoint

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.endpoint.on_datagram(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        _LOGGER.debug("UDP audio socket: %s", exc)


class MqttEndpoint:
    """The MQTT listener and the UDP audio socket of the hub."""

    def __init__(self, hass: HomeAssistant, hub: XiaozhiHub, port: int, udp_port: int, host: str | None) -> None:
        self.hass = hass
        self.hub = hub
        self.port = port
        self.udp_port = udp_port
        self.host = host
        self.wanted = (port, udp_port)  # as configured (0: any free port, in tests)
        self.links: set[MqttLink] = set()
        self.channels: dict[bytes, MqttLink] = {}
        self._server: asyncio.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        # Connected, no valid CONNECT yet: by source, and all of them, oldest first (dicts keep order).
        self._pending: dict[str, dict[asyncio.StreamWriter, None]] = {}
        self._pending_since: dict[asyncio.StreamWriter, tuple[float, str]] = {}
        self._failures = Strikes(LOCKOUT, 1024, clock=hass.loop.time)  # wrong credentials by address
        self._recent_guesses = SlidingWindow(4 * MAX_UNAUTHENTICATED, 60.0, clock=hass.loop.time)  # from anywhere
        self.log = OnceLogger("mqtt", _LOGGER)
        self.refused = 0
        self.udp_blocked = False  # the repair is up

    @property
    def listening(self) -> bool:
        """Both sockets are bound: only then does OTA hand out ``mqtt``."""
        return self._server is not None and self._udp is not None

    async def async_start(self) -> OSError | None:
        """Bind both ports; the error when either cannot be bound (nothing stays bound then)."""
        loop = asyncio.get_running_loop()
        try:
            self._server = await asyncio.start_server(self._async_accept, self.host, self.port, reuse_address=True)
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(self), local_addr=(self.host or "0.0.0.0", self.udp_port)
            )
        except OSError as err:
            await self.async_stop()
            return err
        self._udp = transport
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        if self.udp_port == 0:
            self.udp_port = transport.get_extra_info("sockname")[1]
        _LOGGER.info("Listening for devices on MQTT port %s (TCP) and audio port %s (UDP)", self.port, self.udp_port)
        return None

    async def async_stop(self) -> None:
        """Stop listening; links still open are closed by the hub, half-open ones here."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        for writer in list(self._pending_since):
            writer.transport.abort()
        await asyncio.gather(*(link.async_close("endpoint stopped") for link in list(self.links)))

    @callback
    def credentials(self, device: XiaozhiDevice, host: str) -> dict[str, Any]:
        """The ``mqtt`` object of a paired device's OTA answer (every field py-xiaozhi needs)."""
        return {
            "endpoint": f"{host}:{self.port}",
            "client_id": f"xiaozhi_local-{device.mac.replace(':', '')}",
            "username": device.mac,
            "password": device.token,
            "keepalive": DEFAULT_KEEPALIVE,
            "publish_topic": MQTT_PUBLISH_TOPIC,
            "subscribe_topic": mqtt_topic(device.mac),
        }

    def udp_host(self, writer: asyncio.StreamWriter) -> str:
        """The IPv4 address the device reached us at (the firmware's UDP socket is IPv4 only)."""
        sockname = writer.get_extra_info("sockname")
        address = str(sockname[0]) if sockname else ""
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(address)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            if isinstance(ip, ipaddress.IPv4Address):
                return address
        return self.hub.device_host()

    def send_datagram(self, data: bytes, addr: tuple[str, int]) -> bool:
        """One datagram out (never blocks; False when the socket is gone)."""
        if self._udp is None or self._udp.is_closing():
            return False
        self._udp.sendto(data, addr)
        return True

    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        """Route by the session tag; anything else is dropped (and counted)."""
        link = self.channels.get(ssrc_of(data)) if len(data) >= 8 else None
        if link is None:
            self.refused += 1
            self.log.report("udp_unknown", f"dropped a datagram from {addr[0]} that belongs to no session")
            return
        link.on_datagram(data, addr)

    # -- accepting devices --------------------------------------------------------------------

    def _count_failure(self, address: str) -> float:
        """A wrong guess from ``address``: seconds to wait before it is refused.

        At once while the address has made fewer than ``FAILED_LOGINS`` and everyone fewer than
        ``FREE_GUESSES`` in the last minute; then slower and slower. Guessing from many addresses
        is slowed as much as from one: the wait grows with every wrong guess, wherever it came from.
        """
        failures = self._failures.add(address)
        if failures == FAILED_LOGINS:
            _LOGGER.warning(
                "MQTT: %s gave wrong device credentials %d times; its further wrong ones are answered "
                "slowly for %d minutes (right ones are not)",
                address,
                FAILED_LOGINS,
                int(LOCKOUT // 60),
            )
        over = max(0, self._recent_guesses.count() - FREE_GUESSES) + max(0, failures - FAILED_LOGINS) * 4
        return min(MAX_GUESS_DELAY, GUESS_DELAY * over) if over else 0.0

    @property
    def pending_count(self) -> int:
        """Connections that have not sent a valid CONNECT yet."""
        return len(self._pending_since)

    def _make_room(self, source: str) -> bool:
        """Room for a new connection from ``source``: False when it may not have one now.

        Past the global bound the oldest connection of the source that holds the most goes (a
        flood crowds out itself), or, when every source holds as few, the oldest of all if it
        has been silent for a while (a device sends its CONNECT right after connecting).
        """
        if self.pending_count < MAX_UNAUTHENTICATED:
            return True
        busiest = max(self._pending, key=lambda key: len(self._pending[key]))
        if busiest != source and len(self._pending[busiest]) > len(self._pending.get(source, {})) + 1:
            victim = next(iter(self._pending[busiest]))
        else:
            victim = next(iter(self._pending_since))
            if self.hass.loop.time() - self._pending_since[victim][0] < SILENT_GRACE:
                return False
        self._forget_pending(victim)
        victim.transport.abort()
        return True

    def _room_in_source(self, source: str) -> bool:
        """Room for one more connection from ``source`` (an address, or an IPv6 /64: a whole LAN).

        Past its bound the source's oldest connection goes, once it has been silent for a while
        (a device sends its CONNECT right after connecting): one host holding idle sockets cannot
        lock out the other devices of its LAN or NAT, whose connection is always the newest.
        """
        writers = self._pending.get(source, {})
        if len(writers) < MAX_UNAUTHENTICATED_PER_ADDRESS:
            return True
        oldest = next(iter(writers))
        if self.hass.loop.time() - self._pending_since[oldest][0] < SILENT_GRACE:
            return False  # all of them just came: a burst crowds out itself
        self._forget_pending(oldest)
        oldest.transport.abort()
        return True

    def _forget_pending(self, writer: asyncio.StreamWriter) -> None:
        _since, source = self._pending_since.pop(writer, (0.0, ""))
        writers = self._pending.get(source)
        if writers is None or writer not in writers:
            return
        del writers[writer]
        if not writers:
            del self._pending[source]

    async def _async_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        source = source_of(address)
        if self.hub.stopping or not self._room_in_source(source) or not self._make_room(source):
            self.log.report("mqtt_flood", f"too many connections without a CONNECT (from {address}); closing new ones")
            writer.transport.abort()
            return
        self._pending.setdefault(source, {})[writer] = None
        self._pending_since[writer] = (self.hass.loop.time(), source)
        link: MqttLink | None = None
        try:
            link = await self._async_handshake(reader, writer, address)
        except (TimeoutError, codec.MqttError, ConnectionError, RuntimeError) as err:
            kind = err.kind if isinstance(err, codec.MqttError) else "no_connect"
            self.log.report(f"mqtt_{kind}", f"closed a connection from {address} before its CONNECT: {err}")
        except Exception:  # a bug of ours must not take the listener down: the client is closed
            _LOGGER.exception("MQTT: unexpected error with a connection from %s", address)
        finally:
            self._forget_pending(writer)
        if link is None:
            writer.close()
            return
        self.links.add(link)
        await self.hub.async_run_connection(link)

    async def _async_handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> MqttLink | None:
        """Read the CONNECT, check the credentials, answer; the new link, or None when refused."""
        decoder = codec.PacketDecoder()
        first: codec.Packet | None = None
        received = 0
        async with asyncio.timeout(CONNECT_TIMEOUT):
            while first is None:
                data = await reader.read(READ_SIZE)
                if not data:
                    return None
                # The connection's first byte, not each read's: a CONNECT may come in several segments.
                if not received and data[0] >> 4 != codec.PacketType.CONNECT:  # refused at once, not after 10 s
                    raise codec.MqttError("before_connect", f"packet type {data[0] >> 4} before CONNECT")
                received += len(data)
                for packet in decoder.feed(data):
                    first = packet
                    break
        if first.type != codec.PacketType.CONNECT:
            raise codec.MqttError("before_connect", f"packet type {first.type} before CONNECT")
        try:
            connect = codec.parse_connect(first.body)
        except codec.MqttError as err:
            if err.kind == "bad_protocol":
                writer.write(codec.connack(codec.ConnectCode.BAD_PROTOCOL))
            raise
        device, wait = self._authenticate(connect, address)
        if not isinstance(device, XiaozhiDevice):
            if wait:  # a guesser waits for its answer, its slot taken (it may hang up meanwhile)
                with contextlib.suppress(TimeoutError, ConnectionError):
                    async with asyncio.timeout(wait):
                        while await reader.read(READ_SIZE):
                            pass  # what it sends meanwhile is dropped
            writer.write(codec.connack(device))
            with contextlib.suppress(TimeoutError, ConnectionError):
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await writer.drain()
            return None
        writer.write(codec.connack(codec.ConnectCode.ACCEPTED))
        client = ClientInfo(
            client_id=device.identity.client_id or connect.client_id[:64], protocol_version=3, address=address or None
        )
        vision = self.hub.vision_url()
        return MqttLink(
            self.hass,
            self,
            device,
            client,
            reader=reader,
            writer=writer,
            decoder=decoder,
            keepalive=connect.keepalive,
            vision_url=vision,
        )

    def _authenticate(self, connect: codec.Connect, address: str) -> tuple[XiaozhiDevice | codec.ConnectCode, float]:
        """User name: the device's MAC; password: its token. With the seconds a refusal waits.

        Always checked: right credentials are never refused for what others at the same
        address did. Wrong ones are counted, and answered more slowly the more there are.
        """
        mac = normalize_mac(connect.username or "")
        result = self.hub.async_authenticate(mac, connect.password or "") if mac else Refused.GUESS
        if isinstance(result, XiaozhiDevice):
            if result.open:  # paired without a token (load testers): not over MQTT
                return codec.ConnectCode.NOT_AUTHORIZED, 0.0
            return result, 0.0
        self.refused += 1
        wait = self._count_failure(address) if result is Refused.GUESS else 0.0
        self.log.report("mqtt_refused", f"refused MQTT credentials from {address} ({result.value})")
        return codec.ConnectCode.BAD_CREDENTIALS, wait
