"""MCP client for a device's tools, over any transport that can send a JSON-RPC object.

The device is the MCP server. Stock firmware quirks handled here (docs/protocol.md §5):
ids must be numbers (a string id is dropped without a reply), errors carry only a ``message``,
``tools/list`` pages are cut at 8000 bytes with a tool *name* as ``nextCursor``, and
``withUserTools`` must be repeated on every page.

Clients of the ``mcp/registerTools`` dialect (``protocol/register.py``) announce their tools
themselves; once they have, calls go out as ``mcp/tool/execute`` with string ids, and
``control`` tools are answered as done at once (their late errors go to ``on_late_error``).
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
import json
import logging
import secrets
from typing import Any, Final, Literal

from .messages import loads

PROTOCOL_VERSION: Final = "2024-11-05"
MAX_ID: Final = 2**31 - 1  # the firmware echoes ids through cJSON's valueint
DEFAULT_TIMEOUT: Final = 10.0
MAX_PENDING: Final = 32
MAX_PAGES: Final = 32
MAX_TOOLS: Final = 256
MAX_NAME_LENGTH: Final = 128

type SubType = Literal["control", "query"]
SUB_TYPES: Final[tuple[SubType, ...]] = ("control", "query")
CONTROL_ACCEPTED: Final = '{"status":"success"}'
"""What a ``control`` tool call returns at once: the dialect does not wait for the client."""

_LOGGER = logging.getLogger(__name__)


class McpError(Exception):
    """A tool or request that failed: a JSON-RPC error, an ``isError`` result, or no answer."""


class McpRemoteError(McpError):
    """The device answered with an error (JSON-RPC ``error``, with or without ``code``, or ``isError``)."""

    def __init__(self, message: str, code: int | None = None, result: ToolResult | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.result = result

    @property
    def kind(self) -> Literal["unknown_tool", "invalid_arguments", "failed"]:
        """What went wrong, the same for both firmware generations.

        2.4.2 sends no code: "Unknown tool: x", "Missing valid argument: x" (also for a value of
        the wrong type). 2.5 sends -32602 with "Unknown tool: x", "Missing required argument: x"
        or "Invalid type for argument: x", -32601 for a method it lacks, -32603 for a tool failure.
        """
        message = self.message.lower()
        if message.startswith("unknown tool"):
            return "unknown_tool"
        if self.code == -32602 or message.startswith(("missing valid argument", "missing required argument")):
            return "invalid_arguments"
        if message.startswith("invalid type for argument"):
            return "invalid_arguments"
        return "failed"


class McpTimeoutError(McpError):
    """The device did not answer in time."""


class McpConnectionError(McpError):
    """The connection closed before the answer came, or is not there."""


class McpBusyError(McpError):
    """Too many requests are waiting for this device."""


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool as the device describes it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    user_only: bool = False
    annotations: dict[str, Any] = field(default_factory=dict)
    sub_type: SubType | None = None
    """``control`` or ``query`` for tools of the registerTools dialect; None for MCP tools."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data (diagnostics, caches)."""
        data = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "user_only": self.user_only,
            "annotations": self.annotations,
        }
        if self.sub_type is not None:
            data["sub_type"] = self.sub_type
        return data


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """``initialize``'s ``serverInfo``: board name and firmware version on stock firmware."""

    name: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A ``tools/call`` result."""

    content: list[dict[str, Any]]
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text items joined by newlines."""
        return "\n".join(
            item["text"] for item in self.content if item.get("type") == "text" and isinstance(item.get("text"), str)
        )

    @property
    def json(self) -> Any:
        """The text parsed as JSON, or None when it is not JSON.

        Only objects and arrays count: ``"true"`` or ``"70"`` stay text.
        """
        text = self.text.strip()
        if not text.startswith(("{", "[")):
            return None
        try:
            return loads(text)
        except ValueError, RecursionError:
            return None


def safe_name(name: str) -> bool:
    """Whether a device-given name may become part of an entity's id and name.

    Refuses NUL, ESC, newlines, bidirectional overrides (``U+202E``), zero-width and other
    format characters, and every space but the plain one: ``str.isprintable`` without them.
    """
    return name == name.strip() and name.isprintable()


def parse_tool(raw: Any) -> McpTool:
    """Validate one entry of a ``tools/list`` result. Raises ValueError."""
    if not isinstance(raw, dict):
        raise ValueError("tool is not an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"bad tool name {str(name)[:MAX_NAME_LENGTH]!r}")
    if not safe_name(name):
        raise ValueError(f"tool name {name!r} has control, format or separator characters")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"tool {name}: description is not a string")
    schema = raw.get("inputSchema", raw.get("parameters", {}))
    if schema is None:
        schema = {}
    if not isinstance(schema, dict):
        raise ValueError(f"tool {name}: inputSchema is not an object")
    annotations = raw.get("annotations", {})
    if not isinstance(annotations, dict):
        annotations = {}
    audience = annotations.get("audience")
    user_only = isinstance(audience, list) and "user" in audience and "assistant" not in audience
    sub_type = next((kind for kind in SUB_TYPES if raw.get("sub_type") == kind), None)
    return McpTool(name, description, schema, user_only, annotations, sub_type)


def result_from_value(value: Any) -> ToolResult:
    """A dialect client's ``result`` (any JSON value) as a tool result: strings as they are."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return ToolResult([{"type": "text", "text": text}])


def parse_tool_result(raw: Any) -> ToolResult:
    """Validate a ``tools/call`` result. Raises ValueError."""
    if not isinstance(raw, dict):
        raise ValueError("result is not an object")
    content = raw.get("content", [])
    if not isinstance(content, list) or not all(isinstance(item, dict) for item in content):
        raise ValueError("result content is not a list of objects")
    is_error = raw.get("isError", False)
    if not isinstance(is_error, bool):
        raise ValueError("isError is not a boolean")
    return ToolResult(content, is_error)


def _error_from(raw: Any) -> McpRemoteError:
    """A JSON-RPC ``error`` member, as the firmware sends it (maybe no code) or anyone else."""
    if isinstance(raw, dict):
        message = raw.get("message")
        code = raw.get("code")
        return McpRemoteError(
            message if isinstance(message, str) and message else "unknown error",
            code if isinstance(code, int) and not isinstance(code, bool) else None,
        )
    if isinstance(raw, str) and raw:
        return McpRemoteError(raw)
    return McpRemoteError("unknown error")


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
            future.set_exception(_error_from(payload["error"]))
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
