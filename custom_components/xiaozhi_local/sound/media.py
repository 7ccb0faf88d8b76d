"""Audio for the device's speaker: HA's TTS streams and any media URL, as s16 mono PCM at the downlink rate.

Opus, WAV and pacing are the protocol package's (``protocol/opus.py``, ``wav.py``, ``pacing.py``); this module only
turns what Home Assistant has (a TTS stream, a media URL) into PCM for them.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
import contextlib
import re
from typing import Final

from homeassistant.components import tts
from homeassistant.components.ffmpeg import get_ffmpeg_manager
from homeassistant.const import EVENT_HOMEASSISTANT_CLOSE
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers.network import NoURLAvailableError, get_url
from homeassistant.util.hass_dict import HassKey

from ..const import DOMAIN
from ..protocol.messages import DOWNLINK_SAMPLE_RATE
from ..protocol.opus import EncoderPool, OpusEncoder
from ..protocol.pcm import Resampler
from ..protocol.wav import WavStream

OFF_LOOP_BYTES: Final = 8192
"""Pieces from this size on are resampled on the executor (about 0.2 s of audio), smaller ones inline."""
SLICE_SECONDS: Final = 0.5
DATA_AUDIO_EXECUTOR: HassKey[Executor] = HassKey(f"{DOMAIN}_audio_executor")
DATA_ENCODERS: HassKey[EncoderPool] = HassKey(f"{DOMAIN}_encoders")


async def tts_pcm(hass: HomeAssistant, token: str) -> AsyncGenerator[bytes]:
    """The TTS stream ``token`` as PCM.

    The satellite asks HA for WAV only, at whatever rate and sample format the engine makes
    (Piper: 22.05 kHz s16): HA then passes a WAV engine's audio through untouched, and runs
    ffmpeg only for engines that return something else (MP3). We resample in-process.
    """
    stream = tts.async_get_stream(hass, token)
    if stream is None:
        raise MediaUnreadable(f"the text-to-speech stream {token} is gone")
    async for pcm in wav_pcm(stream.async_stream_result(), audio_executor(hass)):
        yield pcm


async def tts_seconds(hass: HomeAssistant, token: str, first: Callable[[], None] | None = None) -> float:
    """How long the TTS stream ``token`` plays; ``first()`` at its first audio.

    Read from its WAV as it comes, nothing decoded or resampled: a reply speaker plays it, this
    only times it.
    """
    stream = tts.async_get_stream(hass, token)
    if stream is None:
        raise MediaUnreadable(f"the text-to-speech stream {token} is gone")
    return await wav_seconds(stream.async_stream_result(), first)


async def wav_seconds(chunks: AsyncIterator[bytes], first: Callable[[], None] | None = None) -> float:
    """How long a WAV byte stream plays, in whatever pieces it comes (its RIFF sizes ignored)."""
    wav = WavStream()
    seconds = 0.0
    async for chunk in chunks:
        if (pcm := wav.feed(chunk)) and (fmt := wav.format) is not None:
            if first is not None:
                first()
            width = 4 if fmt.sample_width == 3 else fmt.sample_width  # 24-bit comes widened
            seconds += len(pcm) / (fmt.channels * width * fmt.sample_rate)
    return seconds


async def pcm_seconds(pcm: AsyncIterator[bytes], first: Callable[[], None] | None = None) -> float:
    """How long PCM at the downlink rate plays (any source ffmpeg reads), counted as fast as it comes."""
    seconds = 0.0
    try:
        async for chunk in pcm:
            if first is not None:
                first()
            seconds += len(chunk) / (2 * DOWNLINK_SAMPLE_RATE)
    finally:
        if isinstance(pcm, AsyncGenerator):
            await pcm.aclose()  # now: its ffmpeg ends with it, not at a later collection
    return seconds


async def wav_pcm(chunks: AsyncIterator[bytes], executor: Executor | None = None) -> AsyncIterator[bytes]:
    """A WAV byte stream → s16 mono PCM at the downlink rate (resampled only when needed).

    What needs resampling goes in half-second slices, on ``executor`` (None: the loop's default):
    an engine may hand over a whole reply at once, and its first words need not wait for the rest.
    """
    wav = WavStream()
    resampler: Resampler | None = None
    loop = asyncio.get_running_loop()
    async for chunk in chunks:
        pcm = wav.feed(chunk)
        if not pcm:
            continue
        fmt = wav.format
        assert fmt is not None
        if fmt.sample_rate == DOWNLINK_SAMPLE_RATE and fmt.is_s16_mono:
            yield pcm
            continue
        if resampler is None:
            resampler = Resampler(fmt.sample_rate, fmt.channels, DOWNLINK_SAMPLE_RATE, fmt.av_format)
        frame = fmt.channels * (4 if fmt.sample_width == 3 else fmt.sample_width)  # 24-bit comes as 32
        step = int(fmt.sample_rate * SLICE_SECONDS) * frame
        for offset in range(0, len(pcm), step):
            piece = pcm[offset : offset + step]
            if len(piece) >= OFF_LOOP_BYTES:
                yield await loop.run_in_executor(executor, resampler.convert, piece)
            else:
                yield resampler.convert(piece)


def audio_executor(hass: HomeAssistant) -> Executor:
    """The integration's one codec thread: Opus both ways and resampling, for every device.

    Not Home Assistant's shared executor: that one grows to dozens of threads under many
    concurrent turns, and their contention for the GIL stalls the event loop. One thread beside
    the loop is what a small machine has room for (one core decodes and encodes well over 100
    streams). Shut down when Home Assistant closes.
    """
    if (executor := hass.data.get(DATA_AUDIO_EXECUTOR)) is not None:
        return executor
    executor = hass.data[DATA_AUDIO_EXECUTOR] = ThreadPoolExecutor(1, thread_name_prefix="xiaozhi_local_audio")

    async def shutdown(_event: Event) -> None:
        hass.data.pop(DATA_AUDIO_EXECUTOR, None)
        await hass.async_add_executor_job(executor.shutdown)

    hass.bus.async_listen_once(EVENT_HOMEASSISTANT_CLOSE, shutdown)
    return executor


@contextlib.contextmanager
def downlink_encoder(hass: HomeAssistant) -> Iterator[OpusEncoder]:
    """An Opus encoder for one stream to a device, given back to the pool when the stream ends.

    Given back on the codec thread, after whatever encode of the stream is still running there
    (a stream cancelled mid-encode): nothing uses it twice at once.
    """
    pool = hass.data.get(DATA_ENCODERS)
    if pool is None:
        pool = hass.data[DATA_ENCODERS] = EncoderPool()
    encoder = pool.take(DOWNLINK_SAMPLE_RATE)
    try:
        yield encoder
    finally:
        with contextlib.suppress(RuntimeError):  # the codec thread has shut down with HA
            audio_executor(hass).submit(pool.give, encoder)


FFMPEG_PROTOCOLS: Final = "http,https,tcp,tls,crypto"
"""What ffmpeg may open for a media URL, a playlist's entries included: never ``file:``,
``concat:``, ``subfile:`` or other ways to read Home Assistant's own files."""


_SIGNED: Final = re.compile(r"([?&]authSig=)[^&\s'\"]+")
"""A signed path's signature (valid for a day without a login): never in an error or a log line."""


class MediaUnreadable(Exception):
    """The media cannot be played.

    ffmpeg could not read it (what it said is the message), it is not an http(s) URL, or its
    text-to-speech stream is gone. Never reaches the user as it is: the entity that plays it
    raises a translated error with the reason.
    """


def full_url(hass: HomeAssistant, media: str) -> str:
    """A media id that is a path on Home Assistant (``/api/tts_proxy/…``) as a URL ffmpeg can open.

    Raises MediaUnreadable for anything but an http(s) URL (a service's media id reaches ffmpeg).
    """
    if media.startswith("/"):
        try:
            return get_url(hass, prefer_external=False) + media
        except NoURLAvailableError:
            return f"http://127.0.0.1:{hass.http.server_port}{media}"
    if not media.lower().startswith(("http://", "https://")):
        raise MediaUnreadable("not an http(s) URL")
    return media


async def ffmpeg_pcm(hass: HomeAssistant, url: str) -> AsyncGenerator[bytes]:
    """Any media URL → s16 mono PCM at the downlink rate, by HA's ffmpeg (as Wyoming does).

    Raises MediaUnreadable when ffmpeg fails before any audio came (what it said is the message).
    """
    if not url.lower().startswith(("http://", "https://")):
        raise MediaUnreadable("not an http(s) URL")
    process = await asyncio.create_subprocess_exec(
        get_ffmpeg_manager(hass).binary,
        "-nostdin",
        "-loglevel",
        "error",
        "-protocol_whitelist",
        FFMPEG_PROTOCOLS,
        "-i",
        url,
        "-f",
        "s16le",
        "-ac",
        "1",
        "-ar",
        str(DOWNLINK_SAMPLE_RATE),
        "pipe:",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    produced = False
    try:
        while chunk := await process.stdout.read(8192):
            produced = True
            yield chunk
        said = _SIGNED.sub(r"\1…", (await process.stderr.read(4096)).decode(errors="replace").strip())
        if await process.wait() != 0 and not produced:
            raise MediaUnreadable(said.splitlines()[-1] if said else f"ffmpeg exited with {process.returncode}")
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()
