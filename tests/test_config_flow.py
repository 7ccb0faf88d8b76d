"""The hub flow, discovered-device pairing, hub options, and the "Add device" subentry flow."""

from typing import Any

from homeassistant.config_entries import SOURCE_IGNORE, SOURCE_INTEGRATION_DISCOVERY, SOURCE_USER
from homeassistant.const import CONF_MAC, CONF_TOKEN
from homeassistant.core import HomeAssistant
from homeassistant.core_config import async_process_ha_core_config
from homeassistant.data_entry_flow import FlowResultType
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

from custom_components.xiaozhi_local.admission.pairing import LOCKOUT, MAX_FAILURES
from custom_components.xiaozhi_local.admission.reports import DeviceReport
from custom_components.xiaozhi_local.admission.urls import ota_url, websocket_url
from custom_components.xiaozhi_local.const import DOMAIN, SUBENTRY_DEVICE
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import CLIENT_ID, MAC, TOKEN, ws_url
from .helpers import placeholders_of, start_reconfigure
from .internals import hub_of

NEW_MAC = "aa:bb:cc:00:11:22"


def wrong(code: str) -> str:
    return "000000" if code != "000000" else "111111"


# -- the hub -------------------------------------------------------------------------------


async def test_hub_flow(hass: HomeAssistant) -> None:
    await async_process_ha_core_config(hass, {"internal_url": "http://192.168.1.10:8123"})
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "user"
    assert result["description_placeholders"] == {"ota_url": "http://192.168.1.10:8123/api/xiaozhi_local/ota/"}
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "Xiaozhi Local"
    assert result["data"] == {}
    await hass.async_block_till_done()
    assert hub_of(hass).devices == {}


async def test_single_instance(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "single_instance_allowed"
    assert result["description_placeholders"] == {"ota_url": ota_url(hass)}  # where devices are added instead


async def test_ignored_device_does_not_block_the_hub(hass: HomeAssistant) -> None:
    MockConfigEntry(domain=DOMAIN, source=SOURCE_IGNORE, unique_id=NEW_MAC).add_to_hass(hass)
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.FORM


# -- discovered devices ----------------------------------------------------------------------


async def discover(hass: HomeAssistant, entry: MockConfigEntry, mac: str = NEW_MAC) -> tuple[dict[str, Any], str]:
    """An unknown device's OTA request, as the endpoint handles it; returns its flow and code."""
    pending = hub_of(entry).admission.async_request_pairing(mac, DeviceReport(board="atoms3r", client_id="cid"))
    await hass.async_block_till_done()
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN, match_context={"unique_id": mac})
    assert len(flows) == 1
    return dict(flows[0]), pending.code


async def test_discovered_device_pairs(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    flow, code = await discover(hass, setup_integration)
    assert flow["context"]["title_placeholders"] == {
        "board": "atoms3r",
        "mac": NEW_MAC,
        "name": f"Xiaozhi atoms3r ({NEW_MAC})",
    }
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": wrong(code)})
    assert result["errors"] == {"code": "invalid_code"}
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "pairing_successful"
    assert result["description_placeholders"] == {"name": f"Xiaozhi {NEW_MAC}"}
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == NEW_MAC)
    assert sub.data[CONF_MAC] == NEW_MAC
    assert sub.data["client_id"] == "cid"
    await hass.async_block_till_done()
    assert CONF_TOKEN not in sub.data  # kept once, in the private journal
    assert len(hub_of(setup_integration).devices[NEW_MAC].token) >= 43


