"""Audio for xiaozhi devices: Opus (PyAV, which bundles libopus), binary framing v1/v2/v3, WAV streams.

Uplink: one raw Opus packet per binary frame (16 kHz mono, 60 ms on stock firmware) → 16 kHz s16
mono PCM for HA's speech-to-text. Downlink: PCM at the rate of the server hello → 60 ms Opus
packets. One packet costs well under a millisecond, but a hub serves many devices at once: the
codec work runs on an executor the caller gives (PyAV releases the GIL inside libopus), in batches
and in order, so the event loop only hands packets over (``ThreadedDecoder``, ``Pacer``).
"""

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
import contextlib
from dataclasses import dataclass
from fractions import Fraction
import re
import struct
from typing import Final

import av
import av.error

from .messages import FrameError

PCM_RATE: Final = 16000
"""What HA's speech-to-text takes: 16 kHz, 16-bit, mono."""

OPUS_FRAME_MS: Final = 60
V2_HEADER: Final = struct.Struct(">HHIII")  # version, type, reserved, timestamp, payload size
V3_HEADER: Final = struct.Struct(">BBH")  # type, reserved, payload size
MAX_PAYLOAD: Final = 16 * 1024


class AudioError(Exception):
    """An Opus packet that cannot be decoded (or PCM that cannot be encoded)."""


# -- binary framing (docs/protocol.md §2) ---------------------------------------------------


def pack_frame(version: int, payload: bytes, timestamp: int = 0) -> bytes:
    """One binary WebSocket frame in the device's framing version."""
    if version == 2:
        return V2_HEADER.pack(2, 0, 0, timestamp & 0xFFFFFFFF, len(payload)) + payload
    if version == 3:
        return V3_HEADER.pack(0, 0, len(payload)) + payload
    return payload


def unpack_frame(version: int, frame: bytes) -> bytes:
    """The Opus packet in a frame. Raises FrameError when a header does not match the frame."""
    if version == 2:
        if len(frame) < V2_HEADER.size:
            raise FrameError("bad_frame", f"v2 frame of {len(frame)} bytes is shorter than its header")
        _version, _type, _reserved, _timestamp, size = V2_HEADER.unpack_from(frame)
        if size != len(frame) - V2_HEADER.size:
            raise FrameError("bad_frame", f"v2 header says {size} bytes, frame has {len(frame) - V2_HEADER.size}")
        return frame[V2_HEADER.size :]
    if version == 3:
        if len(frame) < V3_HEADER.size:
            raise FrameError("bad_frame", f"v3 frame of {len(frame)} bytes is shorter than its header")
        _type, _reserved, size = V3_HEADER.unpack_from(frame)
        if size != len(frame) - V3_HEADER.size:
            raise FrameError("bad_frame", f"v3 header says {size} bytes, frame has {len(frame) - V3_HEADER.size}")
        return frame[V3_HEADER.size :]
    return frame


# -- Opus --------------------------------------------------------------------------------------


class OpusDecoder:
    """Opus packets (any rate and frame duration) → 16 kHz s16 mono PCM. One per listening turn."""

    def __init__(self) -> None:
        self._decoder = av.CodecContext.create("libopus", "r")
        self._decoder.sample_rate = 48000  # libopus in FFmpeg always decodes at 48 kHz
        self._decoder.layout = "mono"  # a stereo packet is downmixed by libopus; a third less work than stereo
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=PCM_RATE)

    def decode(self, packet: bytes) -> bytes:
        """PCM for one packet (may be empty for DTX). Raises AudioError."""
        try:
            frames = self._decoder.decode(av.Packet(packet))
            return b"".join(
                bytes(out.planes[0])[: out.samples * 2] for frame in frames for out in self._resampler.resample(frame)
            )
        except (av.error.FFmpegError, ValueError) as err:
            raise AudioError(f"undecodable Opus packet of {len(packet)} bytes: {err}") from None


MAX_DECODE_BACKLOG: Final = 200
"""Packets waiting for the decoder thread (12 s at 60 ms): beyond it, the thread is stuck, and audio is dropped."""

