"""The volumes the quieter rooms owe, shared by every device and kept across a restart.

A player made quieter is owed the volume it had (``Ducked``), whichever device lowered it; what is
owed is written to ``xiaozhi_local.ducked`` and given back after a restart (``async_restore_volumes``),
when the player is available again, unless someone set another volume meanwhile. ``quiet.py`` is a
device's side of it.
"""

import asyncio
from dataclasses import dataclass, field
import logging
from typing import Any, Final

from homeassistant.components.media_player import (
    ATTR_MEDIA_VOLUME_LEVEL,
    DOMAIN as MEDIA_PLAYER_DOMAIN,
)
from homeassistant.const import ATTR_ENTITY_ID, SERVICE_VOLUME_SET, STATE_UNAVAILABLE
from homeassistant.core import CALLBACK_TYPE, Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.event import async_track_state_change_event
from homeassistant.util.hass_dict import HassKey
import probatio as vol

from ..const import DOMAIN
from ..store.ducked import async_save_soon, ducked_store
from ..tasks import watched

_LOGGER = logging.getLogger(__package__)

VOLUME_TIMEOUT: Final = 5.0
"""Seconds a player has to take a volume."""
SAME_VOLUME: Final = 0.07
"""Volumes closer than this are the same: players round what they are given to their steps (a
player of 15 steps takes 0.1575 as 0.133); a volume further from ours was set by someone else."""


@dataclass(slots=True)
class Ducked:
    """A player made quieter: the volume it had, the one it got, and the devices talking near it."""

    before: float
    quieter: float
    holders: set[str] = field(default_factory=set)  # MACs: the volume comes back when none is left
    returning: CALLBACK_TYPE | None = None  # waits for the player to be available again
    lowering: asyncio.Task[Any] | None = None  # our volume on its way: the give-back waits for it


DUCKED: HassKey[dict[str, Ducked]] = HassKey(f"{DOMAIN}_ducked")
"""Every player made quieter, by entity id: shared, as two devices of a room may talk at once."""
GIVEN_BACK: HassKey[dict[str, tuple[float, float, float]]] = HassKey(f"{DOMAIN}_given_back")
"""Volumes given back lately, by player: (the volume, the quieter one, when). A player Home
Assistant polls shows ours for a while after: the next exchange must not take it for its own."""
GIVEN_BACK_MEMORY: Final = 30.0
"""Seconds a volume given back is remembered (a polled player updates within its poll interval)."""


def to_save(hass: HomeAssistant) -> dict[str, Any]:
    """What is owed, as it is written."""
    shared = hass.data.get(DUCKED, {})
    return {"players": {player: {"before": d.before, "quieter": d.quieter} for player, d in shared.items()}}


@callback
def async_changed(hass: HomeAssistant) -> None:
    """The players made quieter changed: written soon, so that a restart does not lose a volume."""
    async_save_soon(hass, lambda: to_save(hass))


async def async_forget_volumes(hass: HomeAssistant) -> None:
    """The integration is deleted: the volumes still to give back are given up (logged), and their file goes."""
    for player, ducked in hass.data.pop(DUCKED, {}).items():
        _LOGGER.warning("The volume of %s is not put back to %s: the integration was deleted", player, ducked.before)
        if ducked.returning is not None:
            ducked.returning()
    await ducked_store(hass).async_remove()


async def async_restore_volumes(hass: HomeAssistant) -> None:
    """Volumes not given back before Home Assistant stopped (or this hub unloaded): given back now.

    A player that is not there yet or unavailable gets its volume when it is back; one whose volume
    someone changed meanwhile is left as it is (``_async_give_back``).
    """
    saved = await ducked_store(hass).async_load() or {}
    shared = hass.data.setdefault(DUCKED, {})
    players = saved.get("players", {}) if isinstance(saved, dict) else saved
    if not isinstance(players, dict):
        _LOGGER.warning("The saved volumes are unreadable: %s", players)
        players = {}
    for player, volumes in players.items():
        before, quieter = (volumes.get(key) if isinstance(volumes, dict) else None for key in ("before", "quieter"))
        if player in shared or not isinstance(player, str) or not player.startswith(f"{MEDIA_PLAYER_DOMAIN}."):
            continue
        if isinstance(before, (int, float)) and isinstance(quieter, (int, float)):
            shared[player] = Ducked(float(before), float(quieter))
        else:
            _LOGGER.warning("The saved volume of %s is unreadable: %s", player, volumes)
    for player, ducked in list(shared.items()):
        if not ducked.holders and ducked.returning is None:  # restored, or left waiting by an unload
            watched(hass.async_create_task(async_give_back_volume(hass, player, ducked), "xiaozhi_local volume back"))
    if saved:
        async_changed(hass)  # what was unreadable goes


def own_volume(hass: HomeAssistant, player: str, volume: float, now: float) -> float:
    """The player's own volume: the one given back lately when it still shows the quieter one."""
    given = hass.data.setdefault(GIVEN_BACK, {})
    for gone in [key for key, (_b, _q, at) in given.items() if now - at > GIVEN_BACK_MEMORY]:
        del given[gone]
    if (recent := given.get(player)) is not None and abs(volume - recent[1]) <= SAME_VOLUME:
        return recent[0]
    return volume


async def async_set_volume(hass: HomeAssistant, player: str, level: float) -> None:
    """``player`` to ``level``, within ``VOLUME_TIMEOUT``."""
    async with asyncio.timeout(VOLUME_TIMEOUT):
        await hass.services.async_call(
            MEDIA_PLAYER_DOMAIN,
            SERVICE_VOLUME_SET,
            {ATTR_ENTITY_ID: player, ATTR_MEDIA_VOLUME_LEVEL: level},
            blocking=True,
        )


async def async_give_back_volume(hass: HomeAssistant, player: str, ducked: Ducked) -> None:
    """The player's volume back to what it had; left as it is if someone changed it meanwhile.

    When it cannot take it now: once it is available again (the wait ends when the entry unloads).
    """
    shared = hass.data.setdefault(DUCKED, {})
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
                async_changed(hass)
            return
        try:
            await async_set_volume(hass, player, ducked.before)
        except (HomeAssistantError, TimeoutError, vol.Invalid) as err:
            why = str(err) or type(err).__name__
        else:
            hass.data.setdefault(GIVEN_BACK, {})[player] = (ducked.before, ducked.quieter, hass.loop.time())
            if shared.get(player) is ducked and not ducked.holders:
                shared.pop(player)
                async_changed(hass)
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
                async_changed(hass)
            return
        if new is None or new.state == STATE_UNAVAILABLE or ducked.returning is None:
            return
        stop_waiting()
        if not ducked.holders:
            watched(hass.async_create_task(async_give_back_volume(hass, player, ducked), "xiaozhi_local volume back"))

    @callback
    def stop_waiting() -> None:
        if ducked.returning is not None:
            ducked.returning = None
            remove()

    registry = er.async_get(hass)
    registered = registry.async_get(player) is not None  # a player without an id only ever stops
    remove = async_track_state_change_event(hass, player, on_change)
    ducked.returning = stop_waiting
