"""The MQTT+UDP transport: a small MQTT endpoint and one UDP audio socket inside Home Assistant.

A stock device given ``mqtt`` at its OTA check connects here at boot and stays connected:
its tools are callable, its settings applied and its status read while it is idle. It
publishes every JSON message and never subscribes, so this endpoint is no broker: each
authenticated client is one device link carried by an ``MqttChannel`` (``transport/mqtt_channel.py``), and
what is published to it is simply written to its socket. Audio flows over UDP, encrypted, only
while a conversation is open (the device's hello opens one, ``goodbye`` closes it): this module
owns the socket and routes each datagram to its channel by the session tag. See docs/protocol.md §3.

This module is the door: the listener, the CONNECT, and the bounds on connections that never log
in (per source and in total). A wrong CONNECT is answered and closed at once: a refusal held open
would hold a slot the devices behind the same NAT need, and a token is 256 random bits, so slowing
a guesser buys nothing.

Credentials are the device's own: user name its MAC, password its token (handed out only to
the paired device, bound to its identity, see admission/ota.py), so "Regenerate token" also ends an MQTT
session. Anything else is refused, counted per address, and logged once.
"""

import asyncio
import ipaddress
import logging
from typing import Any, Final

from homeassistant.core import HomeAssistant, callback

from ..admission.gate import DeviceGate, Refused
from ..const import MQTT_PUBLISH_TOPIC, mqtt_topic
from ..device import XiaozhiDevice
from ..limits import Strikes
from ..link import ClientInfo, DeviceLink
from ..protocol import mqtt as codec
from ..protocol.logs import OnceLogger
from ..protocol.messages import normalize_mac
from .mqtt_channel import READ_SIZE, MqttChannel, UdpRoutes
from .udp_socket import UdpSocket

_LOGGER = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 10.0
"""Seconds a new TCP connection has to send its CONNECT."""
MAX_UNAUTHENTICATED: Final = 1024
"""Connections at once that have not yet sent a valid CONNECT. A new one past it takes the place
of the oldest one of the source that holds the most: a flood crowds out itself, not a device."""
MAX_UNAUTHENTICATED_PER_ADDRESS: Final = 128
"""The same from one source (an IPv4 address, an IPv6 /64: one host has many addresses in it).
Behind a NAT, in one /64, or through Docker's published ports every device of a home arrives from
one source: that is the normal case. Past the bound the source's oldest connection that has not
sent its whole CONNECT gives way to the new one, whatever its age: a device sends its CONNECT
within milliseconds of connecting, so a host that keeps reopening sockets only ever pushes out
its own, however fast it reopens. A connection whose CONNECT has arrived is never pushed out."""
FAILED_LOGINS: Final = 5
"""Wrong credentials from one address within ``LOCKOUT`` s before a warning says someone guesses
(once per address; every refusal is answered at once and counted in the diagnostics)."""
LOCKOUT: Final = 600.0
KEEPALIVE: Final = 20
"""Seconds between a device's pings, handed out in its OTA answer (the firmware stores it as NVS
``mqtt/keepalive``, 240 when none is given). A link is dead after 1.5 times it without a packet,
so a device whose power is cut (its sockets never close) is shown unavailable within 30 s, not
6 minutes; a ping is 2 bytes each way, 3 a minute per device."""


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


