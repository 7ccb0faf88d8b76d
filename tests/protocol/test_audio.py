"""Opus both ways, framing, WAV streams, sentences and pacing (pure, no Home Assistant)."""

from array import array
import asyncio
import math
import struct

import pytest

from custom_components.xiaozhi_local.protocol.framing import pack_frame, unpack_frame
from custom_components.xiaozhi_local.protocol.messages import FrameError
from custom_components.xiaozhi_local.protocol.opus import OpusDecoder, OpusEncoder, ThreadedDecoder
from custom_components.xiaozhi_local.protocol.pacing import Pacer
from custom_components.xiaozhi_local.protocol.pcm import AudioError, Resampler
from custom_components.xiaozhi_local.protocol.sentences import split_sentences
from custom_components.xiaozhi_local.protocol.wav import WavStream


def tone(seconds: float, rate: int) -> bytes:
    return array(
        "h", (int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(int(seconds * rate)))
    ).tobytes()


def test_opus_round_trip_16k() -> None:
    encoder = OpusEncoder(16000)
    packets = encoder.encode(tone(1.0, 16000)) + encoder.flush()
    assert 16 <= len(packets) <= 18  # 60 ms each
    decoder = OpusDecoder()
    pcm = b"".join(decoder.decode(p) for p in packets)
    assert abs(len(pcm) / 2 / 16000 - 1.0) < 0.1


def test_decoder_takes_24k_packets_and_refuses_garbage() -> None:
    encoder = OpusEncoder(24000)
    packets = encoder.encode(tone(0.12, 24000))
    assert len(packets) == 2
    pcm = OpusDecoder().decode(packets[0])
    assert len(pcm) // 2 in range(900, 961)  # 60 ms at 16 kHz (first packet has the pre-skip)
    with pytest.raises(AudioError):
        OpusDecoder().decode(b"\xff" * 40)


async def test_threaded_decoder_keeps_order_batches_and_reports_every_packet() -> None:
    """Packets arriving while a batch decodes form the next batch; results come back in order, bad
    packets as errors in their place; ``when_drained`` waits for everything fed before it."""
    packets = OpusEncoder(16000).encode(tone(1.2, 16000))
    expected = OpusDecoder()
    want = [expected.decode(p) for p in packets[:10]]
    batches: list[list[bytes | AudioError]] = []
    decoder = ThreadedDecoder(batches.append)
    drained = asyncio.Event()
    for index, packet in enumerate(packets[:10]):
        decoder.feed(packet)
        if index == 4:
            decoder.feed(b"\xff" * 40)  # undecodable, in the middle
    assert decoder.pending > 0
    decoder.when_drained(drained.set)
    assert not drained.is_set()  # nothing delivered yet: the worker has them
    await asyncio.wait_for(drained.wait(), 10)
    assert decoder.pending == 0
    assert len(batches) >= 2  # the first packet alone, the rest together
    results = [r for batch in batches for r in batch]
    assert len(results) == 11
    assert isinstance(results[5], AudioError)
    assert [r for r in results if not isinstance(r, AudioError)] == want  # one decoder state, in order
    called: list[int] = []
    decoder.when_drained(lambda: called.append(1))  # idle: at once
    assert called == [1]


async def test_threaded_decoder_backlog_is_bounded() -> None:
    """A decoder thread that does not keep up (here: not running yet) holds at most its backlog."""
    from custom_components.xiaozhi_local.protocol.opus import MAX_DECODE_BACKLOG

    delivered: list[int] = []
    decoder = ThreadedDecoder(lambda results: delivered.append(len(results)))
    packet = OpusEncoder(16000).encode(tone(0.06, 16000))[0]
    taken = [decoder.feed(packet) for _ in range(MAX_DECODE_BACKLOG + 10)]
    # the first goes to the thread at once; the next MAX_DECODE_BACKLOG wait; the rest are refused
    assert taken.count(False) == 9
    drained = asyncio.Event()
    decoder.when_drained(drained.set)
    await asyncio.wait_for(drained.wait(), 10)
    assert sum(delivered) == MAX_DECODE_BACKLOG + 1


