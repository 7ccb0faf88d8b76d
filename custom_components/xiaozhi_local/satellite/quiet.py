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
from dataclasses import dataclass, field
import logging
from typing import Any, Final

from homeassistant.components.media_player import (
    ATTR_MEDIA_VOLUME_LEVEL,
    DOMAIN as MEDIA_PLAYER_DOMAIN,
    MediaPlayerEntityFeature,
    MediaPlayerState,
)
from homeassistant.config_entries import ConfigEntryState
from homeassistant.const import ATTR_ENTITY_ID, ATTR_SUPPORTED_FEATURES, SERVICE_VOLUME_SET, STATE_UNAVAILABLE
from homeassistant.core import CALLBACK_TYPE, Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import device_registry as dr, entity_registry as er
from homeassistant.helpers.event import async_call_later, async_track_state_change_event
from homeassistant.helpers.storage import Store
from homeassistant.util.hass_dict import HassKey
import probatio as vol

from ..const import CONF_DUCK_ROOM, DOMAIN
from ..device import XiaozhiDevice
from ..hub import XiaozhiConfigEntry
from ..store.storage import async_save_later
from ..tasks import watched

_LOGGER = logging.getLogger(__package__)

DUCK_FACTOR: Final = 0.25
"""The share of its volume a playing player of the room keeps while the device listens and speaks."""
RESTORE_AFTER: Final = 1.5
"""Seconds after an exchange ends before the room's volume comes back (the next turn of a continued
conversation starts sooner, and keeps it down)."""
VOLUME_TIMEOUT: Final = 5.0
"""Seconds a player has to take a volume."""
SAME_VOLUME: Final = 0.07
"""Volumes closer than this are the same: players round what they are given to their steps (a
player of 15 steps takes 0.1575 as 0.133); a volume further from ours was set by someone else."""
MAX_HOLD: Final = 300.0
"""Seconds a device holds its room down at most: then the volume comes back, and the device does not
lower it again until it has been quiet for as long."""
PLAYING: Final = frozenset({MediaPlayerState.PLAYING, MediaPlayerState.BUFFERING})


def chosen(entry: XiaozhiConfigEntry, device: XiaozhiDevice, key: str) -> Any:
    """A choice stored with the device (its subentry); None when it has none."""
    subentry = entry.subentries.get(device.subentry_id)
    return subentry.data.get(key) if subentry is not None else None


@dataclass(slots=True)
class _Ducked:
    """A player made quieter: the volume it had, the one it got, and the devices talking near it."""

    before: float
    quieter: float
    holders: set[str] = field(default_factory=set)  # MACs: the volume comes back when none is left
    returning: CALLBACK_TYPE | None = None  # waits for the player to be available again
    lowering: asyncio.Task[Any] | None = None  # our volume on its way: the give-back waits for it


_DUCKED: HassKey[dict[str, _Ducked]] = HassKey(f"{DOMAIN}_ducked")
"""Every player made quieter, by entity id: shared, as two devices of a room may talk at once."""
_STORE: HassKey[Store[dict[str, Any]]] = HassKey(f"{DOMAIN}_ducked_store")
_GIVEN_BACK: HassKey[dict[str, tuple[float, float, float]]] = HassKey(f"{DOMAIN}_given_back")
"""Volumes given back lately, by player: (the volume, the quieter one, when). A player Home
Assistant polls shows ours for a while after: the next exchange must not take it for its own."""
GIVEN_BACK_MEMORY: Final = 30.0
"""Seconds a volume given back is remembered (a polled player updates within its poll interval)."""
SAVE_DELAY: Final = 1.0
"""Seconds after a change before the players made quieter are written (Home Assistant writes at its stop)."""


def _store(hass: HomeAssistant) -> Store[dict[str, Any]]:
    """Where the players made quieter are kept across a restart (``xiaozhi_local.ducked``)."""
    if (store := hass.data.get(_STORE)) is None:
        store = hass.data[_STORE] = Store(hass, 1, f"{DOMAIN}.ducked")
    return store


def _to_save(hass: HomeAssistant) -> dict[str, Any]:
    shared = hass.data.get(_DUCKED, {})
    return {"players": {player: {"before": d.before, "quieter": d.quieter} for player, d in shared.items()}}


@callback
def _async_changed(hass: HomeAssistant) -> None:
    """The players made quieter changed: written soon, so that a restart does not lose a volume."""
    async_save_later(hass, _store(hass), lambda: _to_save(hass), SAVE_DELAY)


async def async_forget_volumes(hass: HomeAssistant) -> None:
    """The integration is deleted: the volumes still to give back are given up (logged), and their file goes."""
    for player, ducked in hass.data.pop(_DUCKED, {}).items():
        _LOGGER.warning("The volume of %s is not put back to %s: the integration was deleted", player, ducked.before)
        if ducked.returning is not None:
            ducked.returning()
    await _store(hass).async_remove()


