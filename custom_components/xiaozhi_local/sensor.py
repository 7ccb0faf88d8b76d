"""Sensors from ``self.get_device_status``: battery, network, signal, SSID, carrier, chip temperature."""

from typing import Any

from homeassistant.components.sensor import SensorEntity
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tool_map import SENSORS, XiaozhiSensorDescription

PARALLEL_UPDATES = 0


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Sensors of every device."""
    async_setup_device_entities(hass, entry, async_add_entities, rows_for(SENSORS, XiaozhiSensor))


class XiaozhiSensor(XiaozhiValueEntity, SensorEntity):
    """A reported value."""

    entity_description: XiaozhiSensorDescription

    @property
    def native_value(self) -> Any:
        """The last reported value (kept across disconnects and restarts)."""
        return self.reported_value
