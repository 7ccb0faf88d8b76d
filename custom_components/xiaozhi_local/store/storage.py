"""What a hub keeps on disk: its devices' caches, and the journal of their tokens.

Two stores per hub (config entry). ``xiaozhi_local.<entry_id>`` holds what each device reported
(``values.DeviceCache``), saved on a delay so that many reports make one write.
``xiaozhi_local.<entry_id>.identities`` is the token journal (admission/identities.py): written at once,
0600. The subentries are the user-visible record of the paired devices; this module keeps them
and the journal in step across stops at the worst moment.
"""

import asyncio
from collections.abc import Callable, Mapping
import logging
from types import MappingProxyType
from typing import Any

from homeassistant.config_entries import ConfigEntry, ConfigSubentry
from homeassistant.const import CONF_MAC, CONF_TOKEN, EVENT_HOMEASSISTANT_FINAL_WRITE
from homeassistant.core import CoreState, Event, HomeAssistant, callback
from homeassistant.helpers.json import json_bytes
from homeassistant.helpers.storage import Store
from homeassistant.util.hass_dict import HassKey

from ..admission.identities import IdentityJournal, token_hash
from ..admission.pairing import new_token
from ..admission.policy import default_title
from ..const import DOMAIN, SUBENTRY_DEVICE
from ..device import XiaozhiDevice
from .cache import REPORT_SAVE_DELAY

_LOGGER = logging.getLogger(__name__)

STORAGE_VERSION = 1


def journal_store(hass: HomeAssistant, entry_id: str) -> Store[dict[str, Any]]:
    """Where the hub ``entry_id`` keeps its journal (tokens: as private as HA's own auth store, 0600)."""
    return Store(hass, STORAGE_VERSION, f"{DOMAIN}.{entry_id}.identities", private=True, atomic_writes=True)


_FINAL_WRITE_BEGAN: HassKey[bool] = HassKey(f"{DOMAIN}_final_write_began")


@callback
def async_track_final_write(hass: HomeAssistant) -> None:
    """Note when Home Assistant's final write begins (called once, at the integration's setup).

    After it, the state is ``final_write``, then ``not_running`` again (the close stage, where a
    device's connection that is cancelled late still cleans up), then ``stopped``. ``not_running``
    is also the state of a start, so the state alone cannot tell that the final write is over.
    """
    if _FINAL_WRITE_BEGAN in hass.data:
        return
    hass.data[_FINAL_WRITE_BEGAN] = False

    @callback
    def _began(_event: Event) -> None:
        hass.data[_FINAL_WRITE_BEGAN] = True

    hass.bus.async_listen_once(EVENT_HOMEASSISTANT_FINAL_WRITE, _began)


@callback
def async_save_later[T: Mapping[str, Any]](
    hass: HomeAssistant, store: Store[T], data: Callable[[], T], delay: float
) -> None:
    """``store.async_delay_save``, except once Home Assistant's final write has begun: then now.

    A delayed save asked for then (a device that leaves late in the stop) would wait for a timer
    that never runs: Home Assistant has written its stores already, and that change would be lost.
    Once it has stopped, nothing is written any more (and no timer is left behind).
    """
    if hass.state is CoreState.stopped:
        _LOGGER.debug("Not saved (%s): Home Assistant has stopped", store.key)
    elif hass.state is CoreState.final_write or hass.data.get(_FINAL_WRITE_BEGAN, False):
        hass.async_create_task(store.async_save(data()), f"{DOMAIN} save {store.key}")
    else:
        store.async_delay_save(data, delay)


def hub_store(hass: HomeAssistant, entry_id: str) -> Store[dict[str, Any]]:
    """Where the hub ``entry_id`` keeps its devices' reports, settings and firmware facts."""
    return Store(hass, STORAGE_VERSION, f"{DOMAIN}.{entry_id}")


