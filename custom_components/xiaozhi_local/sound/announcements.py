"""Spoken announcements for idle devices (firmware 2.5 ``notify``), served at short-lived URLs.

A device online over MQTT but in no conversation has no audio channel: only its own hello opens
one. Firmware 2.5 plays ``{"type":"notify","audio_url":…}`` while idle instead, fetching mono Ogg
Opus over HTTP GET (it follows no redirects). Each announcement gets its own unguessable URL,
valid for ``NOTIFY_TTL`` seconds and for one fetch, and its audio is encoded as it is fetched.
See docs/protocol.md §3.
"""

import asyncio
from collections.abc import AsyncGenerator, Callable
import contextlib
from dataclasses import dataclass, field
import logging
import secrets
from typing import Any, Final

from aiohttp import web
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from homeassistant.util.hass_dict import HassKey

from ..const import DOMAIN, NOTIFY_PATH
from ..protocol.messages import DOWNLINK_SAMPLE_RATE
from ..protocol.ogg import OggOpusWriter
from ..protocol.pcm import AudioError
from .media import audio_executor, downlink_encoder

_LOGGER = logging.getLogger(__name__)

NOTIFY_TTL: Final = 120.0
"""Seconds an announcement URL stays valid (the device fetches it at once)."""
DATA_ANNOUNCEMENTS: HassKey[AnnouncementStore] = HassKey(f"{DOMAIN}_announcements")
"""The loaded hub's waiting announcements, for the view (set while the hub is set up)."""
MAX_WAITING: Final = 32
"""Announcements waiting for their fetch at once; the oldest gives way."""

type PcmSource = Callable[[], AsyncGenerator[bytes]]


@dataclass
class Announcement:
    """One announcement waiting to be fetched, then being played."""

    sources: list[PcmSource]
    expires: float
    address: str | None = None
    """Where the device it was made for last came from: only it may fetch it (as firmware URLs)."""
    fetched: asyncio.Event = field(default_factory=asyncio.Event)
    played: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the stream has been sent (or has ended early)."""
    heard_until: float | None = None
    """When the device will have played what was sent (loop time), for a stream sent whole."""
    stopped: bool = False
    """Stopped by Home Assistant (a media player's stop, the device gone): the stream ends where it is."""
    streaming: asyncio.Task[Any] | None = None
    """The request that streams it (cancelled by ``stop``: its ffmpeg and upstream end with it)."""

    def stop(self) -> None:
        """End the stream now, even while a device that stopped reading holds its socket."""
        self.stopped = True
        if self.streaming is not None and not self.streaming.done():
            self.streaming.cancel()


class AnnouncementStore:
    """Announcements by token, bounded in number and time."""

    def __init__(self, hass: HomeAssistant, url_of: Callable[[str], str]) -> None:
        """``url_of``: where a device fetches the announcement of a token."""
        self.hass = hass
        self._url_of = url_of
        self._waiting: dict[str, Announcement] = {}

    @callback
    def add(self, sources: list[PcmSource], address: str | None = None) -> tuple[str, Announcement]:
        """A new announcement for the device at ``address``: its one-time URL, and it."""
        now = self.hass.loop.time()
        for token in [t for t, a in self._waiting.items() if a.expires <= now]:
            self._waiting.pop(token).played.set()
        while len(self._waiting) >= MAX_WAITING:
            self._waiting.pop(next(iter(self._waiting))).played.set()
        token = secrets.token_urlsafe(24)
        announcement = self._waiting[token] = Announcement(sources, now + NOTIFY_TTL, address)
        return self._url_of(token), announcement

    @callback
    def take(self, token: str, address: str | None) -> Announcement | None:
        """The announcement for one fetch, by its device.

        A second fetch, a late one, or one from another address finds nothing; a fetch from
        elsewhere does not use it up (the device's own still works).
        """
        announcement = self._waiting.get(token)
        if announcement is None:
            return None
        if announcement.address is not None and address != announcement.address:
            _LOGGER.warning(
                "Refused an announcement's fetch from %s: its address was made for the device at %s",
                address,
                announcement.address,
            )
            return None
        del self._waiting[token]
        if announcement.expires <= self.hass.loop.time():
            return None
        return announcement


class XiaozhiNotifyView(HomeAssistantView):
    """``GET /api/xiaozhi_local/notify/{token}.ogg``: the announcement as mono Ogg Opus."""

    url = NOTIFY_PATH + "/{token}.ogg"
    name = "api:xiaozhi_local:notify"
    requires_auth = False  # the device has no HA credentials; the token is the secret

    async def get(self, request: web.Request, token: str) -> web.StreamResponse:
        """Stream it as it is made (the device starts playing after the first page)."""
        hass = request.app[KEY_HASS]
        store = hass.data.get(DATA_ANNOUNCEMENTS)
        announcement = store.take(token, request.remote) if store is not None else None
        if announcement is None:
            raise web.HTTPNotFound
        announcement.fetched.set()
        announcement.streaming = asyncio.current_task()
        response = web.StreamResponse(headers={"Content-Type": "audio/ogg"})
        await response.prepare(request)
        with downlink_encoder(hass) as encoder:
            await _async_stream(hass, response, announcement, OggOpusWriter(encoder))
        return response


async def _async_stream(
    hass: HomeAssistant, response: web.StreamResponse, announcement: Announcement, writer: OggOpusWriter
) -> None:
    """Encode and send the announcement's sources; ``played`` is set at the end, whatever happens."""
    loop, codec = asyncio.get_running_loop(), audio_executor(hass)  # encoded beside the loop
    began, pcm_bytes, complete = loop.time(), 0, False
    try:
        for make in announcement.sources:
            async with contextlib.aclosing(make()) as pcm_stream:
                async for pcm in pcm_stream:
                    if announcement.stopped:
                        break
                    pcm_bytes += len(pcm)
                    if data := await loop.run_in_executor(codec, writer.feed, pcm):
                        await response.write(data)
        await response.write(await loop.run_in_executor(codec, writer.finish))
        await response.write_eof()
        complete = not announcement.stopped
    except (ConnectionError, AudioError, HomeAssistantError) as err:
        _LOGGER.debug("Announcement stream ended early: %s", err)
    finally:
        # Sent faster than it plays: it is over when the device has played it all (it plays
        # as it fetches, from the first page on), not when the last byte left.
        if complete:
            announcement.heard_until = began + pcm_bytes / (2 * DOWNLINK_SAMPLE_RATE)
        announcement.played.set()
