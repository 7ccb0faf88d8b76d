"""Media players of a room for tests, registered like a real integration's.

A player fetches what it is asked to play over HTTP (as a Cast or Sonos speaker does), says
``playing`` while it plays for the audio's length, then goes back to what it did. It can refuse,
be unavailable, keep quiet about its state (an announcement over music keeps ``playing``), and
takes volumes as a real one does (``volumes`` keeps each).
"""

import asyncio
from dataclasses import dataclass
import io
from typing import Any
import wave

import aiohttp
import av
from homeassistant.components.media_player import (
    MediaPlayerEntity,
    MediaPlayerEntityFeature,
    MediaPlayerState,
    MediaType,
)
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import area_registry as ar, device_registry as dr, entity_registry as er

from .integrations import async_setup_test_integration

ROOM_DOMAIN = "roomtest"
FEATURES = (
    MediaPlayerEntityFeature.PLAY_MEDIA
    | MediaPlayerEntityFeature.VOLUME_SET
    | MediaPlayerEntityFeature.MEDIA_ANNOUNCE
    | MediaPlayerEntityFeature.STOP
    | MediaPlayerEntityFeature.SEEK
)


@dataclass
class Played:
    """One ``play_media`` call: what was asked, and what the player fetched."""

    media_id: str
    extra: dict[str, Any]
    body: bytes = b""
    seconds: float = 0.0
    began: float = 0.0
    ended: float | None = None  # loop time it stopped playing (its length later, or stopped)


class RoomPlayer(MediaPlayerEntity):
    """A network speaker."""

    _attr_should_poll = False

    def __init__(
        self,
        key: str,
        *,
        state: MediaPlayerState = MediaPlayerState.IDLE,
        volume: float = 0.5,
        announce: bool = True,
        reports: bool = True,
    ) -> None:
        self.key = key
        self.state_now = state
        self.volume = volume
        self.reports = reports  # False: says nothing of an announcement (stays as it was)
        self.fail: str | None = None  # play_media raises this
        self.fails_from: int | None = None  # play_media raises once this many have been played
        self.late: asyncio.Event | None = None  # play_media never returns; the media plays once set
        self.played: list[Played] = []
        self.volumes: list[float] = []
        self.steps: int | None = None  # takes volumes in this many steps (a coarse player)
        self.slow: float = 0.0  # seconds each volume takes before the call returns (a slow network speaker)
        self.polled: float = 0.0  # seconds before its state shows a new volume (Home Assistant polls it)
        self.polls = False  # Home Assistant polls it: the end of what it plays shows at its next poll
        self.stops = 0
        self.seeks: list[float] = []
        self.down = False  # unavailable
        self._playing: asyncio.Task[None] | None = None
        self._attr_name = key.replace("_", " ").title()
        self._attr_unique_id = key
        self._attr_supported_features = FEATURES if announce else FEATURES & ~MediaPlayerEntityFeature.MEDIA_ANNOUNCE
        self._attr_media_content_id = "music" if state == MediaPlayerState.PLAYING else None

    @property
    def should_poll(self) -> bool:
        return self.polls

    @property
    def available(self) -> bool:
        return not self.down

    @property
    def state(self) -> MediaPlayerState:
        return self.state_now

    @property
    def volume_level(self) -> float:
        return self.volume

    def set_down(self, down: bool) -> None:
        self.down = down
        self.async_write_ha_state()

    async def async_set_volume_level(self, volume: float) -> None:
        if self.down:
            raise HomeAssistantError(f"{self.key} is unavailable")
        if self.slow:
            await asyncio.sleep(self.slow)
        if self.steps:
            volume = round(round(volume * self.steps) / self.steps, 3)
        self.volume = volume
        self.volumes.append(volume)
        if self.polled:  # it took the volume; Home Assistant learns of it at its next poll
            self.hass.loop.call_later(self.polled, self.async_write_ha_state)
        else:
            self.async_write_ha_state()

    async def async_media_stop(self) -> None:
        self.stops += 1
        if self._playing is not None:
            self._playing.cancel()

    async def async_media_seek(self, position: float) -> None:
        self.seeks.append(position)
        self._attr_media_position = int(position)
        self.async_write_ha_state()

    async def async_play_media(self, media_type: MediaType | str, media_id: str, **kwargs: Any) -> None:
        if not media_id.startswith("http"):  # its own media (music from its library): it plays it
            self.state_now, self._attr_media_content_id = MediaPlayerState.PLAYING, media_id
            self.async_write_ha_state()
            return
        if self.fail is not None:
            raise HomeAssistantError(self.fail)
        if self.fails_from is not None and len(self.played) >= self.fails_from:
            raise HomeAssistantError(f"{self.key} fails from play {self.fails_from + 1} on")
        if (late := self.late) is not None:  # a cloud speaker: the request is on its way, the call hangs
            self.late = None

            async def arrives() -> None:
                await late.wait()
                await self._async_fetch(media_id, kwargs)

            self.hass.async_create_task(arrives())
            await asyncio.Event().wait()
        await self._async_fetch(media_id, kwargs)

    async def _async_fetch(self, media_id: str, kwargs: dict[str, Any]) -> None:
        async with aiohttp.ClientSession() as session, session.get(media_id) as response:
            response.raise_for_status()
            body = await response.read()
        seconds = await self.hass.async_add_executor_job(media_seconds, body)
        loop = asyncio.get_running_loop()
        played = Played(media_id, dict(kwargs), body, seconds, loop.time())
        self.played.append(played)
        self._playing = self.hass.async_create_task(self._async_play(played))

    async def _async_play(self, played: Played) -> None:
        before = (self.state_now, self._attr_media_content_id)
        if self.reports:
            self.state_now, self._attr_media_content_id = MediaPlayerState.PLAYING, played.media_id
            self.async_write_ha_state()
        try:
            await asyncio.sleep(played.seconds)
        finally:
            played.ended = asyncio.get_running_loop().time()
            if self.reports:
                self.state_now, self._attr_media_content_id = before
                if not self.polls:  # a polled one: Home Assistant learns it at its next poll
                    self.async_write_ha_state()


def media_seconds(body: bytes) -> float:
    """How long a fetched file plays: a WAV from its header, anything else (the chime's MP3) decoded."""
    if body[:4] == b"RIFF":
        with wave.open(io.BytesIO(body)) as wav:
            return float(wav.getnframes() / wav.getframerate())
    with av.open(io.BytesIO(body), mode="r") as container:
        return sum((frame.samples / frame.sample_rate for frame in container.decode(audio=0)), 0.0)


@dataclass
class Room:
    """The test's players (by key), once set up."""

    players: dict[str, RoomPlayer]

    def entity_id(self, key: str) -> str:
        return f"media_player.{key}"


async def async_setup_room(hass: HomeAssistant, *players: RoomPlayer) -> Room:
    """Register ``players`` under a test integration (each a device of its own, for areas)."""

    await async_setup_test_integration(hass, ROOM_DOMAIN, {"media_player": list(players)})
    return Room({player.key: player for player in players})


def put_in_area(
    hass: HomeAssistant, area_name: str, *, entity_id: str | None = None, device_id: str | None = None
) -> str:
    """Place an entity (directly) or a device in the area ``area_name``; returns the area's id."""
    areas = ar.async_get(hass)
    area = areas.async_get_area_by_name(area_name) or areas.async_create(area_name)
    if entity_id is not None:
        er.async_get(hass).async_update_entity(entity_id, area_id=area.id)
    if device_id is not None:
        dr.async_get(hass).async_update_device(device_id, area_id=area.id)
    return area.id
