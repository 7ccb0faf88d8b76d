"""Errors as the user reads them: translated, the same for entities, actions and agents."""

from contextlib import suppress

from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.translation import async_get_cached_translations, async_get_translations

from .const import DOMAIN
from .protocol.mcp import McpBusyError, McpConnectionError, McpError, McpRemoteError, McpTimeoutError


class DeviceOfflineError(McpConnectionError):
    """The device has no open connection now."""


def translated_error(key: str, **placeholders: str) -> HomeAssistantError:
    """A HomeAssistantError with a translated message (``exceptions.<key>`` in strings.json).

    A device that is away is a condition of the moment, not wrong input: a HomeAssistantError, as
    core's integrations raise for a device they cannot reach (ServiceValidationError is for input).
    """
    return HomeAssistantError(translation_domain=DOMAIN, translation_key=key, translation_placeholders=placeholders)


def tool_error(err: McpError, device: str, tool: str) -> HomeAssistantError:
    """Any failure of a tool call as the user reads it: the one mapping for entities, actions and agents."""
    if isinstance(err, DeviceOfflineError):
        return translated_error("device_offline", device=device)
    if isinstance(err, McpRemoteError):
        return remote_error(err, device, tool)
    if isinstance(err, McpTimeoutError):
        return translated_error("timeout", device=device, tool=tool)
    if isinstance(err, McpBusyError):
        return translated_error("busy", device=device)
    if isinstance(err, McpConnectionError):  # it went away during the call
        return translated_error("connection_lost", device=device, tool=tool)
    return translated_error("device_error", device=device, tool=tool, message=str(err))


def remote_error(err: McpRemoteError, device: str, tool: str) -> HomeAssistantError:
    """The device's error as the user reads it, the same for both firmware generations."""
    if err.kind == "unknown_tool":
        return translated_error("unknown_tool", device=device, tool=tool)
    if err.kind == "invalid_arguments":
        return translated_error("invalid_arguments", device=device, tool=tool, errors=err.message)
    return translated_error("device_error", device=device, tool=tool, message=err.message)


async def async_load_translations(hass: HomeAssistant) -> None:
    """Load this integration's messages in Home Assistant's language (and English) for ``async_translate``."""
    for language in dict.fromkeys((hass.config.language, "en")):
        await async_get_translations(hass, language, "exceptions", [DOMAIN])


@callback
def async_translate(hass: HomeAssistant, key: str, **placeholders: str) -> str:
    """``exceptions.<key>`` of strings.json in Home Assistant's language, else English, else the key.

    For texts that are no exception but are shown as they are (an update's release notes):
    Home Assistant translates those nowhere, so they are written in the language it is set to.
    """
    for language in dict.fromkeys((hass.config.language, "en")):
        messages = async_get_cached_translations(hass, language, "exceptions", DOMAIN)
        if message := messages.get(f"component.{DOMAIN}.exceptions.{key}.message"):
            with suppress(KeyError, IndexError, ValueError):
                return message.format(**placeholders)
    return key


@callback
def async_error_text(hass: HomeAssistant, err: HomeAssistantError) -> str:
    """An error of ours in Home Assistant's language (``str(err)`` is always English)."""
    if err.translation_domain == DOMAIN and err.translation_key:
        return async_translate(hass, err.translation_key, **(err.translation_placeholders or {}))
    return str(err)
