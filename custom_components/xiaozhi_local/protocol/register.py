"""The ``mcp/registerTools`` dialect: clients that announce their tools instead of serving MCP.

Bare JSON-RPC 2.0 (the ``{"type":"mcp"}`` envelope is accepted too). The client sends
``mcp/registerTools`` with ``mac_addr`` and ``tools`` (``name``, ``description``, ``parameters``
as JSON Schema, ``main_type`` remote/local, ``sub_type`` control/query); the server calls
``remote`` tools with ``mcp/tool/execute`` and streams replies as ``mcp/ai/message``.
``local`` tools are the server's own: the client only says it knows of them.
"""

from dataclasses import dataclass
from typing import Any, Final

from .mcp import MAX_NAME_LENGTH, MAX_TOOLS, McpTool
from .messages import normalize_mac

METHOD_REGISTER: Final = "mcp/registerTools"
METHOD_EXECUTE: Final = "mcp/tool/execute"
METHOD_AI_MESSAGE: Final = "mcp/ai/message"

INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602

AI_MESSAGE_TYPES: Final = ("chunk", "final", "thought")
MAX_DESCRIPTION: Final = 4096


class RegistrationError(ValueError):
    """A registration that cannot be accepted; the message names what is wrong."""

    def __init__(self, message: str, code: int = INVALID_PARAMS) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Registration:
    """A validated ``mcp/registerTools``."""

    remote: list[McpTool]
    """Tools the client runs (they become the device's tools)."""
    local: list[McpTool]
    """Server-side tools the client says it may call."""


def _tool(index: int, raw: Any) -> tuple[McpTool, bool]:
    where = f"tools[{index}]"
    if not isinstance(raw, dict):
        raise RegistrationError(f"{where} must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RegistrationError(f"{where}.name must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise RegistrationError(f"{where}.name is longer than {MAX_NAME_LENGTH} characters")
    where = f"tool {name!r}"
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise RegistrationError(f"{where}: description must be a string")
    if len(description) > MAX_DESCRIPTION:
        raise RegistrationError(f"{where}: description is longer than {MAX_DESCRIPTION} characters")
    schema = raw.get("parameters", raw.get("inputSchema"))
    if schema is None:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise RegistrationError(f"{where}: parameters must be a JSON Schema object")
    if schema.get("type", "object") != "object":
        raise RegistrationError(f'{where}: parameters must describe an object (type "object")')
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(isinstance(value, dict) for value in properties.values()):
        raise RegistrationError(f"{where}: parameters.properties must map names to schemas")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
        raise RegistrationError(f"{where}: parameters.required must be a list of names")
    if missing := [key for key in required if key not in properties]:
        raise RegistrationError(f"{where}: required {', '.join(missing)} not in parameters.properties")
    main_type = raw.get("main_type", "remote")
    if main_type not in ("remote", "local"):
        raise RegistrationError(f'{where}: main_type must be "remote" or "local", not {main_type!r}')
    sub_type = raw.get("sub_type", "query")
    if sub_type not in ("control", "query"):
        raise RegistrationError(f'{where}: sub_type must be "control" or "query", not {sub_type!r}')
    tool = McpTool(name, description, schema, sub_type=sub_type)
    return tool, main_type == "remote"


def parse_registration(params: Any, device_mac: str) -> Registration:
    """Validate ``mcp/registerTools`` params for the device ``device_mac``. Raises RegistrationError."""
    if not isinstance(params, dict):
        raise RegistrationError("params must be an object with mac_addr and tools")
    mac_addr = params.get("mac_addr")
    if mac_addr is not None:
        if not isinstance(mac_addr, str) or (mac := normalize_mac(mac_addr)) is None:
            raise RegistrationError(f"mac_addr {repr(mac_addr)[:64]} is not a MAC address")  # logged: bounded
        if mac != normalize_mac(device_mac):
            raise RegistrationError(f"mac_addr {mac_addr} is not the MAC this connection authenticated as")
    tools = params.get("tools")
    if not isinstance(tools, list):
        raise RegistrationError("tools must be a list")
    if len(tools) > MAX_TOOLS:
        raise RegistrationError(f"at most {MAX_TOOLS} tools can be registered, got {len(tools)}")
    remote: list[McpTool] = []
    local: list[McpTool] = []
    seen: set[str] = set()
    for index, raw in enumerate(tools):
        tool, is_remote = _tool(index, raw)
        if tool.name in seen:
            raise RegistrationError(f"tool {tool.name!r} is registered twice")
        seen.add(tool.name)
        (remote if is_remote else local).append(tool)
    return Registration(remote, local)


def registered_answer(registration: Registration) -> dict[str, Any]:
    """The ``result`` confirming a registration."""
    count = len(registration.remote) + len(registration.local)
    return {"status": "registered", "message": f"{count} tools were successfully registered."}


def ai_message(kind: str, content: str) -> dict[str, Any]:
    """An ``mcp/ai/message`` notification's params (``chunk``, ``final`` or ``thought``)."""
    if kind not in AI_MESSAGE_TYPES:
        raise ValueError(f"unknown ai message type {kind!r}")
    return {"type": kind, "content": content}
