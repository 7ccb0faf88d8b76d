"""Config flows: the hub, discovered devices (spoken-code pairing), hub options, "Add device"."""

from collections.abc import Callable
from typing import Any

from homeassistant.config_entries import (
    ConfigEntry,
    ConfigFlow,
    ConfigFlowResult,
    ConfigSubentryFlow,
    OptionsFlow,
    SubentryFlowResult,
)
from homeassistant.const import CONF_CODE, CONF_MAC, CONF_NAME, CONF_TOKEN
from homeassistant.core import callback
from homeassistant.data_entry_flow import section
from homeassistant.helpers import selector
import probatio as vol

from .admission import default_title
from .const import (
    CONF_ACCEPT_WITHOUT_CODE,
    CONF_AI_TASK_ENTITY,
    CONF_FIRMWARE,
    CONF_FIRMWARE_RELEASES,
    CONF_FIRMWARE_RELEASES_URL,
    CONF_FIRMWARE_VENDOR,
    CONF_FIRMWARE_VENDOR_URL,
    CONF_IDLE_TIMEOUT,
    CONF_MQTT,
    CONF_MQTT_PORT,
    CONF_NEW_PER_HOUR,
    CONF_SILENCE_TIMEOUT,
    CONF_UDP_PORT,
    CONF_WAKE_WORD_MODELS,
    CONF_WAKE_WORD_MODELS_URL,
    CONF_WEBSOCKET_URL,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MQTT_PORT,
    DEFAULT_NEW_PER_HOUR,
    DEFAULT_SILENCE_TIMEOUT,
    DEFAULT_UDP_PORT,
    DEFAULT_WAKE_WORD_MODELS_URL,
    DOMAIN,
    SUBENTRY_DEVICE,
    TLS_MQTT_PORT,
)
from .firmware.files import DEFAULT_RELEASES_URL, DEFAULT_VENDOR_URL
from .hub import XiaozhiHub, async_get_hub
from .pairing import CheckResult, PendingDevice, new_token
from .protocol.messages import normalize_mac
from .urls import ota_url, websocket_url

CODE_SCHEMA = vol.Schema(
    {
        vol.Required(CONF_CODE): selector.TextSelector(),
        # A device reports only its board type: identical boards are told apart by the room named here.
        vol.Optional(CONF_NAME): selector.TextSelector(),  # pylint: disable=home-assistant-config-flow-name-field
    }
)


AGAIN_SCHEMA = vol.Schema({vol.Required(CONF_CODE): selector.TextSelector()})

FIRMWARE_URLS = {
    CONF_FIRMWARE_VENDOR_URL: DEFAULT_VENDOR_URL,
    CONF_FIRMWARE_RELEASES_URL: DEFAULT_RELEASES_URL,
    CONF_WAKE_WORD_MODELS_URL: DEFAULT_WAKE_WORD_MODELS_URL,
}
"""The firmware sources' addresses and their defaults (stored only when changed)."""


def _name(user_input: dict[str, Any]) -> str | None:
    return (user_input.get(CONF_NAME) or "").strip() or None


class XiaozhiConfigFlow(ConfigFlow, domain=DOMAIN):
    """The hub (one per HA), and discovered devices asking to join it."""

    VERSION = 2
    """2: device tokens are kept in the hub's private journal, not in the subentries (identities.py)."""

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


