"""A paired device at runtime: its live connection, its tools, and calls to them."""

import asyncio
from collections.abc import Callable
import logging
from typing import TYPE_CHECKING, Any

from homeassistant.config_entries import ConfigSubentry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.typing import UNDEFINED
from homeassistant.util import dt as dt_util

from .const import CONF_MAC, CONF_TOKEN, DOMAIN, MANUFACTURER
from .protocol.mcp import McpConnectionError, McpTimeoutError, McpTool, ServerInfo, ToolResult
from .protocol.session import OnceLogger

if TYPE_CHECKING:
    from datetime import datetime

    from .connection import DeviceConnection
    from .pairing import DeviceReport

_LOGGER = logging.getLogger(__name__)


class DeviceOfflineError(McpConnectionError):
    """The device has no open connection now."""


class XiaozhiDevice:
    """One paired device (a config subentry of the hub)."""

    def __init__(self, hass: HomeAssistant, entry_id: str, subentry: ConfigSubentry) -> None:
        self.hass = hass
        self.entry_id = entry_id
        self.subentry_id = subentry.subentry_id
        self.mac: str = subentry.data[CONF_MAC]
        self.token: str = subentry.data[CONF_TOKEN]
        self.name = subentry.title
        self.connection: DeviceConnection | None = None
        self.tools: dict[str, McpTool] = {}
        self.server_info = ServerInfo()
        self.last_seen: datetime | None = None
        self.log = OnceLogger(self.mac, _LOGGER)  # each kind of problem is logged once per device
        self._listeners: list[Callable[[], None]] = []
        registry_entry = dr.async_get(hass).async_get_or_create(
            config_entry_id=entry_id,
            config_subentry_id=subentry.subentry_id,
            identifiers={(DOMAIN, self.mac)},
            connections={(dr.CONNECTION_NETWORK_MAC, self.mac)},
            manufacturer=MANUFACTURER,
            name=subentry.title,
        )
        self.device_id = registry_entry.id

    @property
    def connected(self) -> bool:
        """Whether a connection with a completed hello is open."""
        return self.connection is not None

    @callback
    def async_update_from(self, subentry: ConfigSubentry) -> None:
        """The subentry changed (title, token)."""
        self.name = subentry.title
        token = subentry.data[CONF_TOKEN]
        if token != self.token:
            self.token = token
            if self.connection is not None:  # a replaced token ends the session it opened
                self.hass.async_create_task(self.connection.async_close("token changed"))

    @callback
    def async_add_listener(self, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when the connection, tools or device info change."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    @callback
    def _async_notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    @callback
    def async_attach(self, connection: DeviceConnection) -> None:
        """A connection finished its hello: it is now the device's one connection."""
        old, self.connection = self.connection, connection
        self.last_seen = dt_util.utcnow()
        if old is not None and old is not connection:
            _LOGGER.debug("Device %s reconnected; closing its previous connection", self.mac)
            self.hass.async_create_task(old.async_close("replaced by a new connection"))
        self._async_notify()

    @callback
    def async_detach(self, connection: DeviceConnection) -> None:
        """A connection ended."""
        if self.connection is connection:
            self.connection = None
            self.last_seen = dt_util.utcnow()
            self._async_notify()

    @callback
    def async_set_discovery(self, info: ServerInfo, tools: list[McpTool]) -> None:
        """``initialize`` and ``tools/list`` of the current connection are in."""
        self.server_info = info
        self.tools = {tool.name: tool for tool in tools}
        if info.name or info.version:
            dr.async_get(self.hass).async_update_device(
                self.device_id, model=info.name or None, sw_version=info.version or None
            )
        self._async_notify()

    @callback
    def async_apply_report(self, report: DeviceReport) -> None:
        """What the device said at its OTA check goes to the device registry."""
        if report.board or report.firmware or report.chip:
            dr.async_get(self.hass).async_update_device(
                self.device_id,
                model=report.board or UNDEFINED,
                sw_version=report.firmware or UNDEFINED,
                hw_version=report.chip or UNDEFINED,
            )

    async def async_wait_ready(self, timeout: float) -> DeviceConnection:
        """The live connection once its tools are known. Raises DeviceOfflineError/McpTimeoutError."""
        connection = self.connection
        if connection is None:
            raise DeviceOfflineError(f"device {self.mac} is not connected")
        try:
            async with asyncio.timeout(timeout):
                await connection.discovered.wait()
        except TimeoutError:
            raise McpTimeoutError("the device did not finish listing its tools in time") from None
        return connection

    async def async_call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Call a tool on the live connection. Raises McpError subclasses."""
        connection = self.connection
        if connection is None:
            raise DeviceOfflineError(f"device {self.mac} is not connected")
        return await connection.session.mcp.call_tool(name, arguments, timeout)
