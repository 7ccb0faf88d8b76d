"""Two speakers of a living room for the development setup: the reply speaker and a quieter room.

They play nothing aloud (the machine may have no sound): the speaker fetches what it is given,
as a network speaker does, says ``playing`` for its length and logs it; the TV "plays music" so
that a device in the same area with *Quieter room while talking* on has something to turn down.
"""

import asyncio
import io
import logging
from typing import Any
import wave

from homeassistant.components.media_player import (
    MediaPlayerEntity,
    MediaPlayerEntityFeature,
    MediaPlayerState,
    MediaType,
)
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

_LOGGER = logging.getLogger(__name__)
FEATURES = (
    MediaPlayerEntityFeature.PLAY_MEDIA
    | MediaPlayerEntityFeature.MEDIA_ANNOUNCE
    | MediaPlayerEntityFeature.VOLUME_SET
    | MediaPlayerEntityFeature.STOP
)


async def async_setup_entry(
    hass: HomeAssistant, entry: ConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """The living room's speaker and TV."""
    async_add_entities([DemoPlayer("living_room_speaker", "Speaker"), DemoPlayer("living_room_tv", "TV", music=True)])


class DemoPlayer(MediaPlayerEntity):
    """A network speaker that plays silently."""

    _attr_has_entity_name = True
    _attr_name = None
    _attr_should_poll = False
    _attr_supported_features = FEATURES

    def __init__(self, key: str, name: str, *, music: bool = False) -> None:
        """``name`` in the living room (Home Assistant names its entity ``media_player.living_room_<name>``)."""
        self._attr_unique_id = f"xiaozhi_demo_{key}"
        self._attr_device_info = DeviceInfo(
            identifiers={("xiaozhi_demo", key)}, name=name, suggested_area="Living room"
        )
        self._attr_state = MediaPlayerState.PLAYING if music else MediaPlayerState.IDLE
        self._attr_media_title = "Music" if music else None
        self._attr_volume_level = 0.6 if music else 0.5
        self._playing: asyncio.Task[None] | None = None

    async def async_set_volume_level(self, volume: float) -> None:
        """Take it (and log it)."""
        _LOGGER.info("%s: volume %s", self.entity_id, volume)
        self._attr_volume_level = volume
        self.async_write_ha_state()

    async def async_media_stop(self) -> None:
        """Stop what it plays."""
        if self._playing is not None:
            self._playing.cancel()

    async def async_play_media(self, media_type: MediaType | str, media_id: str, **kwargs: Any) -> None:
        """Fetch it, as a network speaker does; then "play" it for its length."""
        async with async_get_clientsession(self.hass).get(media_id) as response:
            response.raise_for_status()
            body = await response.read()
        seconds = wav_seconds(body)
        _LOGGER.info("%s plays %s (%.1f s, announce: %s)", self.entity_id, media_id, seconds, kwargs.get("announce"))
        self._playing = self.hass.async_create_task(self._async_play(media_id, seconds))

    async def _async_play(self, media_id: str, seconds: float) -> None:
        before = (self._attr_state, self._attr_media_content_id)
        self._attr_state, self._attr_media_content_id = MediaPlayerState.PLAYING, media_id
        self.async_write_ha_state()
        try:
            await asyncio.sleep(seconds)
        finally:
            self._attr_state, self._attr_media_content_id = before
            self.async_write_ha_state()


def wav_seconds(body: bytes) -> float:
    """How long a WAV plays: counted from its audio (3 s for anything else).

    A streamed WAV (Home Assistant's TTS) says "as long as possible" in its header (a reply of 48,695
    s), so the header's frame count is not its length.
    """
    try:
        with wave.open(io.BytesIO(body)) as wav:
            frame = wav.getsampwidth() * wav.getnchannels()
            return len(wav.readframes(wav.getnframes())) / frame / wav.getframerate()
    except wave.Error, EOFError:
        return 3.0
