"""Which device tools become which entities: one table, so supporting a tool is one row.

An entity exists when the device offers every tool in its ``tools``. Values are read from the
results of *query tools* (``self.get_device_status`` …), which the device layer calls on
connect, after every setter and on a modest interval while connected, and keeps across
restarts. A value of the wrong type or a missing key reads as unknown, never as an error.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from homeassistant.components.binary_sensor import BinarySensorEntityDescription
from homeassistant.components.binary_sensor.const import BinarySensorDeviceClass
from homeassistant.components.button import ButtonEntityDescription
from homeassistant.components.light import LightEntityDescription
from homeassistant.components.number import NumberEntityDescription, NumberMode
from homeassistant.components.select import SelectEntityDescription
from homeassistant.components.sensor import SensorDeviceClass, SensorEntityDescription, SensorStateClass
from homeassistant.const import PERCENTAGE, EntityCategory, UnitOfTemperature
from homeassistant.helpers.entity import EntityDescription

from .protocol.mcp import safe_name

STATUS: Final = "self.get_device_status"
LAMP_STATE: Final = "self.lamp.get_state"
IR_LIST: Final = "self.ir.list_codes"
IR_SEND: Final = "self.ir.send_named"

VOLUME_QUERY: Final = "self.audio_speaker.get_volume"
"""py-xiaozhi's volume reading: a bare integer (it has no volume in a status object)."""

QUERY_TOOLS: Final = (STATUS, LAMP_STATE, IR_LIST, VOLUME_QUERY)
"""Tools that only read: their results feed the entities."""

TOOL_ALIASES: Final = {
    # xiaozhi-sdk's built-in tools, and other clients that use the firmware's names without "self.".
    "get_device_status": STATUS,
    "set_volume": "self.audio_speaker.set_volume",
    "set_brightness": "self.screen.set_brightness",
    "set_theme": "self.screen.set_theme",
    "take_photo": "self.camera.take_photo",
}
"""Names real clients give the firmware's tools → the firmware's name, which the rows below use."""

REBOOT_TOOL: Final = "self.reboot"
"""Not needed for the Restart button (``system`` ``reboot`` works on every firmware); no tool button."""
NEVER_BUTTONS: Final = frozenset({"self.upgrade_firmware", REBOOT_TOOL, *QUERY_TOOLS})
"""Tools that must not become generic buttons."""

NETWORK_TYPES: Final = ["wifi", "cellular", "ethernet", "rndis"]
SIGNALS: Final = ["strong", "medium", "weak", "very_weak", "unknown"]
THEMES: Final = ["light", "dark"]


def canonical_tools[T](tools: dict[str, T]) -> dict[str, T]:
    """Tools by the firmware's name: ``set_volume`` becomes ``self.audio_speaker.set_volume``.

    A tool already under the firmware's name wins over an alias of it.
    """
    out = {name: tool for name, tool in tools.items() if name not in TOOL_ALIASES}
    for name, tool in tools.items():
        if name in TOOL_ALIASES:
            out.setdefault(TOOL_ALIASES[name], tool)
    return out


def reported(queries: dict[str, Any], description: XiaozhiValueDescription) -> Any:
    """A row's value as last reported (converted): its source, else its other sources; None."""
    for source, path in ((description.source, description.path), *description.also_from):
        if (value := description.convert(value_at(queries, source, path))) is not None:
            return value
    return None


def value_at(queries: dict[str, Any], source: str, path: tuple[str, ...]) -> Any:
    """``queries[source][path…]``, or None where any step is missing or not an object."""
    node: Any = queries.get(source)
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def as_int(value: Any) -> int | None:
    """An integer (not a bool), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_float(value: Any) -> float | None:
    """A number (not a bool), or None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_bool(value: Any) -> bool | None:
    """A boolean, or None."""
    return value if isinstance(value, bool) else None


