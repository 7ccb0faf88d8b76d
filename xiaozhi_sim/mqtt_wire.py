"""MQTT 3.1.1 packets and the UDP channel's AES-CTR, as the clients build them (esp-mqtt, paho).

Written from the clients, not from the server's codec, so that each checks the other.
"""

import asyncio
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


class MqttRefused(Exception):
    """The endpoint answered CONNECT with a non-zero return code (or closed instead)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"CONNACK return code {code}")
        self.code = code


def remaining_length(length: int) -> bytes:
    """MQTT's variable-length encoding of a packet's remaining length."""
    out = bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out)


def _str(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">H", len(data)) + data


def mqtt_connect(client_id: str, username: str, password: str, keepalive: int) -> bytes:
    """CONNECT as esp-mqtt sends it (MQTT 3.1.1, clean session, user name and password)."""
    flags = 0x02 | (0x80 if username else 0) | (0x40 if password else 0)
    body = _str("MQTT") + bytes([4, flags]) + struct.pack(">H", keepalive) + _str(client_id)
    if username:
        body += _str(username)
    if password:
        body += _str(password)
    return bytes([0x10]) + remaining_length(len(body)) + body


def mqtt_subscribe(packet_id: int, topic: str, qos: int) -> bytes:
    """SUBSCRIBE to one topic (paho, as py-xiaozhi uses it)."""
    body = struct.pack(">H", packet_id) + _str(topic) + bytes([qos])
    return bytes([0x82]) + remaining_length(len(body)) + body


def mqtt_publish(topic: str, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH."""
    body = _str(topic) + payload
    return bytes([0x30]) + remaining_length(len(body)) + body


PINGREQ = bytes([0xC0, 0])
DISCONNECT = bytes([0xE0, 0])


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """(type, flags, body) of the next packet; IncompleteReadError at the end."""
    first = (await reader.readexactly(1))[0]
    length, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first >> 4, first & 0x0F, await reader.readexactly(length)


def aes_ctr(key: bytes, counter_block: bytes, data: bytes) -> bytes:
    """AES-128-CTR over ``data``, the 16-byte header as the counter (``CryptAesCtr``)."""
    context = Cipher(algorithms.AES(key), modes.CTR(counter_block)).encryptor()
    return context.update(data) + context.finalize()
