"""The audio channel of the firmware's MQTT transport: UDP datagrams sealed with AES-128-CTR.

``mqtt_protocol.cc``: the server hello's ``udp`` gives the address, key and nonce; each uplink
datagram is the nonce with length, timestamp and sequence written in (py-xiaozhi keeps bytes 8–11
of the nonce), then the ciphertext whose counter block is that header. Downlink datagrams must be
type 0x01, their length exact and their sequence above the last; the rest are dropped.
"""

import asyncio
from collections.abc import Callable
import struct
from typing import Any

from .mqtt_wire import aes_ctr


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, channel: UdpChannel) -> None:
        self.channel = channel

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.channel.on_datagram(data)


class UdpChannel:
    """One conversation's UDP socket; ``on_audio`` hears each downlink packet, decrypted."""

    def __init__(self, on_audio: Callable[[bytes], None], *, keeps_nonce_timestamp: bool) -> None:
        self._on_audio = on_audio
        self._keeps_nonce_timestamp = keeps_nonce_timestamp  # py-xiaozhi writes no timestamp
        self._transport: asyncio.DatagramTransport | None = None
        self._key = b""
        self._nonce = b""
        self.address: tuple[str, int] | None = None
        self.local_sequence = 0
        self.remote_sequence = 0
        self.datagrams_dropped = 0

    def configure(self, udp: Any) -> bool:
        """The server hello's ``udp``: False (and nothing kept) when a field is invalid."""
        if not isinstance(udp, dict):
            return False
        server, port, key, nonce = udp.get("server"), udp.get("port"), udp.get("key"), udp.get("nonce")
        if not isinstance(server, str) or not isinstance(port, int) or not 0 < port <= 65535:
            return False
        try:
            key_bytes, nonce_bytes = bytes.fromhex(str(key)), bytes.fromhex(str(nonce))
        except ValueError:
            return False
        if len(key_bytes) != 16 or len(nonce_bytes) != 16:
            return False
        self._key, self._nonce = key_bytes, nonce_bytes
        self.address = (server, port)
        self.local_sequence = self.remote_sequence = 0
        return True

    @property
    def is_open(self) -> bool:
        """Whether the socket exists (``IsAudioChannelOpened``, without its 120 s timeout)."""
        return self._transport is not None

    async def open(self) -> None:
        """A socket connected to the configured address (a NAT rebinding: a new one, same session)."""
        assert self.address is not None
        self.close()
        self._transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Protocol(self), remote_addr=self.address
        )

    def close(self) -> None:
        """The socket goes (the session's key and sequences stay until the next hello)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def send_datagram(self, payload: bytes, timestamp: int = 0) -> bytes:
        """``SendAudio``: the nonce with length, timestamp and sequence written in; returns it."""
        if self._transport is None:
            raise ConnectionError("the audio channel is closed")
        datagram = self.seal(payload, timestamp)
        self._transport.sendto(datagram)
        return datagram

    def seal(self, payload: bytes, timestamp: int = 0) -> bytes:
        """The next uplink datagram, as ``SendAudio`` builds it, without sending it (its sequence is used)."""
        self.local_sequence += 1
        header = bytearray(self._nonce)
        struct.pack_into(">H", header, 2, len(payload))
        if not self._keeps_nonce_timestamp:
            struct.pack_into(">I", header, 8, timestamp & 0xFFFFFFFF)
        struct.pack_into(">I", header, 12, self.local_sequence)
        return bytes(header) + aes_ctr(self._key, bytes(header), payload)

    def send_raw(self, datagram: bytes) -> None:
        """Any datagram to the server's audio port (tests of hostile input)."""
        if self._transport is None:
            raise ConnectionError("the audio channel is closed")
        self._transport.sendto(datagram)

    def on_datagram(self, data: bytes) -> None:
        """The UDP ``OnMessage`` checks, in the firmware's order; then the speaker."""
        if len(data) < 16 or data[0] != 0x01:
            self.datagrams_dropped += 1
            return
        length, sequence = struct.unpack_from(">H", data, 2)[0], struct.unpack_from(">I", data, 12)[0]
        if len(data) != 16 + length or sequence <= self.remote_sequence:
            self.datagrams_dropped += 1
            return
        self.remote_sequence = sequence
        self._on_audio(aes_ctr(self._key, data[:16], data[16:]))