class XiaozhiOptionsFlow(OptionsFlow):
    """Pairing without a code (trials) and the WebSocket URL handed to devices."""

    async def async_step_init(self, user_input: dict[str, Any] | None = None) -> ConfigFlowResult:
        """One form."""
        errors: dict[str, str] = {}
        if user_input is not None:
            url = (user_input.get(CONF_WEBSOCKET_URL) or "").strip()
            firmware = dict(user_input.get(CONF_FIRMWARE) or {})
            urls = {key: (firmware.get(key) or "").strip() for key in FIRMWARE_URLS}
            if url and not url.startswith(("ws://", "wss://")):
                errors[CONF_WEBSOCKET_URL] = "invalid_websocket_url"
            elif int(user_input.get(CONF_MQTT_PORT, DEFAULT_MQTT_PORT)) == TLS_MQTT_PORT:
                errors[CONF_MQTT_PORT] = "tls_port"  # the firmware would speak TLS to it
            elif any(value and not value.startswith(("http://", "https://")) for value in urls.values()):
                errors[CONF_FIRMWARE] = "invalid_firmware_url"
            else:
                return self.async_create_entry(
                    data={
                        CONF_FIRMWARE_VENDOR: bool(firmware.get(CONF_FIRMWARE_VENDOR, False)),
                        CONF_FIRMWARE_RELEASES: bool(firmware.get(CONF_FIRMWARE_RELEASES, False)),
                        CONF_WAKE_WORD_MODELS: bool(firmware.get(CONF_WAKE_WORD_MODELS, False)),
                        **{key: value for key, value in urls.items() if value and value != FIRMWARE_URLS[key]},
                        CONF_ACCEPT_WITHOUT_CODE: user_input[CONF_ACCEPT_WITHOUT_CODE],
                        CONF_NEW_PER_HOUR: int(user_input.get(CONF_NEW_PER_HOUR, DEFAULT_NEW_PER_HOUR)),
                        CONF_WEBSOCKET_URL: url,
                        CONF_SILENCE_TIMEOUT: int(user_input[CONF_SILENCE_TIMEOUT]),
                        CONF_IDLE_TIMEOUT: int(user_input.get(CONF_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)),
                        CONF_AI_TASK_ENTITY: user_input.get(CONF_AI_TASK_ENTITY) or "",
                        CONF_MQTT: user_input.get(CONF_MQTT, True),
                        CONF_MQTT_PORT: int(user_input.get(CONF_MQTT_PORT, DEFAULT_MQTT_PORT)),
                        CONF_UDP_PORT: int(user_input.get(CONF_UDP_PORT, DEFAULT_UDP_PORT)),
                    }
                )
        schema = vol.Schema(
            {
                vol.Required(CONF_ACCEPT_WITHOUT_CODE, default=False): selector.BooleanSelector(),
                vol.Required(CONF_NEW_PER_HOUR, default=DEFAULT_NEW_PER_HOUR): selector.NumberSelector(
                    selector.NumberSelectorConfig(min=1, max=1000, step=1, mode=selector.NumberSelectorMode.BOX)
                ),
                vol.Optional(CONF_WEBSOCKET_URL): selector.TextSelector(),
                vol.Optional(CONF_AI_TASK_ENTITY): selector.EntitySelector(
                    selector.EntitySelectorConfig(domain="ai_task")
                ),
                vol.Required(CONF_SILENCE_TIMEOUT, default=DEFAULT_SILENCE_TIMEOUT): selector.NumberSelector(
                    selector.NumberSelectorConfig(
                        min=5, max=300, step=1, unit_of_measurement="s", mode=selector.NumberSelectorMode.BOX
                    )
                ),
                vol.Required(CONF_IDLE_TIMEOUT, default=DEFAULT_IDLE_TIMEOUT): selector.NumberSelector(
                    selector.NumberSelectorConfig(
                        min=30, max=3600, step=1, unit_of_measurement="s", mode=selector.NumberSelectorMode.BOX
                    )
                ),
                vol.Required(CONF_MQTT, default=True): selector.BooleanSelector(),
                vol.Required(CONF_MQTT_PORT, default=DEFAULT_MQTT_PORT): selector.NumberSelector(
                    selector.NumberSelectorConfig(min=1, max=65535, step=1, mode=selector.NumberSelectorMode.BOX)
                ),
                vol.Required(CONF_UDP_PORT, default=DEFAULT_UDP_PORT): selector.NumberSelector(
                    selector.NumberSelectorConfig(min=1, max=65535, step=1, mode=selector.NumberSelectorMode.BOX)
                ),
                vol.Required(CONF_FIRMWARE): section(
                    vol.Schema(
                        {
                            vol.Required(CONF_FIRMWARE_VENDOR, default=False): selector.BooleanSelector(),
                            vol.Optional(CONF_FIRMWARE_VENDOR_URL): selector.TextSelector(
                                selector.TextSelectorConfig(type=selector.TextSelectorType.URL)
                            ),
                            vol.Required(CONF_FIRMWARE_RELEASES, default=False): selector.BooleanSelector(),
                            vol.Optional(CONF_FIRMWARE_RELEASES_URL): selector.TextSelector(
                                selector.TextSelectorConfig(type=selector.TextSelectorType.URL)
                            ),
                            vol.Required(CONF_WAKE_WORD_MODELS, default=False): selector.BooleanSelector(),
                            vol.Optional(CONF_WAKE_WORD_MODELS_URL): selector.TextSelector(
                                selector.TextSelectorConfig(type=selector.TextSelectorType.URL)
                            ),
                        }
                    ),
                    {"collapsed": True},
                ),
            }
        )
        options = dict(self.config_entry.options)
        suggested = user_input or {
            **options,
            CONF_FIRMWARE: {
                CONF_FIRMWARE_VENDOR: options.get(CONF_FIRMWARE_VENDOR, False),
                CONF_FIRMWARE_RELEASES: options.get(CONF_FIRMWARE_RELEASES, False),
                CONF_WAKE_WORD_MODELS: options.get(CONF_WAKE_WORD_MODELS, False),
                **{key: options.get(key) or default for key, default in FIRMWARE_URLS.items()},
            },
        }
        return self.async_show_form(
            step_id="init",
            data_schema=self.add_suggested_values_to_schema(schema, suggested),
            errors=errors,
            description_placeholders={"ota_url": ota_url(self.hass), "websocket_url": websocket_url(self.hass)},
        )


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
