"""Repair issues where the user must act: unreachable URL, missing ffmpeg, a device with a wrong token."""

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import device_registry as dr, issue_registry as ir
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local import repairs
from custom_components.xiaozhi_local.const import DOMAIN, WS_PATH
from custom_components.xiaozhi_local.diagnostics import async_get_device_diagnostics

from .conftest import MAC, TOKEN
from .helpers import regenerate
from .internals import hub_of


def issue(hass: HomeAssistant, issue_id: str) -> ir.IssueEntry | None:
    return ir.async_get(hass).async_get_issue(DOMAIN, issue_id)


async def test_unreachable_url_follows_the_internal_url(
    hass: HomeAssistant, setup_integration: MockConfigEntry
) -> None:
    await hass.config.async_update(internal_url="http://localhost:8123")
    await hass.async_block_till_done()
    found = issue(hass, repairs.ISSUE_UNREACHABLE_URL)
    assert found is not None
    assert found.translation_placeholders == {"url": "http://localhost:8123"}
    assert found.severity is ir.IssueSeverity.WARNING
    await hass.config.async_update(internal_url="http://192.168.1.20:8123")
    await hass.async_block_till_done()
    assert issue(hass, repairs.ISSUE_UNREACHABLE_URL) is None
    await hass.config.async_update(internal_url="http://127.0.0.1:8123")
    await hass.async_block_till_done()
    assert issue(hass, repairs.ISSUE_UNREACHABLE_URL) is not None
    # A WebSocket URL chosen in the options is what devices get: nothing to repair.
    hass.config_entries.async_update_entry(
        setup_integration, options={"websocket_url": "ws://192.168.1.20:8123/api/xiaozhi_local/v1/"}
    )
    await hass.async_block_till_done()
    assert issue(hass, repairs.ISSUE_UNREACHABLE_URL) is None


