"""Config flows: the hub, discovered devices (spoken-code pairing), hub options, "Add device"."""

from collections.abc import Callable
from typing import Any

from homeassistant.config_entries import (
    ConfigEntry,
    ConfigFlow,
    ConfigFlowResult,
    ConfigSubentryFlow,
    SubentryFlowResult,
)
from homeassistant.const import CONF_CODE, CONF_MAC, CONF_NAME, CONF_TOKEN
from homeassistant.core import callback
from homeassistant.helpers import selector
import probatio as vol

from .admission.pairing import CheckResult, PendingDevice, new_token
from .admission.policy import default_title
from .admission.urls import ota_url, websocket_url
from .const import (
    DOMAIN,
    SUBENTRY_DEVICE,
)
from .hub import XiaozhiHub, async_get_hub
from .options_flow import XiaozhiOptionsFlow
from .protocol.messages import normalize_mac

CODE_SCHEMA = vol.Schema(
    {
        vol.Required(CONF_CODE): selector.TextSelector(),
        # A device reports only its board type: identical boards are told apart by the room named here.
        vol.Optional(CONF_NAME): selector.TextSelector(),  # pylint: disable=home-assistant-config-flow-name-field
    }
)


AGAIN_SCHEMA = vol.Schema({vol.Required(CONF_CODE): selector.TextSelector()})


def _name(user_input: dict[str, Any]) -> str | None:
    return (user_input.get(CONF_NAME) or "").strip() or None


