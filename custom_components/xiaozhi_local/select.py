"""Selects: screen theme."""

from homeassistant.components.select import SelectEntity
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tool_map import SELECTS, XiaozhiSelectDescription

PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Selects of every device."""
    async_setup_device_entities(hass, entry, async_add_entities, rows_for(SELECTS, XiaozhiSelect))


class XiaozhiSelect(XiaozhiValueEntity, SelectEntity):
    """A setting with fixed options."""

    entity_description: XiaozhiSelectDescription

    @property
    def current_option(self) -> str | None:
        """The requested option while the device is away, else the reported one."""
        value = self.shown_value
        return value if isinstance(value, str) else None

    async def async_select_option(self, option: str) -> None:
        """Send it (or keep it for the next connection)."""
        description = self.entity_description
        await self.device.async_set(description.key, description.setter, {description.argument: option}, option)
