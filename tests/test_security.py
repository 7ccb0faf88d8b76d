"""Who gets a token, and who is refused how: a neighbour on the LAN cannot take over a device.

Every test goes through the real endpoints, with the firmware simulator where a device acts.
"""

import asyncio
from collections.abc import AsyncIterator
import json
import logging
from pathlib import Path
from types import MappingProxyType
from typing import Any
from unittest.mock import patch

from aiohttp import ClientSession, TCPConnector
from aiohttp.test_utils import TestClient
from homeassistant.components.http.ban import KEY_FAILED_LOGIN_ATTEMPTS
from homeassistant.config_entries import (
    SOURCE_INTEGRATION_DISCOVERY,
    ConfigEntryState,
    ConfigSubentry,
    ConfigSubentryData,
)
from homeassistant.const import CONF_CLIENT_ID, CONF_MAC
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.admission.gate import Refused
from custom_components.xiaozhi_local.admission.identities import token_hash
from custom_components.xiaozhi_local.admission.pairing import MAX_PER_SOURCE
from custom_components.xiaozhi_local.const import (
    CONF_WEBSOCKET_URL,
    DEFAULT_NEW_PER_HOUR as AUTO_PAIR_PER_HOUR,
    DOMAIN,
    OTA_PATH,
    SUBENTRY_DEVICE,
    WS_PATH,
)
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import CLIENT_ID, FAST, MAC, TOKEN, device_subentry, ota_url, wait_for, ws_url
from .helpers import HTTP_BAN, logged_by, logged_by_us, regenerate
from .internals import hub_of
from .test_ota import NEW_MAC, ota_headers

STRANGER = "5f0e0000-0000-4000-8000-00000000dead"


@pytest.fixture
def journal_on_disk() -> dict[str, Any] | None:
    """The identity journal as Home Assistant finds it at start (tests parametrize it)."""
    return None


@pytest.fixture
async def setup_integration(
    hass: HomeAssistant,
    config_entry: MockConfigEntry,
    hass_storage: dict[str, Any],
    journal_on_disk: dict[str, Any] | None,
) -> AsyncIterator[MockConfigEntry]:
    """The integration, with HA's IP ban on as users run it (five failed logins ban an address)."""
    if journal_on_disk is not None:
        hass_storage[f"{DOMAIN}.{config_entry.entry_id}.identities"] = {
            "version": 1,
            "minor_version": 1,
            "key": f"{DOMAIN}.{config_entry.entry_id}.identities",
            "data": {"devices": journal_on_disk},
        }
    with patch("homeassistant.components.http.ban.IpBanManager._add_ban"):  # no ip_bans.yaml in the repo
        assert await async_setup_component(hass, "http", {"http": {"login_attempts_threshold": 5}})
        config_entry.add_to_hass(hass)
        assert await hass.config_entries.async_setup(config_entry.entry_id)
        await hass.async_block_till_done()
        yield config_entry


