"""The encrypted UDP audio channel (pure): what counts as the device's datagram."""

import struct

import pytest

from custom_components.xiaozhi_local.protocol.opus import OpusEncoder
from custom_components.xiaozhi_local.protocol.udp import (
    HEADER_SIZE,
    MAX_DATAGRAM,
    MAX_SEQUENCE_GAP,
    AudioChannel,
    UdpError,
)
from xiaozhi_sim.mqtt import aes_ctr


def uplink(channel: AudioChannel, payload: bytes, sequence: int) -> bytes:
    """A datagram as the firmware builds it from the hello's key and nonce."""
    header = bytearray(channel.nonce)
    struct.pack_into(">H", header, 2, len(payload))
    struct.pack_into(">I", header, 12, sequence)
    return bytes(header) + aes_ctr(channel.key, bytes(header), payload)


def test_sequence_rules() -> None:
    """Rising sequences are taken; a replay or an older one is stale; one far ahead is refused too,
    so a datagram that is not the device's next one cannot push the sequence out of its reach."""
    channel = AudioChannel()
    opus = OpusEncoder(16000).encode(bytes(1920 * 4))
    assert channel.open(uplink(channel, opus[0], 1)) == opus[0]
    with pytest.raises(UdpError) as stale:
        channel.open(uplink(channel, opus[0], 1))
    assert stale.value.kind == "stale"
    with pytest.raises(UdpError) as jump:
        channel.open(uplink(channel, opus[1], 1 + MAX_SEQUENCE_GAP + 1))
    assert jump.value.kind == "jump"
    assert channel.remote_sequence == 1  # refused datagrams move nothing
    assert channel.open(uplink(channel, opus[1], 1 + MAX_SEQUENCE_GAP)) == opus[1]  # packets lost: fine
    with pytest.raises(UdpError) as foreign:
        channel.open(uplink(AudioChannel(), opus[2], MAX_SEQUENCE_GAP + 2))  # another session's header
    assert foreign.value.kind == "foreign"


def test_every_refusal_names_its_reason() -> None:
    """Each way a datagram is not the session's audio is refused, nothing moved, with its own kind."""
    channel = AudioChannel()
    opus = OpusEncoder(16000).encode(bytes(1920 * 4))
    good = uplink(channel, opus[0], 1)
    wrong_key = AudioChannel(nonce=channel.nonce)  # the right header (an observer sees it), not the key
    twenty_ms = AudioChannel(key=channel.key, nonce=channel.nonce, frame_ms=20)  # a session of 20 ms frames
    cases = {
        "bad_size": [good[: HEADER_SIZE - 1], good[:-1], good + b"\0", bytes(MAX_DATAGRAM + 1)],
        "not_audio": [
            uplink(wrong_key, opus[0], 1),  # decrypts to noise
            uplink(channel, b"\xff" * len(opus[0]), 1),  # a payload that is no Opus packet
        ],
    }
    for kind, datagrams in cases.items():
        for datagram in datagrams:
            with pytest.raises(UdpError) as refused:
                channel.open(datagram)
            assert refused.value.kind == kind, (kind, datagram[:16].hex())
    assert channel.remote_sequence == 0
    with pytest.raises(UdpError) as other_frames:
        twenty_ms.open(good)  # a 60 ms packet is not what this session's device sends
    assert other_frames.value.kind == "not_audio"
    assert channel.open(good) == opus[0]
    with pytest.raises(UdpError) as too_large:
        channel.seal(bytes(0x10000))
    assert too_large.value.kind == "too_large"
