"""Device tools for conversation agents: merged into the built-in Assist API, and as "Xiaozhi devices".

A request from a xiaozhi satellite sees that device's tools, named ``xiaozhi_local__<tool>``; a
request from elsewhere sees the tools of the connected devices, named
``xiaozhi_local__<device>__<tool>`` so the agent can tell them apart. Names satisfy
``^[a-zA-Z0-9_-]{1,64}$``; each tool object keeps its real name, so the mapping back is exact.
User-only tools and reboot/upgrade/Wi-Fi-reset tools are never offered.
"""

import hashlib
import re
from typing import Any, Final

from homeassistant.components.llm import LLMTools
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import llm
from homeassistant.util import slugify
from homeassistant.util.json import JsonObjectType, JsonValueType
import probatio as vol

from .const import DEFAULT_CALL_TIMEOUT, DOMAIN
from .device import XiaozhiDevice
from .errors import tool_error
from .hub import async_get_hub
from .protocol.mcp import McpError, McpRemoteError, McpTool
from .protocol.schema import validate

PREFIX: Final = f"{DOMAIN}__"
MAX_NAME: Final = 64
MAX_TOOLS_PER_DEVICE: Final = 64
NEVER_FOR_AGENTS: Final = ("reboot", "upgrade_firmware", "reconfigure_wifi", "factory_reset", "set_download_url")
API_NAME: Final = "Xiaozhi devices"
PROMPT: Final = (
    "Tools whose names start with xiaozhi_local__ act on Xiaozhi voice devices (their speaker, screen, "
    "battery, camera and other hardware). When the user speaks through a Xiaozhi device, 'you' and "
    "'your' refer to that device."
)

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]+")


def sanitize(name: str) -> str:
    """A tool or device name in the characters LLM APIs accept."""
    return _NOT_ALLOWED.sub("_", name).strip("_") or "tool"


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:6]


def tool_name(tool: str, device_slug: str | None, taken: set[str]) -> str:
    """``xiaozhi_local__[device__]tool``, at most 64 characters, unique among ``taken``."""
    middle = f"{device_slug}__{sanitize(tool)}" if device_slug else sanitize(tool)
    name = PREFIX + middle
    if len(name) > MAX_NAME or name in taken:
        suffix = "_" + _short_hash(f"{device_slug}/{tool}")
        name = (PREFIX + middle)[: MAX_NAME - len(suffix)] + suffix
    taken.add(name)
    return name


def offered(tool: McpTool) -> bool:
    """Whether an agent may see the tool."""
    return not tool.user_only and not any(word in tool.name for word in NEVER_FOR_AGENTS)


def _annotations(tool: McpTool) -> llm.ToolAnnotations:
    reads = "get_" in tool.name or tool.name.endswith(("list_codes", ".list"))
    hint = tool.annotations
    return llm.ToolAnnotations(
        read_only=bool(hint.get("readOnlyHint", reads)),
        destructive=bool(hint.get("destructiveHint", False)),
        idempotent=bool(hint.get("idempotentHint", reads)),
        open_world=bool(hint.get("openWorldHint", False)),
    )


def _parameters(schema: dict[str, Any]) -> vol.Schema:
    try:
        return vol.from_openapi(schema) if schema.get("properties") else vol.Schema({})
    except Exception:  # noqa: BLE001 - a schema we cannot convert still has a tool behind it
        return vol.Schema({}, extra=vol.ALLOW_EXTRA)


class XiaozhiTool(llm.Tool):
    """One device tool, called over the device's connection."""

    def __init__(self, device: XiaozhiDevice, tool: McpTool, name: str, *, many_devices: bool) -> None:
        self.device = device
        self.tool = tool
        self.name = name
        self.title = tool.name
        self.description = f"[{device.name}] {tool.description}" if many_devices else tool.description
        self.parameters = _parameters(tool.input_schema)
        self.annotations = _annotations(tool)
        self.integration = DOMAIN

    def __eq__(self, other: object) -> bool:
        """The same tool of the same device, offered alike: one tool where APIs are merged.

        An agent with both "Device control" (Assist, which our tools join) and "Xiaozhi devices"
        gets each device tool from both. Home Assistant 2026.11 merges equal tools into one, and
        prefixes the API id only to names that differ (which could pass 64 characters).
        """
        if not isinstance(other, XiaozhiTool):
            return NotImplemented
        return self._identity == other._identity

    def __hash__(self) -> int:
        return hash(self._identity)

    @property
    def _identity(self) -> tuple[str, str, str, str | None]:
        return (self.device.mac, self.tool.name, self.name, self.description)

    async def async_call(
        self, hass: HomeAssistant, tool_input: llm.ToolInput, llm_context: llm.LLMContext
    ) -> llm.ToolResult:
        """Validate, call, and return what the device said (its errors as error results)."""
        arguments = tool_input.tool_args or {}
        if problems := validate(self.tool.input_schema, arguments):
            details: list[JsonValueType] = list(problems)
            return llm.ToolResult(data={"error": "invalid arguments", "details": details}, error=True)
        try:
            result = await self.device.async_call_tool(self.tool.name, arguments, DEFAULT_CALL_TIMEOUT)
        except McpRemoteError as err:  # the device's own words, for the agent to read
            return llm.ToolResult(data={"error": err.message, "kind": err.kind}, error=True)
        except McpError as err:  # offline, timeout, busy, gone: the message users read everywhere
            return llm.ToolResult(data={"error": str(tool_error(err, self.device.name, self.tool.name))}, error=True)
        parsed = result.json
        data: JsonObjectType = (
            parsed if isinstance(parsed, dict) else {"result": parsed if parsed is not None else result.text}
        )
        return llm.ToolResult(data=data)


@callback
def async_device_tools(hass: HomeAssistant, llm_context: llm.LLMContext) -> list[llm.Tool]:
    """The tools for this request: its own device's, or every connected device's."""
    hub = async_get_hub(hass)
    if hub is None:
        return []
    own = hub.async_get_device(llm_context.device_id) if llm_context.device_id else None
    devices = [own] if own is not None else [d for d in hub.devices.values() if d.connected]
    many = own is None
    taken: set[str] = set()
    tools: list[llm.Tool] = []
    for device in devices:
        slug = sanitize(slugify(device.name)) if many else None
        for tool in [t for t in device.tools.values() if offered(t)][:MAX_TOOLS_PER_DEVICE]:
            tools.append(XiaozhiTool(device, tool, tool_name(tool.name, slug, taken), many_devices=many))
    return tools


@callback
def async_get_tools(hass: HomeAssistant, llm_context: llm.LLMContext, api_id: str) -> LLMTools | None:
    """The ``llm`` platform: device tools join the built-in Assist API (no configuration)."""
    if api_id != llm.LLM_API_ASSIST:
        return None
    tools = async_device_tools(hass, llm_context)
    return LLMTools(tools, prompt=PROMPT) if tools else None


class XiaozhiDevicesAPI(llm.API):
    """Only the device tools, for agents that should not get the rest of Assist."""

    async def async_get_api_instance(self, llm_context: llm.LLMContext) -> llm.APIInstance:
        """The tools of this request."""
        return llm.APIInstance(
            api=self, api_prompt=PROMPT, llm_context=llm_context, tools=async_device_tools(self.hass, llm_context)
        )