async def test_discovered_device_lockout(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    flow, code = await discover(hass, setup_integration)
    for _ in range(MAX_FAILURES - 1):
        result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": wrong(code)})
        assert result["errors"] == {"code": "invalid_code"}
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": wrong(code)})
    assert result["errors"] == {"code": "code_locked"}
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["errors"] == {"code": "code_locked"}
    pairing = hub_of(setup_integration).admission.pairing
    now = pairing.clock()
    pairing.clock = lambda: now + LOCKOUT  # the lock is over; the code is still valid
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "pairing_successful"


async def test_discovered_device_code_expired(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    flow, code = await discover(hass, setup_integration)
    hub_of(setup_integration).admission.pairing.remove(NEW_MAC)  # as if its code expired
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "not_pending"


async def test_expired_codes_close_their_cards(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    pairing = hub_of(setup_integration).admission.pairing
    await discover(hass, setup_integration)
    pairing.code_ttl = 0  # everything pending is now expired
    assert pairing.for_mac(NEW_MAC) == []
    await hass.async_block_till_done()
    assert hass.config_entries.flow.async_progress_by_handler(DOMAIN) == []


@pytest.mark.parametrize(("mac", "reason"), [(MAC, "not_pending"), ("aa:bb:cc:00:11:99", "already_configured")])
async def test_discovery_aborts(hass: HomeAssistant, setup_integration: MockConfigEntry, mac: str, reason: str) -> None:
    MockConfigEntry(domain=DOMAIN, source=SOURCE_IGNORE, unique_id="aa:bb:cc:00:11:99").add_to_hass(hass)
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_INTEGRATION_DISCOVERY}, data={CONF_MAC: mac, "board": ""}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == reason


async def test_discovery_when_not_loaded(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    flow, code = await discover(hass, setup_integration)
    await hass.config_entries.async_unload(setup_integration.entry_id)
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["reason"] == "not_loaded"
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_INTEGRATION_DISCOVERY}, data={CONF_MAC: NEW_MAC}
    )
    assert result["reason"] == "not_loaded"


# -- hub options ----------------------------------------------------------------------------


async def test_options(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    hub = hub_of(setup_integration)
    assert not hub_of(setup_integration).admission.accept_without_code  # (a call: mypy keeps no narrowing)
    assert hub.websocket_url() == websocket_url(hass)
    result = await hass.config_entries.options.async_init(setup_integration.entry_id)
    assert result["type"] is FlowResultType.FORM
    assert placeholders_of(result)["ota_url"] == ota_url(hass)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {"accept_without_code": True, "websocket_url": "http://wrong", "firmware": {}}
    )
    assert result["errors"] == {"websocket_url": "invalid_websocket_url"}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"],
        {
            "accept_without_code": True,
            "websocket_url": " ws://10.0.0.2:8123/api/xiaozhi_local/v1/ ",
            "silence_timeout": 45,
            "idle_timeout": 600,
            "mqtt": False,  # (on, it would bind the real port 1885 here)
            "firmware": {"firmware_vendor": False, "firmware_releases": False},
        },
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert setup_integration.options["idle_timeout"] == 600
    assert hub.admission.accept_without_code
    assert hub.websocket_url() == "ws://10.0.0.2:8123/api/xiaozhi_local/v1/"
    assert setup_integration.options["silence_timeout"] == 45
    result = await hass.config_entries.options.async_init(setup_integration.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {"accept_without_code": False, "mqtt": False, "firmware": {}}
    )
    assert setup_integration.options == {
        "firmware_vendor": False,
        "firmware_releases": False,
        "wake_word_models": False,
        "accept_without_code": False,
        "new_devices_per_hour": 10,
        "websocket_url": "",
        "silence_timeout": 20,
        "idle_timeout": 300,
        "nearest_answers": True,
        "nearest_by_area": False,
        "ai_task_entity": "",
        "mqtt": False,
        "mqtt_port": 1885,
        "udp_port": 1885,
    }
    assert hub.websocket_url() == websocket_url(hass)
    # Port 8883 would make devices speak TLS to an endpoint that has none.
    result = await hass.config_entries.options.async_init(setup_integration.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {"accept_without_code": False, "mqtt_port": 8883, "firmware": {}}
    )
    assert result["errors"] == {"mqtt_port": "tls_port"}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {"accept_without_code": False, "mqtt": False, "firmware": {}}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert hub.mqtt is None


async def test_firmware_source_options(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    """Both remote sources are off until turned on; an address is stored only when it is not the default."""
    hub = hub_of(setup_integration)
    assert (hub.firmware.catalog.vendor, hub.firmware.catalog.releases) == (None, None)
    result = await hass.config_entries.options.async_init(setup_integration.entry_id)
    schema = result["data_schema"]
    assert schema is not None
    section = schema.schema["firmware"]
    assert section.options == {"collapsed": True}
    suggested = {str(key): key.description for key in section.schema.schema}
    assert suggested["firmware_vendor_url"] == {"suggested_value": "https://api.tenclass.net/xiaozhi/ota/"}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {"mqtt": False, "firmware": {"firmware_vendor": True, "firmware_vendor_url": "ftp://x"}}
    )
    assert result["errors"] == {"firmware": "invalid_firmware_url"}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"],
        {
            "mqtt": False,
            "firmware": {
                "firmware_vendor": True,
                "firmware_vendor_url": "https://api.tenclass.net/xiaozhi/ota/",
                "firmware_releases": True,
                "firmware_releases_url": " http://127.0.0.1:9/releases ",
            },
        },
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert setup_integration.options["firmware_vendor"] is True
    assert "firmware_vendor_url" not in setup_integration.options  # the default is not stored
    assert setup_integration.options["firmware_releases_url"] == "http://127.0.0.1:9/releases"
    await hass.async_block_till_done()
    assert hub.firmware.catalog.vendor is not None
    assert hub.firmware.catalog.vendor.url == "https://api.tenclass.net/xiaozhi/ota/"
    assert hub.firmware.catalog.releases is not None
    assert hub.firmware.catalog.releases.url == "http://127.0.0.1:9/releases"
    # Shown again as stored.
    result = await hass.config_entries.options.async_init(setup_integration.entry_id)
    schema = result["data_schema"]
    assert schema is not None
    section = schema.schema["firmware"]
    suggested = {str(key): key.description for key in section.schema.schema}
    assert suggested["firmware_releases"] == {"suggested_value": True}
    assert suggested["firmware_releases_url"] == {"suggested_value": "http://127.0.0.1:9/releases"}


# -- "Add device" ---------------------------------------------------------------------------


async def start_device_flow(hass: HomeAssistant, entry: MockConfigEntry, how: str) -> dict[str, Any]:
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_DEVICE), context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.MENU
    assert result["menu_options"] == ["code", "manual"]
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {"next_step_id": how})
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == how
    return dict(result)