def test_encoder_buffers_partial_frames() -> None:
    encoder = OpusEncoder(24000)
    assert encoder.encode(b"\0" * (encoder.frame_bytes - 2)) == []
    assert len(encoder.encode(b"\0" * 2)) == 1
    encoder.flush()
    assert encoder.flush() == []  # a second flush is harmless and sends nothing


@pytest.mark.parametrize("version", [1, 2, 3])
def test_framing_round_trip(version: int) -> None:
    frame = pack_frame(version, b"opus", timestamp=1234)
    assert unpack_frame(version, frame) == b"opus"
    assert len(frame) == 4 + {1: 0, 2: 16, 3: 4}[version]


def test_v2_header_fields() -> None:
    frame = pack_frame(2, b"xy", timestamp=0x1_0000_0005)
    assert struct.unpack(">HHIII", frame[:16]) == (2, 0, 0, 5, 2)


@pytest.mark.parametrize(
    ("version", "frame"),
    [
        (2, b"\x00" * 10),
        (2, struct.pack(">HHIII", 2, 0, 0, 0, 99) + b"short"),
        (3, b"\x00"),
        (3, struct.pack(">BBH", 0, 0, 1) + b"toolong"),
    ],
)
def test_lying_headers(version: int, frame: bytes) -> None:
    with pytest.raises(FrameError) as err:
        unpack_frame(version, frame)
    assert err.value.kind == "bad_frame"


