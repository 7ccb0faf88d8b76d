"""Ogg Opus streams (RFC 7845): what firmware 2.5 plays from a URL (``notify``).

The Opus packets come from an ``OpusEncoder`` (reused from a pool: PyAV's own Ogg muxer would
encode through a new encoder, whose native threads outlive it until Python's cyclic garbage
collector runs); the pages are written here: an ``OpusHead`` page, an ``OpusTags`` page, then
short pages of audio (the device starts playing after the first), the last marked end of stream.
"""

import secrets
import struct
from typing import Final

from .opus import OPUS_FRAME_MS, OpusEncoder

VENDOR: Final = b"xiaozhi_local"
OPUS_RATE: Final = 48000
"""Granule positions count samples at 48 kHz, whatever the input rate."""
PACKETS_PER_PAGE: Final = 2
"""120 ms a page: the device starts playing after the first page, not after a second of audio."""
BOS: Final = 0x02
EOS: Final = 0x04


def _crc_table() -> tuple[int, ...]:
    """Ogg's CRC-32: polynomial 0x04C11DB7, most significant bit first, no reflection, no final xor."""
    table = []
    for index in range(256):
        crc = index << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
        table.append(crc & 0xFFFFFFFF)
    return tuple(table)


_CRC_TABLE: Final = _crc_table()


def ogg_crc(data: bytes) -> int:
    """The checksum of a page (computed with its checksum field zero)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC_TABLE[((crc >> 24) ^ byte) & 0xFF]
    return crc


def ogg_page(serial: int, sequence: int, granule: int, packets: list[bytes], flags: int = 0) -> bytes:
    """One page holding ``packets`` whole (each laced in 255-byte segments, at most 255 segments)."""
    lacing = bytearray()
    for packet in packets:
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    if len(lacing) > 255:
        raise ValueError("too much for one page")
    header = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, serial, sequence, 0, len(lacing))
    page = bytearray(header + lacing + b"".join(packets))
    struct.pack_into("<I", page, 22, ogg_crc(bytes(page)))
    return bytes(page)


class OggOpusWriter:
    """s16 mono PCM → an Ogg Opus stream, page by page, through ``encoder`` (its stream's packets)."""

    def __init__(self, encoder: OpusEncoder) -> None:
        self._encoder = encoder
        head = encoder.head
        self._pre_skip = struct.unpack_from("<H", head, 10)[0]
        self._serial = secrets.randbits(32)
        self._sequence = 0
        self._granule = 0  # samples at 48 kHz in the packets paged so far
        self._input = 0  # PCM samples given (at the encoder's rate)
        self._waiting: list[bytes] = []  # packets for the next page
        self._out = bytearray()
        self._page([head], BOS)
        self._page([b"OpusTags" + struct.pack("<I", len(VENDOR)) + VENDOR + struct.pack("<I", 0)])
        self._samples_per_packet = OPUS_RATE * OPUS_FRAME_MS // 1000

    def feed(self, pcm: bytes) -> bytes:
        """Ogg bytes for every complete page so far (the header pages first; may be empty)."""
        self._input += len(pcm) // 2
        self._waiting += self._encoder.encode(pcm)
        while len(self._waiting) >= PACKETS_PER_PAGE:
            self._audio_page(self._waiting[:PACKETS_PER_PAGE])
            del self._waiting[:PACKETS_PER_PAGE]
        return self._take()

    def finish(self) -> bytes:
        """The rest, on a last page marked end of stream (its granule trims the padding)."""
        packets, self._waiting = self._waiting + self._encoder.finish(), []
        while len(packets) > PACKETS_PER_PAGE:
            self._audio_page(packets[:PACKETS_PER_PAGE])
            del packets[:PACKETS_PER_PAGE]
        before = self._granule
        self._granule += len(packets) * self._samples_per_packet
        end = self._pre_skip + self._input * OPUS_RATE // self._encoder.sample_rate
        self._page(packets, EOS, max(before, min(end, self._granule)))
        return self._take()

    def _audio_page(self, packets: list[bytes]) -> None:
        self._granule += len(packets) * self._samples_per_packet
        self._page(packets, 0, self._granule)

    def _page(self, packets: list[bytes], flags: int = 0, granule: int = 0) -> None:
        self._out += ogg_page(self._serial, self._sequence, granule, packets, flags)
        self._sequence += 1

    def _take(self) -> bytes:
        data = bytes(self._out)
        self._out.clear()
        return data
