"""Diagnostics of the hub and of a device, through HA's diagnostics API: useful, and without secrets."""

import json
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
    get_diagnostics_for_device,
)
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

from custom_components.xiaozhi_local.const import OTA_PATH

from .conftest import CLIENT_ID, CLIENT_ID2, MAC, MAC2, TOKEN, TOKEN2
from .internals import hub_of
from .test_vision import camera

STRANGER = "cc:ba:97:04:92:a0"


@pytest.fixture
async def diagnostics(hass: HomeAssistant, setup_integration: MockConfigEntry) -> None:
    """HA's diagnostics API, set up before the HTTP server starts (its router is frozen then)."""
    assert await async_setup_component(hass, "diagnostics", {})


async def test_diagnostics_without_secrets(
    hass: HomeAssistant,
    device_registry: dr.DeviceRegistry,
    setup_integration: MockConfigEntry,
    diagnostics: None,
    client: TestClient[Any, Any],
    hass_client: ClientSessionGenerator,
) -> None:
    sim = await camera(hass, setup_integration, client)  # connected, with a camera token
    await sim.send_raw("not json")  # a problem to count
    resp = await client.post(OTA_PATH, json={"mac_address": STRANGER}, headers={"Device-Id": STRANGER})
    code = (await resp.json())["activation"]["code"]  # a stranger waits with a code
    hub_diag: Any = await get_diagnostics_for_config_entry(hass, hass_client, setup_integration)
    text = json.dumps(hub_diag)
    # A device's Client-Id proves who it is (the OTA answer hands the token to it): a secret too.
    for secret in (TOKEN, TOKEN2, sim.mcp.vision_token, code, CLIENT_ID, CLIENT_ID2, sim.options.client_id):
        assert secret
        assert secret not in text
    assert hub_diag["pending_pairings"] == 1
    assert hub_diag["open_connections"] == 1
    kitchen = next(d for d in hub_diag["devices"] if d["mac"] == MAC)
    assert kitchen["connected"] is True
    assert kitchen["connection"]["dialect"] == "mcp"
    assert kitchen["connection"]["hello"]["audio_params"]["frame_duration"] == 60
    assert kitchen["problems"]["not_json"] == 1
    assert kitchen["identity"] == {"has_client_id": True, "has_serial": False}
    assert kitchen["dropped_notifications"] == 0
    assert "self.camera.take_photo" in {tool["name"] for tool in kitchen["tools"]}
    assert kitchen["last_values"]["self.get_device_status"]["network"]["ssid"] == "**REDACTED**"
    desk = next(d for d in hub_diag["devices"] if d["mac"] == MAC2)
    assert desk["connected"] is False
    # Firmware: nothing reported over a bare WebSocket; the remote sources are off by default.
    assert kitchen["firmware"] == {"facts": None, "offers": [], "install": None, "last_error": None}
    assert hub_diag["firmware_sources"]["vendor"] is None
    assert hub_diag["firmware_sources"]["releases"] is None
    assert hub_diag["firmware_sources"]["refused_files"] == {}
    # One device's own diagnostics.
    xdev = hub_of(setup_integration).devices[MAC]
    entry = device_registry.async_get(xdev.device_id)
    assert isinstance(entry, dr.DeviceEntry)
    device_diag: Any = await get_diagnostics_for_device(hass, hass_client, setup_integration, entry)
    assert device_diag["mac"] == MAC
    assert device_diag["connection"]["discovered"] is True
    assert TOKEN not in json.dumps(device_diag)
    await sim.drop()
