"""The wait people feel: each turn's stages, and the Response time sensor (end of speech → first sound)."""

from collections.abc import AsyncIterator
import time
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.const import STATE_UNKNOWN
from homeassistant.core import HomeAssistant, State
import pytest
from pytest_homeassistant_custom_component.common import mock_restore_cache_with_extra_data

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.diagnostics import async_get_config_entry_diagnostics
from custom_components.xiaozhi_local.sound.speaker import FIRST_FRAME_GAP
from custom_components.xiaozhi_local.timings import STAGES, ResponseTimes, Stages
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import MAC, TOKEN, wait_settled, ws_url
from .helpers import until
from .internals import hub_of
from .voice import Voice, speech_pcm

SENSOR = "sensor.kitchen_response_time"


@pytest.fixture
async def device(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> AsyncIterator[SimulatedDevice]:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    await sim.connect()
    await wait_settled(hub_of(hass).devices[MAC])
    sim.relisten = False
    yield sim
    await sim.drop()


def sensor(hass: HomeAssistant) -> State:
    state = hass.states.get(SENSOR)
    assert state is not None
    return state


async def answered(device: SimulatedDevice, marker: int) -> None:
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)


def in_order(offsets: dict[str, float]) -> list[float]:
    return [offsets[stage] for stage in STAGES if stage in offsets]


async def test_push_to_talk_shows_release_to_first_sound(hass: HomeAssistant, device: SimulatedDevice) -> None:
    """Manual mode: the figure runs from the release (``listen stop``) to the first frame sent; the
    client's own measure (stop sent → first packet heard) can only be longer, by the transit."""
    assert sensor(hass).state == STATE_UNKNOWN
    marker, heard = len(device.log), len(device.audio_at)
    await device.say(speech_pcm(), mode="manual")
    released = time.monotonic()  # listen stop was the last thing say() sent
    await answered(device, marker)
    await until(lambda: sensor(hass).state != STATE_UNKNOWN)
    state = sensor(hass)
    shown = float(state.state)
    client = (device.audio_at[heard] - released) * 1000
    assert FIRST_FRAME_GAP * 1000 <= shown <= client + 5, (shown, client)
    assert state.attributes["unit_of_measurement"] == "ms"
    assert state.attributes["kind"] == "voice"
    offsets = state.attributes["stages_ms"]
    assert set(offsets) == set(STAGES) - {"speech_end"}
    assert in_order(offsets) == sorted(in_order(offsets))  # wake, transcript, answer, audio, frames
    assert offsets["wake"] < 0 < offsets["last_frame"]
    assert offsets["first_frame"] == shown


async def test_auto_mode_counts_from_the_vads_end_and_every_turn_is_kept(
    hass: HomeAssistant, device: SimulatedDevice
) -> None:
    """Auto mode: HA's VAD marks the end of speech. Each answered turn replaces the figure; the
    diagnostics keep the last turns (bounded)."""
    values: list[float] = []
    xdev = hub_of(hass).devices[MAC]
    for _ in range(3):
        marker = len(device.log)
        await device.say(speech_pcm(), wake_word="你好小智")
        await answered(device, marker)
        await until(lambda: len(xdev.response_times.recent) > len(values))
        values.append(xdev.response_times.recent[-1]["response_ms"])
    assert float(sensor(hass).state) == values[-1]
    entry = hass.config_entries.async_entries(DOMAIN)[0]
    diagnostics = await async_get_config_entry_diagnostics(hass, entry)
    turns = diagnostics["devices"][0]["response_times"]
    assert [turn["response_ms"] for turn in turns] == values
    assert all(turn["kind"] == "voice" and turn["stages_ms"]["wake"] < 0 for turn in turns)


async def test_typed_text_counts_from_the_text(hass: HomeAssistant, device: SimulatedDevice) -> None:
    """A typed question: its end is when the text came; the wait includes telling it from a wake word."""
    marker = len(device.log)
    await device.type_text("what time is it")
    await answered(device, marker)
    await until(lambda: sensor(hass).state != STATE_UNKNOWN)
    state = sensor(hass)
    assert state.attributes["kind"] == "typed"
    assert float(state.state) >= 500  # the text waits 0.5 s for a listen start that would make it a wake word


async def test_a_turn_without_an_answer_leaves_the_figure(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice
) -> None:
    """Nothing recognised: no answer is played, so the figure of the last answered turn stays."""
    marker = len(device.log)
    await device.say(speech_pcm(), mode="manual")
    await answered(device, marker)
    await until(lambda: sensor(hass).state != STATE_UNKNOWN)
    before = sensor(hass).state
    marker = len(device.log)
    await device.say(bytes(16000 * 2), mode="manual")  # a second of silence: nothing heard
    await answered(device, marker)  # the empty tts start/stop pair that sends it back to idle
    await hass.async_block_till_done()
    assert sensor(hass).state == before
    assert len(hub_of(hass).devices[MAC].response_times.recent) == 1


def test_the_record_is_bounded_and_ignores_turns_that_played_nothing() -> None:
    times = ResponseTimes()
    times.add(Stages("voice", wake=0.0, speech_end=1.0))  # no frame: nothing played
    assert not times.recent
    for n in range(50):
        stages = Stages("voice", wake=n, speech_end=n + 1.0)
        stages.frame_sent(n + 1.25)
        stages.frame_sent(n + 3.0)
        times.add(stages)
    assert len(times.recent) == 10
    assert times.last is not None
    assert times.last.response_ms == 250.0
    assert times.last.offsets_ms() == {"wake": -1000.0, "first_frame": 250.0, "last_frame": 2000.0}


async def test_the_last_figure_comes_back_after_a_restart(hass: HomeAssistant, config_entry: Any) -> None:
    """A restart keeps the figure of the last turn until the next turn replaces it."""

    mock_restore_cache_with_extra_data(
        hass,
        [
            (
                State(SENSOR, "412.5", {"unit_of_measurement": "ms"}),
                {"native_value": 412.5, "native_unit_of_measurement": "ms"},
            )
        ],
    )
    config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(config_entry.entry_id)
    await hass.async_block_till_done()
    assert float(sensor(hass).state) == 412.5
