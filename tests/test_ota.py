"""The OTA endpoint and spoken-code pairing, end to end with the simulated firmware."""

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers import device_registry as dr
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.admission.pairing import MAX_PENDING, MAX_PER_SOURCE
from custom_components.xiaozhi_local.const import CONF_WEBSOCKET_URL, DOMAIN, OTA_PATH, WS_PATH
from xiaozhi_sim import OtaTiming, SimulatedDevice, SimulatorOptions

from .conftest import CLIENT_ID, FAST, MAC, TOKEN, ota_url, wait_for, ws_url
from .helpers import HTTP_BAN, logged_by, placeholders_of, start_reconfigure
from .internals import hub_of

NEW_MAC = "aa:bb:cc:00:11:22"


def ota_headers(mac: str = NEW_MAC, language: str = "en-US", client_id: str = CLIENT_ID) -> dict[str, str]:
    """The firmware's headers; by default with the identity the device ``MAC`` paired with."""
    return {
        "Activation-Version": "1",
        "Device-Id": mac,
        "Client-Id": client_id,
        "User-Agent": "bread-compact-wifi/2.4.2",
        "Accept-Language": language,
        "Content-Type": "application/json",
    }


@pytest.fixture
async def hub_url(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> str:
    """Devices are told the test server's WebSocket URL (the hub option)."""
    hass.config_entries.async_update_entry(
        setup_integration, options={CONF_WEBSOCKET_URL: ws_url(client), "mqtt": False}
    )
    await hass.async_block_till_done()
    return ws_url(client)


def new_device(**kwargs: Any) -> SimulatedDevice:
    options: dict[str, Any] = {"url": "", "mac": NEW_MAC, "language": "en-US"} | kwargs
    return SimulatedDevice(SimulatorOptions(**options))


async def pair_by_spoken_code(hass: HomeAssistant, spoken: asyncio.Queue[str]) -> None:
    """The user types the code the device said into its discovered-device card."""
    code = await asyncio.wait_for(spoken.get(), 10)
    await hass.async_block_till_done()
    flow = hass.config_entries.flow.async_progress_by_handler(DOMAIN)[0]
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["reason"] == "pairing_successful"


@pytest.mark.parametrize("flavor", ["py-xiaozhi", "xiaozhi-sdk"])
async def test_clients_that_do_not_ask_again_connect_right_after_pairing(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str, flavor: str
) -> None:
    """py-xiaozhi and xiaozhi-sdk activate, then connect with the settings of the answer that
    carried the code (py-xiaozhi turns an empty token into "test-token"): that answer's token is
    the one the device has once paired."""
    device = new_device(flavor=flavor)
    spoken: asyncio.Queue[str] = asyncio.Queue()
    boot = asyncio.create_task(device.boot(ota_url(client), FAST, on_code=lambda code, _m: spoken.put_nowait(code)))
    await pair_by_spoken_code(hass, spoken)
    answer = await asyncio.wait_for(boot, 10)
    assert device.ota is not None
    assert device.ota.log.checks == 1  # it did not ask again
    assert "activation" in answer
    assert device.options.token == answer["websocket"]["token"] != "test-token"
    await device.connect()
    hub = hub_of(setup_integration)
    await hub.devices[NEW_MAC].async_wait_ready(5)
    assert hub.devices[NEW_MAC].tools
    await device.drop()


async def test_a_client_that_waits_for_its_code_over_websocket_is_told_it(
    hass: HomeAssistant,
    ready: Any,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """xiaozhi-sdk connects with the token of the answer that carried the code, before the code is
    typed, and expects to be told the code: a session that says it (shown and spoken) and closes.
    Nothing else: no MCP, no pipeline, no device; and it is not counted as a guess."""
    resp = await client.post(OTA_PATH, data=json.dumps({"version": 2}), headers=ota_headers())
    answer = await resp.json()
    code, token = answer["activation"]["code"], answer["websocket"]["token"]
    sdk = SimulatedDevice(
        SimulatorOptions(url=hub_url, token=token, mac=NEW_MAC, client_id=CLIENT_ID, flavor="xiaozhi-sdk")
    )
    await sdk.connect()
    await sdk.wait_closed()
    said = [m["text"] for m in sdk.log if m.get("state") == "sentence_start"]
    assert said
    assert code in said[0]
    assert [m.get("state") for m in sdk.log if m["type"] == "tts"][-1] == "stop"
    assert sdk.audio  # spoken by the assistant's text-to-speech
    assert sdk.mcp_requests == []
    hub = hub_of(setup_integration)
    assert NEW_MAC not in hub.devices
    assert logged_by(caplog, HTTP_BAN) == ""  # no failed login
    # Another MAC presenting that token is a guess, as before.
    other = SimulatedDevice(SimulatorOptions(url=hub_url, token=token, mac="aa:bb:cc:00:11:99", flavor="xiaozhi-sdk"))
    with pytest.raises(Exception, match="401"):
        await other.connect()
    # Once the code is typed, the same token is the device's.
    flow = hass.config_entries.flow.async_progress_by_handler(DOMAIN)[0]
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["reason"] == "pairing_successful"
    sdk = SimulatedDevice(
        SimulatorOptions(url=hub_url, token=token, mac=NEW_MAC, client_id=CLIENT_ID, flavor="xiaozhi-sdk")
    )
    await sdk.connect()
    await hub.devices[NEW_MAC].async_wait_ready(5)
    await sdk.drop()


async def test_whole_journey(
    hass: HomeAssistant,
    device_registry: dr.DeviceRegistry,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
) -> None:
    hub = hub_of(setup_integration)
    device = new_device(board="bread-compact-wifi")
    spoken: asyncio.Queue[str] = asyncio.Queue()
    boot = asyncio.create_task(device.boot(ota_url(client), FAST, on_code=lambda code, _m: spoken.put_nowait(code)))
    code = await asyncio.wait_for(spoken.get(), 10)
    assert device.ota is not None
    assert device.ota.log.shown[0] == (f"Enter {code} in Home Assistant", code)
    # Every answer names the URL, and the token it will have once paired (it opens nothing before).
    pending_token = device.ota.log.responses[0]["websocket"]["token"]
    assert device.ota.log.responses[0]["websocket"] == {"url": hub_url, "token": pending_token, "version": 1}
    assert len(pending_token) >= 32
    await hass.async_block_till_done()
    # The discovered-device card, at once.
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert len(flows) == 1
    flow = flows[0]
    assert flow["context"]["title_placeholders"] == {
        "board": "bread-compact-wifi",
        "mac": NEW_MAC,
        "name": f"Xiaozhi bread-compact-wifi ({NEW_MAC})",
    }
    assert flow["step_id"] == "pair"
    # Until the code is entered, /activate says 202 (to this device: its MAC and Client-Id).
    resp = await client.post(OTA_PATH + "activate", data="{}", headers=ota_headers(client_id=device.options.client_id))
    assert resp.status == 202
    wrong = "000000" if code != "000000" else "111111"
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": wrong})
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {"code": "invalid_code"}
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code, "name": "Kids' room"})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "pairing_successful"
    # The device's next check gets its WebSocket settings.
    answer = await asyncio.wait_for(boot, 10)
    assert device.ota.log.activations[-1] == 200
    assert set(answer) == {"server_time", "websocket"}
    assert set(answer["websocket"]) == {"url", "token", "version"}
    assert set(answer["server_time"]) == {"timestamp", "timezone_offset"}
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == NEW_MAC)
    assert sub.title == "Kids' room"
    token = hub_of(setup_integration).devices[NEW_MAC].token
    assert answer["websocket"] == {"url": hub_url, "token": token, "version": 1}
    assert token == pending_token
    assert sub.data["client_id"] == device.options.client_id
    assert device.nvs == {"websocket": answer["websocket"]}
    # It connects and appears with its tools.
    await device.connect()
    xdev = hub.devices[NEW_MAC]
    await xdev.async_wait_ready(5)
    assert "self.audio_speaker.set_volume" in xdev.tools
    entry = device_registry.async_get(xdev.device_id)
    assert isinstance(entry, dr.DeviceEntry)
    assert (entry.name, entry.model, entry.sw_version, entry.hw_version) == (
        "Kids' room",
        "bread-compact-wifi",
        "2.4.2",
        "esp32s3",
    )
    assert (dr.CONNECTION_NETWORK_MAC, NEW_MAC) in entry.connections
    assert hass.config_entries.flow.async_progress_by_handler(DOMAIN) == []
    assert len(hub.admission.pairing) == 0
    await device.drop()