def wav_header(rate: int, channels: int = 1, bits: int = 16, fmt: int = 1, extra: bytes = b"") -> bytes:
    width = max(1, bits // 8)
    fmt_chunk = struct.pack("<HHIIHH", fmt, channels, rate, rate * channels * width, channels * width, bits)
    return (
        b"RIFF"
        + b"\xff\xff\xff\xff"
        + b"WAVE"
        + extra
        + b"fmt "
        + struct.pack("<I", len(fmt_chunk))
        + fmt_chunk
        + b"data"
        + b"\xff\xff\xff\xff"
    )


def test_wav_stream_in_pieces_with_bogus_sizes() -> None:
    data = wav_header(24000, extra=b"LIST" + struct.pack("<I", 3) + b"abc\0") + b"\x01\x02" * 100 + b"\x03"
    stream = WavStream()
    pcm = b"".join(stream.feed(data[i : i + 7]) for i in range(0, len(data), 7))
    assert stream.format is not None
    assert (stream.format.sample_rate, stream.format.channels) == (24000, 1)
    assert pcm == b"\x01\x02" * 100  # the odd trailing byte waits for its pair


@pytest.mark.parametrize(
    "data",
    [
        b"OggS" + b"\0" * 20,
        wav_header(16000, bits=12),
        wav_header(16000, fmt=3, bits=64),  # double: no engine makes it
        wav_header(16000, fmt=2),  # ADPCM
        wav_header(16000, channels=9),
        wav_header(0),
        wav_header(16000, fmt=0xFFFE),  # extensible, with no sub-format
    ],
)
def test_wav_stream_refuses_what_it_cannot_play(data: bytes) -> None:
    with pytest.raises(AudioError):
        WavStream().feed(data)


def _samples(bits: int, fmt: int, values: list[float]) -> bytes:
    """``values`` in [-1, 1] as WAV samples of ``bits`` (``fmt`` 3: float)."""
    if fmt == 3:
        return array("f", values).tobytes()
    if bits == 8:
        return bytes(int(128 + 127 * v) for v in values)
    scale = 2 ** (bits - 1) - 1
    return b"".join(int(v * scale).to_bytes(bits // 8, "little", signed=True) for v in values)


@pytest.mark.parametrize(
    ("rate", "channels", "bits", "fmt"),
    [
        (22050, 1, 16, 1),  # Piper
        (24000, 1, 24, 1),
        (44100, 2, 16, 1),
        (48000, 1, 32, 1),
        (16000, 1, 32, 3),  # float, as some cloud engines return
        (8000, 1, 8, 1),
    ],
)
def test_every_wav_an_engine_may_return_plays_at_the_device_rate(rate: int, channels: int, bits: int, fmt: int) -> None:
    """Any WAV is resampled in-process to 24 kHz s16 mono: its length and loudness survive."""
    seconds = 0.5
    values = [0.5 * math.sin(2 * math.pi * 440 * i / rate) for i in range(int(seconds * rate)) for _ in range(channels)]
    header = wav_header(rate, channels, bits, fmt)
    data = header + _samples(bits, fmt, values)
    stream = WavStream()
    pcm = b"".join(stream.feed(data[i : i + 1001]) for i in range(0, len(data), 1001))
    assert stream.format is not None
    out = Resampler(rate, channels, 24000, stream.format.av_format).convert(pcm)
    played = array("h", out)
    assert abs(len(played) / 24000 - seconds) < 0.03
    assert 0.45 < max(played) / 32767 < 0.55  # half scale in, half scale out


def test_wav_extensible_float() -> None:
    guid = bytes.fromhex("0300000000001000800000aa00389b71")
    fmt_chunk = struct.pack("<HHIIHH", 0xFFFE, 1, 16000, 64000, 4, 32) + struct.pack("<HHI", 22, 32, 4) + guid
    data = b"RIFF\xff\xff\xff\xffWAVEfmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + b"data\0\0\0\0"
    stream = WavStream()
    stream.feed(data + array("f", [0.25, -0.25]).tobytes())
    assert stream.format is not None
    assert stream.format.av_format == "flt"


def test_resampler() -> None:
    stereo = array("h", [100, -100] * 22050).tobytes()  # 1 s at 22.05 kHz, stereo
    out = Resampler(22050, 2, 24000).convert(stereo)
    assert abs(len(out) / 2 / 24000 - 1.0) < 0.02
    assert Resampler(16000, 1, 24000).convert(b"\x01") == b""


def test_sentences() -> None:
    assert split_sentences("Hello there. How are you? 我很好。谢谢！\nBye") == [
        "Hello there.",
        "How are you?",
        "我很好。",
        "谢谢！",
        "Bye",
    ]
    assert split_sentences("   ") == []


async def test_pacer_sends_every_packet_in_order() -> None:
    sent: list[int] = []

    async def send(packet: bytes, offset_ms: int) -> bool:
        sent.append(offset_ms)
        return True

    loop = asyncio.get_running_loop()
    # A lead longer than the audio: nothing waits, so the test measures order, not time.
    pacer = Pacer(OpusEncoder(24000), send, lead=100, not_before=loop.time() - 1)
    await pacer.feed(tone(0.5, 24000))
    assert sent == [i * 60 for i in range(8)]  # 8 whole frames so far
    pacer._loop = loop  # finish() waits for playback: make "now" the end of it
    pacer.start = loop.time() - 10
    await pacer.finish()
    assert sent[:9] == [i * 60 for i in range(9)]
    assert pacer.sent == pytest.approx(len(sent) * 0.06)
    assert len(pacer.late) == len(sent)


async def test_pacer_stops_when_the_device_is_gone() -> None:
    async def gone(packet: bytes, offset_ms: int) -> bool:
        return False

    pacer = Pacer(OpusEncoder(24000), gone, lead=100, not_before=0)
    with pytest.raises(ConnectionError):
        await pacer.feed(tone(0.5, 24000))  # more than the lead: sending starts


async def test_pacer_starts_only_when_the_lead_is_there() -> None:
    """A source that trickles in (ffmpeg converting an MP3 reply) does not start the speaker with one
    packet and leave it waiting: the first packet waits until the lead (0.3 s: 5 packets) is encoded,
    or the audio ends."""
    sent: list[int] = []

    async def send(packet: bytes, offset_ms: int) -> bool:
        sent.append(offset_ms)
        return True

    loop = asyncio.get_running_loop()
    pacer = Pacer(OpusEncoder(24000), send, lead=0.3, not_before=loop.time() - 1)
    for _ in range(4):
        await pacer.feed(tone(0.06, 24000))  # one packet at a time
    assert sent == []
    assert pacer.start is None
    await pacer.feed(tone(0.06, 24000))
    assert sent == [0, 60, 120, 180, 240]  # the lead is there: all at once

    short: list[int] = []

    async def send_short(packet: bytes, offset_ms: int) -> bool:
        short.append(offset_ms)
        return True

    pacer = Pacer(OpusEncoder(24000), send_short, lead=0.3, not_before=loop.time() - 1)
    await pacer.feed(tone(0.12, 24000))
    assert short == []
    await pacer.finish()  # a reply shorter than the lead still plays, whole
    assert short[:2] == [0, 60]


def _ogg_decoded(data: bytes) -> tuple[int, float]:
    """FFmpeg's own Ogg demuxer and Opus decoder on ``data``: (sample rate, seconds of audio)."""
    import io

    import av

    with av.open(io.BytesIO(data), mode="r", format="ogg") as container:
        samples, rate = 0, 0
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    return rate, samples / rate


def test_ogg_opus_pages_decode_to_what_went_in_and_the_encoder_serves_again() -> None:
    from custom_components.xiaozhi_local.protocol.ogg import OggOpusWriter, ogg_crc
    from custom_components.xiaozhi_local.protocol.opus import EncoderPool

    pool = EncoderPool()
    for seconds in (1.0, 0.35):  # the second stream on the same (reused) encoder
        encoder = pool.take(24000)
        writer = OggOpusWriter(encoder)
        pcm = tone(seconds, 24000)
        data = b"".join(writer.feed(pcm[i : i + 4000]) for i in range(0, len(pcm), 4000)) + writer.finish()
        pool.give(encoder)
        _rate, heard = _ogg_decoded(data)
        assert abs(heard - seconds) < 0.01  # the end padding is trimmed by the last granule
        pages = data.split(b"OggS")[1:]
        assert b"OpusHead" in pages[0]
        assert b"OpusTags" in pages[1]
        for body in pages:  # every page's checksum, as a demuxer checks it
            page = bytearray(b"OggS" + body)
            stored = struct.unpack_from("<I", page, 22)[0]
            struct.pack_into("<I", page, 22, 0)
            assert ogg_crc(bytes(page)) == stored
        assert data[5] == 0x02  # beginning of stream
        last = data.rindex(b"OggS")
        assert data[last + 5] & 0x04  # end of stream
    assert pool.made == 1


def test_ogg_opus_without_audio_is_a_valid_empty_stream() -> None:
    from custom_components.xiaozhi_local.protocol.ogg import OggOpusWriter

    writer = OggOpusWriter(OpusEncoder(24000))
    data = writer.feed(b"") + writer.finish()
    assert data.count(b"OggS") == 3  # head, tags, an empty last page
    last = data.rindex(b"OggS")
    assert data[last + 5] == 0x04  # end of stream
    assert data[last + 26] == 0  # no segments: no packet
    assert struct.unpack_from("<q", data, last + 6)[0] == 0  # granule: nothing to play


def test_encoding_starts_no_native_threads() -> None:
    """PyAV's ``encode`` passes each frame through a resampler whose filter graph starts a thread per
    core, alive until a cyclic garbage collection: 8,000 pairing sessions once left 1,600 threads.
    Whole frames go straight to libopus: encoders made and dropped leave no thread behind."""
    import gc
    import os

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    gc.collect()
    gc.disable()
    try:
        before = threads()
        for _ in range(50):
            encoder = OpusEncoder(24000)
            assert len(encoder.encode(tone(0.3, 24000))) == 5
            assert encoder.finish()
            del encoder
        assert threads() == before
    finally:
        gc.enable()
