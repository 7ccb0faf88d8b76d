"""The device as an Assist satellite: real pipeline, real Opus both ways, real ffmpeg."""

from collections.abc import AsyncIterator
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DOMAIN
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import MAC, TOKEN, wait_settled, ws_url
from .voice import Voice, loud_seconds, speech_pcm, speech_seconds


@pytest.fixture
async def voice(hass: HomeAssistant) -> Voice:
    voice = Voice()
    await voice.async_setup(hass)
    return voice


@pytest.fixture
async def ready(
    hass: HomeAssistant, voice: Voice, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> Voice:
    await voice.async_use(hass)
    return voice


@pytest.fixture
async def device(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> AsyncIterator[SimulatedDevice]:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    await sim.connect()
    await wait_settled(hass.config_entries.async_entries(DOMAIN)[0].runtime_data.devices[MAC])
    yield sim
    await sim.drop()


def kinds(device: SimulatedDevice) -> list[str]:
    return [m["type"] + (f":{m['state']}" if "state" in m else "") for m in device.log]


async def test_auto_turn(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    device.relisten = False
    await device.say(speech_pcm())
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
    stt = next(m for m in device.log if m["type"] == "stt")
    assert stt["text"].startswith("heard ")
    heard = float(stt["text"].split()[1])
    assert 1.0 <= heard <= 3.5  # the speech in the fixture survived Opus both ways
    assert kinds(device)[:3] == ["stt", "llm", "llm"]
    assert kinds(device)[3] == "tts:start"
    assert kinds(device)[-1] == "tts:stop"
    assert [m["text"] for m in device.log if m.get("state") == "sentence_start"] == [
        "The kitchen light is on.",
        "Anything else?",
    ]
    assert device.log[1]["emotion"] == "thinking"
    # The answer's audio arrived whole and decodable: as long as the TTS made it (60 ms packets).
    played = len(device.speaker_pcm) / 2 / 24000
    expected = speech_seconds(ready.agent.reply)
    assert expected - 0.1 <= played <= expected + 0.2
    assert loud_seconds(bytes(device.speaker_pcm), 24000) > expected * 0.8
    assert ready.agent.inputs[0].text == stt["text"]
    state = hass.states.get("assist_satellite.kitchen")
    assert state is not None
    assert state.state == "idle"
