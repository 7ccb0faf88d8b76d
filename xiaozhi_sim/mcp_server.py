"""The firmware's MCP server (``main/mcp_server.cc``), reproduced with its quirks.

- requests need ``jsonrpc: "2.0"``, a string ``method`` and a *numeric* ``id``; anything else is
  dropped without a reply, as are notifications and responses;
- errors are ``{"message": …}`` with no ``code``;
- ``tools/list`` pages stay under 8000 bytes and ``nextCursor`` is the first tool left out;
- arguments of the wrong type count as missing; defaults fill in; extras are ignored.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
import json
from typing import Any, Literal

MAX_PAYLOAD = 8000

type PropertyType = Literal["boolean", "integer", "string"]
type ToolValue = bool | int | str | dict[str, Any]


class ToolError(Exception):
    """A tool failed; the text becomes the error message (or an ``isError`` result).

    ``code`` is what firmware 2.5 adds to its errors (2.4.2 sends none).
    """

    def __init__(self, message: str, code: int = -32603) -> None:
        super().__init__(message)
        self.code = code


def is_v25(version: str) -> bool:
    """Firmware 2.5 or newer (``2.5.0``, ``2.10.1``)."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 5)


@dataclass(frozen=True, slots=True)
class Property:
    """A tool argument as the firmware declares it."""

    name: str
    type: PropertyType
    default: bool | int | str | None = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        """The JSON schema the firmware prints for it."""
        out: dict[str, Any] = {"type": self.type}
        if self.default is not None:
            out["default"] = self.default
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@dataclass(slots=True)
class Tool:
    """A registered tool."""

    name: str
    description: str
    properties: list[Property]
    callback: Callable[[dict[str, Any]], Awaitable[ToolValue]]
    user_only: bool = False
    errors_as_results: bool = False  # py-xiaozhi convention: failures as isError results
    required: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.required = [p.name for p in self.properties if p.default is None]

    def to_json(self) -> str:
        """The exact text the firmware writes into a ``tools/list`` page."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {p.name: p.schema() for p in self.properties},
        }
        if self.required:
            schema["required"] = self.required
        tool: dict[str, Any] = {"name": self.name, "description": self.description, "inputSchema": schema}
        if self.user_only:
            tool["annotations"] = {"audience": ["user"]}
        return json.dumps(tool, ensure_ascii=False, separators=(",", ":"))


def _result_text(value: ToolValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


class McpServer:
    """Tools plus the JSON-RPC handling of the firmware."""

    def __init__(self, board_name: str, firmware_version: str, *, errors_as_results: bool = False) -> None:
        self.errors_as_results = errors_as_results  # py-xiaozhi: every tool failure as an isError result
        self.board_name = board_name
        self.firmware_version = firmware_version
        self.tools: list[Tool] = []
        self.vision_url: str | None = None
        self.vision_token: str | None = None
        self.calls: list[tuple[str, dict[str, Any]]] = []  # what tools/call ran, for tests
        self.replies: list[dict[str, Any]] = []  # every reply sent, for tests

    def add_tool(self, tool: Tool) -> None:
        """Register a tool (registration order is the listing order)."""
        self.tools.append(tool)

    def find(self, name: str) -> Tool | None:
        """A tool by name."""
        return next((t for t in self.tools if t.name == name), None)

    async def handle(self, payload: Any) -> dict[str, Any] | None:
        """Answer one JSON-RPC payload; None where the firmware sends nothing."""
        if not isinstance(payload, dict) or payload.get("jsonrpc") != "2.0":
            return None
        method = payload.get("method")
        if not isinstance(method, str) or method.startswith("notifications"):
            return None
        params = payload.get("params")
        if params is not None and not isinstance(params, dict):
            return None
        request_id = payload.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, (int, float)):
            return None  # the firmware logs "Invalid id" and sends nothing
        rid = int(request_id)  # echoed through cJSON's valueint
        try:
            reply = {"jsonrpc": "2.0", "id": rid, "result": await self._dispatch(method, params or {})}
        except ToolError as err:
            error: dict[str, Any] = {"message": str(err)}
            if is_v25(self.firmware_version):  # 2.5 answers with JSON-RPC codes
                error = {"code": err.code, "message": str(err)}
            reply = {"jsonrpc": "2.0", "id": rid, "error": error}
        self.replies.append(reply)
        return reply

    async def _dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            vision = (
                (params.get("capabilities") or {}).get("vision")
                if isinstance(params.get("capabilities"), dict)
                else None
            )
            if isinstance(vision, dict) and isinstance(vision.get("url"), str):
                self.vision_url = vision["url"]
                token = vision.get("token")
                self.vision_token = token if isinstance(token, str) else None
            return {
                "protocolVersion": "2024-11-05",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": self.board_name, "version": self.firmware_version},
            }
        if method == "tools/list":
            return self._list(params)
        if method == "tools/call":
            return await self._call(params)
        raise ToolError(f"Method not implemented: {method}", -32601)

    def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        cursor = params.get("cursor", "")
        cursor = cursor if isinstance(cursor, str) else ""
        with_user = params.get("withUserTools") is True
        text = '{"tools":['
        found = cursor == ""
        next_cursor = ""
        added = 0
        for tool in self.tools:
            if not found:
                if tool.name != cursor:
                    continue
                found = True
            if tool.user_only and not with_user:
                continue
            tool_json = tool.to_json()
            if len(text.encode()) + len(tool_json.encode()) + 30 > MAX_PAYLOAD:
                next_cursor = tool.name
                break
            text += tool_json + ","
            added += 1
        if not found:
            raise ToolError(f"Failed to add tool {cursor} because of payload size limit")
        if next_cursor and added == 0:
            raise ToolError(f"Failed to add tool {next_cursor} because of payload size limit")
        text = text.removesuffix(",") + "]"
        if next_cursor:
            text += f',"nextCursor":"{next_cursor}"'
        result: dict[str, Any] = json.loads(text + "}")
        return result

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise ToolError("Missing name")
        tool = self.find(name)
        if tool is None:
            raise ToolError(f"Unknown tool: {name}", -32602)
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ToolError("Invalid arguments")
        args: dict[str, Any] = {}
        for prop in tool.properties:
            value = arguments.get(prop.name)
            if prop.type == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
                number = int(value)  # cJSON valueint truncates
                if prop.minimum is not None and number < prop.minimum:
                    raise ToolError(f"Value is below minimum allowed: {prop.minimum}")
                if prop.maximum is not None and number > prop.maximum:
                    raise ToolError(f"Value exceeds maximum allowed: {prop.maximum}")
                args[prop.name] = number
            elif (prop.type == "boolean" and isinstance(value, bool)) or (
                prop.type == "string" and isinstance(value, str)
            ):
                args[prop.name] = value
            elif value is not None and is_v25(self.firmware_version):  # 2.5: a wrong type is an error
                raise ToolError(f"Invalid type for argument: {prop.name}", -32602)
            elif prop.default is not None:  # 2.4.2: a value of the wrong type counts as missing
                args[prop.name] = prop.default
            elif is_v25(self.firmware_version):
                raise ToolError(f"Missing required argument: {prop.name}", -32602)
            else:
                raise ToolError(f"Missing valid argument: {prop.name}")
        self.calls.append((name, args))
        try:
            value = await tool.callback(args)
        except ToolError as err:
            if tool.errors_as_results or self.errors_as_results:
                return {"content": [{"type": "text", "text": str(err)}], "isError": True}
            raise
        return {"content": [{"type": "text", "text": _result_text(value)}], "isError": False}