async def test_ffmpeg_missing(
    hass: HomeAssistant, setup_integration: MockConfigEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert issue(hass, repairs.ISSUE_FFMPEG_MISSING) is None  # installed here
    monkeypatch.setattr("custom_components.xiaozhi_local.repairs.shutil.which", lambda _binary: None)
    assert await hass.config_entries.async_reload(setup_integration.entry_id)
    found = issue(hass, repairs.ISSUE_FFMPEG_MISSING)
    assert found is not None
    assert found.severity is ir.IssueSeverity.ERROR
    assert found.translation_placeholders == {"binary": "ffmpeg"}


async def test_wrong_token_repeated(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    issue_registry: ir.IssueRegistry,
    client: TestClient[Any, Any],
) -> None:
    """The token was regenerated while the device kept its old one: after 5 refusals, a repair."""
    issue_id = f"{repairs.ISSUE_WRONG_TOKEN}_{MAC}"
    new_token = await regenerate(hass, setup_integration)
    for attempt in range(repairs.WRONG_TOKEN_LIMIT):
        assert issue(hass, issue_id) is None, attempt
        resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
        assert resp.status == 401
    await hass.async_block_till_done()
    found = issue(hass, issue_id)
    assert found is not None
    assert found.translation_placeholders == {"device": "Kitchen", "mac": MAC, "count": "5"}
    # Strangers never raise one (and learn nothing about which MACs are paired).
    for _ in range(repairs.WRONG_TOKEN_LIMIT):
        await client.get(WS_PATH, headers={"Authorization": "Bearer x", "Device-Id": "cc:ba:97:00:00:09"})
    assert [i for i in issue_registry.issues.values() if i.domain == DOMAIN and "00:00:09" in i.issue_id] == []
    # The device gets in with its new token: the issue is over.
    async with client.ws_connect(WS_PATH, headers={"Authorization": f"Bearer {new_token}", "Device-Id": MAC}) as ws:
        await ws.send_str('{"type":"hello"}')
        await ws.receive()
    assert issue(hass, issue_id) is None


@pytest.mark.parametrize("token", ["made-up", "", "x" * 43])
async def test_a_strangers_wrong_tokens_for_a_disconnected_device_raise_no_repair(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    issue_registry: ir.IssueRegistry,
    client: TestClient[Any, Any],
    token: str,
) -> None:
    """A stock WebSocket device is disconnected between conversations: a stranger who names its MAC
    with tokens of their own (5 times the 30 measured) raises nothing; they are counted by kind."""
    hub = hub_of(hass)
    assert hub.devices[MAC].link is None
    for _ in range(150):
        resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {token}", "Device-Id": MAC})
        assert resp.status == 401
    await hass.async_block_till_done()
    assert [i for i in issue_registry.issues.values() if i.domain == DOMAIN] == []
    assert sum(hub.devices[MAC].log.counts.values()) == 150
    assert hub.devices[MAC].refused_tokens == 0


async def test_wrong_tokens_while_the_device_is_connected_raise_no_repair(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """Even its own old token, presented while the device is connected with its right one: whoever
    does it is not the device, and the repair's advice (a new token) would cut the real one off."""
    issue_id = f"{repairs.ISSUE_WRONG_TOKEN}_{MAC}"
    new_token = await regenerate(hass, setup_integration)
    async with client.ws_connect(WS_PATH, headers={"Authorization": f"Bearer {new_token}", "Device-Id": MAC}) as ws:
        await ws.send_str('{"type":"hello"}')
        await ws.receive()
        for _ in range(repairs.WRONG_TOKEN_LIMIT * 2):
            resp = await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
            assert resp.status == 401
        await hass.async_block_till_done()
        assert issue(hass, issue_id) is None


async def test_a_removed_device_leaves_no_repair_behind(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """Its wrong-token issue named a device that no longer exists: removed with it."""
    issue_id = f"{repairs.ISSUE_WRONG_TOKEN}_{MAC}"
    await regenerate(hass, setup_integration)
    for _ in range(repairs.WRONG_TOKEN_LIMIT):
        await client.get(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
    await hass.async_block_till_done()
    assert issue(hass, issue_id) is not None
    subentry = next(sub for sub in setup_integration.subentries.values() if sub.unique_id == MAC)
    hass.config_entries.async_remove_subentry(setup_integration, subentry.subentry_id)
    await hass.async_block_till_done()
    assert issue(hass, issue_id) is None


async def test_a_wrong_token_for_a_paired_mac_costs_what_an_unknown_mac_costs(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """Pairing status must not leak by timing: the refusal of a paired MAC's wrong token does the
    same work before its answer as an unknown MAC's (the bookkeeping comes after)."""
    from custom_components.xiaozhi_local.admission.gate import Refused

    hub = hub_of(hass)
    assert hub.async_authenticate(MAC, "wrong-token") is Refused.GUESS
    assert hub.async_authenticate("cc:ba:97:00:00:09", "wrong-token") is Refused.GUESS
    assert hub.devices[MAC].log.counts.get("token_guess", 0) == 0  # nothing more before the answer
    await asyncio.sleep(0)
    assert hub.devices[MAC].log.counts["token_guess"] == 1  # then its count, for the diagnostics


async def test_old_tokens_update_the_repair_as_their_count_doubles(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    device_registry: dr.DeviceRegistry,
    client: TestClient[Any, Any],
) -> None:
    """A client that kept an old token may retry in a loop: a thousand refusals update the repair
    (a write and an event each) a handful of times, log once per kind, and are all counted."""
    hub = hub_of(hass)
    await regenerate(hass, setup_integration)
    updates: list[Event[ir.EventIssueRegistryUpdatedData]] = []
    hass.bus.async_listen(ir.EVENT_REPAIRS_ISSUE_REGISTRY_UPDATED, updates.append)
    for _ in range(1000):
        hub.async_authenticate(MAC, TOKEN)
    hub.async_authenticate(MAC, "")
    hub.async_authenticate(MAC, "wrong-token")
    await hass.async_block_till_done()
    assert len(updates) == 8  # at 5, 10, 20, ..., 640
    found = issue(hass, f"{repairs.ISSUE_WRONG_TOKEN}_{MAC}")
    assert found is not None
    assert found.translation_placeholders is not None
    assert found.translation_placeholders["count"] == "640"
    device = hub.devices[MAC]
    assert device.log.counts["token_earlier_token"] == 1000
    assert device.log.counts["token_no_token"] == 1
    assert device.log.counts["token_guess"] == 1
    entry = hass.config_entries.async_entries(DOMAIN)[0]
    registry_device = device_registry.async_get(device.device_id)
    assert isinstance(registry_device, dr.DeviceEntry)
    diagnostics = await async_get_device_diagnostics(hass, entry, registry_device)
    assert diagnostics["problems"]["token_earlier_token"] == 1000
