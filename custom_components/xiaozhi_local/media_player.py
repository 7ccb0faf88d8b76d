"""Each device's speaker as a media player: media from HA's browser, URLs, announcements, volume.

What plays and how it reaches the device is the voice satellite's (``async_play_media``, through
``sound/speaker.py``): the media player resolves what it is asked to play into a URL ffmpeg can open,
and shows what the device does. With the satellite's entity disabled the speaker plays by itself,
through the same ``sound/speaker.py``. Its state: off while the device is away, playing while media
plays, idle otherwise. Pause is not offered: a live stream has nothing to resume, and the
device's decode queue keeps no more than a second or two.
"""

import asyncio
from collections.abc import Coroutine
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from homeassistant.components import media_source
from homeassistant.components.media_player import (
    ATTR_MEDIA_ANNOUNCE,
    ATTR_MEDIA_EXTRA,
    BrowseMedia,
    MediaPlayerDeviceClass,
    MediaPlayerEntity,
    MediaPlayerEntityDescription,
    MediaPlayerEntityFeature,
    MediaPlayerState,
    MediaType,
    async_process_play_media_url,
)
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .conversations import VoiceHandler
from .device import XiaozhiDevice
from .entity import WAITING_FOR_DEVICE, XiaozhiEntity, async_setup_device_entities, reported
from .errors import translated_error
from .hub import XiaozhiConfigEntry
from .number import NUMBERS
from .sound import speaker
from .sound.media import MediaUnreadable

PARALLEL_UPDATES = 0

SPEAKER = MediaPlayerEntityDescription(
    key="speaker", translation_key="speaker", device_class=MediaPlayerDeviceClass.SPEAKER
)
VOLUME = next(row for row in NUMBERS if row.key == "volume")
"""The Volume number's row: the same tool, the same reported value, the same pending setting."""


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """A speaker for every device."""
    async_setup_device_entities(
        hass, entry, async_add_entities, lambda device: [("speaker", lambda: XiaozhiSpeaker(device))]
    )


def _title(url: str, extra: Any) -> str:
    """What the device shows while it plays: the caller's title, else the file's name.

    A title comes as ``extra.title``, or as Music Assistant (and Cast) pass it:
    ``extra.metadata.title`` with ``extra.metadata.artist``.
    """
    extra = extra if isinstance(extra, dict) else {}
    metadata = extra.get("metadata") if isinstance(extra.get("metadata"), dict) else {}
    title, artist = extra.get("title") or metadata.get("title"), metadata.get("artist")
    if isinstance(title, str) and title.strip():
        if isinstance(artist, str) and artist.strip():
            title = f"{title.strip()} - {artist.strip()}"
        return title.strip()[:100]
    name = PurePosixPath(unquote(urlsplit(url).path)).stem
    return name[:100] or "Media"


