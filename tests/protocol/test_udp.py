"""The encrypted UDP audio channel (pure): what counts as the device's datagram."""

import struct

import pytest

from custom_components.xiaozhi_local.protocol.audio import OpusEncoder
from custom_components.xiaozhi_local.protocol.udp import MAX_SEQUENCE_GAP, AudioChannel, UdpError
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