type Decoded = bytes | AudioError
"""One packet's PCM, or why it could not be decoded."""


class ThreadedDecoder:
    """Opus packets decoded in arrival order on a worker thread; the event loop only hands them over.

    Packets that arrive while a batch is being decoded form the next batch, so a busy hub makes
    fewer, larger hand-overs. ``deliver`` runs on the loop with each batch's results in order. A
    batch once handed over is always delivered (nothing cancels it): a caller that has moved on
    still hears of bad packets, and decides itself what to do with the PCM.
    """

    def __init__(self, deliver: Callable[[list[Decoded]], None], executor: Executor | None = None) -> None:
        self._decoder = OpusDecoder()
        self._deliver = deliver
        self._executor = executor  # None: the loop's default
        self._loop = asyncio.get_running_loop()
        self._waiting: list[bytes] = []
        self._busy = False
        self._drained: list[Callable[[], None]] = []

    @property
    def pending(self) -> int:
        """Packets fed but not delivered yet (waiting, or in the batch being decoded)."""
        return len(self._waiting) + (1 if self._busy else 0)

    def feed(self, packet: bytes) -> bool:
        """Decode ``packet`` after every packet fed before it; False (dropped) when the backlog is full."""
        if len(self._waiting) >= MAX_DECODE_BACKLOG:
            return False
        self._waiting.append(packet)
        if not self._busy:
            self._next()
        return True

    def when_drained(self, done: Callable[[], None]) -> None:
        """``done()`` once every packet fed so far is delivered (at once when none is pending)."""
        if self._busy:
            self._drained.append(done)
        else:
            done()

    def _next(self) -> None:
        batch, self._waiting = self._waiting, []
        try:
            future = self._loop.run_in_executor(self._executor, self._decode_all, batch)
        except RuntimeError:  # the executor is shut down: the loop is stopping, nobody listens
            self._finish_drain()
            return
        self._busy = True
        future.add_done_callback(self._decoded)

    def _decode_all(self, batch: list[bytes]) -> list[Decoded]:  # on the worker thread
        results: list[Decoded] = []
        for packet in batch:
            try:
                results.append(self._decoder.decode(packet))
            except AudioError as err:
                results.append(err)
        return results

    def _decoded(self, future: asyncio.Future[list[Decoded]]) -> None:
        self._busy = False
        results = [] if future.cancelled() else future.result()
        if self._waiting:
            self._next()
        self._deliver(results)
        if not self._busy:
            self._finish_drain()

    def _finish_drain(self) -> None:
        drained, self._drained = self._drained, []
        for done in drained:
            done()


class OpusEncoder:
    """s16 mono PCM at ``sample_rate`` → 60 ms Opus packets. One per TTS stream (no reuse after flush)."""

    def __init__(self, sample_rate: int, bit_rate: int = 32000) -> None:
        self.sample_rate = sample_rate
        self._encoder = av.CodecContext.create("libopus", "w")
        self._encoder.sample_rate = sample_rate
        self._encoder.layout = "mono"
        self._encoder.format = "s16"
        self._encoder.bit_rate = bit_rate
        self._encoder.time_base = Fraction(1, sample_rate)
        self._encoder.options = {"frame_duration": str(OPUS_FRAME_MS), "application": "voip"}
        self._encoder.open()
        self.frame_bytes = sample_rate * OPUS_FRAME_MS // 1000 * 2
        self._buffer = bytearray()
        self._pts = 0

    @property
    def buffered(self) -> int:
        """Bytes of PCM waiting for a whole frame."""
        return len(self._buffer)

    def encode(self, pcm: bytes) -> list[bytes]:
        """Packets for every complete 60 ms of PCM given so far."""
        self._buffer += pcm
        packets: list[bytes] = []
        while len(self._buffer) >= self.frame_bytes:
            chunk = bytes(self._buffer[: self.frame_bytes])
            del self._buffer[: self.frame_bytes]
            packets += self._encode_chunk(chunk)
        return packets

    def flush(self) -> list[bytes]:
        """The rest, zero-padded to a whole frame, and what the encoder still holds."""
        packets: list[bytes] = []
        if self._buffer:
            packets += self._encode_chunk(bytes(self._buffer).ljust(self.frame_bytes, b"\0"))
            self._buffer.clear()
        with contextlib.suppress(av.error.FFmpegError):  # already flushed
            packets += [bytes(p) for p in self._encoder.encode(None)]
        return packets

    def _encode_chunk(self, chunk: bytes) -> list[bytes]:
        samples = len(chunk) // 2
        frame = av.AudioFrame(format="s16", layout="mono", samples=samples)
        frame.planes[0].update(chunk)
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += samples
        try:
            return [bytes(p) for p in self._encoder.encode(frame)]
        except (av.error.FFmpegError, ValueError) as err:
            raise AudioError(f"cannot encode: {err}") from None


