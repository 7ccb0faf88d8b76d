"""PCM as Home Assistant's speech-to-text takes it, conversions to it, and the audio error.

In-process (libswresample through PyAV): what a TTS engine returns is played without an ffmpeg
process.
"""

from typing import Final

import av

PCM_RATE: Final = 16000
"""What HA's speech-to-text takes: 16 kHz, 16-bit, mono."""


class AudioError(Exception):
    """Audio that cannot be used: an undecodable Opus packet, PCM that cannot be encoded, not WAV."""


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
