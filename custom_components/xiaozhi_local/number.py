"""Numbers: volume, screen brightness."""

from homeassistant.components.number import NumberEntity
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tool_map import NUMBERS, XiaozhiNumberDescription

PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Numbers of every device."""
    async_setup_device_entities(hass, entry, async_add_entities, rows_for(NUMBERS, XiaozhiNumber))


class XiaozhiNumber(XiaozhiValueEntity, NumberEntity):
    """A setting with a range."""

    entity_description: XiaozhiNumberDescription

    @property
    def native_value(self) -> float | None:
        """The requested value while the device is away, else the reported one."""
        value = self.shown_value
        return float(value) if isinstance(value, (int, float)) else None

    async def async_set_native_value(self, value: float) -> None:
        """Send it (or keep it for the next connection)."""
        description = self.entity_description
        await self.device.async_set(description.key, description.setter, {description.argument: int(value)}, int(value))
