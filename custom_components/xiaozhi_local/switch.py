"""Switches: a quieter room while the device talks."""

from collections.abc import Callable, Iterable
from typing import Any

from homeassistant.components.switch import SwitchEntity, SwitchEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import CONF_DUCK_ROOM
from .device import XiaozhiDevice
from .entity import XiaozhiEntity, async_setup_device_entities, async_store_choice
from .hub import XiaozhiConfigEntry

PARALLEL_UPDATES = 0

DUCK_ROOM = SwitchEntityDescription(
    key=CONF_DUCK_ROOM, translation_key=CONF_DUCK_ROOM, entity_category=EntityCategory.CONFIG
)


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """One per device."""

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [(CONF_DUCK_ROOM, lambda: XiaozhiDuckSwitch(entry, device))]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiDuckSwitch(XiaozhiEntity, SwitchEntity):
    """A quieter room while the device talks (``satellite/quiet.py``).

    On: the media players of the device's area that play go quieter while it listens and speaks,
    and come back to the volume they had. Stored with the device (its subentry).
    """

    def __init__(self, entry: XiaozhiConfigEntry, device: XiaozhiDevice) -> None:
        super().__init__(device, DUCK_ROOM)
        self.entry = entry

    @property
    def available(self) -> bool:
        """Always: the choice is Home Assistant's, the device need not be connected."""
        return True

    @property
    def is_on(self) -> bool:
        """Whether it is chosen (off unless it is)."""
        subentry = self.entry.subentries.get(self.device.subentry_id)
        return subentry is not None and subentry.data.get(CONF_DUCK_ROOM) is True

    async def async_turn_on(self, **kwargs: Any) -> None:
        """The room goes quieter from the next exchange on."""
        async_store_choice(self.hass, self.entry, self.device, CONF_DUCK_ROOM, True)
        self.async_write_ha_state()

    async def async_turn_off(self, **kwargs: Any) -> None:
        """The room is left alone (what is quieter now comes back when the exchange ends)."""
        async_store_choice(self.hass, self.entry, self.device, CONF_DUCK_ROOM, None)
        self.async_write_ha_state()
