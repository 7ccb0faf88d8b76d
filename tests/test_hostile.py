"""Hostile input through the real endpoints: a fixed-seed slice of what ``python -m bench fuzz`` sends.

Nothing crashes, nothing unhandled is logged, every refusal is a clean answer, and the
device (and Home Assistant) carry on afterwards.
"""

import logging
import random
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DOMAIN, OTA_PATH, VISION_PATH
from custom_components.xiaozhi_local.device import XiaozhiDevice
from xiaozhi_sim.hostile import Hostile

from .conftest import MAC, TOKEN, DeviceFactory, wait_settled
from .internals import hub_of

FRAMES = 600


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def reconnects_and_works(
    hass: HomeAssistant, make_device: DeviceFactory, xdev: XiaozhiDevice, volume: int
) -> None:
    """The device connects again and a tool call reaches it."""
    again = await make_device()
    await wait_settled(xdev)
    result = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": xdev.device_id, "tool": "self.audio_speaker.set_volume", "arguments": {"volume": volume}},
        blocking=True,
        return_response=True,
    )
    assert result is not None
    assert result["text"] == "true"
    assert again.state.volume == volume


async def test_hostile_frames_on_a_device_connection(
    hass: HomeAssistant, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = await make_device()
    xdev = hub_of(hass).devices[MAC]
    await wait_settled(xdev)
    hostile = Hostile(seed=8)
    for frame in hostile.frames(FRAMES):
        await device.send_raw(frame)
    # Every frame was read (a ping is answered only after all of them), the connection is still up.
    pong = await device.connection.ping()
    await pong
    assert xdev.link is not None
    problems = sum(xdev.log.counts.values())
    assert problems > FRAMES // 4  # the garbage was noticed and counted, once-per-kind logged
    assert errors_logged(caplog) == []
    # The same device comes back clean on a new connection and its tools work.
    await device.drop()
    await reconnects_and_works(hass, make_device, xdev, volume=12)
    assert errors_logged(caplog) == []


async def test_hostile_ota_requests(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    hostile = Hostile(seed=3)
    rng = random.Random(3)
    statuses: set[int] = set()
    for _ in range(200):
        headers = {
            "Device-Id": rng.choice((MAC, "cc:ba:97:04:92:a0", "", "not a mac", "中文", "a" * 300)),
            "Client-Id": "".join(ch for ch in hostile.string()[:100] if " " <= ch <= "~"),
            "Activation-Version": rng.choice(("1", "2", "x", "")),
            "Content-Type": rng.choice(("application/json", "text/plain", "")),
        }
        path = OTA_PATH + rng.choice(("", "activate"))
        resp = await client.post(path, data=hostile.ota_body(), headers=headers)
        statuses.add(resp.status)
        body = await resp.json()  # every answer, refusals too, is JSON
        assert isinstance(body, dict)
    assert statuses <= {200, 202, 400, 404, 413}
    assert 400 in statuses
    assert 200 in statuses
    assert errors_logged(caplog) == []
    # The paired device is still paired and its token unchanged.
    assert hub_of(setup_integration).devices[MAC].token == TOKEN


async def test_hostile_vision_uploads(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    rng = random.Random(5)
    hostile = Hostile(seed=5)
    for _ in range(60):
        headers = {
            "Authorization": rng.choice(("", "Bearer x", f"Bearer {TOKEN}", "Basic abc")),
            "Device-Id": rng.choice((MAC, "", "zz")),
            "Content-Type": rng.choice(
                ("multipart/form-data; boundary=b", "multipart/form-data", "image/jpeg", "application/json")
            ),
        }
        body = rng.choice((hostile.ota_body(), b"--b\r\n" + rng.randbytes(rng.randrange(300)), b""))
        resp = await client.post(VISION_PATH, data=body, headers=headers)
        assert resp.status in (400, 401, 413)
    assert errors_logged(caplog) == []
    assert hub_of(setup_integration).devices[MAC].photo is None


async def test_invalid_utf8_text_frame(
    hass: HomeAssistant, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A text frame that is not UTF-8 is a protocol error: the socket closes with 1007, nothing else breaks."""
    device = await make_device()
    xdev = hub_of(hass).devices[MAC]
    await wait_settled(xdev)
    # A hello-shaped frame with a stray Latin-1 byte, sent as text exactly as a broken client would.
    await device.connection.send(b'{"type":"listen","state":"detect","text":"caf\xe9"}', text=True)
    await device.wait_closed()
    assert device.connection.close_code == 1007
    assert xdev.link is None
    assert any("connection error" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert errors_logged(caplog) == []
    # The device reconnects and its tools work.
    await reconnects_and_works(hass, make_device, xdev, volume=30)
