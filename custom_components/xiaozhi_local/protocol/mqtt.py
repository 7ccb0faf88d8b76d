"""MQTT 3.1.1, the part a xiaozhi device's client uses, from the broker's side (sans-IO).

The firmware (``esp-mqtt`` under ``main/protocols/mqtt_protocol.cc``) connects with a client id,
user name and password, publishes every JSON message with QoS 0 to one topic, pings, and never
subscribes: the server delivers to it by publishing on its session. py-xiaozhi (paho) also
subscribes (QoS 1) to the topic the OTA answer names. See docs/protocol.md §3.

Nothing here does I/O: ``PacketDecoder`` turns received bytes into packets, and the builders
make the bytes to send. Every length is bounded before anything is buffered.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

MAX_PACKET: Final = 96 * 1024
"""Largest remaining length accepted: a device's JSON message is at most 64 KiB, plus its topic."""


class PacketType(IntEnum):
    """Control packet types (the high nibble of the first byte)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14


class ConnectCode(IntEnum):
    """CONNACK return codes of MQTT 3.1.1."""

    ACCEPTED = 0
    BAD_PROTOCOL = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_CREDENTIALS = 4
    NOT_AUTHORIZED = 5


class MqttError(ValueError):
    """Bytes that are not an MQTT packet we accept; ``kind`` names the problem for logs."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Packet:
    """One control packet: its type, the low nibble of its first byte, and its body."""

    type: int
    flags: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Connect:
    """What a CONNECT says."""

    client_id: str
    username: str | None
    password: str | None
    keepalive: int
    level: int


@dataclass(frozen=True, slots=True)
class Publish:
    """A PUBLISH: its topic, payload, QoS and (QoS 1/2) packet id."""

    topic: str
    payload: bytes
    qos: int
    packet_id: int | None


class PacketDecoder:
    """Received bytes in, whole packets out; a bad or oversized packet raises MqttError."""

    def __init__(self, max_packet: int = MAX_PACKET) -> None:
        self.max_packet = max_packet
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[Packet]:
        """Take ``data``; yield each packet it completes."""
        self._buffer += data
        while True:
            header = _fixed_header(self._buffer, self.max_packet)
            if header is None:
                if len(self._buffer) > 5:  # never: a header is at most 5 bytes
                    raise MqttError("malformed", "unreadable fixed header")
                return
            offset, length = header
            if len(self._buffer) < offset + length:
                return
            first = self._buffer[0]
            body = bytes(self._buffer[offset : offset + length])
            del self._buffer[: offset + length]
            if first >> 4 == 0 or first >> 4 == 15:
                raise MqttError("malformed", f"reserved packet type {first >> 4}")
            yield Packet(first >> 4, first & 0x0F, body)


def _fixed_header(buffer: bytearray, max_packet: int) -> tuple[int, int] | None:
    """(header size, remaining length) once the header is complete; raises when it is invalid."""
    length = 0
    for index in range(1, min(len(buffer), 5)):
        byte = buffer[index]
        length |= (byte & 0x7F) << (7 * (index - 1))
        if length > max_packet:
            raise MqttError("too_large", f"a packet of more than {max_packet} bytes announced")
        if not byte & 0x80:
            return index + 1, length
    if len(buffer) >= 5:
        raise MqttError("malformed", "remaining length longer than four bytes")
    return None


class _Reader:
    """Reads the fields of one packet body; running past its end raises MqttError."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pos = 0

    def take(self, count: int) -> bytes:
        if self.pos + count > len(self.body):
            raise MqttError("malformed", "a field runs past the end of its packet")
        data = self.body[self.pos : self.pos + count]
        self.pos += count
        return data

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2))

    def binary(self) -> bytes:
        return self.take(self.u16())

    def text(self) -> str:
        try:
            return self.binary().decode()
        except UnicodeDecodeError:
            raise MqttError("malformed", "a string that is not UTF-8") from None

    @property
    def rest(self) -> bytes:
        return self.body[self.pos :]


def parse_connect(body: bytes) -> Connect:
    """A CONNECT body; protocol 3.1 (``MQIsdp``) and 3.1.1 (``MQTT``) are accepted."""
    reader = _Reader(body)
    name = reader.text()
    level = reader.u8()
    if (name, level) not in (("MQTT", 4), ("MQIsdp", 3)):
        raise MqttError("bad_protocol", f"protocol {name[:16]!r} level {level}")
    flags = reader.u8()
    if flags & 0x01:
        raise MqttError("malformed", "reserved CONNECT flag set")
    keepalive = reader.u16()
    client_id = reader.text()
    if flags & 0x04:  # a will: read past its topic and message
        reader.text()
        reader.binary()
    username = reader.text() if flags & 0x80 else None
    password = None
    if flags & 0x40:
        try:
            password = reader.binary().decode()
        except UnicodeDecodeError:
            password = ""  # never a token of ours: refused as a wrong password
    return Connect(client_id, username, password, keepalive, level)


def parse_publish(packet: Packet) -> Publish:
    """A PUBLISH packet (its flags carry QoS)."""
    qos = (packet.flags >> 1) & 0x03
    if qos == 3:
        raise MqttError("malformed", "PUBLISH with QoS 3")
    reader = _Reader(packet.body)
    topic = reader.text()
    packet_id = reader.u16() if qos else None
    return Publish(topic, reader.rest, qos, packet_id)


def parse_subscribe(body: bytes) -> tuple[int, list[tuple[str, int]]]:
    """A SUBSCRIBE: its packet id and (topic filter, requested QoS) pairs."""
    reader = _Reader(body)
    packet_id = reader.u16()
    topics: list[tuple[str, int]] = []
    while reader.pos < len(body):
        topics.append((reader.text(), reader.u8() & 0x03))
    if not topics:
        raise MqttError("malformed", "SUBSCRIBE without a topic")
    return packet_id, topics


def parse_packet_id(body: bytes) -> int:
    """The packet id that starts an UNSUBSCRIBE, PUBREL, PUBACK … body."""
    return _Reader(body).u16()


def _remaining_length(length: int) -> bytes:
    out = bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out)


def _packet(kind: PacketType, flags: int, body: bytes) -> bytes:
    return bytes([(kind << 4) | flags]) + _remaining_length(len(body)) + body


def _text(value: str) -> bytes:
    data = value.encode()
    return len(data).to_bytes(2) + data


def connack(code: ConnectCode) -> bytes:
    """The answer to CONNECT (never a present session: the server keeps none)."""
    return _packet(PacketType.CONNACK, 0, bytes([0, code]))


def publish(topic: str, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH: how every message reaches a device."""
    return _packet(PacketType.PUBLISH, 0, _text(topic) + payload)


def acknowledge(kind: PacketType, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBCOMP or UNSUBACK for ``packet_id``."""
    return _packet(kind, 0, packet_id.to_bytes(2))


def suback(packet_id: int, granted: list[int]) -> bytes:
    """SUBACK granting each requested QoS (capped at 1; nothing is delivered by topic)."""
    return _packet(PacketType.SUBACK, 0, packet_id.to_bytes(2) + bytes(min(qos, 1) for qos in granted))


PINGRESP: Final = _packet(PacketType.PINGRESP, 0, b"")
