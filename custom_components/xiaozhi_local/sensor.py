"""Sensors: what ``self.get_device_status`` reports, and the transport a device is on.

Battery, network, signal, SSID, carrier and chip temperature come from the device's status; the
Transport sensor says whether it is on MQTT+UDP or WebSocket, and whether a change waits.
"""

from collections.abc import Callable, Iterable
from typing import Any

from homeassistant.components.sensor import SensorDeviceClass, SensorEntity, SensorEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from . import transport
from .device import XiaozhiDevice
from .entity import XiaozhiEntity, XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry, XiaozhiHub
from .tool_map import SENSORS, XiaozhiSensorDescription

TRANSPORT = SensorEntityDescription(
    key="transport_state",
    translation_key="transport_state",
    device_class=SensorDeviceClass.ENUM,
    options=[state.value for state in transport.TransportState],
    entity_category=EntityCategory.DIAGNOSTIC,
)

PARALLEL_UPDATES = 0


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Sensors of every device."""
    rows = rows_for(SENSORS, XiaozhiSensor)
    hub = entry.runtime_data

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [("transport_state", lambda: XiaozhiTransportSensor(hub, device)), *rows(device)]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiSensor(XiaozhiValueEntity, SensorEntity):
    """A reported value."""

    entity_description: XiaozhiSensorDescription

    @property
    def native_value(self) -> Any:
        """The last reported value (kept across disconnects and restarts)."""
        return self.reported_value


class XiaozhiTransportSensor(XiaozhiEntity, SensorEntity):
    """MQTT+UDP or WebSocket, offline, or the change its Connection choice waits for."""

    def __init__(self, hub: XiaozhiHub, device: XiaozhiDevice) -> None:
        super().__init__(device, TRANSPORT)
        self.hub = hub

    async def async_added_to_hass(self) -> None:
        """Follow the device and the connection choice."""
        await super().async_added_to_hass()
        self.async_on_remove(self.hub.async_add_transport_listener(self.async_write_ha_state))

    @property
    def native_value(self) -> str:
        """The state (``transport.TransportState``)."""
        return transport.state(self.hub, self.device).value