class MqttEndpoint:
    """The MQTT listener and the UDP audio socket; devices are let in through the hub's ``gate``."""

    def __init__(self, hass: HomeAssistant, gate: DeviceGate, port: int, udp_port: int, host: str | None) -> None:
        self.hass = hass
        self.gate = gate
        self.port = port
        self._udp = UdpSocket(hass, self.on_datagram)
        self.routes = UdpRoutes(self.send_datagram, gate.device_host, self._udp.drain)
        self.routes.port = udp_port
        self.host = host
        self.wanted = (port, udp_port)  # as configured (0: any free port, in tests)
        self.links: set[DeviceLink] = set()
        self._server: asyncio.Server | None = None
        # Connected, no valid CONNECT yet: by source, and all of them, oldest first (dicts keep order).
        self._pending: dict[str, dict[asyncio.StreamWriter, None]] = {}
        self._pending_since: dict[asyncio.StreamWriter, tuple[float, str]] = {}
        self._connect_read: set[asyncio.StreamWriter] = set()  # pending, but their CONNECT has arrived
        self._failures = Strikes(LOCKOUT, 1024, clock=hass.loop.time)  # wrong credentials by address
        self.log = OnceLogger("mqtt", _LOGGER)
        self.refused = 0

    @property
    def udp_port(self) -> int:
        """The UDP port devices send their audio to."""
        return self.routes.port

    @property
    def channels(self) -> dict[bytes, MqttChannel]:
        """Open conversations by their session tag."""
        return self.routes.channels

    @property
    def listening(self) -> bool:
        """Both sockets are bound: only then does OTA hand out ``mqtt``."""
        return self._server is not None and self._udp.open

    async def async_start(self) -> OSError | None:
        """Bind both ports; the error when either cannot be bound (nothing stays bound then)."""
        try:
            self._server = await asyncio.start_server(self._async_accept, self.host, self.port, reuse_address=True)
            udp_port = self._udp.bind(self.host, self.udp_port)
        except OSError as err:
            await self.async_stop()
            return err
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        self.routes.port = udp_port
        _LOGGER.info("Listening for devices on MQTT port %s (TCP) and audio port %s (UDP)", self.port, self.udp_port)
        return None

    async def async_stop(self) -> None:
        """Stop listening; links still open are closed by the hub, half-open ones here."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self._udp.close()
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
            "keepalive": KEEPALIVE,
            "publish_topic": MQTT_PUBLISH_TOPIC,
            "subscribe_topic": mqtt_topic(device.mac),
        }

    def send_datagram(self, data: bytes, addr: tuple[str, int]) -> bool:
        """One datagram out (never blocks; False when the socket is gone)."""
        return self._udp.sendto(data, addr)

    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        """Route by the session tag; anything else is dropped (and counted)."""
        channel = self.routes.route(data)
        if channel is None:
            self.refused += 1
            self.log.report("udp_unknown", f"dropped a datagram from {addr[0]} that belongs to no session")
            return
        channel.on_datagram(data, addr)

    # -- accepting devices --------------------------------------------------------------------

    def _count_failure(self, address: str) -> None:
        """A wrong guess from ``address``: counted, and one warning when it keeps guessing."""
        if self._failures.add(address) == FAILED_LOGINS:
            _LOGGER.warning(
                "MQTT: %s gave wrong device credentials %d times in %d minutes; each is refused at once",
                address,
                FAILED_LOGINS,
                int(LOCKOUT // 60),
            )

    @property
    def pending_count(self) -> int:
        """Connections that have not sent a valid CONNECT yet."""
        return len(self._pending_since)

    def _make_room(self, source: str) -> bool:
        """Room for a new connection from ``source``: False when it may not have one now.

        Past the global bound the oldest connection of the source that holds the most goes (a
        flood crowds out itself), or, when every source holds as few, the oldest of all; never
        one whose CONNECT has arrived.
        """
        if self.pending_count < MAX_UNAUTHENTICATED:
            return True
        busiest = max(self._pending, key=lambda key: len(self._pending[key]))
        if busiest != source and len(self._pending[busiest]) > len(self._pending.get(source, {})) + 1:
            victim = self._silent(self._pending[busiest])
        else:
            victim = self._silent(self._pending_since)
        return self._push_out(victim)

    def _room_in_source(self, source: str) -> bool:
        """Room for one more connection from ``source`` (an address, or an IPv6 /64: a whole LAN).

        Past its bound the source's oldest connection without a CONNECT goes, whatever its age: one
        host holding or reopening idle sockets cannot lock out the other devices of its LAN, NAT or
        Docker host, whose connection is always the newest and sends its CONNECT at once.
        """
        writers = self._pending.get(source, {})
        if len(writers) < MAX_UNAUTHENTICATED_PER_ADDRESS:
            return True
        return self._push_out(self._silent(writers))

    def _silent(self, writers: dict[asyncio.StreamWriter, Any]) -> asyncio.StreamWriter | None:
        """The oldest of ``writers`` whose CONNECT has not arrived."""
        return next((writer for writer in writers if writer not in self._connect_read), None)

    def _push_out(self, victim: asyncio.StreamWriter | None) -> bool:
        """Close ``victim`` to make room; False when there is none (every one has sent its CONNECT)."""
        if victim is None:
            return False
        self._forget_pending(victim)
        victim.transport.abort()
        return True

    def _forget_pending(self, writer: asyncio.StreamWriter) -> None:
        self._connect_read.discard(writer)
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
        if self.gate.stopping or not self._room_in_source(source) or not self._make_room(source):
            self.log.report("mqtt_flood", f"too many connections without a CONNECT (from {address}); closing new ones")
            writer.transport.abort()
            return
        self._pending.setdefault(source, {})[writer] = None
        self._pending_since[writer] = (self.hass.loop.time(), source)
        link: DeviceLink | None = None
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
        try:
            await self.gate.async_run_connection(link)
        finally:
            self.links.discard(link)

    async def _async_handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> DeviceLink | None:
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
                    self._connect_read.add(writer)  # from now on it is never pushed out for a newcomer
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
            # Answered and closed at once (no drain to wait on: the CONNACK is 4 bytes into an
            # empty buffer), so the refused connection's slot is free for the next one.
            writer.write(codec.connack(device))
            return None
        writer.write(codec.connack(codec.ConnectCode.ACCEPTED))
        client = ClientInfo(
            client_id=device.identity.client_id or connect.client_id[:64], protocol_version=3, address=address or None
        )
        vision = self.gate.vision_url()
        channel = MqttChannel(
            self.hass,
            self.routes,
            mqtt_topic(device.mac),
            reader=reader,
            writer=writer,
            decoder=decoder,
            keepalive=connect.keepalive,
        )
        return DeviceLink(self.hass, device, client, channel, vision)

    def _authenticate(self, connect: codec.Connect, address: str) -> XiaozhiDevice | codec.ConnectCode:
        """User name: the device's MAC; password: its token.

        Always checked: right credentials are never refused for what others at the same
        address did. Wrong ones are counted.
        """
        mac = normalize_mac(connect.username or "")
        result = self.gate.async_authenticate(mac, connect.password or "") if mac else Refused.GUESS
        if isinstance(result, XiaozhiDevice):
            if result.open:  # paired without a token (load testers): not over MQTT
                return codec.ConnectCode.NOT_AUTHORIZED
            return result
        self.refused += 1
        if result is Refused.GUESS:
            self._count_failure(address)
        self.log.report("mqtt_refused", f"refused MQTT credentials from {address} ({result.value})")
        return codec.ConnectCode.BAD_CREDENTIALS