async def async_restore_volumes(hass: HomeAssistant) -> None:
    """Volumes not given back before Home Assistant stopped (or this hub unloaded): given back now.

    A player that is not there yet or unavailable gets its volume when it is back; one whose volume
    someone changed meanwhile is left as it is (``_async_give_back``).
    """
    saved = await _store(hass).async_load() or {}
    shared = hass.data.setdefault(_DUCKED, {})
    players = saved.get("players", {}) if isinstance(saved, dict) else saved
    if not isinstance(players, dict):
        _LOGGER.warning("The saved volumes are unreadable: %s", players)
        players = {}
    for player, volumes in players.items():
        before, quieter = (volumes.get(key) if isinstance(volumes, dict) else None for key in ("before", "quieter"))
        if player in shared or not isinstance(player, str) or not player.startswith(f"{MEDIA_PLAYER_DOMAIN}."):
            continue
        if isinstance(before, (int, float)) and isinstance(quieter, (int, float)):
            shared[player] = _Ducked(float(before), float(quieter))
        else:
            _LOGGER.warning("The saved volume of %s is unreadable: %s", player, volumes)
    for player, ducked in list(shared.items()):
        if not ducked.holders and ducked.returning is None:  # restored, or left waiting by an unload
            watched(hass.async_create_task(_async_give_back(hass, player, ducked), "xiaozhi_local volume back"))
    if saved:
        _async_changed(hass)  # what was unreadable goes


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
    def _ducked(self) -> dict[str, _Ducked]:
        return self.hass.data.setdefault(_DUCKED, {})

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
            volume = _own_volume(self.hass, player, float(volume), now)
            quieter = round(float(volume) * DUCK_FACTOR, 3)
            ducked = self._ducked[player] = _Ducked(float(volume), quieter, {self.device.mac})
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
        await _async_give_back(self.hass, player, ducked)

    async def _async_lower(self, player: str, ducked: _Ducked) -> None:
        """On disk first (a kill at any moment loses no volume), then the player lowered."""
        try:
            await _store(self.hass).async_save(_to_save(self.hass))
        except OSError as err:  # the volume is still kept in memory, and written at the next change
            _LOGGER.warning("%s: the volume of %s could not be written down: %s", self.device.name, player, err)
        if ducked.holders:  # not given back meanwhile
            try:
                await _async_set_volume(self.hass, player, ducked.quieter)
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


def _own_volume(hass: HomeAssistant, player: str, volume: float, now: float) -> float:
    """The player's own volume: the one given back lately when it still shows the quieter one."""
    given = hass.data.setdefault(_GIVEN_BACK, {})
    for gone in [key for key, (_b, _q, at) in given.items() if now - at > GIVEN_BACK_MEMORY]:
        del given[gone]
    if (recent := given.get(player)) is not None and abs(volume - recent[1]) <= SAME_VOLUME:
        return recent[0]
    return volume


async def _async_set_volume(hass: HomeAssistant, player: str, level: float) -> None:
    async with asyncio.timeout(VOLUME_TIMEOUT):
        await hass.services.async_call(
            MEDIA_PLAYER_DOMAIN,
            SERVICE_VOLUME_SET,
            {ATTR_ENTITY_ID: player, ATTR_MEDIA_VOLUME_LEVEL: level},
            blocking=True,
        )


async def _async_give_back(hass: HomeAssistant, player: str, ducked: _Ducked) -> None:
    """The player's volume back to what it had; left as it is if someone changed it meanwhile.

    When it cannot take it now: once it is available again (the wait ends when the entry unloads).
    """
    shared = hass.data.setdefault(_DUCKED, {})
    if (lowering := ducked.lowering) is not None and not lowering.done():
        await asyncio.wait({lowering}, timeout=VOLUME_TIMEOUT + 1)  # ours first, then the volume back
    state = hass.states.get(player)
    if state is not None and state.state != STATE_UNAVAILABLE:
        volume = state.attributes.get(ATTR_MEDIA_VOLUME_LEVEL)
        theirs = isinstance(volume, (int, float)) and all(
            abs(float(volume) - ours) > SAME_VOLUME for ours in (ducked.quieter, ducked.before)
        )
        if theirs:
            _LOGGER.debug("%s was set to %s meanwhile; left so", player, volume)
            if shared.get(player) is ducked:
                shared.pop(player)
                _async_changed(hass)
            return
        try:
            await _async_set_volume(hass, player, ducked.before)
        except (HomeAssistantError, TimeoutError, vol.Invalid) as err:
            why = str(err) or type(err).__name__
        else:
            hass.data.setdefault(_GIVEN_BACK, {})[player] = (ducked.before, ducked.quieter, hass.loop.time())
            if shared.get(player) is ducked and not ducked.holders:
                shared.pop(player)
                _async_changed(hass)
            return
    else:
        why = "it is unavailable"
    _LOGGER.warning(
        "The volume of %s cannot be put back to %s now (%s); it will be when the player is back",
        player,
        ducked.before,
        why,
    )

    @callback
    def on_change(event: Event[EventStateChangedData]) -> None:
        new = event.data["new_state"]
        if new is None and registered and registry.async_get(player) is None and ducked.returning is not None:
            stop_waiting()  # deleted (not just stopped): nothing will take it any more
            _LOGGER.info("%s was deleted: its volume is no longer owed", player)
            if shared.get(player) is ducked:
                shared.pop(player)
                _async_changed(hass)
            return
        if new is None or new.state == STATE_UNAVAILABLE or ducked.returning is None:
            return
        stop_waiting()
        if not ducked.holders:
            watched(hass.async_create_task(_async_give_back(hass, player, ducked), "xiaozhi_local volume back"))

    @callback
    def stop_waiting() -> None:
        if ducked.returning is not None:
            ducked.returning = None
            remove()

    registry = er.async_get(hass)
    registered = registry.async_get(player) is not None  # a player without an id only ever stops
    remove = async_track_state_change_event(hass, player, on_change)
    ducked.returning = stop_waiting
