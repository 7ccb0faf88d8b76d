"""The one back door from the tests into the integration's internals.

Tests assert through Home Assistant's surfaces (states, services, events) where they can; what
only the integration can tell (its hub, a link's MCP client) is reached here and nowhere else, so
a change of the internals changes this module, not every test.
"""

from typing import Any

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.link import DeviceLink
from custom_components.xiaozhi_local.protocol.mcp_client import McpClient
from custom_components.xiaozhi_local.protocol.messages import ClientHello


def hub_of(source: HomeAssistant | ConfigEntry[Any]) -> XiaozhiHub:
    """The hub of ``source`` (a config entry, or the first of the integration's)."""
    entry = source if isinstance(source, ConfigEntry) else source.config_entries.async_entries(DOMAIN)[0]
    hub: XiaozhiHub = entry.runtime_data
    return hub


def mcp_of(link: DeviceLink) -> McpClient:
    """The MCP client of a device's link."""
    return link.session.mcp


def hello_of(link: DeviceLink) -> ClientHello | None:
    """The hello the device sent on ``link``."""
    return link.session.hello


def session_id_of(link: DeviceLink) -> str:
    """The session id of ``link``'s conversation."""
    return str(link.session.session_id)
