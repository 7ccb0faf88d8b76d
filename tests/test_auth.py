"""Authentication under attack: expired camera tokens, oversized headers, no pairing oracle, no token in logs."""

import logging
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DOMAIN, VISION_PATH, VISION_TOKEN_TTL, WS_PATH
from xiaozhi_sim.camera import BOUNDARY, TINY_JPEG

from .conftest import MAC, TOKEN, DeviceFactory
from .internals import hub_of
from .test_vision import camera, multipart


async def test_camera_token_replayed_after_expiry(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = await camera(hass, setup_integration, client)
    token = sim.mcp.vision_token
    device = hub_of(setup_integration).devices[MAC]
    assert token is not None
    assert device.vision_token.check(token)
    later = hass.loop.time() + VISION_TOKEN_TTL + 1
    monkeypatch.setattr(hass.loop, "time", lambda: later)  # 30 min and a second on
    resp = await client.post(
        VISION_PATH,
        data=multipart(b"what is it?", TINY_JPEG),
        headers={
            "Authorization": f"Bearer {token}",
            "Device-Id": MAC,
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        },
    )
    assert resp.status == 401
    assert device.photo is None
    await sim.drop()


async def test_refusals_do_not_tell_whether_a_mac_is_paired(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """A paired MAC with a wrong token and a MAC nobody paired get the very same answer."""
    answers = []
    for mac in (MAC, "cc:ba:97:00:00:01"):
        resp = await client.get(WS_PATH, headers={"Authorization": "Bearer wrong", "Device-Id": mac})
        answers.append((resp.status, await resp.text(), resp.headers.get("Content-Type")))
    assert answers[0] == answers[1]
    assert answers[0][0] == 401


async def test_oversized_headers_are_refused(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    resp = await client.get(WS_PATH, headers={"Authorization": "Bearer " + "x" * 20_000, "Device-Id": MAC})
    assert resp.status in (400, 401, 431)
    # The endpoint still serves devices.
    ok = await client.ws_connect(WS_PATH, headers={"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC})
    await ok.send_str('{"type":"hello"}')
    assert (await ok.receive_json())["type"] == "hello"
    await ok.close()


async def test_tokens_never_reach_the_log(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    make_device: DeviceFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    sim = await camera(hass, setup_integration, client)  # connects, gets a camera token, lists tools
    await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": hub_of(setup_integration).devices[MAC].device_id, "tool": "self.get_device_status"},
        blocking=True,
        return_response=True,
    )
    await client.get(WS_PATH, headers={"Authorization": "Bearer not-the-token", "Device-Id": MAC})
    await sim.drop()
    assert sim.mcp.vision_token
    # What Home Assistant logs; the simulator (the device side) logs its own headers.
    text = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith(("websockets.client", "xiaozhi_sim"))
    )
    assert "cc:ba:97:04:92:94" in text  # the log was captured
    assert TOKEN not in text
    assert sim.mcp.vision_token not in text
    assert "not-the-token" not in text
