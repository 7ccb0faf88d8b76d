"""Selects: screen theme."""

from collections.abc import Callable, Iterable

from homeassistant.components.assist_pipeline import AssistPipelineSelect, VadSensitivitySelect
from homeassistant.components.select import SelectEntity
from homeassistant.core import HomeAssistant
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN
from .device import XiaozhiDevice
from .entity import XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tool_map import SELECTS, XiaozhiSelectDescription

PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Selects of every device: theme, and the satellite's pipeline and VAD sensitivity."""
    rows = rows_for(SELECTS, XiaozhiSelect)

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [
            ("pipeline", lambda: XiaozhiPipelineSelect(hass, device)),
            ("vad_sensitivity", lambda: XiaozhiVadSelect(hass, device)),
            *rows(device),
        ]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiPipelineSelect(AssistPipelineSelect):
    """Which Assist pipeline answers the device."""

    _attr_has_entity_name = True  # the base class leaves it off: no translated name without it

    def __init__(self, hass: HomeAssistant, device: XiaozhiDevice) -> None:
        super().__init__(hass, DOMAIN, device.mac)
        self._attr_device_info = DeviceInfo(identifiers={(DOMAIN, device.mac)})


class XiaozhiVadSelect(VadSensitivitySelect):
    """How long a pause ends what the user says."""

    _attr_has_entity_name = True

    def __init__(self, hass: HomeAssistant, device: XiaozhiDevice) -> None:
        super().__init__(hass, device.mac)
        self._attr_device_info = DeviceInfo(identifiers={(DOMAIN, device.mac)})


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
