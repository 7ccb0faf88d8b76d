"""The MCP client for a device's tools, over any transport that can send a JSON-RPC object.

The device is the MCP server; what its tools and answers are made of is ``mcp.py``. Stock
firmware quirks handled here (docs/protocol.md §5): ids must be numbers (a string id is dropped
without a reply), ``tools/list`` pages are cut at 8000 bytes with a tool *name* as ``nextCursor``,
and ``withUserTools`` must be repeated on every page.

Clients of the ``mcp/registerTools`` dialect (``protocol/register.py``) announce their tools
themselves; once they have, calls go out as ``mcp/tool/execute`` with string ids, and
``control`` tools are answered as done at once (their late errors go to ``on_late_error``).
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
import logging
import secrets
from typing import Any, Final

from .mcp import (
    CONTROL_ACCEPTED,
    MAX_TOOLS,
    McpBusyError,
    McpConnectionError,
    McpError,
    McpRemoteError,
    McpTimeoutError,
    McpTool,
    ServerInfo,
    ToolResult,
    error_from,
    parse_tool,
    parse_tool_result,
    result_from_value,
)

_LOGGER = logging.getLogger(__name__)

PROTOCOL_VERSION: Final = "2024-11-05"
MAX_ID: Final = 2**31 - 1  # the firmware echoes ids through cJSON's valueint
DEFAULT_TIMEOUT: Final = 10.0
MAX_PENDING: Final = 32
MAX_PAGES: Final = 32


type SendFunc = Callable[[dict[str, Any]], Awaitable[None]]
type WarnFunc = Callable[[str, str], None]
type LateErrorFunc = Callable[[str, McpError], None]
type RequestId = int | str


class McpClient:
    """JSON-RPC requests to one connected device, matched to replies by numeric id."""

    def __init__(
        self,
        send: SendFunc,
        *,
        warn: WarnFunc | None = None,
        max_pending: int = MAX_PENDING,
        default_timeout: float = DEFAULT_TIMEOUT,
        on_late_error: LateErrorFunc | None = None,
    ) -> None:
        self._send = send
        self._warn = warn or (lambda kind, msg: _LOGGER.warning("%s: %s", kind, msg))
        self._on_late_error = on_late_error or (lambda tool, err: self._warn("control_failed", f"{tool}: {err}"))
        self._max_pending = max_pending
        self.default_timeout = default_timeout
        self._next_id = 1
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._closed: McpConnectionError | None = None
        self.server_info = ServerInfo()
        self.registered: dict[str, McpTool] | None = None
        """The tools a registerTools client announced; None for MCP servers (stock firmware)."""
        self._id_prefix = f"tool-call-{secrets.token_hex(4)}"
        self.unanswered_in_a_row = 0
        """Requests that timed out since the device last answered one (late answers count): a
        device that keeps its link alive but stops reading answers none."""

    @property
    def pending_count(self) -> int:
        """Requests waiting for an answer."""
        return len(self._pending)

    def use_registered_tools(self, tools: Iterable[McpTool]) -> None:
        """The client registered its tools (``mcp/registerTools``); a second registration replaces them."""
        self.registered = {tool.name: tool for tool in tools}

    def _allocate_id(self) -> RequestId:
        while True:
            number = self._next_id
            self._next_id = 1 if number >= MAX_ID else number + 1
            # The dialect's notes ask for unique string ids; stock firmware drops anything but numbers.
            request_id: RequestId = number if self.registered is None else f"{self._id_prefix}-{number}"
            if request_id not in self._pending:
                return request_id

    async def _start(self, method: str, params: dict[str, Any] | None) -> tuple[RequestId, asyncio.Future[Any]]:
        """Send a request; its future is pending under its id until answered or dropped by the caller."""
        if len(self._pending) >= self._max_pending:
            raise McpBusyError(f"{len(self._pending)} requests are already waiting")
        request_id = self._allocate_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send_or_raise(message)
        except McpError:
            self._pending.pop(request_id, None)
            raise
        return request_id, future

    async def _send_or_raise(self, message: dict[str, Any]) -> None:
        """Send; the transport's own errors (closed socket …) become McpConnectionError."""
        if self._closed is not None:
            raise self._closed
        try:
            await self._send(message)
        except McpError:
            raise
        except Exception as err:
            raise McpConnectionError(f"could not send {message.get('method')}: {err}") from err

    async def request(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Send a request and wait for its result. Raises an McpError subclass."""
        request_id, future = await self._start(method, params)
        try:
            async with asyncio.timeout(self.default_timeout if timeout is None else timeout):
                return await future
        except TimeoutError:
            self.unanswered_in_a_row += 1
            raise McpTimeoutError(f"no answer to {method} in time") from None
        finally:
            self._pending.pop(request_id, None)

    async def ping(self, timeout: float) -> bool:
        """Whether the device reads and answers now; False when no answer comes within ``timeout``.

        Any answer counts: the stock firmware answers ``ping`` with "Method not implemented". Raises
        McpBusyError when too many requests wait already (that says nothing about the device).
        """
        try:
            await self.request("ping", None, timeout)
        except McpRemoteError:
            return True
        except McpTimeoutError, McpConnectionError:
            return False
        return True

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """A JSON-RPC notification (no answer expected). Raises McpConnectionError when closed."""
        await self._send_or_raise({"jsonrpc": "2.0", "method": method, "params": params})

    async def _fire(self, tool: str, method: str, params: dict[str, Any], timeout: float | None) -> None:
        """Send without waiting; a later error answer goes to ``on_late_error``, silence is forgotten."""
        request_id, future = await self._start(method, params)
        loop = asyncio.get_running_loop()

        def expired() -> None:
            if not future.done():
                self.unanswered_in_a_row += 1
                future.set_exception(McpTimeoutError(f"no answer to {tool} in time"))

        expire = loop.call_later(self.default_timeout if timeout is None else timeout, expired)

        def done(fut: asyncio.Future[Any]) -> None:
            expire.cancel()
            if self._pending.get(request_id) is fut:
                del self._pending[request_id]
            if fut.cancelled():
                return
            err = fut.exception()
            if isinstance(err, McpRemoteError):
                self._on_late_error(tool, err)
            elif err is not None:
                _LOGGER.debug("control tool %s: %s", tool, err)

        future.add_done_callback(done)

    def handle_response(self, payload: dict[str, Any]) -> bool:
        """Resolve the request a response answers. False when no request waits for it."""
        self.unanswered_in_a_row = 0  # it reads what we send, late or not
        request_id = payload.get("id")
        future = (
            self._pending.get(request_id)
            if isinstance(request_id, (int, str)) and not isinstance(request_id, bool)
            else None
        )
        if future is None or future.done():
            return False
        if "error" in payload:
            future.set_exception(error_from(payload["error"]))
        else:
            future.set_result(payload.get("result"))
        return True

    def close(self, reason: str = "connection closed") -> None:
        """Fail every pending request at once; later requests fail too."""
        self._closed = McpConnectionError(reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(McpConnectionError(reason))
                # Nobody may be awaiting any more (its task was cancelled): keep asyncio quiet.
                future.exception()
        self._pending.clear()

    async def initialize(self, capabilities: dict[str, Any] | None = None, timeout: float | None = None) -> ServerInfo:
        """``initialize``; ``capabilities`` may carry ``vision {url, token}``."""
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "xiaozhi_local", "version": "1"},
            },
            timeout,
        )
        info = result.get("serverInfo") if isinstance(result, dict) else None
        if isinstance(info, dict):
            name, version = info.get("name"), info.get("version")
            self.server_info = ServerInfo(
                name if isinstance(name, str) else None, version if isinstance(version, str) else None
            )
        return self.server_info

    async def list_tools(
        self,
        *,
        with_user_tools: bool = True,
        max_pages: int = MAX_PAGES,
        max_tools: int = MAX_TOOLS,
        timeout: float | None = None,
    ) -> list[McpTool]:
        """All tools, following ``nextCursor`` up to ``max_pages`` pages and ``max_tools`` tools."""
        tools: dict[str, McpTool] = {}
        cursor: str | None = None
        seen_cursors: set[str] = set()
        for _ in range(max_pages):
            params: dict[str, Any] = {"withUserTools": with_user_tools}
            if cursor is not None:
                params["cursor"] = cursor
            result = await self.request("tools/list", params, timeout)
            if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
                raise McpRemoteError("tools/list result has no tools list")
            for raw in result["tools"]:
                try:
                    tool = parse_tool(raw)
                except ValueError as err:
                    self._warn("bad_tool", str(err))
                    continue
                if tool.name not in tools and len(tools) >= max_tools:
                    self._warn("too_many_tools", f"more than {max_tools} tools; the rest are ignored")
                    return list(tools.values())
                tools[tool.name] = tool
            next_cursor = result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return list(tools.values())
            if next_cursor in seen_cursors:
                self._warn("cursor_loop", f"tools/list cursor {next_cursor!r} repeats")
                return list(tools.values())
            seen_cursors.add(next_cursor)
            cursor = next_cursor
        self._warn("too_many_pages", f"tools/list stopped after {max_pages} pages")
        return list(tools.values())

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """Call a tool. An ``isError`` result raises McpRemoteError carrying the result."""
        if self.registered is not None:
            return await self._execute(name, arguments or {}, timeout)
        raw = await self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout)
        try:
            result = parse_tool_result(raw)
        except ValueError as err:
            raise McpRemoteError(f"malformed result: {err}") from None
        if result.is_error:
            raise McpRemoteError(result.text or "the tool reported an error", result=result)
        return result

    async def _execute(self, name: str, arguments: dict[str, Any], timeout: float | None) -> ToolResult:
        """``mcp/tool/execute``: ``query`` tools are awaited, ``control`` tools succeed once sent."""
        params = {"tool_name": name, "tool_input": arguments}
        tool = (self.registered or {}).get(name)
        if tool is not None and tool.sub_type == "control":
            await self._fire(name, "mcp/tool/execute", params, timeout)
            return ToolResult([{"type": "text", "text": CONTROL_ACCEPTED}])
        return result_from_value(await self.request("mcp/tool/execute", params, timeout))
