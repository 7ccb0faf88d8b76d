"""WAV streams as TTS engines send them: the header read as it arrives, then PCM."""

from dataclasses import dataclass
import struct
from typing import Final

from .pcm import AudioError


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
