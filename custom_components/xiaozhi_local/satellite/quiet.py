"""A quieter room while a device talks: its area's playing media players, and their volume back.

With the device's "Quieter room while talking" switch on, the media players of its area that are
playing are set to a quarter of their volume while an exchange runs (``Runner.begin``), and put
back to exactly the volume they had 1.5 s after it ends (a continued conversation keeps them down),
when the device drops, or when its entity goes. A volume someone changed meanwhile is left as they
set it; a player that cannot take its volume back now gets it when it is available again. The
reply speaker (``reply_speaker.py``) gets its own volume back before it plays a reply.

Always given back: the volume to restore is read before ours is sent and written to disk before
the player is lowered (a kill at any moment loses nothing); the give-back waits for the lowering
to land (a slow player would otherwise take it after); a volume near the quieter one counts as
ours (players round to their steps); and a device that keeps talking holds the room down for
``MAX_HOLD`` s at most.
"""

import asyncio
from collections.abc import Callable
import logging
from typing import Any, Final

from homeassistant.components.media_player import (
    ATTR_MEDIA_VOLUME_LEVEL,
    DOMAIN as MEDIA_PLAYER_DOMAIN,
    MediaPlayerEntityFeature,
    MediaPlayerState,
)
from homeassistant.config_entries import ConfigEntryState
from homeassistant.const import ATTR_SUPPORTED_FEATURES
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import device_registry as dr, entity_registry as er
from homeassistant.helpers.event import async_call_later
import probatio as vol

from ..const import CONF_DUCK_ROOM
from ..device import XiaozhiDevice
from ..home.volumes import (
    DUCKED,
    Ducked,
    async_give_back_volume,
    async_set_volume,
    own_volume,
    to_save,
)
from ..hub import XiaozhiConfigEntry
from ..store.ducked import ducked_store
from ..tasks import watched

_LOGGER = logging.getLogger(__package__)

DUCK_FACTOR: Final = 0.25
"""The share of its volume a playing player of the room keeps while the device listens and speaks."""
RESTORE_AFTER: Final = 1.5
"""Seconds after an exchange ends before the room's volume comes back (the next turn of a continued
conversation starts sooner, and keeps it down)."""
MAX_HOLD: Final = 300.0
"""Seconds a device holds its room down at most: then the volume comes back, and the device does not
lower it again until it has been quiet for as long."""
PLAYING: Final = frozenset({MediaPlayerState.PLAYING, MediaPlayerState.BUFFERING})


def chosen(entry: XiaozhiConfigEntry, device: XiaozhiDevice, key: str) -> Any:
    """A choice stored with the device (its subentry); None when it has none."""
    subentry = entry.subentries.get(device.subentry_id)
    return subentry.data.get(key) if subentry is not None else None


