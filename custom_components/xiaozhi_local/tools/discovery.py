"""A link's tools: MCP discovery, then the connect-time round (``tools/readings.py``).

At a hello that announces MCP: ``initialize`` (with the camera's upload URL and token), then
``tools/list`` (every page, with the user's tools), then settings made while the device was away
and its status. A ``mcp/registerTools`` client announces its tools instead; a device that says
its tools changed is asked again. ``discovered``: calls can go out; ``settled``: the round is over.
Both are set when the link ends, so nothing waits on a gone link.
"""

import asyncio
from collections.abc import Coroutine
import logging
from typing import Any, Protocol

from ..const import DISCOVERY_TIMEOUT
from ..limits import ExpiringToken
from ..protocol.logs import OnceLogger
from ..protocol.mcp import McpConnectionError, McpError, McpRemoteError, McpTool, ServerInfo
from ..protocol.mcp_client import McpClient
from ..protocol.register import Registration
from .readings import DeviceValues

_LOGGER = logging.getLogger(__name__)


class Discoverable(Protocol):
    """What discovery uses of a device (``XiaozhiDevice``): not the device class, so no circle."""

    mac: str
    log: OnceLogger
    server_info: ServerInfo
    values: DeviceValues
    vision_token: ExpiringToken

    def async_set_discovery(self, info: ServerInfo, tools: list[McpTool]) -> None:
        """``initialize`` and the tools are in."""

    def async_create_task[T](
        self, target: Coroutine[Any, Any, T], name: str, *, background: bool = False
    ) -> asyncio.Task[T]:
        """A task of the device's hub entry."""


class ToolDiscovery:
    """One link's discovery and settle round: at most one running, cancelled when the link ends."""

    def __init__(self, device: Discoverable, mcp: McpClient, vision_url: str | None) -> None:
        self.device = device
        self.mcp = mcp
        self.vision_url = vision_url
        self.discovered = asyncio.Event()  # tools known: calls can go out
        self.settled = asyncio.Event()  # the connect-time round is over: settings applied, status read
        self._task: asyncio.Task[None] | None = None

    def start(self, *, mcp: bool) -> None:
        """The hello came: discover its tools (``mcp``), or it has none to discover."""
        if mcp:
            self._run(self._async_discover(), "discovery")
            return
        self.device.async_set_discovery(self.device.server_info, [])
        self.discovered.set()
        self.settled.set()

    def on_register(self, registration: Registration) -> None:
        """A registerTools client announced its tools: they are the device's tools from now on."""
        _LOGGER.debug(
            "Device %s registered %d tools (%d server-side ones it may call)",
            self.device.mac,
            len(registration.remote),
            len(registration.local),
        )
        self.device.async_set_discovery(self.mcp.server_info, registration.remote)
        self.discovered.set()
        self.settled.clear()
        self._run(self._async_settle(), "settle")  # (replaces a discovery or an earlier round)

    def relist(self) -> None:
        """The device says its tools changed: ask again, once they were known."""
        if self.discovered.is_set():
            self.device.async_create_task(
                self._async_relist(), f"xiaozhi_local relist {self.device.mac}", background=True
            )

    def end(self) -> None:
        """The link is gone: a round still running stops, and nobody waits forever."""
        if self._task is not None:
            self._task.cancel()
        self.discovered.set()
        self.settled.set()

    def _run(self, work: Any, what: str) -> None:
        if self._task is not None:
            self._task.cancel()
        self._task = self.device.async_create_task(work, f"xiaozhi_local {what} {self.device.mac}", background=True)

    async def _async_discover(self) -> None:
        try:
            await self._async_discover_and_settle()
        finally:
            # Cancelled: a registration replaced it, or the link ended (``end`` sets them).
            if not _cancelling():
                self.discovered.set()
                self.settled.set()

    async def _async_discover_and_settle(self) -> None:
        mcp = self.mcp
        try:
            try:
                info = await mcp.initialize(self._capabilities(), timeout=DISCOVERY_TIMEOUT)
            except McpRemoteError as err:  # some clients skip initialize; tools/list may still work
                self.device.log.report("initialize_failed", f"initialize failed: {err}")
                info = mcp.server_info
            tools = await mcp.list_tools(with_user_tools=True, timeout=DISCOVERY_TIMEOUT)
        except McpConnectionError:
            return  # gone while we asked
        except McpError as err:
            _LOGGER.warning("Device %s: could not list its tools: %s", self.device.mac, err)
            return
        _LOGGER.debug("Device %s offers %d tools", self.device.mac, len(tools))
        self.device.async_set_discovery(info, tools)
        self.discovered.set()
        await self.device.values.async_on_ready()

    def _capabilities(self) -> dict[str, Any]:
        """``vision``: where a camera board uploads photos, with a token just for that."""
        if self.vision_url is None:
            return {}
        return {"vision": {"url": self.vision_url, "token": self.device.vision_token.async_new()}}

    async def _async_relist(self) -> None:
        try:
            tools = await self.mcp.list_tools(with_user_tools=True, timeout=DISCOVERY_TIMEOUT)
        except McpError as err:
            self.device.log.report("relist_failed", f"could not list its tools again: {err}")
            return
        self.device.async_set_discovery(self.mcp.server_info, tools)
        await self.device.values.async_read()

    async def _async_settle(self) -> None:
        """Settings made while the client was away, then its status (as after MCP discovery)."""
        try:
            await self.device.values.async_on_ready()
        finally:
            if not _cancelling():
                self.settled.set()


def _cancelling() -> bool:
    """Whether the running task is being cancelled (its replacement sets the events)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
