"""Sensors: what ``self.get_device_status`` reports, the transport a device is on, its response time.

Battery, network, signal, SSID, carrier and chip temperature come from the device's status; the
Transport sensor says whether it is on MQTT+UDP or WebSocket, and whether a change waits; the
Response time sensor shows the wait people feel, end of speech → first sound (``timings.py``).
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from homeassistant.components.sensor import (
    RestoreSensor,
    SensorDeviceClass,
    SensorEntity,
    SensorEntityDescription,
    SensorStateClass,
)
from homeassistant.const import PERCENTAGE, EntityCategory, UnitOfTemperature, UnitOfTime
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.typing import StateType

from .admission import transport_choice as transport
from .device import XiaozhiDevice
from .entity import XiaozhiEntity, XiaozhiValueDescription, XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry, XiaozhiHub
from .tools.table import NETWORK_TYPES, SIGNALS, STATUS, as_float, as_int, as_option, as_text


@dataclass(frozen=True, kw_only=True)
class XiaozhiSensorDescription(XiaozhiValueDescription, SensorEntityDescription):
    """A sensor row."""


SENSORS: tuple[XiaozhiSensorDescription, ...] = (
    XiaozhiSensorDescription(
        key="battery",
        tools=(STATUS,),
        path=("battery", "level"),
        convert=as_int,
        device_class=SensorDeviceClass.BATTERY,
        state_class=SensorStateClass.MEASUREMENT,
        native_unit_of_measurement=PERCENTAGE,
        only_when_reported=True,
    ),
    XiaozhiSensorDescription(
        key="network_type",
        translation_key="network_type",
        tools=(STATUS,),
        path=("network", "type"),
        convert=as_option(NETWORK_TYPES),
        device_class=SensorDeviceClass.ENUM,
        options=NETWORK_TYPES,
        entity_category=EntityCategory.DIAGNOSTIC,
    ),
    XiaozhiSensorDescription(
        key="signal",
        translation_key="signal",
        tools=(STATUS,),
        path=("network", "signal"),
        convert=as_option(SIGNALS),
        device_class=SensorDeviceClass.ENUM,
        options=SIGNALS,
        entity_category=EntityCategory.DIAGNOSTIC,
        only_when_reported=True,
    ),
    XiaozhiSensorDescription(
        key="ssid",
        translation_key="ssid",
        tools=(STATUS,),
        path=("network", "ssid"),
        convert=as_text,
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
        only_when_reported=True,
    ),
    XiaozhiSensorDescription(
        key="carrier",
        translation_key="carrier",
        tools=(STATUS,),
        path=("network", "carrier"),
        convert=as_text,
        entity_category=EntityCategory.DIAGNOSTIC,
        only_when_reported=True,
    ),
    XiaozhiSensorDescription(
        key="chip_temperature",
        translation_key="chip_temperature",
        tools=(STATUS,),
        path=("chip", "temperature"),
        convert=as_float,
        device_class=SensorDeviceClass.TEMPERATURE,
        state_class=SensorStateClass.MEASUREMENT,
        native_unit_of_measurement=UnitOfTemperature.CELSIUS,
        entity_category=EntityCategory.DIAGNOSTIC,
        only_when_reported=True,
    ),
)


TRANSPORT = SensorEntityDescription(
    key="transport_state",
    translation_key="transport_state",
    device_class=SensorDeviceClass.ENUM,
    options=[state.value for state in transport.TransportState],
    entity_category=EntityCategory.DIAGNOSTIC,
)

RESPONSE_TIME = SensorEntityDescription(
    key="response_time",
    translation_key="response_time",
    device_class=SensorDeviceClass.DURATION,
    state_class=SensorStateClass.MEASUREMENT,
    native_unit_of_measurement=UnitOfTime.MILLISECONDS,
    suggested_display_precision=0,
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
        return [
            ("transport_state", lambda: XiaozhiTransportSensor(hub, device)),
            ("response_time", lambda: XiaozhiResponseTimeSensor(device)),
            *rows(device),
        ]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiSensor(XiaozhiValueEntity, SensorEntity):
    """A reported value."""

    entity_description: XiaozhiSensorDescription

    @property
    def native_value(self) -> StateType:
        """The last reported value (kept across disconnects and restarts), as a state can hold it."""
        value = self.reported_value
        return value if value is None or isinstance(value, str | int | float) else str(value)


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


class XiaozhiResponseTimeSensor(XiaozhiEntity, RestoreSensor):
    """End of speech → the first frame of the answer at the device, in ms, after each turn.

    The stages of the last turn are its attributes, in ms after the end of speech; they are not
    recorded (the state is, with statistics). The last value is restored after a restart.
    """

    _unrecorded_attributes = frozenset({"kind", "stages_ms"})

    def __init__(self, device: XiaozhiDevice) -> None:
        super().__init__(device, RESPONSE_TIME)

    async def async_added_to_hass(self) -> None:
        """Follow the device and its turns; restore the last value."""
        await super().async_added_to_hass()
        self.async_on_remove(self.device.response_times.async_add_listener(self._answered))
        if (last := await self.async_get_last_sensor_data()) is not None and self.device.response_times.last is None:
            self._attr_native_value = last.native_value

    @callback
    def _answered(self) -> None:
        stages = self.device.response_times.last
        if stages is None:
            return
        self._attr_native_value = stages.response_ms
        self._attr_extra_state_attributes = {"kind": stages.kind, "stages_ms": stages.offsets_ms()}
        self.async_write_ha_state()

    @property
    def available(self) -> bool:
        """Always: the last turn's figure stays while the device is away."""
        return True
