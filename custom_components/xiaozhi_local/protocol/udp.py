"""The encrypted UDP audio channel of the MQTT transport (sans-IO).

Built as ``main/protocols/mqtt_protocol.cc`` builds it. A datagram is a 16-byte header and the
Opus packet encrypted with AES-128-CTR, whose counter block is the header itself:

    | type 1 | flags 1 | payload length 2 | ssrc 4 | timestamp 4 | sequence 4 |   (big-endian)

The server's hello gives the device a key and a 16-byte nonce. The device makes each uplink
header from that nonce, overwriting the length, timestamp and sequence, so bytes 0–1 and the
ssrc (4–7) of every uplink datagram are the nonce's: they tell the session a datagram belongs
to. Downlink datagrams must have type 0x01 and rising sequence numbers from 1.

CTR has no integrity check. A datagram counts as the device's only if it carries the session's
nonce bytes (32 random bits, the ssrc, that an off-path sender cannot know; bytes 0–1 are always
``01 00``; an observer on the path sees them all), a sequence number above every earlier one
(and not far above it), and a payload that decrypts to an Opus packet of the announced frame
duration (which a sender without the key hits by chance about once in 40 tries). Only such a
datagram teaches the server where to send audio: nothing is ever sent to an address that has not
proved the session. Moving it later takes far more (``AudioPeer``): what a NAT's new mapping
really looks like, which one datagram, or a thousand guesses, never does.
"""

from dataclasses import dataclass, field
import os
from typing import Final

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

HEADER_SIZE: Final = 16
PACKET_TYPE: Final = 0x01
MAX_DATAGRAM: Final = HEADER_SIZE + 4000
"""An Opus packet of 60 ms is a few hundred bytes; larger datagrams are not audio."""
MAX_SEQUENCE_GAP: Final = 1000
"""How far a sequence number may run ahead of the last accepted one (a minute of 60 ms packets lost).
The device counts from 1 for each channel; a datagram far ahead is not its next one. Without this
bound, a forged payload that decrypted to a plausible Opus packet by chance would move the sequence
out of the device's reach, and every genuine packet after it would be refused as stale."""


class UdpError(ValueError):
    """A datagram that is not the session's audio; ``kind`` names why, for logs."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _crypt(key: bytes, counter_block: bytes, data: bytes) -> bytes:
    """AES-128-CTR with the whole 16-byte block as the counter (encryption and decryption alike)."""
    context = Cipher(algorithms.AES(key), modes.CTR(counter_block)).encryptor()
    return context.update(data) + context.finalize()


def ssrc_of(datagram: bytes) -> bytes:
    """The 4 bytes that name a session in every datagram of it."""
    return datagram[4:8]


def opus_duration_ms(packet: bytes) -> float | None:
    """The audio duration an Opus packet's TOC announces (RFC 6716 §3.1), or None if malformed."""
    if not packet:
        return None
    toc = packet[0]
    config = toc >> 3
    if config < 12:  # SILK-only: 10, 20, 40, 60 ms
        frame = (10.0, 20.0, 40.0, 60.0)[config & 3]
    elif config < 16:  # hybrid: 10, 20 ms
        frame = (10.0, 20.0)[config & 1]
    else:  # CELT-only: 2.5, 5, 10, 20 ms
        frame = (2.5, 5.0, 10.0, 20.0)[config & 3]
    code = toc & 0x03
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    else:
        if len(packet) < 2:
            return None
        frames = packet[1] & 0x3F
        if frames == 0:
            return None
    duration = frame * frames
    return duration if duration <= 120 else None