class QuietRoom:
    """The players of a device's area made quieter, and their volumes given back."""

    def __init__(
        self,
        device: XiaozhiDevice,
        entry: Callable[[], XiaozhiConfigEntry],
        background: Callable[[Any, str], asyncio.Task[Any]],
    ) -> None:
        self.device = device
        self.hass: HomeAssistant = device.hass
        self._entry = entry
        self._background = background
        self._mine: set[str] = set()  # the players this device holds down
        self._restore: asyncio.TimerHandle | None = None
        self._held_since: float | None = None  # when it began to hold the room down
        self._rest_until = 0.0  # it held the room down too long: it does not lower it again before
        self._limit: CALLBACK_TYPE | None = None

    @property
    def _ducked(self) -> dict[str, Ducked]:
        return self.hass.data.setdefault(DUCKED, {})

    def _area_players(self) -> list[str]:
        """The media players of the device's area, not the device's own."""
        device_registry = dr.async_get(self.hass)
        own = device_registry.async_get(self.device.device_id) if self.device.device_id else None
        if own is None or own.area_id is None:
            return []
        found = []
        for entity in er.async_get(self.hass).entities.values():
            if entity.domain != MEDIA_PLAYER_DOMAIN or entity.device_id == own.id or entity.disabled:
                continue
            area = entity.area_id
            if area is None and entity.device_id is not None:
                holder = device_registry.async_get(entity.device_id)
                area = holder.area_id if holder is not None else None
            if area == own.area_id:
                found.append(entity.entity_id)
        return found

    @callback
    def duck(self) -> None:
        """An exchange begins: the room's playing players go quieter (when the device's switch says so)."""
        if self._restore is not None:
            self._restore.cancel()
            self._restore = None
        if chosen(self._entry(), self.device, CONF_DUCK_ROOM) is not True:
            return
        now = self.hass.loop.time()
        if now < self._rest_until:
            return
        if self._held_since is not None and now - self._held_since >= MAX_HOLD:
            self._held_too_long(None)
            return
        for player in self._area_players():
            if player in self._mine:
                continue
            if (ducked := self._ducked.get(player)) is not None:  # down already (another device, or pending)
                if ducked.returning is not None:
                    ducked.returning()
                    ducked.returning = None
                ducked.holders.add(self.device.mac)
                self._mine.add(player)
                continue
            state = self.hass.states.get(player)
            if state is None or state.state not in PLAYING:
                continue
            features = MediaPlayerEntityFeature(state.attributes.get(ATTR_SUPPORTED_FEATURES, 0))
            volume = state.attributes.get(ATTR_MEDIA_VOLUME_LEVEL)
            if MediaPlayerEntityFeature.VOLUME_SET not in features or not isinstance(volume, (int, float)):
                continue
            volume = own_volume(self.hass, player, float(volume), now)
            quieter = round(float(volume) * DUCK_FACTOR, 3)
            ducked = self._ducked[player] = Ducked(float(volume), quieter, {self.device.mac})
            self._mine.add(player)
            ducked.lowering = self._background(self._async_lower(player, ducked), "duck")
        if self._mine and self._held_since is None:
            self._held_since = now
            self._limit = async_call_later(self.hass, MAX_HOLD, self._held_too_long)

    @callback
    def _held_too_long(self, _now: Any) -> None:
        """The device has held its room down for ``MAX_HOLD`` s: the volume comes back, and stays."""
        if not self._mine:
            return
        _LOGGER.warning(
            "%s has kept its room quieter for %d minutes: the volume comes back, and it is not lowered "
            "again until the device has been quiet as long",
            self.device.name,
            int(MAX_HOLD // 60),
        )
        self.give_back()
        self._rest_until = self.hass.loop.time() + MAX_HOLD

    @callback
    def later(self) -> None:
        """The exchange ended: the room's volume comes back soon, unless another begins."""
        if self._mine and self._restore is None:
            self._restore = self.hass.loop.call_later(RESTORE_AFTER, self.give_back)

    @callback
    def give_back(self) -> None:
        """Every player this device holds down back to the volume it had, now.

        Tasks Home Assistant waits for when it stops; not the entry's, which its unload cancels.
        """
        if self._restore is not None:
            self._restore.cancel()
            self._restore = None
        if self._limit is not None:
            self._limit()
            self._limit = None
        self._held_since = None
        for player in list(self._mine):
            back = self.async_give_back(player)
            watched(self.hass.async_create_task(back, f"xiaozhi_local volume back {self.device.mac}", eager_start=True))

    async def async_give_back(self, player: str) -> None:
        """``player``'s volume back (if this device made it quieter and no other holds it down)."""
        if player not in self._mine:
            return
        self._mine.discard(player)
        ducked = self._ducked.get(player)
        if ducked is None:
            return
        ducked.holders.discard(self.device.mac)
        if ducked.holders or ducked.returning is not None:
            return  # another device of the room still talks; or it waits for the player already
        await async_give_back_volume(self.hass, player, ducked)

    async def _async_lower(self, player: str, ducked: Ducked) -> None:
        """On disk first (a kill at any moment loses no volume), then the player lowered."""
        try:
            await ducked_store(self.hass).async_save(to_save(self.hass))
        except OSError as err:  # the volume is still kept in memory, and written at the next change
            _LOGGER.warning("%s: the volume of %s could not be written down: %s", self.device.name, player, err)
        if ducked.holders:  # not given back meanwhile
            try:
                await async_set_volume(self.hass, player, ducked.quieter)
            except (HomeAssistantError, TimeoutError, vol.Invalid) as err:
                _LOGGER.warning("%s: the volume of %s could not be lowered: %s", self.device.name, player, err)

    @callback
    def release(self) -> None:
        """The entity goes: the room's volume comes back now.

        When the integration unloads, no player is waited for any more (what could not be given
        back was logged).
        """
        self.give_back()
        if self._entry().state is not ConfigEntryState.LOADED:
            for ducked in list(self._ducked.values()):
                if ducked.returning is not None:
                    ducked.returning()
