"""Binary sensors: charging, and whether the device is connected now."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from homeassistant.components.binary_sensor import (
    BinarySensorDeviceClass,
    BinarySensorEntity,
    BinarySensorEntityDescription,
)
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import XiaozhiDevice
from .entity import XiaozhiEntity, XiaozhiValueDescription, XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tools.table import STATUS, as_bool


@dataclass(frozen=True, kw_only=True)
class XiaozhiBinarySensorDescription(XiaozhiValueDescription, BinarySensorEntityDescription):
    """A binary sensor row."""


BINARY_SENSORS: tuple[XiaozhiBinarySensorDescription, ...] = (
    XiaozhiBinarySensorDescription(
        key="charging",
        tools=(STATUS,),
        path=("battery", "charging"),
        convert=as_bool,
        device_class=BinarySensorDeviceClass.BATTERY_CHARGING,
        only_when_reported=True,
    ),
)


PARALLEL_UPDATES = 0

CONNECTED = BinarySensorEntityDescription(
    key="connected",
    translation_key="connected",
    device_class=BinarySensorDeviceClass.CONNECTIVITY,
    entity_category=EntityCategory.DIAGNOSTIC,
)


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Binary sensors of every device."""
    rows = rows_for(BINARY_SENSORS, XiaozhiBinarySensor)

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [("connected", lambda: XiaozhiConnected(device, CONNECTED)), *rows(device)]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiBinarySensor(XiaozhiValueEntity, BinarySensorEntity):
    """A reported on/off value."""

    entity_description: XiaozhiBinarySensorDescription

    @property
    def is_on(self) -> bool | None:
        """The last reported value."""
        value = self.reported_value
        return value if isinstance(value, bool) else None


class XiaozhiConnected(XiaozhiEntity, BinarySensorEntity):
    """Whether the device can be reached now (stock devices connect only during conversations)."""

    @property
    def is_on(self) -> bool:
        """Connected now."""
        return self.device.connected
