"""The hub flow and the "Add device" subentry flow."""

from typing import Any

from homeassistant.config_entries import SOURCE_USER
from homeassistant.core import HomeAssistant
from homeassistant.core_config import async_process_ha_core_config
from homeassistant.data_entry_flow import FlowResultType
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import CONF_MAC, CONF_TOKEN, DOMAIN, SUBENTRY_DEVICE
from custom_components.xiaozhi_local.http import websocket_url
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import MAC, ws_url


async def test_hub_flow(hass: HomeAssistant) -> None:
    await async_process_ha_core_config(hass, {"internal_url": "http://192.168.1.10:8123"})
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "user"
    assert result["description_placeholders"] == {"url": "ws://192.168.1.10:8123/api/xiaozhi_local/v1/"}
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "Xiaozhi Local"
    assert result["data"] == {}
    await hass.async_block_till_done()
    entry = hass.config_entries.async_entries(DOMAIN)[0]
    assert entry.runtime_data.devices == {}


async def test_single_instance(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "single_instance_allowed"


async def start_device_flow(hass: HomeAssistant, entry: MockConfigEntry) -> dict[str, Any]:
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_DEVICE), context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "user"
    return dict(result)


async def test_add_device_then_it_connects(
    hass: HomeAssistant, setup_integration: MockConfigEntry, hass_client_no_auth: Any
) -> None:
    mac = "AA-BB-CC-00-11-22"
    result = await start_device_flow(hass, setup_integration)
    result = dict(
        await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: mac, "name": " Hall "})
    )
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "credentials"
    placeholders = result["description_placeholders"]
    token = placeholders["token"]
    assert placeholders["mac"] == "aa:bb:cc:00:11:22"
    assert placeholders["url"].endswith("/api/xiaozhi_local/v1/")
    assert len(token) >= 43  # 256 bits, URL-safe base64
    assert " " not in token
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {}))
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "Hall"
    await hass.async_block_till_done()
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == "aa:bb:cc:00:11:22")
    assert sub.data == {CONF_MAC: "aa:bb:cc:00:11:22", CONF_TOKEN: token}
    # The new device is known at once (no reload) and connects with the token it was shown.
    hub = setup_integration.runtime_data
    client = await hass_client_no_auth()
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=token, mac="aa:bb:cc:00:11:22"))
    await device.connect()
    await hub.devices["aa:bb:cc:00:11:22"].async_wait_ready(5)
    await device.drop()
    await hub.async_wait_no_connections()


async def test_add_device_default_name(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await start_device_flow(hass, setup_integration)
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: "aabbcc001122"}))
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {}))
    assert result["title"] == "Xiaozhi aa:bb:cc:00:11:22"


async def test_tokens_differ(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    tokens = set()
    for mac in ("aabbcc001122", "aabbcc001123"):
        result = await start_device_flow(hass, setup_integration)
        result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: mac}))
        tokens.add(result["description_placeholders"]["token"])
    assert len(tokens) == 2


@pytest.mark.parametrize("mac", ["", "cc:ba:97", "not a mac", "gg:ba:97:04:92:94"])
async def test_invalid_mac_then_fixed(hass: HomeAssistant, setup_integration: MockConfigEntry, mac: str) -> None:
    result = await start_device_flow(hass, setup_integration)
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: mac}))
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {CONF_MAC: "invalid_mac"}
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: "aabbcc001122"}))
    assert result["step_id"] == "credentials"


async def test_duplicate_mac(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await start_device_flow(hass, setup_integration)
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: MAC.upper()}))
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "already_configured"


@pytest.mark.parametrize(
    ("config", "url"),
    [
        ({"internal_url": "https://ha.lan:8443"}, "wss://ha.lan:8443/api/xiaozhi_local/v1/"),
        ({"internal_url": "http://10.0.0.2:8123"}, "ws://10.0.0.2:8123/api/xiaozhi_local/v1/"),
        ({}, "ws://homeassistant.local:8123/api/xiaozhi_local/v1/"),
    ],
)
async def test_websocket_url(hass: HomeAssistant, config: dict[str, str], url: str) -> None:
    await async_process_ha_core_config(hass, config)
    assert websocket_url(hass) == url
