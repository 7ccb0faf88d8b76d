"""Opus (PyAV, which bundles libopus): the device's packets to PCM, and PCM to its packets.

Uplink: one raw Opus packet per frame (16 kHz mono, 60 ms on stock firmware) → 16 kHz s16 mono
PCM for HA's speech-to-text. Downlink: PCM at the rate of the server hello → 60 ms Opus packets.
One packet costs well under a millisecond, but a hub serves many devices at once: decoding runs
on an executor the caller gives (PyAV releases the GIL inside libopus), in batches and in order,
so the event loop only hands packets over (``ThreadedDecoder``; encoding: ``pacing.Pacer``).
"""

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
import contextlib
from fractions import Fraction
import threading
from typing import Final

import av

from .pcm import PCM_RATE, AudioError, FrameResampler

OPUS_FRAME_MS: Final = 60
"""The frame duration of every packet sent to a device."""


class OpusDecoder:
    """Opus packets (any rate and frame duration) → 16 kHz s16 mono PCM. One per listening turn."""

    def __init__(self) -> None:
        self._decoder = av.CodecContext.create("libopus", "r")
        self._decoder.sample_rate = 48000  # libopus in FFmpeg always decodes at 48 kHz
        self._decoder.layout = "mono"  # a stereo packet is downmixed by libopus; a third less work than stereo
        self._decoder.thread_count = 1  # no threads of FFmpeg's own (they outlive the decoder until GC)
        self._resampler = FrameResampler(PCM_RATE)

    def decode(self, packet: bytes) -> bytes:
        """PCM for one packet (may be empty for DTX). Raises AudioError."""
        try:
            frames = self._decoder.decode(av.Packet(packet))
            return b"".join(
                bytes(out.planes[0])[: out.samples * 2] for frame in frames for out in self._resampler.resample(frame)
            )
        except (av.FFmpegError, ValueError) as err:
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
        self._encoder.thread_count = 1  # FFmpeg's default starts a thread per core, kept until GC runs
        self._encoder.open()
        self.frame_bytes = sample_rate * OPUS_FRAME_MS // 1000 * 2
        self._buffer = bytearray()
        self._pts = 0
        self._streaming = False  # frames went in since the stream began: libopus may hold some back

    @property
    def head(self) -> bytes:
        """Its ``OpusHead`` (channels, pre-skip, input rate), as an Ogg stream begins."""
        return bytes(self._encoder.extradata or b"")

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
        with contextlib.suppress(av.FFmpegError):  # already flushed
            packets += [bytes(p) for p in self._encoder.encode(None)]
        return packets

    def finish(self) -> list[bytes]:
        """The end of one stream; the encoder is kept for the next.

        The rest, zero-padded, then 60 ms of silence that brings out what libopus still holds
        back (its look-ahead). No flush: a flushed encoder cannot encode again.
        """
        if not self._buffer and not self._streaming:
            return []  # nothing was said: nothing to bring out
        packets = self._encode_chunk(bytes(self._buffer).ljust(self.frame_bytes, b"\0")) if self._buffer else []
        self._buffer.clear()
        packets += self._encode_chunk(bytes(self.frame_bytes))
        self._streaming = False
        return packets

    def reset(self) -> None:
        """Forget a stream that ended half-way: what is buffered, and what libopus holds back."""
        self._buffer.clear()
        if self._streaming:
            with contextlib.suppress(AudioError):
                self._encode_chunk(bytes(self.frame_bytes))
            self._streaming = False

    def _encode_chunk(self, chunk: bytes) -> list[bytes]:
        self._streaming = True
        samples = len(chunk) // 2
        frame = av.AudioFrame(format="s16", layout="mono", samples=samples)
        frame.planes[0].update(chunk)
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += samples
        # A whole frame goes straight to libopus. ``encode`` would first pass it through a resampler
        # whose filter graph starts a thread per core that lives until a cyclic garbage collection.
        send = getattr(self._encoder, "_send_frame_and_recv", None)
        try:
            packets = (
                send(frame) if send is not None and samples == self._encoder.frame_size else self._encoder.encode(frame)
            )
            return [bytes(p) for p in packets]
        except (av.FFmpegError, ValueError) as err:
            raise AudioError(f"cannot encode: {err}") from None


class EncoderPool:
    """Opus encoders reused from one stream to the next, so that encoding leaves no threads behind.

    PyAV's encoder converts every frame through a filter graph of its own, whose native threads
    (one per core) live until Python's cyclic garbage collector frees the graph, which Home
    Assistant seldom runs: an encoder per reply left two threads behind on a two-core machine.
    Reused, the threads are bounded by the streams that play at once. ``take`` on the event loop;
    ``give`` on the thread that encodes (after its last encode), which readies it for the next.
    """

    def __init__(self, idle: int = 4) -> None:
        self._idle: dict[int, list[OpusEncoder]] = {}
        self._max_idle = idle
        self._lock = threading.Lock()
        self.made = 0
        """Encoders made (tests, diagnostics): no more than ever played at once, plus the idle ones."""

    def take(self, sample_rate: int) -> OpusEncoder:
        """An idle encoder for ``sample_rate``, or a new one."""
        with self._lock:
            idle = self._idle.get(sample_rate)
            if idle:
                return idle.pop()
        self.made += 1
        return OpusEncoder(sample_rate)

    def give(self, encoder: OpusEncoder) -> None:
        """``encoder``'s stream is over: ready for the next one, kept unless enough are idle."""
        encoder.reset()
        with self._lock:
            idle = self._idle.setdefault(encoder.sample_rate, [])
            if len(idle) < self._max_idle:
                idle.append(encoder)
