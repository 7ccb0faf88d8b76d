"""One device on the MQTT transport: its packets, its keepalive and its UDP audio channel.

The endpoint (``transport/mqtt.py``) accepts the TCP connection and the CONNECT; from then on this channel
carries the device's link: JSON messages are PUBLISHes both ways, and while a conversation is open (the
device's hello opens it, ``goodbye`` ends it) its audio goes over the endpoint's UDP socket,
proved and routed by ``protocol/udp.py``'s ``AudioPeer``. See docs/protocol.md §3.
"""

import asyncio
from collections.abc import Callable
import contextlib
import ipaddress
import logging
import secrets
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from ..protocol import mqtt as codec
from ..protocol.messages import ClientHello, ControlMessage, server_hello
from ..protocol.session import HelloReply
from ..protocol.udp import AudioChannel, AudioPeer, UdpError, ssrc_of
from ..repairs import async_udp_arrived, async_udp_blocked
from .channel import Channel

_LOGGER = logging.getLogger(__name__)

READ_SIZE: Final = 16384
WRITE_TIMEOUT: Final = 2.0
"""Seconds a write may wait for a device to read."""
MAX_KEEPALIVE: Final = 300
"""The longest keepalive honoured: a client asking for none (0) or for hours gets this one, so a
silent link still ends (1.5 times it without a packet)."""
UNANSWERED_LIMIT: Final = 3
"""Requests in a row a device may leave unanswered before its link is closed: one that keeps
pinging but no longer reads what is sent to it would hold every call for its full timeout."""
UDP_DEADLINE: Final = 10.0
"""Seconds after ``listen start`` within which a device's first audio datagram must arrive."""
MAX_WRITE_BUFFER: Final = 256 * 1024
"""Bytes queued for a device that does not read before its link is dropped."""


class UdpRoutes:
    """The endpoint's UDP side as its channels use it (the endpoint, ``transport/mqtt.py``, owns it).

    The session tags that route uplink datagrams to their channel (each channel opens and closes
    its own), the socket downlink audio leaves by, the address and port a server hello names,
    and whether the "UDP blocked" repair is up.
    """

    def __init__(
        self,
        send: Callable[[bytes, tuple[str, int]], bool],
        device_host: Callable[[], str],
        drain: Callable[[], None],
    ) -> None:
        self.channels: dict[bytes, MqttChannel] = {}
        """Open conversations by their session tag."""
        self.port = 0
        self.blocked = False
        """The repair is up: no device's audio has reached the port yet."""
        self._send = send
        self._device_host = device_host
        self.drain = drain
        """Take the datagrams waiting on the socket now (its wake audio, before ``listen detect``)."""

    def open(self, channel: MqttChannel, frame_ms: int) -> AudioChannel:
        """A new conversation of ``channel``: keys and a session tag no other open one has."""
        audio = AudioChannel(frame_ms=frame_ms)
        while audio.ssrc in self.channels:  # the tag routes datagrams: unique
            audio = AudioChannel(frame_ms=frame_ms)
        self.channels[audio.ssrc] = channel
        return audio

    def close(self, audio: AudioChannel, channel: MqttChannel) -> None:
        """``channel``'s conversation ``audio`` is over: its datagrams go nowhere now."""
        if self.channels.get(audio.ssrc) is channel:
            del self.channels[audio.ssrc]

    def route(self, data: bytes) -> MqttChannel | None:
        """The channel an uplink datagram names, or None."""
        return self.channels.get(ssrc_of(data)) if len(data) >= 8 else None

    def send(self, data: bytes, addr: tuple[str, int]) -> bool:
        """One datagram out (never blocks; False when the socket is gone)."""
        return self._send(data, addr)

    def host_for(self, writer: asyncio.StreamWriter) -> str:
        """The IPv4 address the device reached us at (the firmware's UDP socket is IPv4 only)."""
        sockname = writer.get_extra_info("sockname")
        address = str(sockname[0]) if sockname else ""
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(address)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            if isinstance(ip, ipaddress.IPv4Address):
                return address
        return self._device_host()