@dataclass
class AudioChannel:
    """One session's keys and sequence counters (new for each device hello)."""

    key: bytes = field(default_factory=lambda: os.urandom(16))
    nonce: bytes = field(default_factory=lambda: bytes([PACKET_TYPE, 0]) + os.urandom(14))
    frame_ms: int = 60
    """The uplink frame duration from the device's hello: what a genuine packet announces."""
    remote_sequence: int = 0
    local_sequence: int = 0

    @property
    def ssrc(self) -> bytes:
        """Bytes 4–7 of the nonce: the session's tag in every datagram."""
        return self.nonce[4:8]

    def hello_fields(self, server: str, port: int) -> dict[str, str | int]:
        """The ``udp`` object of the server hello."""
        return {"server": server, "port": port, "key": self.key.hex(), "nonce": self.nonce.hex()}

    def seal(self, payload: bytes, timestamp: int = 0) -> bytes:
        """One downlink datagram: the firmware accepts it once (its sequence is new)."""
        if len(payload) > 0xFFFF:
            raise UdpError("too_large", f"an audio packet of {len(payload)} bytes")
        self.local_sequence += 1
        header = (
            bytes([PACKET_TYPE, 0])
            + len(payload).to_bytes(2)
            + self.ssrc
            + (timestamp & 0xFFFFFFFF).to_bytes(4)
            + (self.local_sequence & 0xFFFFFFFF).to_bytes(4)
        )
        return header + _crypt(self.key, header, payload)

    def open(self, datagram: bytes) -> bytes:
        """The Opus packet in an uplink datagram of this session; UdpError when it is not one.

        A packet accepted moves the sequence on: a replay, or an older packet, is refused.
        """
        payload, sequence = self.peek(datagram)
        self.remote_sequence = sequence
        return payload

    def peek(self, datagram: bytes, after: int = 0) -> tuple[bytes, int]:
        """As ``open`` (its sequence above ``after`` too), without moving the sequence on."""
        if len(datagram) < HEADER_SIZE or len(datagram) > MAX_DATAGRAM:
            raise UdpError("bad_size", f"a datagram of {len(datagram)} bytes")
        if datagram[0:2] != self.nonce[0:2] or datagram[4:8] != self.nonce[4:8]:
            raise UdpError("foreign", "a datagram whose header is not the session's")
        length = int.from_bytes(datagram[2:4])
        if len(datagram) != HEADER_SIZE + length:
            raise UdpError("bad_size", f"length field {length} for {len(datagram) - HEADER_SIZE} bytes of payload")
        sequence = int.from_bytes(datagram[12:16])
        if sequence <= max(self.remote_sequence, after):
            raise UdpError("stale", f"sequence {sequence} after {max(self.remote_sequence, after)}")
        if sequence > self.remote_sequence + MAX_SEQUENCE_GAP:
            raise UdpError("jump", f"sequence {sequence} after {self.remote_sequence}")
        payload = _crypt(self.key, datagram[:HEADER_SIZE], datagram[HEADER_SIZE:])
        if opus_duration_ms(payload) != self.frame_ms:
            raise UdpError("not_audio", "a payload that does not decrypt to an Opus packet of the session")
        return payload, sequence


MOVE_EVIDENCE: Final = 4
"""Datagrams in a row (consecutive sequence numbers) from one new port before audio goes there."""
MOVE_GUESSES: Final = 8
"""Datagrams from other ports that do not decrypt to the device's packets, per channel, before no
move is believed any more (until the device's next channel). The device never sends one."""


@dataclass
class _Move:
    """Datagrams from a new port of the device's address: the evidence that its NAT mapped it anew."""

    addr: tuple[str, int]
    last: int
    packets: list[bytes]


@dataclass
class AudioPeer:
    """Where one channel's audio comes from and goes to (sans-IO).

    The first datagram that opens tells where the device is; audio goes nowhere before. Once
    known, CTR cannot authenticate a single datagram, so a move to another port is believed only
    as a NAT really rebinds: the device's address, a new listening turn in which its known port has
    sent nothing (a NAT maps anew only a mapping that went idle, and the device sends from one
    socket), ``MOVE_EVIDENCE`` datagrams with consecutive sequence numbers, each decrypting to a
    packet with the exact TOC byte of the device's own encoder. A port that sends anything else is
    not the device: after ``MOVE_GUESSES`` such guesses no move is believed on this channel.
    """

    channel: AudioChannel
    address: tuple[str, int] | None = None
    heard_this_turn: bool = False
    """A datagram came from ``address`` since the last ``new_turn``: it has not moved."""
    guesses: int = 0
    toc: int | None = None
    _move: _Move | None = None

    def new_turn(self) -> None:
        """The device starts streaming again (``listen start``): the turn in which it may have moved."""
        self.heard_this_turn = False
        self._move = None

    def receive(self, datagram: bytes, addr: tuple[str, int]) -> list[bytes]:
        """The Opus packets a datagram delivers (none while a move is being proved); UdpError if refused."""
        if self.address is None or addr == self.address:
            packet = self.channel.open(datagram)
            self.address = addr
            self.heard_this_turn, self._move, self.toc = True, None, packet[0]
            return [packet]
        return self._moving(datagram, addr)

    def _moving(self, datagram: bytes, addr: tuple[str, int]) -> list[bytes]:
        assert self.address is not None
        if addr[0] != self.address[0]:
            raise UdpError("elsewhere", f"a datagram of the session from {addr[0]}, not the device's address")
        if self.heard_this_turn:
            raise UdpError("not_moved", f"port {addr[1]}: the device sends from port {self.address[1]} this turn")
        if self.guesses >= MOVE_GUESSES:
            raise UdpError("move_closed", f"port {addr[1]}: too many guesses from other ports on this channel")
        move = self._move if self._move is not None and self._move.addr == addr else None
        try:
            packet, sequence = self.channel.peek(datagram, after=move.last if move else 0)
        except UdpError as err:
            if err.kind == "not_audio":
                self._guessed()
            raise
        if packet[0] != self.toc:
            self._guessed()
            raise UdpError("not_audio", f"port {addr[1]}: a packet the device's encoder does not make")
        if move is None or sequence != move.last + 1:
            move = _Move(addr, sequence, [])  # a gap (a packet lost): the evidence starts again here
        move.last = sequence
        move.packets.append(packet)
        self._move = move
        if len(move.packets) < MOVE_EVIDENCE:
            return []
        self.channel.remote_sequence = sequence
        self.address, self._move, self.heard_this_turn = addr, None, True
        return move.packets

    def _guessed(self) -> None:
        self.guesses += 1
        self._move = None