class XiaozhiConfigFlow(ConfigFlow, domain=DOMAIN):
    """The hub (one per HA), and discovered devices asking to join it."""

    VERSION = 2
    """2: device tokens are kept in the hub's private journal, not in the subentries (admission/identities.py)."""

    def __init__(self) -> None:
        """Start empty."""
        self._mac = ""

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """Create the hub, showing the URL devices are set up with."""
        if self._async_current_entries(include_ignore=False):
            # HA's ``single_config_entry`` would hide this button, but also abort every discovery
            # card of the domain once the hub exists: the "wants to join" cards need it off.
            return self.async_abort(
                reason="single_instance_allowed", description_placeholders={"ota_url": ota_url(self.hass)}
            )
        if user_input is not None:
            return self.async_create_entry(title="Xiaozhi Local", data={})
        return self.async_show_form(step_id="user", description_placeholders={"ota_url": ota_url(self.hass)})

    async def async_step_integration_discovery(self, discovery_info: dict[str, Any]) -> ConfigFlowResult:
        """An unknown device asked the OTA endpoint to join."""
        self._mac = discovery_info[CONF_MAC]
        await self.async_set_unique_id(self._mac)
        self._abort_if_unique_id_configured()  # "Ignore" on an earlier card
        hub = async_get_hub(self.hass)
        if hub is None:
            return self.async_abort(reason="not_loaded")
        if not hub.admission.pairing.for_mac(self._mac):
            return self.async_abort(reason="not_pending")
        if (device := hub.devices.get(self._mac)) is not None:
            # A paired MAC with another identity: the real device after a reset, or someone else.
            self.context["title_placeholders"] = {"board": device.name, "mac": self._mac, "name": device.name}
            return await self.async_step_pair_again()
        board = discovery_info.get("board") or "device"
        # "name" is what the frontend shows where it has not loaded the flow_title translation
        # (the integration's own page); without it, it shows the bare domain.
        self.context["title_placeholders"] = {
            "board": board,
            "mac": self._mac,
            "name": f"Xiaozhi {board} ({self._mac})",
        }
        return await self.async_step_pair()

    async def async_step_pair(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """Type the code the device speaks."""
        hub = async_get_hub(self.hass)
        if hub is None:
            return self.async_abort(reason="not_loaded")

        def paired(pending: PendingDevice) -> ConfigFlowResult:
            device = hub.admission.async_pair(
                self._mac, _name(user_input or {}), pending.report.identity, token=pending.token
            )
            return self.async_abort(reason="pairing_successful", description_placeholders={"name": device.name})

        return self._code_form(
            hub, "pair", CODE_SCHEMA, user_input=user_input, placeholders={"mac": self._mac}, paired=paired
        )

    async def async_step_pair_again(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """A paired device's MAC asks to pair again with a new identity: only its code lets it."""
        hub = async_get_hub(self.hass)
        if hub is None or (device := hub.devices.get(self._mac)) is None:
            return self.async_abort(reason="not_loaded" if hub is None else "not_pending")

        def paired(pending: PendingDevice) -> ConfigFlowResult:
            hub.admission.async_pair(self._mac, None, pending.report.identity, token=pending.token)
            return self.async_abort(reason="paired_again", description_placeholders={"name": device.name})

        placeholders = {"mac": self._mac, "name": device.name}
        return self._code_form(
            hub, "pair_again", AGAIN_SCHEMA, user_input=user_input, placeholders=placeholders, paired=paired
        )

    def _code_form(
        self,
        hub: XiaozhiHub,
        step_id: str,
        schema: vol.Schema,
        *,
        user_input: dict[str, Any] | None,
        placeholders: dict[str, str],
        paired: Callable[[PendingDevice], ConfigFlowResult],
    ) -> ConfigFlowResult:
        """The code typed for this card's MAC: whichever identity of it heard the code is ``paired``."""
        errors: dict[str, str] = {}
        if user_input is not None:
            result, pending = hub.admission.pairing.check(self._mac, user_input[CONF_CODE])
            if pending is not None:
                return paired(pending)
            if result is CheckResult.UNKNOWN:
                return self.async_abort(reason="not_pending")
            errors[CONF_CODE] = result.value
        return self.async_show_form(
            step_id=step_id,
            data_schema=self.add_suggested_values_to_schema(schema, user_input),
            errors=errors,
            description_placeholders=placeholders,
        )

    @staticmethod
    @callback
    def async_get_options_flow(config_entry: ConfigEntry) -> XiaozhiOptionsFlow:
        """The hub's options."""
        return XiaozhiOptionsFlow()

    @classmethod
    @callback
    def async_get_supported_subentry_types(cls, config_entry: ConfigEntry) -> dict[str, type[ConfigSubentryFlow]]:
        """Devices are subentries."""
        return {SUBENTRY_DEVICE: DeviceSubentryFlow}


MANUAL_SCHEMA = vol.Schema(
    {
        vol.Required(CONF_MAC): selector.TextSelector(),
        # A device reports only its board type: identical boards are told apart by the room named here.
        vol.Optional(CONF_NAME): selector.TextSelector(),  # pylint: disable=home-assistant-config-flow-name-field
    }
)


class DeviceSubentryFlow(ConfigSubentryFlow):
    """Add a device (by its spoken code, or by MAC for other clients); regenerate its token."""

    def __init__(self) -> None:
        """Start empty."""
        self._data: dict[str, str] = {}
        self._title = ""

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """How to add it."""
        return self.async_show_menu(step_id="user", menu_options=["code", "manual"])

    async def async_step_code(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """The code a device speaks after its OTA URL was set to Home Assistant."""
        if (hub := async_get_hub(self.hass)) is None:
            return self.async_abort(reason="not_loaded")
        errors: dict[str, str] = {}
        if user_input is not None:
            result, pending = hub.admission.pairing.claim(user_input[CONF_CODE])
            if pending is not None:
                mac, identity = pending.mac, pending.report.identity
                if (device := hub.devices.get(mac)) is not None:  # a paired MAC with a new identity
                    hub.admission.async_pair(mac, _name(user_input), identity, token=pending.token)
                    return self.async_abort(reason="paired_again", description_placeholders={"name": device.name})
                data = {CONF_MAC: mac, CONF_TOKEN: pending.token, **identity.as_data()}
                return self.async_create_entry(title=_name(user_input) or default_title(mac), data=data, unique_id=mac)
            errors[CONF_CODE] = result.value
        return self.async_show_form(
            step_id="code",
            data_schema=self.add_suggested_values_to_schema(CODE_SCHEMA, user_input),
            errors=errors,
            description_placeholders={"ota_url": ota_url(self.hass)},
        )

    async def async_step_manual(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """A client configured by hand: its MAC address (``Device-Id``) and a name."""
        errors: dict[str, str] = {}
        if user_input is not None:
            mac = normalize_mac(user_input[CONF_MAC])
            if mac is None:
                errors[CONF_MAC] = "invalid_mac"
            elif any(sub.unique_id == mac for sub in self._get_entry().subentries.values()):
                return self.async_abort(reason="already_configured")
            else:
                self._data = {CONF_MAC: mac, CONF_TOKEN: new_token()}
                self._title = _name(user_input) or default_title(mac)
                return await self.async_step_credentials()
        return self.async_show_form(
            step_id="manual",
            data_schema=self.add_suggested_values_to_schema(MANUAL_SCHEMA, user_input),
            errors=errors,
        )

    async def async_step_credentials(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """Show the URL and the token to configure on the client, then create it."""
        if user_input is not None:
            return self.async_create_entry(title=self._title, data=self._data, unique_id=self._data[CONF_MAC])
        return self._show_credentials("credentials")

    async def async_step_reconfigure(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """Regenerate the device's token (the old one stops working at once)."""
        subentry = self._get_reconfigure_subentry()
        if user_input is not None:
            self._data = {**subentry.data, CONF_TOKEN: new_token()}
            return await self.async_step_new_token()
        return self.async_show_form(step_id="reconfigure", description_placeholders={"name": subentry.title})

    async def async_step_new_token(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """Show the new token, then store it."""
        if user_input is not None:
            # A reason of our own: the default is Home Assistant's generic, untranslated here.
            return self.async_update_and_abort(
                self._get_entry(), self._get_reconfigure_subentry(), data=self._data, reason="token_regenerated"
            )
        return self._show_credentials("new_token")

    def _show_credentials(self, step_id: str) -> SubentryFlowResult:
        hub = async_get_hub(self.hass)
        return self.async_show_form(
            step_id=step_id,
            description_placeholders={
                # The URL devices really get: the hub option when it is set.
                "url": hub.websocket_url() if hub is not None else websocket_url(self.hass),
                "ota_url": ota_url(self.hass),
                "token": self._data[CONF_TOKEN],
                "mac": self._data[CONF_MAC],
            },
        )
