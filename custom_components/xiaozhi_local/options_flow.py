"""The hub's options.

Pairing without a code, the URLs and ports handed to devices, timeouts, and where firmware and
wake word models may come from.
"""

from typing import Any

from homeassistant.config_entries import ConfigFlowResult, OptionsFlow
from homeassistant.data_entry_flow import section
from homeassistant.helpers import selector
import probatio as vol

from .admission.urls import ota_url, websocket_url
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
    CONF_NEAREST,
    CONF_NEAREST_BY_AREA,
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
    TLS_MQTT_PORT,
)
from .firmware.files import DEFAULT_RELEASES_URL, DEFAULT_VENDOR_URL

FIRMWARE_URLS = {
    CONF_FIRMWARE_VENDOR_URL: DEFAULT_VENDOR_URL,
    CONF_FIRMWARE_RELEASES_URL: DEFAULT_RELEASES_URL,
    CONF_WAKE_WORD_MODELS_URL: DEFAULT_WAKE_WORD_MODELS_URL,
}
"""The firmware sources' addresses and their defaults (stored only when changed)."""


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
                        CONF_NEAREST: bool(user_input.get(CONF_NEAREST, True)),
                        CONF_NEAREST_BY_AREA: bool(user_input.get(CONF_NEAREST_BY_AREA, False)),
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
                vol.Required(CONF_NEAREST, default=True): selector.BooleanSelector(),
                vol.Required(CONF_NEAREST_BY_AREA, default=False): selector.BooleanSelector(),
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
