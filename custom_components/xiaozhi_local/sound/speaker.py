"""Sound on a device's speaker: the one path for replies, announcements and media.

- **Over an open conversation channel** (any firmware, both transports): ``tts start``, the text
  shown line by line as it is heard, Opus packets paced at real time with a small lead, then
  always ``tts stop`` (``async_speak``). The PCM comes from anywhere: HA's TTS, ffmpeg.
- **To a device online without a channel** (idle over MQTT): ``notify`` with a one-time Ogg Opus
  URL on firmware that plays it (2.5), else an ``alert`` with the text and the firmware's sound
  (``async_speak_idle``).

The voice satellite decides *when* (its exchanges, barge-in), the media player what to play;
how the sound travels is here, once.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
import contextlib
import logging
import math
from typing import Any, Final, Protocol

from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..errors import translated_error
from ..link import DeviceLink
from ..protocol import voice
from ..protocol.pacing import Pacer
from ..protocol.pcm import AudioError
from ..protocol.sentences import split_sentences
from ..protocol.voice import speech_seconds
from .announcements import Announcement, AnnouncementStore, PcmSource
from .media import (
    MediaUnreadable,
    audio_executor,
    downlink_encoder,
    ffmpeg_pcm,
    full_url,
    pcm_seconds,
    tts_pcm,
    tts_seconds,
)

_LOGGER = logging.getLogger(__name__)

TTS_LEAD: Final = 0.3
"""Seconds of audio sent ahead of real time. The device drops what its decode queue cannot hold:
40 packets (2.4 s) on firmware 2.4, 20 (1.2 s) on 2.5; 0.3 s fits both."""
FIRST_FRAME_GAP: Final = 0.08
"""Pause between ``tts start`` and the first packet: the device resets its queue on entering speaking."""
NOTIFY_FETCH_TIMEOUT: Final = 10.0
"""Seconds a 2.5 device has to fetch a ``notify`` announcement before it is shown as an alert."""
DELIVERY_TIMEOUT: Final = 5.0
"""Seconds an idle device has to answer after an alert before the announcement counts as not
delivered (and its link as dead): a device on Wi-Fi answers in well under one."""
MEDIA_OPEN_TIMEOUT: Final = 15.0
"""Seconds a media URL has to give its first audio (a radio stream connects, a file is read)."""

type TextSource = Callable[[], str | None]
"""The text to show while speaking, read as it plays (a streamed reply's text comes later)."""


class Named(Protocol):
    """What a log line names a device by."""

    @property
    def mac(self) -> str:
        """Its MAC address."""


class SpeechWatch(Protocol):
    """Who wants to know when speech reached the device (a turn's stages: ``timings.py``)."""

    def first_pcm(self, at: float) -> None:
        """The source's first audio came, at ``at`` (the loop's clock)."""

    def frame_sent(self, at: float) -> None:
        """A frame went to the device, at ``at``."""


class SpeakerLink(Protocol):
    """What speech needs of a connection (a device's link, or a pairing session's socket)."""

    @property
    def device(self) -> Named:
        """Whom it talks to."""

    async def async_send_json(self, message: dict[str, Any]) -> bool:
        """One JSON message; False when the connection is gone."""

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One Opus packet; False when the connection is gone."""

    def touch(self) -> None:
        """Voice activity (the conversation goes on)."""


async def async_speak(
    hass: HomeAssistant,
    link: SpeakerLink,
    source: AsyncIterator[bytes] | None,
    text: TextSource,
    watch: SpeechWatch | None = None,
) -> None:
    """``tts start``, paced Opus, the text's sentences as they are heard, then always ``tts stop``.

    ``source`` None shows the text without speech (typed text answered without TTS). Returns
    once the device has played it all, or when the link or the source broke (logged). ``watch``
    hears of the first audio and of every frame sent.
    """
    loop = asyncio.get_running_loop()
    await link.async_send_json(voice.tts_start())
    shown = 0
    try:
        if source is None:
            await show_sentences(link, text, shown, math.inf)
            return

        async def send(packet: bytes, offset_ms: int) -> bool:
            nonlocal shown
            shown, _next = await show_sentences(link, text, shown, offset_ms / 1000)
            link.touch()
            sent = await link.async_send_audio(packet, offset_ms)
            if sent and watch is not None:
                watch.frame_sent(loop.time())
            return sent

        with downlink_encoder(hass) as encoder:
            pacer = Pacer(
                encoder, send, lead=TTS_LEAD, not_before=loop.time() + FIRST_FRAME_GAP, executor=audio_executor(hass)
            )
            async for pcm in source:
                if watch is not None:
                    watch.first_pcm(loop.time())
                await pacer.feed(pcm)
            shown, _next = await show_sentences(link, text, shown, math.inf)
            await pacer.finish()  # returns once the device has played it all
    except ConnectionError as err:  # the device went away (or a pairing session was replaced): normal
        _LOGGER.debug("Device %s: speech stopped: %s", link.device.mac, err)
    except (AudioError, MediaUnreadable, HomeAssistantError) as err:
        _LOGGER.warning("Device %s: speech stopped: %s", link.device.mac, err)
    finally:
        if isinstance(source, AsyncGenerator):
            await source.aclose()  # now, in this task: its ffmpeg ends with it (not at a later GC)
        await link.async_send_json(voice.tts_stop())
        link.touch()


async def show_sentences(link: SpeakerLink, text: TextSource, shown: int, heard: float) -> tuple[int, float | None]:
    """``tts sentence_start`` for each sentence whose (estimated) time has come, ``heard`` seconds in.

    Returns how many are shown now, and when the next one is due (None: all are shown).
    """
    sentences = split_sentences(text() or "")
    offset = sum(speech_seconds(s) for s in sentences[:shown])
    while shown < len(sentences) and offset <= heard:
        await link.async_send_json(voice.tts_sentence(sentences[shown]))
        offset += speech_seconds(sentences[shown])
        shown += 1
    return shown, (offset if shown < len(sentences) else None)


async def chained(sources: list[PcmSource]) -> AsyncGenerator[bytes]:
    """The PCM of each source in turn (a chime, then the message); each closed when left."""
    for make in sources:
        async with contextlib.aclosing(make()) as pcm_stream:
            async for pcm in pcm_stream:
                yield pcm


def announcement_sources(hass: HomeAssistant, announcement: AssistSatelliteAnnouncement) -> list[PcmSource]:
    """The chime (if any), then the message: each a PCM stream made when it is played."""
    sources: list[PcmSource] = []
    if announcement.preannounce_media_id:
        chime = full_url(hass, announcement.preannounce_media_id)
        sources.append(lambda: ffmpeg_pcm(hass, chime))
    if announcement.media_id_source == "tts" and announcement.tts_token:
        token = announcement.tts_token
        sources.append(lambda: tts_pcm(hass, token))
    else:
        url = full_url(hass, announcement.media_id)
        sources.append(lambda: ffmpeg_pcm(hass, url))
    return sources


async def announcement_seconds(
    hass: HomeAssistant, announcement: AssistSatelliteAnnouncement, first: Callable[[], None] | None = None
) -> float:
    """How long the message (not its chime) plays: a reply speaker's wait for it."""
    if announcement.media_id_source == "tts" and announcement.tts_token:
        return await tts_seconds(hass, announcement.tts_token, first)
    return await pcm_seconds(ffmpeg_pcm(hass, full_url(hass, announcement.media_id)), first)


async def async_notify(
    announcements: AnnouncementStore, link: DeviceLink, sources: list[PcmSource], text: str
) -> Announcement | None:
    """``notify`` (firmware 2.5): the device told, and fetching it; its ``played`` is set at the end.

    None when the device did not fetch it in time (busy: it ignores ``notify`` then, or it cannot
    reach the URL) or could not be told.
    """
    url, waiting = announcements.add(sources, link.device.address)
    subtitles = [{"start_ms": 0, "text": text}] if text else []
    if not await link.async_send_json(voice.notify(url, subtitles)):
        return None
    try:
        async with asyncio.timeout(NOTIFY_FETCH_TIMEOUT):
            await waiting.fetched.wait()
    except TimeoutError:
        _LOGGER.debug("Device %s did not fetch its announcement", link.device.mac)
        return None
    return waiting


async def async_until_played(waiting: Announcement) -> None:
    """Until the device has played it; cancelled, the stream ends where it is (the device stops).

    The stream is sent faster than it plays: after its last byte, until its audio has been heard.
    """
    try:
        await waiting.played.wait()
        if waiting.heard_until is not None:
            loop = asyncio.get_running_loop()
            await asyncio.sleep(max(0.0, waiting.heard_until - loop.time()))
    except asyncio.CancelledError:
        waiting.stop()
        raise


class OpenedMedia(AsyncGenerator[bytes]):
    """A PCM stream whose first chunk was read already: yields it first, then the rest.

    ``aclose`` ends the stream underneath (its ffmpeg) whether or not iteration ever began.
    """

    def __init__(self, first: bytes, source: AsyncGenerator[bytes]) -> None:
        self._first: bytes | None = first
        self._source = source

    async def asend(self, value: None) -> bytes:
        """The next chunk (the one read ahead first)."""
        if (first := self._first) is not None:
            self._first = None
            return first
        return await self._source.asend(value)

    async def athrow(self, typ: Any, val: Any = None, tb: Any = None) -> bytes:
        """Into the stream underneath."""
        self._first = None
        return await self._source.athrow(typ, val, tb)

    async def aclose(self) -> None:
        """End the stream underneath (its ffmpeg)."""
        self._first = None
        await self._source.aclose()


async def async_open_media(hass: HomeAssistant, url: str) -> OpenedMedia:
    """The media at ``url`` as PCM, once its first audio is there (MediaUnreadable otherwise).

    Read ahead by one chunk, so that a URL ffmpeg cannot read fails here, before the device is told
    anything. Close what is returned (``aclose``) if it is not played to its end.
    """
    source = ffmpeg_pcm(hass, url)
    try:
        async with asyncio.timeout(MEDIA_OPEN_TIMEOUT):
            first = await anext(source)
    except StopAsyncIteration:
        raise MediaUnreadable("no audio in it") from None
    except TimeoutError:
        await source.aclose()
        raise MediaUnreadable(f"no audio within {MEDIA_OPEN_TIMEOUT:.0f} s") from None
    except BaseException:
        await source.aclose()
        raise
    return OpenedMedia(first, source)


async def async_speak_idle(
    announcements: AnnouncementStore, link: DeviceLink, sources: list[PcmSource], text: str
) -> None:
    """An announcement for a device without a channel: ``notify`` where it plays it, else an ``alert``.

    ``text`` is shown with the sound, or in the alert. Media without text that cannot be played
    fails with the reason (an alert would have nothing to show but an address).
    """
    if link.device.plays_notify and (waiting := await async_notify(announcements, link, sources, text)):
        await async_until_played(waiting)
        return
    if not text:  # media only, not fetched: nothing to show instead (never its URL)
        raise translated_error("media_not_fetched", device=link.device.name)
    status = "通知" if announcements.hass.config.language.lower().startswith("zh") else "Announcement"
    sent = await link.async_send_json(voice.alert(text, status=status, emotion=voice.EMOTION_ANSWER))
    # Written is not delivered: a device without power keeps its connection open for a while.
    # It has read the alert once it answers what was sent after it.
    if not sent or not await link.async_reads(DELIVERY_TIMEOUT):
        raise translated_error("announcement_not_delivered", device=link.device.name)
    _LOGGER.info(
        "Device %s is idle: the announcement was shown as an alert (its text and a sound, not spoken: %s)",
        link.device.mac,
        "its firmware plays speech while idle from 2.5 on"
        if not link.device.plays_notify
        else "it did not fetch the speech",
    )
