"""What a device's MCP tools and answers are made of: tools, results, errors, parsed defensively.

The device is the MCP server; the client that talks to it is ``mcp_client.py``. Stock firmware's
errors carry only a ``message`` (no ``code``); names a device gives are checked (``safe_name``)
before anything of ours shows them (docs/protocol.md §5).
"""

from dataclasses import dataclass, field
import json
import logging
from typing import Any, Final, Literal

from .messages import loads

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


def error_from(raw: Any) -> McpRemoteError:
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


TOOL_ALIASES: Final = {
    # xiaozhi-sdk's built-in tools, and other clients that use the firmware's names without "self.".
    "get_device_status": "self.get_device_status",
    "set_volume": "self.audio_speaker.set_volume",
    "set_brightness": "self.screen.set_brightness",
    "set_theme": "self.screen.set_theme",
    "take_photo": "self.camera.take_photo",
}
"""Names real clients give the firmware's tools → the firmware's name, which the rows below use."""


def canonical_tools[T](tools: dict[str, T]) -> dict[str, T]:
    """Tools by the firmware's name: ``set_volume`` becomes ``self.audio_speaker.set_volume``.

    A tool already under the firmware's name wins over an alias of it.
    """
    out = {name: tool for name, tool in tools.items() if name not in TOOL_ALIASES}
    for name, tool in tools.items():
        if name in TOOL_ALIASES:
            out.setdefault(TOOL_ALIASES[name], tool)
    return out