class MqttChannel(Channel):
    """One device connected over MQTT, with its UDP audio channel while a conversation is open."""

    name = "mqtt"
    audio_in_order = False  # UDP beside MQTT
    conversation_is_connection = False  # each hello opens one, goodbye ends it

    def __init__(
        self,
        hass: HomeAssistant,
        routes: UdpRoutes,
        topic: str,
        *,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        decoder: codec.PacketDecoder,
        keepalive: int,
    ) -> None:
        self.hass = hass
        self.routes = routes
        self.reader = reader
        self.writer = writer
        self.decoder = decoder
        self.keepalive = keepalive
        self.topic = topic
        self.audio: AudioPeer | None = None  # the conversation's UDP channel and where its audio goes
        self.closing = False
        self._cancel_udp_check: CALLBACK_TYPE | None = None

    def hello_reply_builder(self) -> HelloReply:
        """Each hello opens a conversation with its own UDP channel: the server hello names it."""
        return self._hello_reply

    # -- the connection ------------------------------------------------------------------------------

    async def async_receive(self) -> None:
        """The device is in from its CONNECT: discovery starts now, then packets until it leaves."""
        link = self.link
        try:
            await link.session.start_without_hello()
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
            _LOGGER.info("Device %s sent nothing within its keepalive; closing its MQTT link", self.mac)
        except codec.MqttError as err:
            self.link.log.report(f"mqtt_{err.kind}", f"closed its MQTT link: {err.detail}")
        except (ConnectionError, RuntimeError) as err:
            _LOGGER.debug("Device %s: MQTT link lost: %s", self.mac, err)
        finally:
            self._close_channel()
            link.ended()
            self.writer.close()

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
                self.link.log.report("not_text", "dropped an MQTT message that is not UTF-8")
                return True
            await self.link.async_receive_text(text)
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
            _LOGGER.info("Device %s does not read what is sent to it; dropping its MQTT link", self.mac)
            self.writer.transport.abort()
            raise ConnectionError("the device does not read")

    async def async_send_text(self, text: str) -> None:
        """One JSON message, published on the device's topic (QoS 0)."""
        await self._async_write(codec.publish(self.topic, text.encode()))

    async def async_close(self, reason: str, code: int = 1000) -> None:
        """MQTT 3.1.1 has no server DISCONNECT: the socket is closed (the device reconnects in 60 s)."""
        self.closing = True
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
        if self.link.requests_unanswered >= UNANSWERED_LIMIT and not self.closing:
            _LOGGER.info(
                "Device %s answered none of its last %d requests; closing its MQTT link",
                self.mac,
                UNANSWERED_LIMIT,
            )
            self.link.create_task(self.link.async_close("answers no request"), "close")

    # -- the audio channel ---------------------------------------------------------------------

    @property
    def audio_open(self) -> bool:
        """Audio reaches the device only through a channel it opened and proved (a datagram)."""
        return self.udp is not None and self.peer is not None

    def _hello_reply(self, hello: ClientHello) -> dict[str, Any]:
        """A device hello opens a conversation: new keys, a new session id, the UDP address."""
        self._close_channel()
        channel = self.routes.open(self, hello.audio_params.frame_duration)
        self.audio = AudioPeer(channel)
        session = self.link.session
        session.session_id = secrets.token_hex(8)
        reply = server_hello(session.session_id, session.sample_rate)
        reply["transport"] = "udp"
        reply["udp"] = channel.hello_fields(self.routes.host_for(self.writer), self.routes.port)
        self.link.conversation_opened()  # a new one: nothing of the last (its silence) carries over
        return reply

    def _close_channel(self, *, by_device: bool = False) -> None:
        if self._cancel_udp_check is not None:
            self._cancel_udp_check()
            self._cancel_udp_check = None
        if self.audio is None:
            return
        self.routes.close(self.audio.channel, self)
        self.audio = None
        self.link.conversation_closed(by_device=by_device)

    @property
    def udp(self) -> AudioChannel | None:
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
            self.link.log.report(f"udp_{err.kind}", f"dropped a datagram from {addr[0]}: {err.detail}")
            return
        if audio.address != was:
            if was is None and self.routes.blocked:
                self.routes.blocked = False
                async_udp_arrived(self.hass)
            if was is not None:
                _LOGGER.debug("Device %s now sends audio from %s", self.mac, addr)
            self.link.channel_changed()
        for packet in packets:
            self.link.deliver_audio(packet)

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One Opus packet over UDP; False while no proved channel is open."""
        channel, peer = self.udp, self.peer
        if channel is None or peer is None or self.closing:
            return False
        try:
            datagram = channel.seal(packet, timestamp)
        except UdpError as err:
            self.link.log.report(f"udp_{err.kind}", err.detail)
            return False
        return self.routes.send(datagram, peer)

    def on_control(self, message: ControlMessage) -> bool:
        """``goodbye`` ends the conversation (the link stays); the rest goes to the satellite.

        Before a ``listen detect``, the datagrams waiting are taken: the wake word's audio, sent
        just before it, is then in (asyncio reads one datagram a turn; a burst of 33 was mostly
        still in the socket's buffer). Not before other messages: what follows a ``listen start``
        belongs to the new turn.
        """
        if message.type == "listen" and message.data.get("state") == "detect" and self.audio is not None:
            self.routes.drain()
        if message.type == "listen" and message.data.get("state") == "start":
            if self.audio is not None:
                self.audio.new_turn()
            self._expect_audio()
        if message.type == "goodbye":
            self._close_channel(by_device=True)
            return True
        return False

    @callback
    def _expect_audio(self) -> None:
        """The device streams its microphone now: its first datagram should arrive soon."""
        if self.peer is not None or self._cancel_udp_check is not None or self.udp is None:
            return

        @callback
        def check(_now: Any) -> None:
            self._cancel_udp_check = None
            if self.udp is not None and self.peer is None and not self.closing:
                _LOGGER.warning(
                    "Device %s talks, but none of its audio reached UDP port %s: a firewall, or Docker "
                    "without host networking, blocks it",
                    self.mac,
                    self.routes.port,
                )
                self.routes.blocked = True
                async_udp_blocked(self.hass, self.link.device.name, self.routes.port)

        self._cancel_udp_check = async_call_later(self.hass, UDP_DEADLINE, check)

    async def async_end_conversation(self, reason: str) -> bool:
        """``goodbye``: the device closes its audio channel and goes idle; the connection stays."""
        if self.udp is None:
            return True
        _LOGGER.debug("Ending the conversation of %s: %s", self.mac, reason)
        session_id = self.link.session.session_id
        self._close_channel()
        await self.link.async_send_json({"type": "goodbye", "session_id": session_id})
        return True
