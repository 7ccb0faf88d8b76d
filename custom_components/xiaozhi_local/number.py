"""Numbers: volume, screen brightness."""

from dataclasses import dataclass

from homeassistant.components.number import NumberEntity, NumberEntityDescription, NumberMode
from homeassistant.const import PERCENTAGE, EntityCategory
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiSettingDescription, XiaozhiValueEntity, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .tools.table import VOLUME_QUERY, as_int


@dataclass(frozen=True, kw_only=True)
class XiaozhiNumberDescription(XiaozhiSettingDescription, NumberEntityDescription):
    """A number row."""


NUMBERS: tuple[XiaozhiNumberDescription, ...] = (
    XiaozhiNumberDescription(
        key="volume",
        translation_key="volume",
        tools=("self.audio_speaker.set_volume",),
        path=("audio_speaker", "volume"),
        also_from=((VOLUME_QUERY, ()),),
        convert=as_int,
        setter="self.audio_speaker.set_volume",
        argument="volume",
        native_min_value=0,
        native_max_value=100,
        native_step=1,
        native_unit_of_measurement=PERCENTAGE,
        mode=NumberMode.SLIDER,
    ),
    XiaozhiNumberDescription(
        key="screen_brightness",
        translation_key="screen_brightness",
        tools=("self.screen.set_brightness",),
        path=("screen", "brightness"),
        convert=as_int,
        setter="self.screen.set_brightness",
        argument="brightness",
        native_min_value=0,
        native_max_value=100,
        native_step=1,
        native_unit_of_measurement=PERCENTAGE,
        mode=NumberMode.SLIDER,
        entity_category=EntityCategory.CONFIG,
    ),
)


PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Numbers of every device."""
    async_setup_device_entities(hass, entry, async_add_entities, rows_for(NUMBERS, XiaozhiNumber))


class XiaozhiNumber(XiaozhiValueEntity, NumberEntity):
    """A setting with a range."""

    takes_settings_while_away = True

    entity_description: XiaozhiNumberDescription

    @property
    def native_value(self) -> float | None:
        """The requested value while the device is away, else the reported one."""
        value = self.shown_value
        return float(value) if isinstance(value, (int, float)) else None

    async def async_set_native_value(self, value: float) -> None:
        """Send it (or keep it for the next connection)."""
        description = self.entity_description
        await self.device.values.async_set(
            description.key, description.setter, {description.argument: int(value)}, int(value)
        )
