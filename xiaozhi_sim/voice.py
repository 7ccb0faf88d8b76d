"""The firmware's audio side (§6): Opus 16 kHz mono 60 ms uplink; downlink decoded while speaking.

Its own small PyAV codec, not the integration's: the simulator is the other end of the wire.
"""

from collections.abc import Callable
import contextlib
from fractions import Fraction
from functools import lru_cache
import io
import math
import random
import struct
import subprocess

import av
import av.error
from av.filter import Graph

UPLINK_RATE = 16000
FRAME_MS = 60
FRAME_BYTES = UPLINK_RATE * FRAME_MS // 1000 * 2


def frame(version: int, payload: bytes, timestamp: int = 0) -> bytes:
    """Binary protocol v1/v2/v3 framing, as ``websocket_protocol.cc`` builds it."""
    if version == 2:
        return struct.pack(">HHIII", 2, 0, 0, timestamp, len(payload)) + payload
    if version == 3:
        return struct.pack(">BBH", 0, 0, len(payload)) + payload
    return payload


def unframe(version: int, data: bytes) -> bytes:
    """The payload (the firmware trusts the header's size without checking it)."""
    if version == 2:
        size = struct.unpack_from(">I", data, 12)[0]
        return data[16 : 16 + size]
    if version == 3:
        size = struct.unpack_from(">H", data, 2)[0]
        return data[4 : 4 + size]
    return data


class MicEncoder:
    """16 kHz s16 mono PCM → Opus packets of ``frame_ms`` (60 on the firmware; py-xiaozhi uses 20)."""

    def __init__(self, frame_ms: int = FRAME_MS) -> None:
        self.frame_bytes = UPLINK_RATE * frame_ms // 1000 * 2
        self._codec = av.CodecContext.create("libopus", "w")
        self._codec.sample_rate = UPLINK_RATE
        self._codec.layout = "mono"
        self._codec.format = "s16"
        self._codec.bit_rate = 24000
        self._codec.time_base = Fraction(1, UPLINK_RATE)
        self._codec.options = {"frame_duration": str(frame_ms), "application": "voip"}
        self._codec.open()
        self._pts = 0

    def packets(self, pcm: bytes) -> list[bytes]:
        """Packets for whole frames of ``pcm`` (the rest is zero-padded)."""
        out: list[bytes] = []
        size = self.frame_bytes
        for start in range(0, len(pcm), size):
            chunk = pcm[start : start + size].ljust(size, b"\0")
            audio = av.AudioFrame(format="s16", layout="mono", samples=size // 2)
            audio.planes[0].update(chunk)
            audio.sample_rate = UPLINK_RATE
            audio.pts = self._pts
            self._pts += size // 2
            out += [bytes(p) for p in self._codec.encode(audio)]
        return out


@lru_cache(maxsize=8)
def mic_packets(pcm: bytes, frame_ms: int = FRAME_MS) -> tuple[bytes, ...]:
    """What a fresh microphone encoder makes of ``pcm``.

    The same every time: simulated devices saying one clip share its encoding, so a bench of 100
    talkers does not encode it 100 times.
    """
    return tuple(MicEncoder(frame_ms).packets(pcm))


def _to_rate(rate: int) -> Callable[[av.AudioFrame], list[av.AudioFrame]]:
    """Frames → s16 mono at ``rate``, on the calling thread.

    ``av.AudioResampler``'s graph would start native threads that only the cyclic garbage
    collector stops; run inside a test process, they would count as the server's.
    """
    graph: Graph | None = None

    def convert(frame: av.AudioFrame) -> list[av.AudioFrame]:
        nonlocal graph
        if graph is None:
            graph = Graph()
            graph.threads = 1
            chain = [
                graph.add(
                    "abuffer",
                    sample_rate=str(frame.sample_rate),
                    sample_fmt=frame.format.name,
                    channel_layout=frame.layout.name,
                    time_base=f"1/{frame.sample_rate}",
                ),
                graph.add("aformat", sample_rates=str(rate), sample_fmts="s16", channel_layouts="mono"),
                graph.add("abuffersink"),
            ]
            chain[0].link_to(chain[1])
            chain[1].link_to(chain[2])
            graph.configure()
        graph.push(frame)
        frames: list[av.AudioFrame] = []
        with contextlib.suppress(av.error.BlockingIOError, av.error.EOFError):
            while True:
                frames.append(graph.pull())  # type: ignore[arg-type]
        return frames

    return convert


class SpeakerDecoder:
    """Downlink Opus → s16 mono PCM at the rate the server hello announced."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._codec = av.CodecContext.create("libopus", "r")
        self._codec.sample_rate = 48000
        self._resample = _to_rate(rate)

    def decode(self, packet: bytes) -> bytes:
        """PCM of one packet; raises av.error.FFmpegError on garbage (the firmware logs and drops)."""
        return b"".join(
            bytes(out.planes[0])[: out.samples * 2]
            for decoded in self._codec.decode(av.Packet(packet))
            for out in self._resample(decoded)
        )


def decode_ogg_opus(data: bytes, rate: int = 24000) -> bytes:
    """A whole Ogg Opus stream (a ``notify`` URL's body) → s16 mono PCM at ``rate``."""
    container = av.open(io.BytesIO(data), mode="r")
    resample = _to_rate(rate)
    out = bytearray()
    for decoded in container.decode(audio=0):
        for frame_ in resample(decoded):
            out += bytes(frame_.planes[0])[: frame_.samples * 2]
    container.close()
    return bytes(out)


@lru_cache(maxsize=16)
def wake_clip(level_db: float, noise_db: float, seconds: float = 2.0) -> bytes:
    """A wake word as a microphone records it: 16 kHz s16 mono, the same every time (seeded).

    Kept once made (about 50 ms of pure Python): devices that wake together in one process must not
    take turns making it, where real ones hear the word at once.

    A voiced sound at ``level_db`` (RMS, dBFS) from 0.4 s to 1.6 s, over steady noise at ``noise_db``.
    """
    rng = random.Random(7)
    count = int(UPLINK_RATE * seconds)
    noise = 32767 * 10 ** (noise_db / 20) * math.sqrt(3)  # uniform noise of that RMS
    voice = 32767 * 10 ** (level_db / 20) * math.sqrt(2) / math.sqrt(1 + 1 / 4 + 1 / 9)
    start, end = int(0.4 * UPLINK_RATE), int(1.6 * UPLINK_RATE)
    samples = []
    for n in range(count):
        value = rng.uniform(-noise, noise)
        if start <= n < end:
            t = n / UPLINK_RATE
            value += voice * sum(math.sin(2 * math.pi * 180 * k * t) / k for k in (1, 2, 3))
        samples.append(max(-32768, min(32767, round(value))))
    return struct.pack(f"<{count}h", *samples)


def spoken(text: str) -> bytes:
    """``text`` as espeak-ng says it (script/develop's demo voice), s16 mono at the microphone's rate.

    A voiced tone where espeak-ng is missing.
    """
    try:
        wav = subprocess.run(["espeak-ng", "--stdout", text], capture_output=True, check=True, timeout=30).stdout
    except OSError, subprocess.SubprocessError:
        return wake_clip(-20.0, -60.0)
    return decode_ogg_opus(wav, UPLINK_RATE)
