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
from collections import Counter
import contextlib
from dataclasses import dataclass
import ipaddress
import logging
import secrets
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from .const import MQTT_PUBLISH_TOPIC, mqtt_topic
from .device import XiaozhiDevice
from .hub import Refused, XiaozhiHub
from .link import ClientInfo, DeviceLink
from .protocol import mqtt as codec
from .protocol.messages import ClientHello, ControlMessage, normalize_mac, server_hello
from .protocol.session import OnceLogger
from .protocol.udp import AudioChannel, UdpError, ssrc_of
from .repairs import async_udp_arrived, async_udp_blocked

_LOGGER = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 10.0
"""Seconds a new TCP connection has to send its CONNECT."""
MAX_UNAUTHENTICATED: Final = 1024
"""Connections at once that have not yet sent a valid CONNECT; more are closed at once."""
MAX_UNAUTHENTICATED_PER_ADDRESS: Final = 128
"""The same from one address. Devices connect at once after a power cut (each from its own
address); a flood from one address cannot fill the table for the others."""
MAX_WRITE_BUFFER: Final = 256 * 1024
"""Bytes queued for a device that does not read before its link is dropped."""
WRITE_TIMEOUT: Final = 2.0
"""Seconds a write may wait for a device to read."""
FAILED_LOGINS: Final = 5
"""Wrong credentials from one address before it is refused without a check for ``LOCKOUT`` s."""
LOCKOUT: Final = 600.0
DEFAULT_KEEPALIVE: Final = 240
"""The firmware's keepalive (NVS ``mqtt/keepalive``); we hand it out explicitly."""
READ_SIZE: Final = 16384
UDP_DEADLINE: Final = 10.0
"""Seconds after ``listen start`` within which a device's first audio datagram must arrive."""


@dataclass
class _Failures:
    count: int
    first: float