class XiaozhiSpeaker(XiaozhiEntity, MediaPlayerEntity):
    """The device's speaker."""

    shows_activity = True  # what plays

    def __init__(self, device: XiaozhiDevice) -> None:
        super().__init__(device, SPEAKER)
        self._alone: tuple[str, asyncio.Task[None]] | None = None
        """What plays without the satellite (its entity disabled): the title, and its playback."""

    async def async_will_remove_from_hass(self) -> None:
        """Nothing it plays outlives it."""
        self._stop_alone()
        await super().async_will_remove_from_hass()

    @property
    def _voice(self) -> VoiceHandler | None:
        return self.device.voice

    @property
    def available(self) -> bool:
        """Always: an away device is shown as off, not unavailable."""
        return True

    @property
    def supported_features(self) -> MediaPlayerEntityFeature:
        """Playing, stopping and announcing; volume where the device has the tool."""
        features = (
            MediaPlayerEntityFeature.PLAY_MEDIA
            | MediaPlayerEntityFeature.BROWSE_MEDIA
            | MediaPlayerEntityFeature.MEDIA_ANNOUNCE
            | MediaPlayerEntityFeature.STOP
        )
        if VOLUME.setter in self.device.tools:
            features |= MediaPlayerEntityFeature.VOLUME_SET | MediaPlayerEntityFeature.VOLUME_STEP
        return features

    @property
    def state(self) -> MediaPlayerState:
        """Off while the device is away; playing while media plays; idle otherwise."""
        if not self.device.connected:
            return MediaPlayerState.OFF
        return MediaPlayerState.PLAYING if self.media_title else MediaPlayerState.IDLE

    @property
    def media_content_type(self) -> MediaType | None:
        """Music while something plays."""
        return MediaType.MUSIC if self.media_title else None

    @property
    def media_title(self) -> str | None:
        """What plays."""
        voice = self._voice
        if voice is not None:
            return voice.media_title
        return self._alone[0] if self._alone is not None else None

    @property
    def volume_level(self) -> float | None:
        """The device's volume (a setting made while it was away shows at once)."""
        pending = self.device.values.pending.get(VOLUME.key)
        value = pending.value if pending is not None else reported(self.device.queries, VOLUME)
        return max(0.0, min(1.0, value / 100)) if isinstance(value, (int, float)) else None

    @property
    def extra_state_attributes(self) -> dict[str, Any] | None:
        """``waiting_for_device`` while the volume shown has not reached the device yet."""
        return {WAITING_FOR_DEVICE: True} if VOLUME.key in self.device.values.pending else None

    async def async_set_volume_level(self, volume: float) -> None:
        """The device's own volume tool (kept for the next connection while it is away)."""
        value = round(max(0.0, min(1.0, volume)) * 100)
        await self.device.values.async_set(VOLUME.key, VOLUME.setter, {VOLUME.argument: value}, value)

    async def async_play_media(self, media_type: MediaType | str, media_id: str, **kwargs: Any) -> None:
        """Play a media-source item or a plain http(s) URL (Music Assistant hands over streams so)."""
        voice = self._voice
        if not self.device.connected:
            raise translated_error("device_offline", device=self.device.name)
        if media_source.is_media_source_id(media_id):
            item = await media_source.async_resolve_media(self.hass, media_id, self.entity_id)
            media_id = item.url
        url = async_process_play_media_url(self.hass, media_id)
        if not url.startswith(("http://", "https://")):
            raise translated_error("media_unreadable", device=self.device.name, reason="not an http(s) URL")
        title = _title(url, kwargs.get(ATTR_MEDIA_EXTRA))
        if voice is None:  # the satellite's entity is disabled: the speaker plays by itself
            await self._async_play_alone(url, title, announce=bool(kwargs.get(ATTR_MEDIA_ANNOUNCE)))
        elif kwargs.get(ATTR_MEDIA_ANNOUNCE):
            # The satellite's announcement: the same path as assist_satellite.announce.
            await voice.async_announce_media(url)
        else:
            await voice.async_play_media(url, title)

    async def _async_play_alone(self, url: str, title: str, *, announce: bool) -> None:
        """Without the satellite: over the open conversation channel, or by ``notify`` (2.5, idle).

        Nothing else runs a conversation on the device then (no pipeline), so the speaker is its
        own: one thing plays at a time, a new one replaces it. An announcement returns once played.
        """
        link, entry = self.device.link, self.platform.config_entry
        assert entry is not None
        if link is None:
            raise translated_error("device_offline", device=self.device.name)
        if not link.audio_open and not self.device.plays_notify:
            raise translated_error("media_no_channel", device=self.device.name)
        self._stop_alone()
        try:
            source = await speaker.async_open_media(self.hass, url)
        except MediaUnreadable as err:
            raise translated_error("media_unreadable", device=self.device.name, reason=str(err)) from None
        if link.audio_open:
            playing: Coroutine[Any, Any, None] = speaker.async_speak(self.hass, link, source, lambda: title)
        else:
            waiting = await speaker.async_notify(entry.runtime_data.announcements, link, [lambda: source], title)
            if waiting is None:
                await source.aclose()
                raise translated_error("media_not_fetched", device=self.device.name)
            playing = speaker.async_until_played(waiting)
        task = entry.async_create_background_task(self.hass, playing, f"xiaozhi_local speaker {self.device.mac}")
        self._alone = (title, task)
        task.add_done_callback(lambda _task: self._alone_ended(task))
        self.async_write_ha_state()
        if announce:
            await asyncio.wait({task})

    @callback
    def _alone_ended(self, task: asyncio.Task[None]) -> None:
        if self._alone is not None and self._alone[1] is task:
            self._alone = None
            if self.hass is not None and self.entity_id:
                self.async_write_ha_state()

    @callback
    def _stop_alone(self) -> None:
        if self._alone is not None:
            _title, task = self._alone
            self._alone = None
            task.cancel()

    async def async_media_stop(self) -> None:
        """Stop it (the device goes back to listening, or to idle)."""
        if (voice := self._voice) is not None:
            voice.async_stop_media()
        if self._alone is not None:
            self._stop_alone()
            self.async_write_ha_state()

    async def async_browse_media(
        self, media_content_type: MediaType | str | None = None, media_content_id: str | None = None
    ) -> BrowseMedia:
        """HA's media sources, audio only."""
        return await media_source.async_browse_media(
            self.hass,
            media_content_id,
            content_filter=lambda item: item.media_content_type.startswith("audio/"),
        )