class HubStorage:
    """The hub's two stores, and the journal kept in step with the subentries."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, devices: Mapping[str, XiaozhiDevice]) -> None:
        """``devices``: the hub's, by MAC (read when saving)."""
        self.hass = hass
        self._entry = entry
        self._devices = devices
        self._store = hub_store(hass, entry.entry_id)
        self._cache: dict[str, Any] = {}  # by MAC: what was loaded, then the last cache that could be saved
        self._save_due: float | None = None
        self.identities = IdentityJournal(journal_store(hass, entry.entry_id))

    def cached(self, mac: str) -> dict[str, Any] | None:
        """What the device ``mac`` had when last saved."""
        return self._cache.get(mac)

    @callback
    def async_forget(self, mac: str) -> None:
        """The device was removed: its token (journal) and cache go, at the next saves."""
        self.identities.forget(mac)
        self._cache.pop(mac, None)
        self.async_schedule_save()

    async def async_save_now(self) -> None:
        """Everything, now (shutdown)."""
        await self._store.async_save(self.data_to_save())
        await self.identities.async_flush()

    async def async_load(self) -> None:
        """What devices reported before the restart (tools, values, waiting settings); the tokens."""
        self._cache = await self._store.async_load() or {}
        await self.identities.async_load()

    @callback
    def async_schedule_save(self, delay: float = REPORT_SAVE_DELAY) -> None:
        """Save the devices' caches in ``delay`` seconds, or sooner if a save is already due sooner."""
        due = self.hass.loop.time() + delay
        if self._save_due is not None and self._save_due <= due:
            return
        self._save_due = due
        async_save_later(self.hass, self._store, self.data_to_save, delay)

    @callback
    def data_to_save(self) -> dict[str, Any]:
        """Every device's cache; one that cannot be stored keeps its last good one (the others are saved)."""
        self._save_due = None
        data: dict[str, Any] = {}
        for mac, device in self._devices.items():
            cache = device.as_cache()
            try:
                json_bytes(cache)
            except (TypeError, ValueError) as err:
                device.log.report("unsaveable", f"what it reported cannot be stored ({err}); keeping the last good")
                cache = self._cache.get(mac) or {}
            self._cache[mac] = data[mac] = cache
        return data

    @callback
    def async_restore_subentries(self) -> None:
        """Make the subentries match the journal where Home Assistant stopped before saving them.

        The journal is always ahead of the subentries (it is written at once, they a second
        later): a device it has and the subentries lack was paired just before the stop; a
        subentry whose device the journal has deleted was deleted just before it. A subentry
        that still carries a token (one written by a flow, or by a version before the tokens
        moved to the journal) the journal knows as an earlier one was regenerated or deleted.
        """
        subentries = {
            sub.data[CONF_MAC]: sub for sub in self._entry.subentries.values() if sub.subentry_type == SUBENTRY_DEVICE
        }
        for mac, record in self.identities:
            sub = subentries.get(mac)
            carried = sub.data.get(CONF_TOKEN) if sub is not None else None
            stale = isinstance(carried, str) and token_hash(carried) in record.previous
            if record.token is None:
                if sub is not None and (stale or carried is None):
                    _LOGGER.warning("Device %s was deleted just before Home Assistant stopped; deleting it again", mac)
                    self.hass.config_entries.async_remove_subentry(self._entry, sub.subentry_id)
                continue
            data = {CONF_MAC: mac, **record.identity.as_data()}
            if sub is None:
                _LOGGER.warning("Device %s was paired just before Home Assistant stopped; restoring it", mac)
                self.hass.config_entries.async_add_subentry(
                    self._entry,
                    ConfigSubentry(
                        data=MappingProxyType(data),
                        subentry_type=SUBENTRY_DEVICE,
                        title=record.title or default_title(mac),
                        unique_id=mac,
                    ),
                )
            elif stale:
                _LOGGER.warning("Device %s got a new token just before Home Assistant stopped; keeping it", mac)
                kept = {k: v for k, v in sub.data.items() if k != CONF_TOKEN}
                self.hass.config_entries.async_update_subentry(self._entry, sub, data={**kept, **data})

    @callback
    def token_for(self, mac: str, subentry: ConfigSubentry) -> str:
        """The device's token: one its subentry carries (newer), else the journal's, else a new one.

        A flow hands a new or regenerated token over in the subentry; it moves to the journal and
        leaves the subentry once the journal is on disk (``async_save_identities``).
        """
        carried = subentry.data.get(CONF_TOKEN)
        if isinstance(carried, str) and carried:
            return carried
        if (record := self.identities.get(mac)) is not None and record.token:
            return record.token
        _LOGGER.warning("Device %s had no token on record; it gets a new one with its next OTA answer", mac)
        return new_token()

    async def async_save_identities(self, stopping: Callable[[], bool]) -> None:
        """Write the journal; then the tokens it holds leave the subentries (each secret kept once).

        Home Assistant keeps config entries readable by every user of the machine; the journal
        is kept as its auth store is (0600). The subentry loses its token only once the journal
        holding it is on disk, so a stop in between loses nothing.
        """
        await self.identities.async_flush()
        if self.identities.dirty or stopping():
            return  # a newer change: its own save comes next
        for sub in list(self._entry.subentries.values()):
            carried = sub.data.get(CONF_TOKEN)
            if sub.subentry_type != SUBENTRY_DEVICE or carried is None:
                continue
            record = self.identities.get(sub.data[CONF_MAC])
            if record is not None and record.token == carried:
                self.hass.config_entries.async_update_subentry(
                    self._entry, sub, data={k: v for k, v in sub.data.items() if k != CONF_TOKEN}
                )
                await asyncio.sleep(0)  # each update calls the entry's listener: let it run between them