async def test_pair_with_add_device(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    device = new_device(language="zh-CN")
    spoken: asyncio.Queue[str] = asyncio.Queue()
    boot = asyncio.create_task(device.boot(ota_url(client), FAST, on_code=lambda code, _m: spoken.put_nowait(code)))
    code = await asyncio.wait_for(spoken.get(), 10)
    assert device.ota is not None
    assert device.ota.log.shown[0][0] == f"请在 Home Assistant 中输入 {code}"
    await hass.async_block_till_done()
    result = await hass.config_entries.subentries.async_init(
        (setup_integration.entry_id, "device"), context={"source": "user"}
    )
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {"next_step_id": "code"})
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {"code": code})
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == f"Xiaozhi {NEW_MAC}"
    await hass.async_block_till_done()
    answer = await asyncio.wait_for(boot, 10)
    assert answer["websocket"]["token"] == result["data"]["token"]
    # The discovered-device card went away with the pairing.
    assert hass.config_entries.flow.async_progress_by_handler(DOMAIN) == []


async def test_paired_device_gets_settings_at_once(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    device = new_device(mac=MAC.upper().replace(":", "-"), client_id=CLIENT_ID)  # any MAC spelling
    device.options.mac = MAC  # the firmware sends it lower-case; the header spelling is tested below
    answer = await device.boot(ota_url(client), FAST)
    assert answer["websocket"] == {"url": hub_url, "token": TOKEN, "version": 1}
    assert device.ota is not None
    assert device.ota.log.checks == 1
    assert device.ota.log.activations == []
    for url in (OTA_PATH, OTA_PATH.rstrip("/")):
        resp = await client.post(url, json={}, headers=ota_headers(MAC.upper().replace(":", "-")))
        assert resp.status == 200
        assert set(await resp.json()) == {"server_time", "websocket"}
    resp = await client.post(OTA_PATH + "activate/", data="{}", headers=ota_headers(MAC))
    assert (resp.status, await resp.json()) == (200, {"status": "activated"})


async def test_registry_follows_the_ota_body(
    hass: HomeAssistant,
    device_registry: dr.DeviceRegistry,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    xdev = hub_of(setup_integration).devices[MAC]
    body = {"application": {"version": "2.4.2"}, "board": {"type": "bread-compact-wifi"}, "chip_model_name": "esp32s3"}
    await client.post(OTA_PATH, json=body, headers=ota_headers(MAC))
    entry = device_registry.async_get(xdev.device_id)
    assert isinstance(entry, dr.DeviceEntry)
    assert (entry.model, entry.sw_version, entry.hw_version) == ("bread-compact-wifi", "2.4.2", "esp32s3")
    body["application"] = {"version": "2.5.0"}
    await client.post(OTA_PATH, json=body, headers=ota_headers(MAC))
    entry = device_registry.async_get(xdev.device_id)
    assert isinstance(entry, dr.DeviceEntry)
    assert entry.sw_version == "2.5.0"


@pytest.mark.parametrize(
    ("body", "headers", "status", "error"),
    [
        (b"{not json", None, 400, "body is not valid JSON"),
        (b"[1, 2]", None, 400, "body must be a JSON object"),
        (b'"text"', None, 400, "body must be a JSON object"),
        (b"{}", {"Device-Id": "nope"}, 400, "Device-Id header missing or not a MAC address"),
        (b"{}", {}, 400, "Device-Id header missing or not a MAC address"),
        (b"x" * 70_000, None, 413, "body larger than 65536 bytes"),
    ],
)
async def test_malformed_requests(
    hass: HomeAssistant,
    client: TestClient[Any, Any],
    body: bytes,
    headers: dict[str, str] | None,
    status: int,
    error: str,
) -> None:
    hub = hub_of(hass)
    resp = await client.post(OTA_PATH, data=body, headers=ota_headers() if headers is None else headers)
    assert resp.status == status
    assert await resp.json() == {"error": error}
    assert len(hub.admission.pairing) == 0  # nothing stored
    assert hass.config_entries.flow.async_progress_by_handler(DOMAIN) == []


async def test_chunked_oversized_body(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b" " * 10_000

    resp = await client.post(OTA_PATH, data=chunks(), headers=ota_headers())
    assert resp.status == 413


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b'{"mac_address": 5, "board": [], "application": {"version": 2}, "extra": {"deep": [1, 2]}}',
        b'{"version": 2, "language": "en-US"}',
    ],
)
async def test_odd_but_acceptable_bodies(hass: HomeAssistant, client: TestClient[Any, Any], body: bytes) -> None:
    headers = ota_headers()
    del headers["Activation-Version"]
    resp = await client.post(OTA_PATH, data=body, headers=headers)
    assert resp.status == 200
    answer = await resp.json()
    assert set(answer) == {"server_time", "websocket", "activation"}
    assert len(answer["websocket"]["token"]) >= 32  # the token its code would give it
    assert set(answer["activation"]) == {"code", "message", "challenge", "timeout_ms"}


async def test_device_id_from_body_when_header_missing(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    body = {"mac_address": MAC.upper(), "uuid": CLIENT_ID}  # the body's uuid is the Client-Id
    resp = await client.post(OTA_PATH, json=body, headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert (await resp.json())["websocket"]["token"] == TOKEN


async def test_activate_for_unknown_device(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    resp = await client.post(OTA_PATH + "activate", data="{}", headers=ota_headers())
    assert resp.status == 404
    assert "error" in await resp.json()
    resp = await client.post(OTA_PATH + "activate", data="{bad", headers=ota_headers())
    assert resp.status == 400


async def test_strangers_flood_leaves_bounded_state(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    hub = hub_of(hass)
    for i in range(MAX_PENDING * 3):
        resp = await client.post(OTA_PATH, data=b"", headers=ota_headers(f"02:00:00:00:{i // 256:02x}:{i % 256:02x}"))
        assert resp.status == 200
    await hass.async_block_till_done()
    assert len(hub.admission.pairing) == MAX_PER_SOURCE  # one address holds only so many
    assert len(hass.config_entries.flow.async_progress_by_handler(DOMAIN)) <= MAX_PER_SOURCE
    assert len(hub.devices) == 2  # nobody got in


async def test_accept_without_code(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    hass.config_entries.async_update_entry(
        setup_integration, options={"accept_without_code": True, CONF_WEBSOCKET_URL: ws_url(client), "mqtt": False}
    )
    await hass.async_block_till_done()
    device = new_device()
    answer = await device.boot(ota_url(client), FAST)
    assert set(answer) == {"server_time", "websocket"}
    assert "without a code" in caplog.text
    assert answer["websocket"]["token"] == hub_of(setup_integration).devices[NEW_MAC].token
    await device.connect()
    await hub_of(setup_integration).devices[NEW_MAC].async_wait_ready(5)
    await device.drop()


async def test_token_regeneration(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    device = new_device(mac=MAC, client_id=CLIENT_ID)
    await device.boot(ota_url(client), FAST)
    await device.connect()
    xdev = hub_of(setup_integration).devices[MAC]
    await xdev.async_wait_ready(5)
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    result = await start_reconfigure(hass, setup_integration, sub.subentry_id)
    assert result["step_id"] == "reconfigure"
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {})
    assert result["step_id"] == "new_token"
    new_token = placeholders_of(result)["token"]
    assert new_token != TOKEN
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "token_regenerated"
    await hass.async_block_till_done()
    await device.wait_closed()  # the session opened with the old token ends
    resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
    assert resp.status == 401
    # The next boot brings the new token, and it works.
    reboot = new_device(mac=MAC, client_id=CLIENT_ID)
    answer = await reboot.boot(ota_url(client), FAST)
    assert answer["websocket"]["token"] == new_token
    await reboot.connect()
    await wait_for(xdev, lambda d: d.link is not None)
    await reboot.drop()


async def test_removed_device_is_refused_and_can_pair_again(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    device = new_device(mac=MAC, client_id=CLIENT_ID)
    await device.boot(ota_url(client), FAST)
    await device.connect()
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    hass.config_entries.async_remove_subentry(setup_integration, sub.subentry_id)
    await hass.async_block_till_done()
    await device.wait_closed()
    resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
    assert resp.status == 401
    resp = await client.post(OTA_PATH, json={}, headers=ota_headers(MAC))
    answer = await resp.json()
    assert "activation" in answer
    assert answer["websocket"]["token"] != TOKEN  # a new one, for its code


async def test_firmware_gives_up_after_failed_checks(hass: HomeAssistant, client: TestClient[Any, Any]) -> None:
    from xiaozhi_sim import OtaError

    device = new_device()
    with pytest.raises(OtaError):
        await device.boot(
            str(client.make_url("/api/nothing/here/")), OtaTiming(check_retry_base=0.001, check_attempts=3)
        )
    assert device.ota is not None
    assert device.ota.log.checks == 3


async def test_endpoint_when_not_loaded(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    assert (await (await client.get(OTA_PATH)).json())["status"] == "ok"
    await hass.config_entries.async_unload(setup_integration.entry_id)
    resp = await client.post(OTA_PATH, json={}, headers=ota_headers())
    assert resp.status == 404
    assert json.loads(await resp.text()) == {"error": "Xiaozhi Local is not set up"}


async def test_device_info_from_ota_is_not_overwritten_by_server_info(
    hass: HomeAssistant,
    device_registry: dr.DeviceRegistry,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
) -> None:
    """An SDK names itself in serverInfo (or names nothing): the board and version OTA reported stay."""
    device = new_device(mac=MAC, client_id=CLIENT_ID, board="bread-compact-wifi", firmware_version="2.4.2")
    await device.boot(ota_url(client), FAST)
    device.mcp.board_name, device.mcp.firmware_version = "", "0.5.1"  # an SDK's own version, no board
    await device.connect()
    xdev = hub_of(setup_integration).devices[MAC]
    await xdev.async_wait_ready(5)
    entry = device_registry.async_get(xdev.device_id)
    assert isinstance(entry, dr.DeviceEntry)
    assert (entry.model, entry.sw_version) == ("bread-compact-wifi", "2.4.2")
    await device.drop()
