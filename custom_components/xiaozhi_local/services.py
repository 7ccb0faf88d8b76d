"""The ``xiaozhi_local.call_tool`` action."""

from typing import Any

from homeassistant.const import ATTR_DEVICE_ID
from homeassistant.core import HomeAssistant, ServiceCall, ServiceResponse, SupportsResponse, callback
from homeassistant.exceptions import ServiceValidationError
from homeassistant.helpers import config_validation as cv
import probatio as vol

from .const import (
    ATTR_ARGUMENTS,
    ATTR_RETURN_ERRORS,
    ATTR_TIMEOUT,
    ATTR_TOOL,
    DEFAULT_CALL_TIMEOUT,
    DOMAIN,
    SERVICE_CALL_TOOL,
)
from .device import XiaozhiDevice
from .errors import DeviceOfflineError, tool_error, translated_error
from .hub import async_get_hub
from .protocol.mcp import McpError, McpRemoteError, McpTimeoutError, ToolResult
from .protocol.schema import validate

CALL_TOOL_SCHEMA = vol.Schema(
    {
        vol.Required(ATTR_DEVICE_ID): cv.string,
        vol.Required(ATTR_TOOL): cv.string,
        vol.Optional(ATTR_ARGUMENTS, default=dict): vol.Schema(dict),
        vol.Optional(ATTR_TIMEOUT, default=DEFAULT_CALL_TIMEOUT): vol.All(
            vol.Coerce(float), vol.Range(min=0.1, max=300)
        ),
        vol.Optional(ATTR_RETURN_ERRORS, default=False): cv.boolean,
    }
)


def _response(result: ToolResult, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": result.content, "text": result.text, "data": result.json, "is_error": is_error}


def _resolve_device(hass: HomeAssistant, device_id: str) -> XiaozhiDevice:
    hub = async_get_hub(hass)
    device = hub.async_get_device(device_id) if hub is not None else None
    if device is None:
        raise ServiceValidationError(
            translation_domain=DOMAIN,
            translation_key="unknown_device",
            translation_placeholders={"device_id": device_id},
        )
    return device


async def _async_call_tool(call: ServiceCall) -> ServiceResponse:
    device = _resolve_device(call.hass, call.data[ATTR_DEVICE_ID])
    name: str = call.data[ATTR_TOOL]
    arguments: dict[str, Any] = call.data[ATTR_ARGUMENTS]
    timeout: float = call.data[ATTR_TIMEOUT]
    placeholders = {"device": device.name, "tool": name}
    deadline = call.hass.loop.time() + timeout  # one deadline for the wait for its tools and the call
    try:
        await device.async_wait_ready(timeout)
    except McpError as err:
        raise tool_error(err, device.name, name) from None
    if (tool := device.find_tool(name)) is None:
        raise ServiceValidationError(
            translation_domain=DOMAIN, translation_key="unknown_tool", translation_placeholders=placeholders
        )
    if problems := validate(tool.input_schema, arguments):
        raise ServiceValidationError(
            translation_domain=DOMAIN,
            translation_key="invalid_arguments",
            translation_placeholders={**placeholders, "errors": "; ".join(problems)},
        )
    try:
        left = deadline - call.hass.loop.time()
        if left <= 0:
            raise McpTimeoutError(f"no time left for {name}")
        result = await device.async_call_tool(name, arguments, left)
    except McpRemoteError as err:
        if call.data[ATTR_RETURN_ERRORS]:
            return _response(err.result or ToolResult([{"type": "text", "text": err.message}]), is_error=True)
        raise tool_error(err, device.name, name) from None
    except DeviceOfflineError:  # it went away between the check and the call
        raise translated_error("connection_lost", **placeholders) from None
    except McpError as err:
        raise tool_error(err, device.name, name) from None
    return _response(result)


@callback
def async_setup_services(hass: HomeAssistant) -> None:
    """Register the actions (once, in ``async_setup``)."""
    hass.services.async_register(
        DOMAIN,
        SERVICE_CALL_TOOL,
        _async_call_tool,
        schema=CALL_TOOL_SCHEMA,
        supports_response=SupportsResponse.OPTIONAL,
    )
