"""Buttons: restart, Wi-Fi reconfiguration, one per saved IR code, and plain argument-less tools."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from homeassistant.components.button import ButtonDeviceClass, ButtonEntity, ButtonEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .binary_sensor import BINARY_SENSORS
from .const import DOMAIN, MAX_REMOVED_RECORDS, MAX_TOOL_BUTTONS
from .device import XiaozhiDevice
from .entity import XiaozhiEntity, XiaozhiEntityDescription, async_setup_device_entities, rows_for
from .hub import XiaozhiConfigEntry
from .light import LIGHTS
from .number import NUMBERS
from .select import SELECTS
from .sensor import SENSORS
from .tools.table import IR_LIST, IR_SEND, ir_code_names, plain_buttons


@dataclass(frozen=True, kw_only=True)
class XiaozhiButtonDescription(XiaozhiEntityDescription, ButtonEntityDescription):
    """A button row: pressing calls ``tools[0]`` without arguments."""


BUTTONS: tuple[XiaozhiButtonDescription, ...] = (
    XiaozhiButtonDescription(
        key="reconfigure_wifi",
        translation_key="reconfigure_wifi",
        tools=("self.system.reconfigure_wifi",),
        entity_category=EntityCategory.CONFIG,
        entity_registry_enabled_default=False,
    ),
)
MAPPED_TOOLS = frozenset(
    tool for rows in (NUMBERS, SELECTS, SENSORS, BINARY_SENSORS, LIGHTS, BUTTONS) for row in rows for tool in row.tools
)
"""Tools some platform's row maps: never a generic button."""

PARALLEL_UPDATES = 1

IR_BUTTON = ButtonEntityDescription(key="ir", translation_key="ir_code")
RESTART_BUTTON = ButtonEntityDescription(
    key="reboot", device_class=ButtonDeviceClass.RESTART, entity_category=EntityCategory.CONFIG
)
TOOL_BUTTON = ButtonEntityDescription(
    key="tool", translation_key="tool", entity_category=EntityCategory.CONFIG, entity_registry_enabled_default=False
)


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Buttons of every device; IR buttons follow the device's list of codes."""
    rows = rows_for(BUTTONS, XiaozhiButton)

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        found: list[tuple[str, Callable[[], Entity]]] = [("reboot", lambda: XiaozhiRestartButton(device))]
        found += rows(device)
        found += [
            (f"tool-{name}", lambda n=name: XiaozhiToolButton(device, n))  # type: ignore[misc]
            for name in tool_buttons(device)
        ]
        if IR_LIST in device.tools and IR_SEND in device.tools:
            found += [
                (f"ir-{name}", lambda n=name: XiaozhiIrButton(device, n))  # type: ignore[misc]
                for name in ir_code_names(device.queries.get(IR_LIST))
            ]
        return found

    async_setup_device_entities(hass, entry, async_add_entities, candidates)

    registry = er.async_get(hass)

    def remove_stale(device: XiaozhiDevice, kind: str, keep: Iterable[str], gone: str) -> None:
        """Remove the device's ``kind`` buttons whose code or tool it no longer has; say which."""
        prefix = f"{device.mac}-{kind}-"
        wanted = {prefix + name for name in keep}
        stale = [
            entity
            for entity in er.async_entries_for_config_entry(registry, entry.entry_id)
            if entity.domain == "button" and entity.unique_id.startswith(prefix) and entity.unique_id not in wanted
        ]
        for entity in stale:
            registry.async_remove(entity.entity_id)
        if stale:
            forget_oldest_removed(registry, prefix)
            # A warning the first time for the device (then debug): the user sees what went and why.
            names = ", ".join(entity.unique_id.removeprefix(prefix) for entity in stale[:20])
            entity_ids = ", ".join(entity.entity_id for entity in stale[:20]) + (" …" if len(stale) > 20 else "")
            device.log.report(
                f"removed_{kind}_buttons", f"no longer has {gone} {names}; removed their buttons: {entity_ids}"
            )

    @callback
    def remove_deleted_codes(device: XiaozhiDevice) -> Callable[[], None]:
        listed = 0  # the tool lists already compared with

        @callback
        def update() -> None:
            nonlocal listed
            if IR_LIST in device.queries:  # listed at least once: compare with it
                remove_stale(device, "ir", ir_code_names(device.queries[IR_LIST]), "the IR codes")
            if device.tool_lists != listed:  # a new tools/list (not the cache of an earlier one)
                listed = device.tool_lists
                remove_stale(device, "tool", tool_buttons(device), "the tools")

        return update

    hub = entry.runtime_data

    @callback
    def follow(device: XiaozhiDevice) -> None:
        hub.async_follow(device, remove_deleted_codes(device))

    for device in list(hub.devices.values()):
        follow(device)
    entry.async_on_unload(hub.async_add_device_listener(follow))


