"""The encrypted UDP audio channel (pure): what counts as the device's datagram."""

import struct

import pytest

from custom_components.xiaozhi_local.protocol.opus import OpusEncoder
from custom_components.xiaozhi_local.protocol.udp import (
    HEADER_SIZE,
    MAX_DATAGRAM,
    MAX_SEQUENCE_GAP,
    MOVE_EVIDENCE,
    MOVE_GUESSES,
    AudioChannel,
    AudioPeer,
    UdpError,
)
from xiaozhi_sim.mqtt_wire import aes_ctr


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
    channel = AudioChannel(key=bytes(range(16)), nonce=bytes.fromhex("01000000123456780000000000000000"))
    opus = OpusEncoder(16000).encode(bytes(1920 * 4))
    good = uplink(channel, opus[0], 1)
    # The right header (an observer sees it), not the key. Noise announces 60 ms about once in 40
    # tries, so the keys are fixed: this one's noise does not.
    wrong_key = AudioChannel(key=bytes(16), nonce=channel.nonce)
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


DEVICE = ("192.0.2.7", 40000)
NEW_PORT = ("192.0.2.7", 40001)


def streaming_peer() -> tuple[AudioPeer, list[bytes]]:
    """A channel whose device has proved its address this turn; more of its packets to send."""
    peer = AudioPeer(AudioChannel())
    opus = OpusEncoder(16000).encode(bytes(1920 * 12))
    assert peer.receive(uplink(peer.channel, opus[0], 1), DEVICE) == [opus[0]]
    return peer, opus[1:]


def test_the_first_datagram_tells_where_the_device_is() -> None:
    peer = AudioPeer(AudioChannel())
    with pytest.raises(UdpError):
        peer.receive(uplink(peer.channel, b"\xff" * 40, 1), DEVICE)
    assert (peer.address, peer.toc) == (None, None)  # nothing that failed teaches anything
    opus = OpusEncoder(16000).encode(bytes(1920 * 3))
    assert peer.receive(uplink(peer.channel, opus[0], 1), DEVICE) == [opus[0]]
    assert (peer.address, peer.toc) == (DEVICE, opus[0][0])


def test_a_nat_mapping_anew_moves_the_audio_with_nothing_lost() -> None:
    """A new turn, the device's packets from a new port of its address, in sequence: they move it."""
    peer, opus = streaming_peer()
    peer.new_turn()
    delivered = [peer.receive(uplink(peer.channel, opus[i], 2 + i), NEW_PORT) for i in range(MOVE_EVIDENCE)]
    assert delivered[:-1] == [[]] * (MOVE_EVIDENCE - 1)  # held as evidence
    assert delivered[-1] == opus[:MOVE_EVIDENCE]  # then all delivered at once
    assert peer.address == NEW_PORT
    assert peer.channel.remote_sequence == 1 + MOVE_EVIDENCE


def test_a_lost_packet_starts_the_evidence_again_without_counting_as_a_guess() -> None:
    peer, opus = streaming_peer()
    peer.new_turn()
    peer.receive(uplink(peer.channel, opus[0], 2), NEW_PORT)
    for i in range(MOVE_EVIDENCE - 1):  # sequence 3 was lost
        assert peer.receive(uplink(peer.channel, opus[1 + i], 4 + i), NEW_PORT) == []
    assert peer.address == DEVICE
    assert len(peer.receive(uplink(peer.channel, opus[MOVE_EVIDENCE], 4 + MOVE_EVIDENCE - 1), NEW_PORT)) == (
        MOVE_EVIDENCE
    )
    assert peer.address == NEW_PORT
    assert peer.guesses == 0


def test_while_the_device_sends_from_its_port_nothing_moves_it() -> None:
    """Even its own packets (the strongest forgery: the right key) from another port, in this turn."""
    peer, opus = streaming_peer()
    for i in range(2 * MOVE_EVIDENCE):
        with pytest.raises(UdpError) as refused:
            peer.receive(uplink(peer.channel, opus[i], 2 + i), NEW_PORT)
        assert refused.value.kind == "not_moved"
    peer.new_turn()
    with pytest.raises(UdpError) as elsewhere:
        peer.receive(uplink(peer.channel, opus[0], 100), ("192.0.2.8", 40000))
    assert elsewhere.value.kind == "elsewhere"
    assert peer.address == DEVICE
    assert peer.guesses == 0


def test_packets_the_devices_encoder_does_not_make_are_guesses() -> None:
    """A payload announcing 60 ms with another TOC byte, or none at all, is a guess; the evidence
    starts over, and after MOVE_GUESSES no move is believed on this channel, however good."""
    peer, opus = streaming_peer()
    peer.new_turn()
    assert peer.toc is not None
    other_toc = bytes([0x18 if peer.toc != 0x18 else 0x08]) + opus[0][1:]  # SILK 60 ms, another bandwidth
    sequence = 2
    for i in range(MOVE_GUESSES):
        peer.receive(uplink(peer.channel, opus[0], sequence), NEW_PORT)  # evidence begun
        payload = other_toc if i % 2 else b"\xff" * 40
        with pytest.raises(UdpError) as guess:
            peer.receive(uplink(peer.channel, payload, sequence + 1), NEW_PORT)
        assert guess.value.kind == "not_audio"
        sequence += 2
    assert peer.guesses == MOVE_GUESSES
    with pytest.raises(UdpError) as closed:
        peer.receive(uplink(peer.channel, opus[0], sequence), NEW_PORT)
    assert closed.value.kind == "move_closed"
    assert peer.address == DEVICE
    assert peer.receive(uplink(peer.channel, opus[1], sequence + 1), DEVICE) == [opus[1]]  # it still talks
