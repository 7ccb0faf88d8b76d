"""Audio for the device's speaker: HA's TTS streams and any media URL, as s16 mono PCM at the downlink rate.

Opus, framing and pacing are the protocol package's (``protocol/audio.py``); this module only
turns what Home Assistant has (a TTS stream, a media URL) into PCM for them.
"""

import asyncio
from collections.abc import AsyncIterator
import contextlib

from homeassistant.components import tts
from homeassistant.components.ffmpeg import get_ffmpeg_manager
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.network import NoURLAvailableError, get_url

from .protocol.audio import Resampler, WavStream
from .protocol.messages import DOWNLINK_SAMPLE_RATE


async def tts_pcm(hass: HomeAssistant, token: str) -> AsyncIterator[bytes]:
    """The TTS stream ``token`` as PCM.

    The satellite asks HA for WAV only, at whatever rate and sample format the engine makes
    (Piper: 22.05 kHz s16): HA then passes a WAV engine's audio through untouched, and runs
    ffmpeg only for engines that return something else (MP3). We resample in-process.
    """
    stream = tts.async_get_stream(hass, token)
    if stream is None:
        raise HomeAssistantError(f"TTS stream {token} not found")
    async for pcm in wav_pcm(stream.async_stream_result()):
        yield pcm


async def wav_pcm(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A WAV byte stream → s16 mono PCM at the downlink rate (resampled only when needed)."""
    wav = WavStream()
    resampler: Resampler | None = None
    async for chunk in chunks:
        pcm = wav.feed(chunk)
        if not pcm:
            continue
        fmt = wav.format
        assert fmt is not None
        if fmt.sample_rate != DOWNLINK_SAMPLE_RATE or not fmt.is_s16_mono:
            if resampler is None:
                resampler = Resampler(fmt.sample_rate, fmt.channels, DOWNLINK_SAMPLE_RATE, fmt.av_format)
            pcm = resampler.convert(pcm)
        yield pcm


def full_url(hass: HomeAssistant, media: str) -> str:
    """A media id that is a path on Home Assistant (``/api/tts_proxy/…``) as a URL ffmpeg can open."""
    if not media.startswith("/"):
        return media
    try:
        return get_url(hass, prefer_external=False) + media
    except NoURLAvailableError:
        return f"http://127.0.0.1:{hass.http.server_port}{media}"


async def ffmpeg_pcm(hass: HomeAssistant, url: str) -> AsyncIterator[bytes]:
    """Any media URL → s16 mono PCM at the downlink rate, by HA's ffmpeg (as Wyoming does)."""
    process = await asyncio.create_subprocess_exec(
        get_ffmpeg_manager(hass).binary,
        "-nostdin",
        "-loglevel",
        "error",
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
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    try:
        while chunk := await process.stdout.read(8192):
            yield chunk
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()