class _Sink:
    """Where the Ogg muxer writes: collected until taken."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def take(self) -> bytes:
        data = bytes(self.data)
        self.data.clear()
        return data


class OggOpusWriter:
    """s16 mono PCM → an Ogg Opus stream, page by page (firmware 2.5's ``notify`` plays one over HTTP)."""

    def __init__(self, sample_rate: int, bit_rate: int = 32000) -> None:
        self.sample_rate = sample_rate
        self._sink = _Sink()
        # Short pages: the device starts playing after the first one, not after a second of audio.
        self._container = av.open(self._sink, mode="w", format="ogg", options={"page_duration": "120000"})
        self._stream = self._container.add_stream("libopus", rate=sample_rate)
        context = self._stream.codec_context
        context.layout = "mono"
        context.format = "s16"
        context.bit_rate = bit_rate
        self.frame_bytes = sample_rate * OPUS_FRAME_MS // 1000 * 2
        self._buffer = bytearray()
        self._pts = 0

    def feed(self, pcm: bytes) -> bytes:
        """Ogg bytes for every complete frame given so far (may be empty until a page fills)."""
        self._buffer += pcm
        while len(self._buffer) >= self.frame_bytes:
            self._encode(bytes(self._buffer[: self.frame_bytes]))
            del self._buffer[: self.frame_bytes]
        return self._sink.take()

    def finish(self) -> bytes:
        """The rest, and the end of the stream."""
        if self._buffer:
            self._encode(bytes(self._buffer) + bytes(self.frame_bytes - len(self._buffer)))
            self._buffer.clear()
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.take()

    def _encode(self, chunk: bytes) -> None:
        samples = len(chunk) // 2
        frame = av.AudioFrame(format="s16", layout="mono", samples=samples)
        frame.planes[0].update(chunk)
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        frame.time_base = Fraction(1, self.sample_rate)
        self._pts += samples
        for packet in self._stream.encode(frame):
            self._container.mux(packet)


class Resampler:
    """Interleaved PCM of any rate, channel count and sample format → s16 mono at ``rate``.

    In-process (libswresample through PyAV): what a TTS engine returns is played without an
    ffmpeg process. ``source_format`` is PyAV's packed format: ``u8``, ``s16``, ``s32`` or ``flt``.
    """

    def __init__(self, source_rate: int, channels: int, rate: int, source_format: str = "s16") -> None:
        self._source_rate = source_rate
        self._layout = {1: "mono", 2: "stereo"}.get(channels, f"{channels}c")  # (downmixed to mono)
        self._channels = channels
        self._format = source_format
        self._width = av.AudioFormat(source_format).bytes
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        self._pts = 0

    def convert(self, pcm: bytes) -> bytes:
        """Converted PCM (whole samples only; the caller keeps frames aligned)."""
        samples = len(pcm) // (self._width * self._channels)
        if samples == 0:
            return b""
        frame = av.AudioFrame(format=self._format, layout=self._layout, samples=samples)
        frame.planes[0].update(pcm[: samples * self._width * self._channels])
        frame.sample_rate = self._source_rate
        frame.pts = self._pts
        self._pts += samples
        return b"".join(bytes(out.planes[0])[: out.samples * 2] for out in self._resampler.resample(frame))


# -- WAV streams -------------------------------------------------------------------------------


@dataclass(slots=True)
class WavFormat:
    """What a WAV header says. 24-bit samples are handed on as 32-bit (``av_format`` ``s32``)."""

    sample_rate: int
    channels: int
    sample_width: int
    float: bool = False

    @property
    def av_format(self) -> str:
        """PyAV's packed sample format of the PCM that ``WavStream.feed`` returns."""
        if self.float:
            return "flt"
        return {1: "u8", 2: "s16", 3: "s32", 4: "s32"}[self.sample_width]

    @property
    def is_s16_mono(self) -> bool:
        """Already what the device plays (at some rate)."""
        return not self.float and self.sample_width == 2 and self.channels == 1


MAX_WAV_CHANNELS: Final = 8
_FLOAT_GUID: Final = bytes.fromhex("0300000000001000800000aa00389b71")
_PCM_GUID: Final = bytes.fromhex("0100000000001000800000aa00389b71")


def _widen_24(pcm: bytes) -> bytes:
    """24-bit little-endian samples → 32-bit (the low byte zero)."""
    out = bytearray(len(pcm) // 3 * 4)
    out[1::4] = pcm[0::3]
    out[2::4] = pcm[1::3]
    out[3::4] = pcm[2::3]
    return bytes(out)


class WavStream:
    """Parse a WAV byte stream incrementally; the RIFF sizes are ignored (piped WAV has bogus ones).

    ``feed(chunk)`` returns PCM once the header has been read; ``format`` is set from then on.
    """

    MAX_HEADER: Final = 64 * 1024

    def __init__(self) -> None:
        self.format: WavFormat | None = None
        self._head = bytearray()
        self._odd = b""

    def feed(self, chunk: bytes) -> bytes:
        """PCM in this chunk (whole samples only). Raises AudioError on a stream that is not WAV."""
        if self.format is None:
            self._head += chunk
            pcm = self._parse_header()
            if pcm is None:
                return b""
        else:
            pcm = self._odd + chunk
        assert self.format is not None
        frame = self.format.channels * self.format.sample_width
        whole = len(pcm) - len(pcm) % frame
        self._odd = pcm[whole:]
        return _widen_24(pcm[:whole]) if self.format.sample_width == 3 else pcm[:whole]

    def _parse_header(self) -> bytes | None:
        data = bytes(self._head)
        if len(data) < 12:
            return None
        if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
            raise AudioError("not a WAV stream")
        pos = 12
        fmt: WavFormat | None = None
        while pos + 8 <= len(data):
            chunk_id, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
            if chunk_id == b"data":
                if fmt is None:
                    raise AudioError("WAV data before its fmt chunk")
                self.format = fmt
                self._head.clear()
                return data[pos + 8 :]
            if pos + 8 + size > len(data):
                break  # wait for the rest of this chunk
            if chunk_id == b"fmt ":
                fmt = _wav_format(data[pos + 8 : pos + 8 + size])
            pos += 8 + size + (size & 1)
        if len(data) > self.MAX_HEADER:
            raise AudioError("WAV header too long")
        return None


def _wav_format(chunk: bytes) -> WavFormat:
    """The ``fmt `` chunk: integer PCM of 8, 16, 24 or 32 bits, or 32-bit float; 1–8 channels."""
    if len(chunk) < 16:
        raise AudioError("WAV fmt chunk too short")
    audio_format, channels, rate = struct.unpack_from("<HHI", chunk)
    bits = struct.unpack_from("<H", chunk, 14)[0]
    if audio_format == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: the real format is its sub-format GUID
        guid = chunk[24:40] if len(chunk) >= 40 else b""
        audio_format = 3 if guid == _FLOAT_GUID else 1 if guid == _PCM_GUID else -1
    is_float = audio_format == 3
    if (
        (audio_format != 1 and not is_float)
        or (is_float and bits != 32)
        or bits not in (8, 16, 24, 32)
        or not 1 <= channels <= MAX_WAV_CHANNELS
        or not 1000 <= rate <= 192_000
    ):
        raise AudioError(f"unsupported WAV: format {audio_format}, {bits} bits, {channels} channels, {rate} Hz")
    return WavFormat(rate, channels, bits // 8, is_float)


# -- text shown on the device while it speaks ------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;…])\s*|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences to show one by one (``tts sentence_start``), Chinese and Latin punctuation alike."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


# -- pacing ------------------------------------------------------------------------------------

type SendPacket = Callable[[bytes, int], Awaitable[bool]]
"""Send one packet (with its offset in ms); False when the peer is gone."""


class Pacer:
    """PCM → 60 ms Opus packets sent at real time plus ``lead`` seconds (the device's queue is small).

    The first packet goes out once ``lead`` seconds of audio (at most ``SLICE_PACKETS`` packets)
    are encoded, or the audio has ended, but not before ``not_before`` (loop time): the device
    resets its queue when it enters speaking after ``tts start``. Holding the start until the lead
    exists is what keeps a source that trickles in (HA's ffmpeg converting an MP3 engine's reply)
    from starting the speaker and then leaving it waiting. ``start`` is when the first packet went
    out; ``sent`` the seconds of audio sent since.

    Audio is encoded a slice (``SLICE_PACKETS`` packets) at a time, on ``executor`` (None: the
    loop's default), just ahead of sending: a reply that comes as one long chunk does not wait
    for all of it to be encoded before its first packet, and many replies starting at once share
    the encoder's time packet by packet instead of reply by reply.
    """

    SLICE_PACKETS: Final = 5

    def __init__(
        self,
        encoder: OpusEncoder,
        send: SendPacket,
        *,
        lead: float,
        not_before: float,
        executor: Executor | None = None,
    ) -> None:
        self._encoder = encoder
        self._send = send
        self._lead = lead
        self._not_before = not_before
        self._executor = executor
        self._loop = asyncio.get_running_loop()
        self._prebuffer = max(1, min(self.SLICE_PACKETS, round(lead * 1000 / OPUS_FRAME_MS)))
        self._held: list[bytes] = []  # encoded before the start: sent once there are enough
        self.start: float | None = None
        self.sent = 0.0
        self.late: list[float] = []  # how late each packet left, for the benchmark (seconds, ≥ 0)

    async def feed(self, pcm: bytes) -> None:
        """Encode and send what ``pcm`` completes."""
        step = self._encoder.frame_bytes * self.SLICE_PACKETS
        for offset in range(0, len(pcm), step):
            piece = pcm[offset : offset + step]
            if self._encoder.buffered + len(piece) < self._encoder.frame_bytes:
                self._encoder.encode(piece)  # not a whole packet yet: only buffered
                continue
            for packet in await self._loop.run_in_executor(self._executor, self._encoder.encode, piece):
                await self._put(packet)

    async def finish(self) -> None:
        """Send the rest (zero-padded) and wait until the device has played everything."""
        for packet in await self._loop.run_in_executor(self._executor, self._encoder.flush):
            await self._put(packet)
        held, self._held = self._held, []
        for packet in held:  # a reply shorter than the lead
            await self._send_packet(packet)
        if self.start is not None:
            await asyncio.sleep(max(0.0, self.start + self.sent - self._loop.time()))

    async def _put(self, packet: bytes) -> None:
        if self.start is None and len(self._held) + 1 < self._prebuffer:
            self._held.append(packet)
            return
        held, self._held = self._held, []
        for earlier in held:
            await self._send_packet(earlier)
        await self._send_packet(packet)

    async def _send_packet(self, packet: bytes) -> None:
        now = self._loop.time()
        if self.start is None:
            if now < self._not_before:
                await asyncio.sleep(self._not_before - now)
            self.start = self._loop.time()
        target = self.start + self.sent - self._lead
        if (delay := target - self._loop.time()) > 0:
            await asyncio.sleep(delay)
        self.late.append(max(0.0, self._loop.time() - target))
        if not await self._send(packet, int(self.sent * 1000)):
            raise ConnectionError("the device is gone")
        self.sent += OPUS_FRAME_MS / 1000
