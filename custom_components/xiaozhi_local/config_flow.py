"""Config flow: one hub entry; devices are its subentries ("Add device")."""

import secrets
from typing import Any

from homeassistant.config_entries import (
    ConfigEntry,
    ConfigFlow,
    ConfigFlowResult,
    ConfigSubentryFlow,
    SubentryFlowResult,
)
from homeassistant.core import callback
from homeassistant.helpers import selector
import probatio as vol

from .const import CONF_MAC, CONF_TOKEN, DOMAIN, SUBENTRY_DEVICE
from .http import websocket_url
from .protocol.messages import normalize_mac

CONF_NAME = "name"
TOKEN_BYTES = 32  # 256 bits


def new_token() -> str:
    """A per-device secret (URL-safe, no spaces: the firmware prepends "Bearer ")."""
    return secrets.token_urlsafe(TOKEN_BYTES)


class XiaozhiConfigFlow(ConfigFlow, domain=DOMAIN):
    """The hub: a single entry that owns the device endpoint."""

    VERSION = 1

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """Confirm, showing the URL devices will use."""
        if user_input is not None:
            return self.async_create_entry(title="Xiaozhi Local", data={})
        return self.async_show_form(step_id="user", description_placeholders={"url": websocket_url(self.hass)})

    @classmethod
    @callback
    def async_get_supported_subentry_types(cls, config_entry: ConfigEntry) -> dict[str, type[ConfigSubentryFlow]]:
        """Devices are subentries."""
        return {SUBENTRY_DEVICE: DeviceSubentryFlow}


DEVICE_SCHEMA = vol.Schema(
    {
        vol.Required(CONF_MAC): selector.TextSelector(),
        vol.Optional(CONF_NAME): selector.TextSelector(),
    }
)


class DeviceSubentryFlow(ConfigSubentryFlow):
    """Add a device by its MAC address; it gets its own token."""

    def __init__(self) -> None:
        """Start empty."""
        self._data: dict[str, str] = {}
        self._title = ""

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """Ask for the MAC address (the device's ``Device-Id``) and a name."""
        errors: dict[str, str] = {}
        if user_input is not None:
            mac = normalize_mac(user_input[CONF_MAC])
            if mac is None:
                errors[CONF_MAC] = "invalid_mac"
            elif any(sub.unique_id == mac for sub in self._get_entry().subentries.values()):
                return self.async_abort(reason="already_configured")
            else:
                self._data = {CONF_MAC: mac, CONF_TOKEN: new_token()}
                self._title = (user_input.get(CONF_NAME) or "").strip() or f"Xiaozhi {mac}"
                return await self.async_step_credentials()
        return self.async_show_form(
            step_id="user", data_schema=self.add_suggested_values_to_schema(DEVICE_SCHEMA, user_input), errors=errors
        )

    async def async_step_credentials(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """Show the URL and the token to configure on the device, then create it."""
        if user_input is not None:
            return self.async_create_entry(title=self._title, data=self._data, unique_id=self._data[CONF_MAC])
        return self.async_show_form(
            step_id="credentials",
            description_placeholders={
                "url": websocket_url(self.hass),
                "token": self._data[CONF_TOKEN],
                "mac": self._data[CONF_MAC],
            },
        )
