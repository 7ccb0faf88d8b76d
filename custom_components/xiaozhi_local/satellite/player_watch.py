"""What the reply speaker watches and gives back: a player's states, what it played before, its end.

Helpers of ``reply_speaker.py``: whether Home Assistant polls a player (its end shows late), what
a player without ``announce`` played before a reply and how it is put back, and the reply's
sentences shown on the device while the player says them.
"""

import asyncio
from collections.abc import Callable
import contextlib
from dataclasses import dataclass
from datetime import datetime
import logging
from typing import Final

from homeassistant.components.media_player import (
    ATTR_MEDIA_CONTENT_ID,
    ATTR_MEDIA_CONTENT_TYPE,
    DOMAIN as MEDIA_PLAYER_DOMAIN,
    SERVICE_PLAY_MEDIA,
    MediaPlayerEntityFeature,
    MediaType,
)
from homeassistant.components.media_player.const import (
    ATTR_MEDIA_POSITION,
    ATTR_MEDIA_POSITION_UPDATED_AT,
    ATTR_MEDIA_SEEK_POSITION,
    DATA_COMPONENT as MEDIA_PLAYER_COMPONENT,
)
from homeassistant.const import ATTR_ENTITY_ID, SERVICE_MEDIA_SEEK
from homeassistant.core import CALLBACK_TYPE, Event, EventStateChangedData, HomeAssistant, State, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.event import async_track_state_change_event
from homeassistant.util import dt as dt_util
import probatio as vol

from ..sound.speaker import SpeakerLink, show_sentences
from .quiet import PLAYING

_LOGGER = logging.getLogger(__package__)

PLAY_TIMEOUT: Final = 10.0
"""Seconds a player has to take the ``play_media`` call before the reply goes to the device."""


def polled(hass: HomeAssistant, player: str) -> bool:
    """Whether Home Assistant learns ``player``'s state by polling it (its end shows late)."""
    component = hass.data.get(MEDIA_PLAYER_COMPONENT)
    entity = component.get_entity(player) if component is not None else None
    return bool(entity is not None and entity.should_poll)


class PlayerFailed(Exception):
    """The chosen player cannot play the reply: its ``kind`` and, for the log, the words.

    ``kind`` chooses the repair's translated text; ``said`` is the log's (the player's own, for ``error``).
    Kinds: ``missing``, ``unavailable``, ``cannot_play``, ``no_url``, ``timeout``, ``error``.
    ``chimed``: an announcement's chime played there already (the device says only the message).
    """

    chimed = False

    def __init__(self, kind: str, said: str) -> None:
        super().__init__(said)
        self.kind = kind


class PlayerBusy(PlayerFailed):
    """The player plays something it could not be given back: the device says the reply (no repair)."""


@dataclass(frozen=True, slots=True)
class Playing:
    """What a player without ``announce`` played before the reply, to be put back after it."""

    content_id: str
    content_type: str
    position: float | None
    seeks: bool


def playing_before(state: State, features: MediaPlayerEntityFeature) -> Playing | None:
    """What a playing player without ``announce`` plays (PlayerBusy when it cannot be named)."""
    if MediaPlayerEntityFeature.MEDIA_ANNOUNCE in features or state.state not in PLAYING:
        return None
    content_id = state.attributes.get(ATTR_MEDIA_CONTENT_ID)
    if not isinstance(content_id, str) or not content_id:
        raise PlayerBusy("busy", "it plays something it could not be given back after the reply")
    position = state.attributes.get(ATTR_MEDIA_POSITION)
    updated = state.attributes.get(ATTR_MEDIA_POSITION_UPDATED_AT)
    if isinstance(position, (int, float)):
        if isinstance(updated, datetime):
            position += max(0.0, (dt_util.utcnow() - updated).total_seconds())
    else:
        position = None
    content_type = state.attributes.get(ATTR_MEDIA_CONTENT_TYPE)
    return Playing(
        content_id,
        content_type if isinstance(content_type, str) else MediaType.MUSIC,
        position,
        MediaPlayerEntityFeature.SEEK in features,
    )


class Watch:
    """A player's states from the moment it is entered (the last 16), and an event on each change."""

    def __init__(self, hass: HomeAssistant, player: str) -> None:
        self._hass = hass
        self._player = player
        self.states: list[State] = []
        self.changed = asyncio.Event()
        self._remove: CALLBACK_TYPE | None = None

    @callback
    def _on_change(self, event: Event[EventStateChangedData]) -> None:
        if (new := event.data["new_state"]) is not None:
            self.states.append(new)
            del self.states[:-16]
        self.changed.set()

    async def __aenter__(self) -> Watch:
        self._remove = async_track_state_change_event(self._hass, self._player, self._on_change)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._remove is not None:
            self._remove()


async def async_show(link: SpeakerLink, text: Callable[[], str | None], begun: float, shown: list[int]) -> None:
    """The reply's sentences, each when the player should be saying it (``shown[0]``: how many are)."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(ConnectionError):
        while True:
            shown[0], next_at = await show_sentences(link, text, shown[0], loop.time() - begun)
            if next_at is None:
                return
            await asyncio.sleep(max(0.05, next_at - (loop.time() - begun)))


async def async_resume(hass: HomeAssistant, name: str, player: str, before: Playing) -> None:
    """What ``player`` played before the reply, again, at the position it had (where it seeks)."""
    try:
        async with asyncio.timeout(PLAY_TIMEOUT):
            await hass.services.async_call(
                MEDIA_PLAYER_DOMAIN,
                SERVICE_PLAY_MEDIA,
                {
                    ATTR_ENTITY_ID: player,
                    ATTR_MEDIA_CONTENT_ID: before.content_id,
                    ATTR_MEDIA_CONTENT_TYPE: before.content_type,
                },
                blocking=True,
            )
            if before.position is not None and before.seeks:
                await hass.services.async_call(
                    MEDIA_PLAYER_DOMAIN,
                    SERVICE_MEDIA_SEEK,
                    {ATTR_ENTITY_ID: player, ATTR_MEDIA_SEEK_POSITION: before.position},
                    blocking=True,
                )
    except (HomeAssistantError, vol.Invalid, TimeoutError) as err:
        _LOGGER.warning("%s: what %s played before the reply could not be put back: %s", name, player,
                        str(err) or type(err).__name__)  # fmt: skip