async def test_add_device_by_code(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    _flow, code = await discover(hass, setup_integration)
    result = await start_device_flow(hass, setup_integration, "code")
    assert result["description_placeholders"] == {"ota_url": ota_url(hass)}
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {"code": wrong(code)}))
    assert result["errors"] == {"code": "invalid_code"}
    result = dict(
        await hass.config_entries.subentries.async_configure(
            result["flow_id"], {"code": f"{code[:3]}-{code[3:]}", "name": "Hall"}
        )
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "Hall"
    assert result["data"][CONF_MAC] == NEW_MAC
    assert result["data"]["client_id"] == "cid"
    await hass.async_block_till_done()
    assert NEW_MAC in hub_of(setup_integration).devices
    assert len(hub_of(setup_integration).admission.pairing) == 0
    assert hass.config_entries.flow.async_progress_by_handler(DOMAIN) == []  # its card is gone


async def test_add_device_by_code_lockout(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    _flow, code = await discover(hass, setup_integration)
    result = await start_device_flow(hass, setup_integration, "code")
    for _ in range(MAX_FAILURES):
        result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {"code": wrong(code)}))
    assert result["errors"] == {"code": "code_locked"}
    pairing = hub_of(setup_integration).admission.pairing
    pairing.clock = lambda: 1e12 + LOCKOUT  # time passes
    pairing.code_ttl = 1e13
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {"code": code}))
    assert result["type"] is FlowResultType.CREATE_ENTRY


async def test_add_device_by_code_for_a_paired_mac(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    """The code of a paired MAC with a new identity (a reset device): it takes over, with a new token."""
    code = hub_of(setup_integration).admission.pairing.request(MAC, DeviceReport(client_id="reset"))[0].code
    result = await start_device_flow(hass, setup_integration, "code")
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {"code": code}))
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "paired_again"
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    assert sub.data["client_id"] == "reset"
    assert hub_of(setup_integration).devices[MAC].token != TOKEN
    assert sub.title == "Kitchen"


