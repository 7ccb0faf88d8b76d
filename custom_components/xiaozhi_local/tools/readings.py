"""What a device reports and what waits for it: the query round and the settings made while away.

A part of ``XiaozhiDevice`` (``device.values``). At every connect, once the tools are known
(``link.py``), settings the user made while the device was away are applied, then its query tools
(``get_device_status`` …) are read; the hub's sweep reads them again now and then. An entity's
setting goes out at once when the device is connected, or waits in ``pending`` (saved at once)
for its next connect. Both are kept in the device's cache (``values.DeviceCache``), so entities
show the last-known state across disconnects and restarts.
"""

import asyncio
from collections.abc import Callable
import logging
from typing import Any, Protocol

from homeassistant.exceptions import HomeAssistantError

from ..const import DEFAULT_CALL_TIMEOUT
from ..errors import tool_error, translated_error
from ..protocol.logs import OnceLogger
from ..protocol.mcp import McpError, McpTool, ToolResult
from ..store.cache import REPORT_SAVE_DELAY, PendingSetting, query_number
from .table import QUERY_TOOLS

_LOGGER = logging.getLogger(__name__)

USER_SAVE_DELAY = 0.0
"""Seconds before a setting the user made while the device was away reaches disk: at once (the
entity shows it from then on, so a crash right after must not lose it)."""


class Readable(Protocol):
    """What the readings use of their device (``device.py``): its tools, and whether it is connected."""

    mac: str
    name: str
    log: OnceLogger
    tools: dict[str, McpTool]
    told_transport: str | None

    @property
    def connected(self) -> bool:
        """Whether a connection is up."""

    async def async_call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Call a tool on the live connection."""

    def async_changed(self) -> None:
        """Tell the entities."""


class DeviceValues:
    """One device's last query results and its waiting settings, and the calls that move them."""

    def __init__(
        self,
        device: Readable,
        queries: dict[str, Any],
        pending: dict[str, PendingSetting],
        persist: Callable[[float], None],
    ) -> None:
        self._device = device
        self.queries = queries
        """Last result of each query tool (parsed JSON), by tool name."""
        self.pending = pending
        """Settings made while the device was away, by entity key (the latest value wins)."""
        self._persist = persist
        self._lock = asyncio.Lock()

    async def async_on_ready(self) -> None:
        """The connection's tools are known: apply waiting settings, then read the device."""
        device = self._device
        for key, setting in list(self.pending.items()):
            if setting.tool not in device.tools:
                continue
            try:
                await self._async_run_setter(setting.tool, setting.arguments)
            except (McpError, HomeAssistantError) as err:
                _LOGGER.warning("Device %s refused the setting %s made while it was away: %s", device.mac, key, err)
            if self.pending.get(key) is setting:  # not replaced meanwhile (latest value wins)
                del self.pending[key]
        self._persist(REPORT_SAVE_DELAY)
        await self.async_read()

    async def async_read(self) -> None:
        """Call the query tools the device has (``get_device_status`` …); keep what they return."""
        device = self._device
        async with self._lock:  # one at a time: a later refresh sees later values
            for tool in QUERY_TOOLS:
                if tool not in device.tools or not device.connected:
                    continue
                try:
                    result = await device.async_call_tool(tool, {}, DEFAULT_CALL_TIMEOUT)
                except McpError as err:
                    device.log.report("query_failed", f"{tool} failed: {err}")
                    continue
                value = result.json if result.json is not None else query_number(result.text)
                if value is None:
                    device.log.report("query_not_json", f"{tool} did not answer with JSON")
                    continue
                self.queries[tool] = value
        self._persist(REPORT_SAVE_DELAY)
        device.async_changed()

    async def async_set(self, key: str, tool: str, arguments: dict[str, Any], value: Any) -> None:
        """A setting from an entity. Offline: kept and applied at the next connect."""
        device = self._device
        if not device.connected:
            self.pending[key] = PendingSetting(tool, arguments, value)
            _LOGGER.info(
                "%s is not connected: %s %s is kept and set when it connects%s",
                device.name,
                key,
                value,
                " (at its next conversation)" if device.told_transport == "websocket" else "",
            )
            self._persist(USER_SAVE_DELAY)
            device.async_changed()
            return
        self.pending.pop(key, None)
        try:
            await self._async_run_setter(tool, arguments)
        finally:  # success or not, show what the device really has now
            await self.async_read()

    async def _async_run_setter(self, tool: str, arguments: dict[str, Any]) -> None:
        device = self._device
        try:
            result = await device.async_call_tool(tool, arguments, DEFAULT_CALL_TIMEOUT)
        except McpError as err:
            raise tool_error(err, device.name, tool) from None
        if result.text.strip() == "false":
            raise translated_error("setting_refused", device=device.name, tool=tool)
