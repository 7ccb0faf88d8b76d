"""The lamp some boards drive (``self.lamp.*``)."""

from dataclasses import dataclass
from typing import Any

from homeassistant.components.light import ColorMode, LightEntity, LightEntityDescription
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiValueDescription, XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tools.table import LAMP_STATE, as_bool


@dataclass(frozen=True, kw_only=True)
class XiaozhiLightDescription(XiaozhiValueDescription, LightEntityDescription):
    """An on/off light row: ``on_tool``/``off_tool`` take no arguments."""

    on_tool: str
    off_tool: str


LIGHTS: tuple[XiaozhiLightDescription, ...] = (
    XiaozhiLightDescription(
        key="lamp",
        translation_key="lamp",
        tools=("self.lamp.turn_on", "self.lamp.turn_off", LAMP_STATE),
        source=LAMP_STATE,
        path=("power",),
        convert=as_bool,
        on_tool="self.lamp.turn_on",
        off_tool="self.lamp.turn_off",
    ),
)


PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Lights of every device."""
    async_setup_device_entities(hass, entry, async_add_entities, rows_for(LIGHTS, XiaozhiLight))


class XiaozhiLight(XiaozhiValueEntity, LightEntity):
    """An on/off light."""

    takes_settings_while_away = True

    entity_description: XiaozhiLightDescription
    _attr_color_mode = ColorMode.ONOFF
    _attr_supported_color_modes = {ColorMode.ONOFF}  # noqa: RUF012

    @property
    def is_on(self) -> bool | None:
        """The requested state while the device is away, else the reported one."""
        value = self.shown_value
        return value if isinstance(value, bool) else None

    async def async_turn_on(self, **kwargs: Any) -> None:
        """Turn it on (or when the device next connects)."""
        await self.device.values.async_set(self.entity_description.key, self.entity_description.on_tool, {}, True)

    async def async_turn_off(self, **kwargs: Any) -> None:
        """Turn it off (or when the device next connects)."""
        await self.device.values.async_set(self.entity_description.key, self.entity_description.off_tool, {}, False)