class MqttLink(DeviceLink):
    """One device connected over MQTT, with its UDP audio channel while a conversation is open."""

    transport_name = "mqtt"

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
        self.channel: AudioChannel | None = None
        self.peer: tuple[str, int] | None = None  # where the channel's audio goes: proved by a datagram
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
            timeout = self.keepalive * 1.5 if self.keepalive else None
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
        """The keepalive deadline in ``run`` watches the link; nothing to ping."""

    # -- the audio channel ---------------------------------------------------------------------

    @property
    def conversation_open(self) -> bool:
        """Whether the device opened its audio channel (hello) and has not said goodbye."""
        return self.channel is not None

    @property
    def audio_open(self) -> bool:
        """Audio reaches the device only through a channel it opened and proved (a datagram)."""
        return self.channel is not None and self.peer is not None

    def _hello_reply(self, hello: ClientHello) -> dict[str, Any]:
        """A device hello opens a conversation: new keys, a new session id, the UDP address."""
        self._close_channel()
        self.channel = AudioChannel(frame_ms=hello.audio_params.frame_duration)
        while self.channel.ssrc in self.endpoint.channels:  # the tag routes datagrams: unique
            self.channel = AudioChannel(frame_ms=hello.audio_params.frame_duration)
        self.endpoint.channels[self.channel.ssrc] = self
        self.session.session_id = secrets.token_hex(8)
        reply = server_hello(self.session.session_id, self.session.sample_rate)
        reply["transport"] = "udp"
        reply["udp"] = self.channel.hello_fields(self.endpoint.udp_host(self.writer), self.endpoint.udp_port)
        return reply

    def _close_channel(self) -> None:
        if self._cancel_udp_check is not None:
            self._cancel_udp_check()
            self._cancel_udp_check = None
        if self.channel is None:
            return
        if self.endpoint.channels.get(self.channel.ssrc) is self:
            del self.endpoint.channels[self.channel.ssrc]
        self.channel = None
        self.peer = None
        self.device.async_link_changed()

    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        """An uplink datagram naming this link's channel: audio only if it proves the session."""
        channel = self.channel
        if channel is None:
            return
        try:
            packet = channel.open(data)
        except UdpError as err:
            self.log.report(f"udp_{err.kind}", f"dropped a datagram from {addr[0]}: {err.detail}")
            return
        if self.peer != addr:
            if self.peer is None:
                if self.endpoint.udp_blocked:
                    self.endpoint.udp_blocked = False
                    async_udp_arrived(self.hass)
            else:
                _LOGGER.debug("Device %s now sends audio from %s", self.device.mac, addr)
            self.peer = addr
            self.device.async_link_changed()
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
        self._pending: set[asyncio.StreamWriter] = set()  # connected, no valid CONNECT yet
        self._pending_from: Counter[str] = Counter()
        self._failures: dict[str, _Failures] = {}
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
        for writer in list(self._pending):
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

    def _locked_out(self, address: str) -> bool:
        failures = self._failures.get(address)
        if failures is None:
            return False
        if self.hass.loop.time() - failures.first > LOCKOUT:
            del self._failures[address]
            return False
        return failures.count >= FAILED_LOGINS

    def _count_failure(self, address: str) -> None:
        now = self.hass.loop.time()
        failures = self._failures.get(address)
        if failures is None or now - failures.first > LOCKOUT:
            if len(self._failures) >= 1024:  # bounded: forget the oldest
                del self._failures[min(self._failures, key=lambda key: self._failures[key].first)]
            failures = self._failures[address] = _Failures(0, now)
        failures.count += 1
        if failures.count == FAILED_LOGINS:
            _LOGGER.warning(
                "MQTT: %s gave wrong device credentials %d times; refusing it for %d minutes",
                address,
                FAILED_LOGINS,
                int(LOCKOUT // 60),
            )

    async def _async_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        if (
            len(self._pending) >= MAX_UNAUTHENTICATED
            or self._pending_from[address] >= MAX_UNAUTHENTICATED_PER_ADDRESS
            or self.hub.stopping
        ):
            self.log.report("mqtt_flood", f"too many connections without a CONNECT (from {address}); closing new ones")
            writer.transport.abort()
            return
        self._pending.add(writer)
        self._pending_from[address] += 1
        link: MqttLink | None = None
        try:
            link = await self._async_handshake(reader, writer, address)
        except (TimeoutError, codec.MqttError, ConnectionError, RuntimeError) as err:
            kind = err.kind if isinstance(err, codec.MqttError) else "no_connect"
            self.log.report(f"mqtt_{kind}", f"closed a connection from {address} before its CONNECT: {err}")
        except Exception:  # a bug of ours must not take the listener down: the client is closed
            _LOGGER.exception("MQTT: unexpected error with a connection from %s", address)
        finally:
            self._pending.discard(writer)
            self._pending_from[address] -= 1
            if not self._pending_from[address]:
                del self._pending_from[address]
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
        device = self._authenticate(connect, address)
        if not isinstance(device, XiaozhiDevice):
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

    def _authenticate(self, connect: codec.Connect, address: str) -> XiaozhiDevice | codec.ConnectCode:
        """User name: the device's MAC; password: its token. Wrong ones are counted per address."""
        if self._locked_out(address):
            self.refused += 1
            return codec.ConnectCode.NOT_AUTHORIZED
        mac = normalize_mac(connect.username or "")
        result = self.hub.async_authenticate(mac, connect.password or "") if mac else Refused.GUESS
        if isinstance(result, XiaozhiDevice):
            if result.open:  # paired without a token (load testers): not over MQTT
                return codec.ConnectCode.NOT_AUTHORIZED
            return result
        self.refused += 1
        if result is Refused.GUESS:
            self._count_failure(address)
        self.log.report("mqtt_refused", f"refused MQTT credentials from {address} ({result.value})")
        return codec.ConnectCode.BAD_CREDENTIALS
