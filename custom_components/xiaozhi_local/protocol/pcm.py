"""PCM as Home Assistant's speech-to-text takes it, conversions to it, and the audio error.

In-process (libswresample through PyAV): what a TTS engine returns is played without an ffmpeg
process.
"""

from fractions import Fraction
from typing import Final

import av
from av.filter import Graph

PCM_RATE: Final = 16000
"""What HA's speech-to-text takes: 16 kHz, 16-bit, mono."""


class AudioError(Exception):
    """Audio that cannot be used: an undecodable Opus packet, PCM that cannot be encoded, not WAV."""


class FrameResampler:
    """Audio frames of any rate, layout and format → s16 mono frames at ``rate`` (libswresample).

    ``av.AudioResampler`` would do the same, but its filter graph starts a pool of native threads
    (one per core) that lives until Python's cyclic garbage collector frees the graph, which Home
    Assistant seldom runs: every listening turn and every reply left threads behind. This graph
    runs on the caller's thread (``nb_threads`` 1), so nothing outlives the resampler but memory.
    """

    def __init__(self, rate: int) -> None:
        self._rate = rate
        self._graph: Graph | None = None
        self._passthrough = False

    def resample(self, frame: av.AudioFrame) -> list[av.AudioFrame]:
        """The frame converted (what the graph has ready; it may keep a few samples back)."""
        if self._graph is None and not self._passthrough:
            self._start(frame)
        if self._graph is None:
            return [frame]
        self._graph.push(frame)
        out: list[av.AudioFrame] = []
        while True:
            try:
                pulled = self._graph.pull()
            except av.BlockingIOError, av.EOFError:
                return out
            assert isinstance(pulled, av.AudioFrame)
            out.append(pulled)

    def _start(self, frame: av.AudioFrame) -> None:
        """The graph for the first frame's format (later frames have the same)."""
        source = (frame.format.name, frame.layout.name, frame.sample_rate)
        if source == ("s16", "mono", self._rate):
            self._passthrough = True
            return
        graph = Graph()
        graph.threads = 1  # before any filter: no thread pool
        time_base = frame.time_base or Fraction(1, frame.sample_rate)
        buffer = graph.add(
            "abuffer",
            sample_rate=str(frame.sample_rate),
            sample_fmt=frame.format.name,
            channel_layout=frame.layout.name,
            time_base=str(time_base),
        )
        convert = graph.add("aformat", sample_rates=str(self._rate), sample_fmts="s16", channel_layouts="mono")
        sink = graph.add("abuffersink")
        buffer.link_to(convert)
        convert.link_to(sink)
        graph.configure()
        self._graph = graph


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
        self._resampler = FrameResampler(rate)
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
