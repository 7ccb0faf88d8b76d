"""Ogg Opus streams: what firmware 2.5 plays from a URL (``notify``)."""

from fractions import Fraction

import av

from .opus import OPUS_FRAME_MS


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
