"""The device's tools by name, and how their results read: what the entity rows build on.

The rows themselves (which tools make which entity) are in the platform modules, one table per
platform, so supporting a tool is one row there. An entity exists when the device offers every
tool in its row's ``tools``. Values are read from the
results of *query tools* (``self.get_device_status`` …), which the device layer calls on
connect, after every setter and on a modest interval while connected, and keeps across
restarts. A value of the wrong type or a missing key reads as unknown, never as an error.
"""

from collections.abc import Callable, Iterable
from typing import Any, Final

from ..protocol.mcp import safe_name

STATUS: Final = "self.get_device_status"
LAMP_STATE: Final = "self.lamp.get_state"
IR_LIST: Final = "self.ir.list_codes"
IR_SEND: Final = "self.ir.send_named"

VOLUME_QUERY: Final = "self.audio_speaker.get_volume"
"""py-xiaozhi's volume reading: a bare integer (it has no volume in a status object)."""

QUERY_TOOLS: Final = (STATUS, LAMP_STATE, IR_LIST, VOLUME_QUERY)
"""Tools that only read: their results feed the entities."""


REBOOT_TOOL: Final = "self.reboot"
"""Not needed for the Restart button (``system`` ``reboot`` works on every firmware); no tool button."""
NEVER_BUTTONS: Final = frozenset({"self.upgrade_firmware", REBOOT_TOOL, *QUERY_TOOLS})
"""Tools that must not become generic buttons."""

NETWORK_TYPES: Final = ["wifi", "cellular", "ethernet", "rndis"]
SIGNALS: Final = ["strong", "medium", "weak", "very_weak", "unknown"]
THEMES: Final = ["light", "dark"]


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


def plain_buttons(tools: dict[str, Any], mapped: Iterable[str]) -> list[str]:
    """Tools that become generic buttons (disabled by default).

    Tools without arguments that no row maps (``mapped``: the rows' tools), except those that only read (``…get_…``: a
    button would show nothing) and those never to be pressed by accident (firmware upgrade).
    """
    return [
        name
        for name, tool in tools.items()
        if name not in mapped
        and name not in NEVER_BUTTONS
        and "get_" not in name
        and not (tool.input_schema.get("properties") or {})
    ]