@pytest.fixture
async def hub_url(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> str:
    hass.config_entries.async_update_entry(
        setup_integration, options={CONF_WEBSOCKET_URL: ws_url(client), "mqtt": False}
    )
    await hass.async_block_till_done()
    return ws_url(client)


async def boot_until_code(
    device: SimulatedDevice, client: TestClient[Any, Any]
) -> tuple[asyncio.Task[dict[str, Any]], str]:
    """Boot through the OTA URL until the device speaks its code; the boot goes on (polling /activate)."""
    spoken: asyncio.Queue[str] = asyncio.Queue()
    boot = asyncio.create_task(device.boot(ota_url(client), FAST, on_code=lambda code, _m: spoken.put_nowait(code)))
    return boot, await asyncio.wait_for(spoken.get(), 10)


def firmware(client: TestClient[Any, Any], **kwargs: Any) -> SimulatedDevice:
    options: dict[str, Any] = {"url": "", "mac": MAC, "client_id": CLIENT_ID, "hello_timeout": 5} | kwargs
    return SimulatedDevice(SimulatorOptions(**options))


def failed_logins(hass: HomeAssistant) -> int:
    return sum(hass.http.app[KEY_FAILED_LOGIN_ATTEMPTS].values())


def login_notifications(hass: HomeAssistant) -> list[str]:
    from homeassistant.components import persistent_notification

    return [n for n in persistent_notification._async_get_or_create_notifications(hass) if n == "http-login"]


async def post_ota(client: TestClient[Any, Any], mac: str = MAC, client_id: str = STRANGER) -> dict[str, Any]:
    resp = await client.post(OTA_PATH, json={}, headers=ota_headers(mac, client_id=client_id))
    assert resp.status == 200
    answer: dict[str, Any] = await resp.json()
    return answer


def token_of(answer: dict[str, Any]) -> str:
    """The token in an OTA answer, as xiaozhi-sdk reads it (``answer["websocket"]["token"]``)."""
    token: str = answer["websocket"]["token"]
    return token


def pending_only(hass: HomeAssistant, mac: str, answer: dict[str, Any]) -> bool:
    """The answer carries a code and only the token its code would give: it opens no device now."""
    hub = hub_of(hass)
    token = token_of(answer)
    return "activation" in answer and hub.async_authenticate(mac, token) is Refused.PENDING


# -- who gets a token --------------------------------------------------------------------------


async def test_a_paired_mac_alone_gets_no_token(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    """The neighbour knows the MAC; it gets a code of its own and a card asks the user. Nothing else."""
    for headers in (
        ota_headers(MAC, client_id=STRANGER),
        {k: v for k, v in ota_headers(MAC).items() if k != "Client-Id"},  # no identity at all
    ):
        resp = await client.post(OTA_PATH, json={"mac_address": MAC}, headers=headers)
        answer = await resp.json()
        assert pending_only(hass, MAC, answer)
        assert TOKEN not in await resp.text()
        assert set(answer["activation"]) == {"code", "message", "challenge", "timeout_ms"}
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert flow["step_id"] == "pair_again"
    assert flow["context"]["title_placeholders"]["name"] == "Kitchen"
    # The real device is unaffected: it proves itself, gets its token and connects.
    device = firmware(client)
    answer = await device.boot(ota_url(client), FAST)
    assert answer["websocket"]["token"] == TOKEN
    await device.connect()
    xdev = hub_of(setup_integration).devices[MAC]
    await xdev.async_wait_ready(5)
    await device.drop()


async def test_pair_again_with_the_code_the_new_identity_heard(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    """A reset device (new Client-Id): the user types its code on the card; it takes over with a new token."""
    reset = firmware(client, client_id="after-factory-reset")
    boot, code = await boot_until_code(reset, client)
    # A stranger naming the same MAC meanwhile gets another code, which does not pair anything.
    stranger_code = (await post_ota(client))["activation"]["code"]
    assert stranger_code != code
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "paired_again"
    answer = await asyncio.wait_for(boot, 10)
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    assert sub.data["client_id"] == "after-factory-reset"
    assert answer["websocket"]["token"] == hub_of(setup_integration).devices[MAC].token != TOKEN
    assert sub.title == "Kitchen"  # the same device in Home Assistant: name, entities, history
    assert pending_only(hass, MAC, await post_ota(client))  # the stranger still gets nothing
    assert pending_only(hass, MAC, await post_ota(client, client_id=CLIENT_ID))  # nor the old identity
    await reset.connect()
    await wait_for(hub_of(setup_integration).devices[MAC], lambda d: d.link is not None)
    await reset.drop()


async def test_activation_v2_serial_number_is_part_of_the_identity(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    device = firmware(client, mac=NEW_MAC, client_id="v2-board", serial_number="SN-A")
    boot, code = await boot_until_code(device, client)
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert "token" in (await asyncio.wait_for(boot, 10))["websocket"]
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == NEW_MAC)
    assert (sub.data["client_id"], sub.data["serial"]) == ("v2-board", "SN-A")
    # The same Client-Id with another serial number, or none, proves nothing.
    for serial in ("SN-B", None):
        headers = ota_headers(NEW_MAC, client_id="v2-board")
        if serial:
            headers |= {"Activation-Version": "2", "Serial-Number": serial}
        answer = await (await client.post(OTA_PATH, json={}, headers=headers)).json()
        assert pending_only(hass, NEW_MAC, answer)


async def test_client_added_by_mac_binds_its_identity_when_it_connects(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    """py-xiaozhi added by MAC: once it has connected with its token, its OTA checks get that token."""
    hub = hub_of(setup_integration)
    hass.config_entries.async_add_subentry(setup_integration, _subentry(NEW_MAC, "manual-token"))
    await hass.async_block_till_done()
    # Before it has proven anything, its MAC alone gets no token.
    assert pending_only(hass, NEW_MAC, await post_ota(client, NEW_MAC, client_id="py-xiaozhi-uuid"))
    client_app = firmware(client, mac=NEW_MAC, client_id="py-xiaozhi-uuid", token="manual-token", flavor="py-xiaozhi")
    client_app.options.url = ws_url(client)
    await client_app.connect()
    await wait_for(hub.devices[NEW_MAC], lambda d: d.identity.client_id == "py-xiaozhi-uuid")
    answer = await post_ota(client, NEW_MAC, client_id="py-xiaozhi-uuid")
    assert answer["websocket"]["token"] == "manual-token"  # the token the user configured stays
    assert pending_only(hass, NEW_MAC, await post_ota(client, NEW_MAC, client_id="someone-else"))
    await client_app.drop()


async def test_client_added_by_mac_can_bind_with_its_code(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    """py-xiaozhi asks the OTA URL first: its code on the card binds it, with the token handed out
    with the code (the one it stored: it does not ask again after activating)."""
    hass.config_entries.async_add_subentry(setup_integration, _subentry(NEW_MAC, "manual-token"))
    await hass.async_block_till_done()
    pending = await post_ota(client, NEW_MAC, client_id="py-xiaozhi-uuid")
    code = pending["activation"]["code"]
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    result = await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    assert result["reason"] == "paired_again"
    answer = await post_ota(client, NEW_MAC, client_id="py-xiaozhi-uuid")
    assert answer["websocket"]["token"] == token_of(pending) != "manual-token"


def _subentry(mac: str, token: str) -> ConfigSubentry:
    """A client added by its MAC address ("Enter a MAC address"): no identity recorded."""
    return ConfigSubentry(
        data=MappingProxyType({"mac": mac, "token": token}), subentry_type="device", title="Desktop", unique_id=mac
    )


async def test_activate_tells_nobody_what_is_paired(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    answers = []
    for mac in (MAC, "aa:bb:cc:00:00:99"):
        resp = await client.post(OTA_PATH + "activate", data="{}", headers=ota_headers(mac, client_id=STRANGER))
        answers.append((resp.status, await resp.text()))
    assert answers[0] == answers[1]
    assert answers[0][0] == 404
    resp = await client.post(OTA_PATH + "activate", data="{}", headers=ota_headers(MAC))  # the device itself
    assert (resp.status, await resp.json()) == (200, {"status": "activated"})


# -- refused, but not as a guess -----------------------------------------------------------------


async def test_previous_token_is_refused_but_never_banned(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    new_token = await regenerate(hass, setup_integration)
    for _ in range(10):  # a device woken ten times before anyone restarts it
        resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
        assert resp.status == 401
    assert failed_logins(hass) == 0
    assert login_notifications(hass) == []
    # Not banned: at its next boot it fetches the new token and connects.
    device = firmware(client)
    assert (await device.boot(ota_url(client), FAST))["websocket"]["token"] == new_token
    await device.connect()
    await wait_for(hub_of(setup_integration).devices[MAC], lambda d: d.link is not None)
    await device.drop()


async def test_deleted_device_is_refused_but_never_banned(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    sub = next(s for s in setup_integration.subentries.values() if s.unique_id == MAC)
    hass.config_entries.async_remove_subentry(setup_integration, sub.subentry_id)
    await hass.async_block_till_done()
    for _ in range(10):
        resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
        assert resp.status == 401
    assert failed_logins(hass) == 0
    assert login_notifications(hass) == []
    assert "activation" in await post_ota(client, MAC, client_id=CLIENT_ID)  # it can pair again


async def test_guesses_count_towards_the_ban(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    # No token at all guesses nothing (xiaozhi-sdk connects so while it pairs): refused, not counted.
    for mac in (MAC, "aa:bb:cc:00:00:99"):
        resp = await client.get(WS_PATH, headers={"Device-Id": mac})
        assert resp.status == 401
    assert failed_logins(hass) == 0
    for mac, token in ((MAC, "guess-1"), ("aa:bb:cc:00:00:99", "guess-2"), (MAC, "guess-3")):
        resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {token}", "Device-Id": mac})
        assert resp.status == 401
    assert failed_logins(hass) == 3
    assert login_notifications(hass) == ["http-login"]
    for _ in range(2):
        await client.get(WS_PATH, headers={"Authorization": "Bearer guess", "Device-Id": MAC})
    resp = await client.post(OTA_PATH, json={}, headers=ota_headers(MAC))
    assert resp.status == 403  # five guesses: HA banned the address


async def test_no_token_reaches_the_ban_warning(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A browser page with a typo in its device id: HA logs the URL it asked for, the token masked."""
    caplog.set_level(logging.DEBUG)
    resp = await client.get(WS_PATH, params={"device-id": "cc:ba:97:04:92:9x", "authorization": f"Bearer {TOKEN}"})
    assert resp.status == 401
    resp = await client.get(WS_PATH, params={"device-id": MAC, "token": TOKEN[:-1]})
    assert resp.status == 401
    # Home Assistant sets aiohttp's access log to WARNING; the test server's INFO lines are not HA's log.
    text = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")
    assert "Login attempt or request with invalid authentication" in text
    assert "authorization=***" in text
    assert TOKEN not in text
    assert TOKEN[:-1] not in text


async def test_accept_without_code_is_capped(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    hass.config_entries.async_update_entry(setup_integration, options={"accept_without_code": True})
    await hass.async_block_till_done()
    answers = [await post_ota(client, f"02:00:00:00:00:{i:02x}", client_id=f"c{i}") for i in range(40)]
    assert sum("activation" not in a for a in answers) == AUTO_PAIR_PER_HOUR
    assert all("activation" in a for a in answers[AUTO_PAIR_PER_HOUR:])
    assert len(hub_of(setup_integration).devices) == 1 + AUTO_PAIR_PER_HOUR
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert sum(f"but {AUTO_PAIR_PER_HOUR} joined within the last hour" in r.getMessage() for r in warned) == 1
    assert "Refused 02:00:00:00:00:0a: the hub accepts new devices without a code" in caplog.text
    # A paired MAC with another identity is never let in without a code, option or not.
    assert pending_only(hass, MAC, await post_ota(client, MAC))


async def test_the_hourly_number_of_new_devices_is_an_option_and_a_refusal_says_so(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A load test of 5 clients with only ``?device-id=``: 3 an hour are let in, as set; the log names
    the refused one and says what to change (it said "Refused device None … sent no token")."""
    hass.config_entries.async_update_entry(
        setup_integration, options={"accept_without_code": True, "new_devices_per_hour": 3}
    )
    await hass.async_block_till_done()
    statuses = []
    for index in range(5):
        resp = await client.get(WS_PATH, params={"device-id": f"load-test-{index}"})
        statuses.append(resp.status)
        resp.close()
    assert statuses.count(401) == 2
    assert "Refused load-test-3: the hub accepts new devices without a code, but 3 joined" in caplog.text
    assert "Refused device None" not in logged_by_us(caplog)
    assert logged_by(caplog, HTTP_BAN) == ""  # no failed login


# -- pairing under a flood ---------------------------------------------------------------------


@pytest.fixture
async def neighbour(client: TestClient[Any, Any]) -> AsyncIterator[ClientSession]:
    """Another address on the LAN (127.0.0.2)."""
    async with ClientSession(connector=TCPConnector(local_addr=("127.0.0.2", 0))) as session:
        yield session


async def test_a_flood_does_not_push_out_the_device_being_paired(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    neighbour: ClientSession,
) -> None:
    device = firmware(client, mac=NEW_MAC, client_id="real")
    boot, code = await boot_until_code(device, client)
    for i in range(300):
        headers = ota_headers(f"02:00:00:{i // 65536:02x}:{i // 256 % 256:02x}:{i % 256:02x}", client_id=f"f{i}")
        async with neighbour.post(ota_url(client), json={}, headers=headers) as resp:
            assert resp.status == 200
    await hass.async_block_till_done()
    hub = hub_of(setup_integration)
    assert len(hub.admission.pairing) == 1 + MAX_PER_SOURCE
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN, match_context={"unique_id": NEW_MAC})
    result = await hass.config_entries.flow.async_configure(flows[0]["flow_id"], {"code": code})
    assert result["reason"] == "pairing_successful"
    assert "token" in (await asyncio.wait_for(boot, 10))["websocket"]


# -- durability ----------------------------------------------------------------------------------


async def test_the_token_is_on_disk_before_it_leaves(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    hass_storage: dict[str, Any],
) -> None:
    """Killed right after the OTA answer: the journal holds the token (HA's own save is still pending)."""
    device = firmware(client, mac=NEW_MAC, client_id="fresh")
    boot, code = await boot_until_code(device, client)
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    token = (await asyncio.wait_for(boot, 10))["websocket"]["token"]
    on_disk = hass_storage[f"{DOMAIN}.{setup_integration.entry_id}.identities"]["data"]["devices"]
    assert on_disk[NEW_MAC]["token"] == token
    assert on_disk[NEW_MAC]["client_id"] == "fresh"


@pytest.fixture
def config_entry() -> MockConfigEntry:
    """The hub; its journal (set by tests) may know more than its subentries."""
    return MockConfigEntry(
        domain=DOMAIN,
        title="Xiaozhi Local",
        data={},
        entry_id="hub",
        subentries_data=[device_subentry(MAC, TOKEN, "Kitchen", CLIENT_ID)],
    )


@pytest.mark.parametrize(
    "journal_on_disk",
    [
        {
            NEW_MAC: {
                "token": "tok-new",
                "client_id": "fresh",
                "serial": None,
                "title": "Hall",
                "previous": [],
            },
            MAC: {
                "token": "tok-regenerated",
                "client_id": CLIENT_ID,
                "title": "Kitchen",
                "previous": [token_hash(TOKEN)],
            },
        }
    ],
)
async def test_restart_after_a_kill_restores_what_devices_were_given(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    """HA was killed before it saved a pairing and a regenerated token: both devices still work."""
    hub = hub_of(setup_integration)
    assert set(hub.devices) == {MAC, NEW_MAC}
    assert hub.devices[NEW_MAC].name == "Hall"
    assert hub.devices[NEW_MAC].token == "tok-new"
    assert hub.devices[MAC].token == "tok-regenerated"
    for mac, token in ((NEW_MAC, "tok-new"), (MAC, "tok-regenerated")):
        device = firmware(client, mac=mac, token=token, url=ws_url(client))
        await device.connect()
        await wait_for(hub.devices[mac], lambda d: d.link is not None)
        await device.drop()
    resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
    assert resp.status == 401


@pytest.mark.parametrize(
    "journal_on_disk",
    [
        {MAC: {"token": None, "title": "Kitchen", "previous": [token_hash(TOKEN)]}},
    ],
)
async def test_restart_after_a_kill_keeps_a_deleted_device_deleted(
    hass: HomeAssistant, setup_integration: MockConfigEntry
) -> None:
    assert hub_of(setup_integration).devices == {}
    assert not any(s.unique_id == MAC for s in setup_integration.subentries.values())


async def test_each_token_is_kept_once(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    hass_storage: dict[str, Any],
) -> None:
    """Tokens live in the private journal only: moved out of older subentries, never left in new ones."""
    await hass.async_block_till_done()
    assert setup_integration.version == 2
    assert TOKEN not in json.dumps(setup_integration.as_dict())  # what HA saves, readable by all users
    journal = f"{DOMAIN}.{setup_integration.entry_id}.identities"
    assert hass_storage[journal]["data"]["devices"][MAC]["token"] == TOKEN
    device = firmware(client, mac=NEW_MAC, client_id="fresh")
    boot, code = await boot_until_code(device, client)
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    await hass.config_entries.flow.async_configure(flow["flow_id"], {"code": code})
    token = (await asyncio.wait_for(boot, 10))["websocket"]["token"]
    await hass.async_block_till_done()
    assert token not in json.dumps(setup_integration.as_dict())
    assert hass_storage[journal]["data"]["devices"][NEW_MAC]["token"] == token
    # After a restart, both still get in with what they hold.
    assert await hass.config_entries.async_reload(setup_integration.entry_id)
    await hass.async_block_till_done()
    hub = hub_of(setup_integration)
    for mac, held in ((MAC, TOKEN), (NEW_MAC, token)):
        sim = firmware(client, mac=mac, token=held, url=ws_url(client))
        await sim.connect()
        await wait_for(hub.devices[mac], lambda d: d.link is not None)
        await sim.drop()


async def setup_hub(
    hass: HomeAssistant, hass_storage: dict[str, Any], data: dict[str, Any], journal: dict[str, Any], version: int = 2
) -> MockConfigEntry:
    """A hub whose one subentry holds ``data`` and whose journal on disk holds ``journal``."""
    entry = MockConfigEntry(
        domain=DOMAIN,
        title="Xiaozhi Local",
        data={},
        version=version,
        subentries_data=[
            ConfigSubentryData(data=data, subentry_type=SUBENTRY_DEVICE, title="Kitchen", unique_id=data[CONF_MAC])
        ],
    )
    key = f"{DOMAIN}.{entry.entry_id}.identities"
    hass_storage[key] = {"version": 1, "minor_version": 1, "key": key, "data": {"devices": journal}}
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    return entry


async def test_a_deleted_device_without_a_token_in_its_subentry_stays_deleted(
    hass: HomeAssistant, hass_storage: dict[str, Any]
) -> None:
    """Deleted just before a kill, after its token had left the subentry."""
    journal = {MAC: {"token": None, "title": "Kitchen", "previous": [token_hash(TOKEN)]}}
    entry = await setup_hub(hass, hass_storage, {CONF_MAC: MAC, CONF_CLIENT_ID: CLIENT_ID}, journal)
    assert hub_of(entry).devices == {}
    assert not entry.subentries


async def test_a_device_with_no_token_on_record_gets_a_new_one(
    hass: HomeAssistant, hass_storage: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The journal was lost (restored from an old backup): the device gets a token at its next OTA answer."""
    entry = await setup_hub(hass, hass_storage, {CONF_MAC: MAC, CONF_CLIENT_ID: CLIENT_ID}, {})
    token = hub_of(entry).devices[MAC].token
    assert len(token) >= 43
    assert f"Device {MAC} had no token on record" in caplog.text
    assert hass_storage[f"{DOMAIN}.{entry.entry_id}.identities"]["data"]["devices"][MAC]["token"] == token


async def test_a_newer_entry_is_not_set_up(hass: HomeAssistant, hass_storage: dict[str, Any]) -> None:
    """An entry from a later release is left alone, not half read."""
    entry = await setup_hub(hass, hass_storage, {CONF_MAC: MAC}, {}, version=3)
    assert entry.state is ConfigEntryState.MIGRATION_ERROR


async def test_discovery_card_of_a_paired_mac_needs_a_waiting_identity(
    hass: HomeAssistant, setup_integration: MockConfigEntry
) -> None:
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_INTEGRATION_DISCOVERY}, data={"mac": MAC, "board": ""}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "not_pending"


async def test_an_expired_camera_token_is_not_a_guess(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from custom_components.xiaozhi_local.const import VISION_PATH, VISION_TOKEN_TTL
    from xiaozhi_sim.camera import BOUNDARY, TINY_JPEG

    from .test_vision import camera, multipart

    sim = await camera(hass, setup_integration, client)
    token = sim.mcp.vision_token
    later = hass.loop.time() + VISION_TOKEN_TTL + 1
    monkeypatch.setattr(hass.loop, "time", lambda: later)
    for bearer, counted in ((token, 0), ("a guess", 1)):
        resp = await client.post(
            VISION_PATH,
            data=multipart(b"what is it?", TINY_JPEG),
            headers={
                "Authorization": f"Bearer {bearer}",
                "Device-Id": MAC,
                "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
            },
        )
        assert resp.status == 401
        assert failed_logins(hass) == counted
    await sim.drop()


async def test_load_testers_join_without_a_code_only_while_the_hub_accepts_them(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """Written for other xiaozhi servers: ``?device-id=<any string>`` and no token."""
    resp = await client.get(WS_PATH, params={"device-id": "load-tester-001"})
    assert resp.status == 401  # the option is off: refused, as any client without a token
    hass.config_entries.async_update_entry(setup_integration, options={"accept_without_code": True})
    await hass.async_block_till_done()
    for _ in range(2):  # paired at first contact, let in again with nothing but its id
        ws = await client.ws_connect(WS_PATH, params={"device-id": "load-tester-001", "client-id": "c1"})
        await ws.send_str('{"type":"hello"}')
        assert (await ws.receive_json())["type"] == "hello"
        await ws.close()
    hub = hub_of(setup_integration)
    (tester,) = [d for d in hub.devices.values() if d.name == "load-tester-001"]
    assert tester.open
    # A device paired the usual way never gets in without its token, option or not.
    resp = await client.get(WS_PATH, params={"device-id": MAC})
    assert resp.status == 401
    assert failed_logins(hass) == 0  # no token is no guess
    hass.config_entries.async_update_entry(setup_integration, options={"accept_without_code": False})
    await hass.async_block_till_done()
    resp = await client.get(WS_PATH, params={"device-id": "load-tester-001"})
    assert resp.status == 401  # and once the option is off, not even it


async def test_the_token_journal_is_kept_private(
    hass: HomeAssistant, setup_integration: MockConfigEntry, tmp_path: Path
) -> None:
    """The journal holds tokens: written as Home Assistant writes its auth store (mode 0600)."""
    from homeassistant.util.file import write_utf8_file

    journal = hub_of(setup_integration).identities
    assert journal._store._private
    path = tmp_path / "journal"
    write_utf8_file(str(path), "{}", journal._store._private)
    assert path.stat().st_mode & 0o077 == 0


async def test_new_identities_for_a_paired_mac_are_warned_about_once_and_counted(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Anyone can name a paired MAC with a new Client-Id, as often as it likes: one warning (not
    a line each time, which filled the disk), and the count in the device's diagnostics."""
    for index in range(40):
        answer = await post_ota(client, MAC, client_id=f"stranger-{index}")
        assert pending_only(hass, MAC, answer)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "pair again" in r.getMessage()]
    assert len(warnings) == 1
    xdev = hub_of(setup_integration).devices[MAC]
    assert xdev.log.counts["asks_to_pair_again"] == 40


async def test_a_paired_device_whose_reports_keep_changing_cannot_fill_the_disk(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In hostile hands, with its own identity: a new board, chip or version at every OTA check.
    Each change was a device-registry update (a recorder event), a firmware check and a save;
    past a few they change nothing for a while, with one warning."""
    from homeassistant.helpers import device_registry as dr

    updates: list[Any] = []
    hass.bus.async_listen(dr.EVENT_DEVICE_REGISTRY_UPDATED, updates.append)
    for index in range(60):
        body = {
            "application": {"name": "xiaozhi", "version": f"2.{index}.0"},
            "board": {"type": f"board-{index}", "name": f"board-{index}"},
            "chip_model_name": "esp32s3",
        }
        resp = await client.post(OTA_PATH, json=body, headers=ota_headers(MAC))
        assert resp.status == 200
        assert (await resp.json())["websocket"]["token"] == TOKEN  # still served: it is the device
    await hass.async_block_till_done()
    assert len(updates) <= 4
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING and "too often" in r.getMessage()]) == 1
    xdev = hub_of(setup_integration).devices[MAC]
    assert xdev.log.counts["reports_change_too_often"] >= 55


async def test_pairing_sessions_are_bounded_and_say_a_code_made_once(
    hass: HomeAssistant, ready: Any, setup_integration: MockConfigEntry, client: TestClient[Any, Any], hub_url: str
) -> None:
    """One anonymous OTA request yields a pending token; it opened any number of sessions, each
    synthesising the code's speech. Now: one live session per pending device (a new one ends the
    one before), a few in all (503 past them), and the speech of a code made once."""
    from aiohttp import WSServerHandshakeError

    from custom_components.xiaozhi_local.admission.pairing_session import MAX_SESSIONS

    def headers(mac: str, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", "Device-Id": mac, "Client-Id": STRANGER, "Protocol-Version": "1"}

    async def pending_token(mac: str) -> str:
        return token_of(await post_ota(client, mac, client_id=STRANGER))

    mac = "aa:bb:cc:00:22:00"
    token = await pending_token(mac)
    first = await client.ws_connect(WS_PATH, headers=headers(mac, token))  # says no hello: stays live
    second = await client.ws_connect(WS_PATH, headers=headers(mac, token))
    closed = await asyncio.wait_for(first.receive(), 5)
    assert closed.type.name in ("CLOSE", "CLOSED", "CLOSING")  # replaced by the newer one
    await second.close()
    # The same code said twice: its speech is made once.
    for _ in range(2):
        sdk = SimulatedDevice(
            SimulatorOptions(url=hub_url, token=token, mac=mac, client_id=STRANGER, flavor="xiaozhi-sdk")
        )
        await sdk.connect()
        await sdk.wait_closed()
        assert sdk.audio
        await sdk.drop()
    assert len([m for m in ready.tts.messages if "code" in m.lower() or any(c.isdigit() for c in m)]) == 1
    # Sessions of other pending devices at once: a few, then 503.
    held = []
    try:
        for index in range(1, MAX_SESSIONS + 1):
            other = f"aa:bb:cc:00:22:{index:02x}"
            held.append(await client.ws_connect(WS_PATH, headers=headers(other, await pending_token(other))))
        extra = "aa:bb:cc:00:22:ff"
        with pytest.raises(WSServerHandshakeError) as refused:
            await client.ws_connect(WS_PATH, headers=headers(extra, await pending_token(extra)))
        assert refused.value.status == 503
    finally:
        for ws in held:
            await ws.close()


@pytest.mark.parametrize("sessions", [20, 100])
async def test_sessions_opened_together_with_one_pending_token_speak_once(
    hass: HomeAssistant,
    ready: Any,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hub_url: str,
    caplog: pytest.LogCaptureFixture,
    sessions: int,
) -> None:
    """One anonymous OTA answer's token, many xiaozhi-sdk sessions opened at the same moment (20
    were measured: 10 of them got speech). Each new one takes the place of the one before at
    once, which ends without waiting for its peer: at most one is spoken to, and nothing of it is
    logged above debug."""
    mac = "aa:bb:cc:00:23:00"
    token = token_of(await post_ota(client, mac, client_id=STRANGER))
    caplog.clear()
    devices = [
        SimulatedDevice(SimulatorOptions(url=hub_url, token=token, mac=mac, client_id=STRANGER, flavor="xiaozhi-sdk"))
        for _ in range(sessions)
    ]
    try:
        opened = await asyncio.gather(*(device.connect() for device in devices), return_exceptions=True)
        connected = [device for device, result in zip(devices, opened, strict=True) if result is None]
        assert connected  # the last one, at least
        async with asyncio.timeout(60):  # a guard: each ends (replaced, or told its code and closed)
            await asyncio.gather(*(device.wait_closed() for device in connected))
    finally:
        await asyncio.gather(*(device.drop() for device in devices), return_exceptions=True)
    spoken_to = [device for device in devices if device.audio]
    assert len(spoken_to) <= 1
    assert [m for m in ready.tts.messages if any(c.isdigit() for c in m)] != []  # the last one was told
    ours = [r for r in caplog.records if r.name.startswith("custom_components.xiaozhi_local") and r.levelno > 10]
    assert len(ours) <= 2, [r.getMessage() for r in ours]  # the pending device's card, once