async def test_add_device_by_code_not_loaded(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await start_device_flow(hass, setup_integration, "code")
    await hass.config_entries.async_unload(setup_integration.entry_id)
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {"code": "123456"}))
    assert result["reason"] == "not_loaded"


async def test_add_device_by_mac_then_it_connects(
    hass: HomeAssistant, setup_integration: MockConfigEntry, hass_client_no_auth: ClientSessionGenerator
) -> None:
    mac = "AA-BB-CC-00-11-22"
    result = await start_device_flow(hass, setup_integration, "manual")
    result = dict(
        await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: mac, "name": " Hall "})
    )
    assert result["step_id"] == "credentials"
    placeholders = result["description_placeholders"]
    token = placeholders["token"]
    assert placeholders["mac"] == NEW_MAC
    assert placeholders["url"] == websocket_url(hass)
    assert placeholders["ota_url"] == ota_url(hass)
    assert len(token) >= 43
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {}))
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "Hall"
    await hass.async_block_till_done()
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == NEW_MAC)
    assert sub.data == {CONF_MAC: NEW_MAC}
    hub = hub_of(setup_integration)
    assert hub.devices[NEW_MAC].token == token
    client = await hass_client_no_auth()
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=token, mac=NEW_MAC))
    await device.connect()
    await hub.devices[NEW_MAC].async_wait_ready(5)
    await device.drop()
    await hub.async_wait_no_connections()


async def test_add_device_by_mac_default_name(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await start_device_flow(hass, setup_integration, "manual")
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: "aabbcc001122"}))
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {}))
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == f"Xiaozhi {NEW_MAC}"


@pytest.mark.parametrize("mac", ["", "cc:ba:97", "not a mac", "gg:ba:97:04:92:94"])
async def test_invalid_mac_then_fixed(hass: HomeAssistant, setup_integration: MockConfigEntry, mac: str) -> None:
    result = await start_device_flow(hass, setup_integration, "manual")
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: mac}))
    assert result["errors"] == {CONF_MAC: "invalid_mac"}
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: "aabbcc001122"}))
    assert result["step_id"] == "credentials"
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {}))
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "Xiaozhi aa:bb:cc:00:11:22"


async def test_duplicate_mac(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    result = await start_device_flow(hass, setup_integration, "manual")
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: MAC.upper()}))
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "already_configured"


async def test_regenerate_token(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    hub = hub_of(setup_integration)
    old = hub.devices[MAC].token
    result = await start_reconfigure(hass, setup_integration, sub.subentry_id)
    assert result["step_id"] == "reconfigure"
    assert result["description_placeholders"] == {"name": "Kitchen"}
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {})
    assert result["step_id"] == "new_token"
    token = placeholders_of(result)["token"]
    assert token != old
    await hass.async_block_till_done()
    assert hub.devices[MAC].token == old  # not changed before Submit
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {})
    assert result["reason"] == "token_regenerated"
    assert result.get("translation_domain") is None  # our own, translated text (not HA's generic one)
    await hass.async_block_till_done()
    assert setup_integration.subentries[sub.subentry_id].data == {CONF_MAC: MAC, "client_id": CLIENT_ID}
    assert hub.devices[MAC].token == token
    record = hub.identities.get(MAC)
    assert record is not None
    assert record.token == token


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
    assert ota_url(hass) == url.replace("ws", "http", 1).replace("/v1/", "/ota/")


async def test_dialogs_show_the_url_devices_really_get(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    """With the hub's WebSocket URL option set, "Enter a MAC address" and "Regenerate token" show it."""
    url = "ws://192.0.2.5:8123/api/xiaozhi_local/v1/"
    hass.config_entries.async_update_entry(setup_integration, options={"websocket_url": url})
    await hass.async_block_till_done()
    result = await start_device_flow(hass, setup_integration, "manual")
    result = dict(await hass.config_entries.subentries.async_configure(result["flow_id"], {CONF_MAC: "aabbcc001122"}))
    assert placeholders_of(result)["url"] == url
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    again = await start_reconfigure(hass, setup_integration, sub.subentry_id)
    again = await hass.config_entries.subentries.async_configure(again["flow_id"], {})
    assert placeholders_of(again)["url"] == url
