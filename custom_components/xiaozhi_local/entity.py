"""The base of every Xiaozhi Local entity, and how platforms add entities as devices change."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity import Entity, EntityDescription
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN
from .device import XiaozhiDevice
from .hub import XiaozhiConfigEntry
from .tools.table import STATUS, value_at

WAITING_FOR_DEVICE = "waiting_for_device"
"""State attribute of a setting made while the device was away (applied when it connects)."""

type Candidates = Callable[[XiaozhiDevice], Iterable[tuple[str, Callable[[], Entity]]]]
"""For a device: (key, factory) of every entity that applies to it now."""


@dataclass(frozen=True, kw_only=True)
class XiaozhiEntityDescription(EntityDescription):
    """Common to every row: the tools the entity needs."""

    tools: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class XiaozhiValueDescription(XiaozhiEntityDescription):
    """An entity showing one value of a query tool's result."""

    source: str = STATUS
    path: tuple[str, ...]
    also_from: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Other (query tool, path) to read the value from when ``source`` has none."""
    convert: Callable[[Any], Any]
    only_when_reported: bool = False  # created only once the device reported the value


@dataclass(frozen=True, kw_only=True)
class XiaozhiSettingDescription(XiaozhiValueDescription):
    """A value the user sets: ``setter`` is called with ``{argument: value}``."""

    setter: str
    argument: str


def reported(queries: dict[str, Any], description: XiaozhiValueDescription) -> Any:
    """A row's value as last reported (converted): its source, else its other sources; None."""
    for source, path in ((description.source, description.path), *description.also_from):
        if (value := description.convert(value_at(queries, source, path))) is not None:
            return value
    return None


class XiaozhiEntity(Entity):
    """An entity of one device, updated whenever the device changes (no polling)."""

    _attr_has_entity_name = True
    _attr_should_poll = False

    def __init__(self, device: XiaozhiDevice, description: EntityDescription, key: str | None = None) -> None:
        self.device = device
        self.entity_description = description
        self._attr_unique_id = f"{device.mac}-{key or description.key}"
        self._attr_device_info = DeviceInfo(identifiers={(DOMAIN, device.mac)})

    shows_activity = False
    """Whether the entity shows what runs in a conversation (the speaker): then it is also told
    when a conversation opens or closes (``XiaozhiDevice.async_add_listener``)."""

    async def async_added_to_hass(self) -> None:
        """Follow the device."""
        self.async_on_remove(self.device.async_add_listener(self.async_write_ha_state, activity=self.shows_activity))

    @property
    def available(self) -> bool:
        """Unavailable once the device no longer offers the entity's tools (kept, not deleted)."""
        description = self.entity_description
        if isinstance(description, XiaozhiEntityDescription):
            return all(tool in self.device.tools for tool in description.tools)
        return True


class XiaozhiValueEntity(XiaozhiEntity):
    """An entity showing a value from a query tool's result."""

    entity_description: XiaozhiValueDescription
    takes_settings_while_away: ClassVar[bool] = False
    """A setting: it stays available while its device is off, and the value set waits for the device."""

    @property
    def available(self) -> bool:
        """What an always-connected device that is off reported is stale: unavailable (settings aside).

        A device that connects per conversation (WebSocket) is away between conversations by
        design: its last values stay, as they are still what it has.
        """
        return super().available and (self.takes_settings_while_away or not self.device.off)

    @property
    def reported_value(self) -> Any:
        """The value as the device last reported it, converted; None when missing or malformed."""
        description = self.entity_description
        return reported(self.device.queries, description)

    @property
    def shown_value(self) -> Any:
        """A setting made while the device was away, else what the device reported."""
        pending = self.device.values.pending.get(self.entity_description.key)
        return pending.value if pending is not None else self.reported_value

    @property
    def extra_state_attributes(self) -> dict[str, Any] | None:
        """``waiting_for_device`` while the value shown is a setting the device has not received yet."""
        return {WAITING_FOR_DEVICE: True} if self.entity_description.key in self.device.values.pending else None


def applies(device: XiaozhiDevice, description: XiaozhiEntityDescription) -> bool:
    """Whether a row's entity belongs on this device now."""
    if not all(tool in device.tools for tool in description.tools):
        return False
    if isinstance(description, XiaozhiValueDescription) and description.only_when_reported:
        return reported(device.queries, description) is not None
    return True


def rows_for(
    descriptions: Iterable[XiaozhiEntityDescription], factory: Callable[[XiaozhiDevice, Any], Entity]
) -> Candidates:
    """Candidates from a table of rows."""

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [
            (description.key, lambda d=description: factory(device, d))  # type: ignore[misc]
            for description in descriptions
            if applies(device, description)
        ]

    return candidates


@callback
def async_setup_device_entities(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
    candidates: Candidates,
) -> None:
    """Add each device's entities now, and later when new ones apply (new tools, first values)."""
    hub = entry.runtime_data

    @callback
    def add_device(device: XiaozhiDevice) -> None:
        added: set[str] = set()

        @callback
        def update() -> None:
            new = [(key, factory) for key, factory in candidates(device) if key not in added]
            if new:
                added.update(key for key, _ in new)
                async_add_entities([factory() for _, factory in new], config_subentry_id=device.subentry_id)

        update()
        hub.async_follow(device, update)

    for device in list(hub.devices.values()):
        add_device(device)
    entry.async_on_unload(hub.async_add_device_listener(add_device))


@callback
def async_store_choice(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, device: XiaozhiDevice, key: str, value: object
) -> None:
    """A setting of Home Assistant's for the device, kept with it (its subentry); None removes it."""
    subentry = entry.subentries[device.subentry_id]
    data = {k: v for k, v in subentry.data.items() if k != key}
    if value is not None:
        data[key] = value
    if data != dict(subentry.data):
        hass.config_entries.async_update_subentry(entry, subentry, data=data)
