"""Sending audio at the pace the device plays it: PCM → 60 ms Opus packets, just ahead of real time."""

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Final

from .opus import OPUS_FRAME_MS, OpusEncoder

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
        """Send the rest (zero-padded) and wait until the device has played everything.

        The encoder is not flushed: it can serve the next stream (``EncoderPool``).
        """
        for packet in await self._loop.run_in_executor(self._executor, self._encoder.finish):
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