def forget_oldest_removed(registry: er.EntityRegistry, prefix: str) -> None:
    """Keep the newest ``MAX_REMOVED_RECORDS`` records of removed buttons under ``prefix``; forget the rest.

    ``deleted_entities`` is the registry's own public table (core integrations read it too);
    a record dropped here only means a button that comes back gets a fresh entity id.
    """
    removed = sorted(
        (
            (record.modified_at, key)
            for key, record in registry.deleted_entities.items()
            if record.platform == DOMAIN and record.domain == "button" and record.unique_id.startswith(prefix)
        ),
        reverse=True,
    )
    forgotten = [key for _, key in removed[MAX_REMOVED_RECORDS:]]
    for key in forgotten:
        del registry.deleted_entities[key]
    if forgotten:
        registry.async_schedule_save()


def tool_buttons(device: XiaozhiDevice) -> list[str]:
    """The tools that get a generic button: at most ``MAX_TOOL_BUTTONS`` (bounds the registry)."""
    names = plain_buttons(device.tools, MAPPED_TOOLS)
    if len(names) > MAX_TOOL_BUTTONS:
        device.log.report("too_many_buttons", f"{len(names)} tools could be buttons; the first {MAX_TOOL_BUTTONS} are")
    return names[:MAX_TOOL_BUTTONS]


class XiaozhiButton(XiaozhiEntity, ButtonEntity):
    """A row of the table: calls its tool without arguments."""

    entity_description: XiaozhiButtonDescription

    @property
    def available(self) -> bool:
        """While the device offers the tool, and is not off (an always-connected device that is away)."""
        return super().available and not self.device.off

    async def async_press(self) -> None:
        """Call the tool (the device must be connected)."""
        await self.device.async_press(self.entity_description.tools[0])


class XiaozhiRestartButton(XiaozhiEntity, ButtonEntity):
    """Restart the device: the ``system`` ``reboot`` command every firmware obeys, on either transport."""

    def __init__(self, device: XiaozhiDevice) -> None:
        super().__init__(device, RESTART_BUTTON)

    @property
    def available(self) -> bool:
        """While the device is connected (over MQTT: from boot to power-off)."""
        return self.device.connected

    async def async_press(self) -> None:
        """Send it; the device reboots a second later, runs its OTA check and comes back."""
        await self.device.async_restart()


class XiaozhiIrButton(XiaozhiEntity, ButtonEntity):
    """Send one saved IR code."""

    def __init__(self, device: XiaozhiDevice, code: str) -> None:
        super().__init__(device, IR_BUTTON, f"ir-{code}")
        self.code = code
        self._attr_translation_placeholders = {"code": code}

    @property
    def available(self) -> bool:
        """While the device offers IR and still lists the code, and is not off."""
        return (
            not self.device.off
            and IR_SEND in self.device.tools
            and IR_LIST in self.device.tools
            and self.code in ir_code_names(self.device.queries.get(IR_LIST))
        )

    async def async_press(self) -> None:
        """Send it."""
        await self.device.async_press(IR_SEND, {"name": self.code})


class XiaozhiToolButton(XiaozhiEntity, ButtonEntity):
    """Any other tool without arguments (disabled by default)."""

    def __init__(self, device: XiaozhiDevice, tool: str) -> None:
        super().__init__(device, TOOL_BUTTON, f"tool-{tool}")
        self.tool = tool
        self._attr_translation_placeholders = {"tool": tool}

    @property
    def available(self) -> bool:
        """While the device offers the tool, and is not off."""
        return self.tool in self.device.tools and not self.device.off

    async def async_press(self) -> None:
        """Call it."""
        await self.device.async_press(self.tool)