def as_text(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def as_option(options: list[str]) -> Callable[[Any], str | None]:
    """A string that is one of ``options`` once spaces become underscores (``very weak``)."""

    def convert(value: Any) -> str | None:
        text = value.strip().lower().replace(" ", "_") if isinstance(value, str) else None
        return text if text in options else None

    return convert


@dataclass(frozen=True, kw_only=True)
class XiaozhiEntityDescription(EntityDescription):
    """Common to every row: the tools the entity needs."""

    tools: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class XiaozhiValueDescription(XiaozhiEntityDescription):
    """An entity showing one value of a query tool's result."""

    source: str = STATUS
    path: tuple[str, ...]
    also_from: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Other (query tool, path) to read the value from when ``source`` has none."""
    convert: Callable[[Any], Any]
    only_when_reported: bool = False  # created only once the device reported the value


@dataclass(frozen=True, kw_only=True)
class XiaozhiSensorDescription(XiaozhiValueDescription, SensorEntityDescription):
    """A sensor row."""


@dataclass(frozen=True, kw_only=True)
class XiaozhiBinarySensorDescription(XiaozhiValueDescription, BinarySensorEntityDescription):
    """A binary sensor row."""


@dataclass(frozen=True, kw_only=True)
class XiaozhiSettingDescription(XiaozhiValueDescription):
    """A value the user sets: ``setter`` is called with ``{argument: value}``."""

    setter: str
    argument: str


@dataclass(frozen=True, kw_only=True)
class XiaozhiNumberDescription(XiaozhiSettingDescription, NumberEntityDescription):
    """A number row."""


@dataclass(frozen=True, kw_only=True)
class XiaozhiSelectDescription(XiaozhiSettingDescription, SelectEntityDescription):
    """A select row."""


@dataclass(frozen=True, kw_only=True)
class XiaozhiLightDescription(XiaozhiValueDescription, LightEntityDescription):
    """An on/off light row: ``on_tool``/``off_tool`` take no arguments."""

    on_tool: str
    off_tool: str


@dataclass(frozen=True, kw_only=True)
class XiaozhiButtonDescription(XiaozhiEntityDescription, ButtonEntityDescription):
    """A button row: pressing calls ``tools[0]`` without arguments."""


NUMBERS: Final = (
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

SELECTS: Final = (
    XiaozhiSelectDescription(
        key="theme",
        translation_key="theme",
        tools=("self.screen.set_theme",),
        path=("screen", "theme"),
        convert=as_option(THEMES),
        setter="self.screen.set_theme",
        argument="theme",
        options=THEMES,
        entity_category=EntityCategory.CONFIG,
    ),
)

SENSORS: Final = (
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

BINARY_SENSORS: Final = (
    XiaozhiBinarySensorDescription(
        key="charging",
        tools=(STATUS,),
        path=("battery", "charging"),
        convert=as_bool,
        device_class=BinarySensorDeviceClass.BATTERY_CHARGING,
        only_when_reported=True,
    ),
)

LIGHTS: Final = (
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

BUTTONS: Final = (
    XiaozhiButtonDescription(
        key="reconfigure_wifi",
        translation_key="reconfigure_wifi",
        tools=("self.system.reconfigure_wifi",),
        entity_category=EntityCategory.CONFIG,
        entity_registry_enabled_default=False,
    ),
)

MAPPED_TOOLS: Final = frozenset(
    tool for rows in (NUMBERS, SELECTS, SENSORS, BINARY_SENSORS, LIGHTS, BUTTONS) for row in rows for tool in row.tools
)


def ir_code_names(result: Any) -> list[str]:
    """The saved IR code names in a ``self.ir.list_codes`` result, whatever its shape.

    Accepts ``["tv_power", …]``, ``{"codes": [...]}`` with strings or ``{"name": …}`` objects, or
    ``{"tv_power": "20DF10EF", …}``. At most 64 names of at most 64 characters; names with
    control or format characters are left out (they would reach entity ids and names).
    """
    items: Any = result.get("codes", result) if isinstance(result, dict) else result
    if isinstance(items, dict):
        items = list(items)
    names: list[str] = []
    for item in items if isinstance(items, list) else []:
        name = item.get("name") if isinstance(item, dict) else item
        if isinstance(name, str) and 0 < len(name) <= 64 and safe_name(name) and name not in names:
            names.append(name)
    return names[:64]


def plain_buttons(tools: dict[str, Any]) -> list[str]:
    """Tools that become generic buttons (disabled by default).

    Tools without arguments that no row maps, except those that only read (``…get_…``: a
    button would show nothing) and those never to be pressed by accident (firmware upgrade).
    """
    return [
        name
        for name, tool in tools.items()
        if name not in MAPPED_TOOLS
        and name not in NEVER_BUTTONS
        and "get_" not in name
        and not (tool.input_schema.get("properties") or {})
    ]
