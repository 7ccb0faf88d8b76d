"""``assist_satellite.ask_question`` and continued conversations, as the clients behave.

The question is spoken on the device's open channel; the device then listens (auto mode: it
sends ``listen start`` once the question has played), the answer is heard by the pipeline's
speech-to-text and matched to the given answers in the configured language. The conversation
agent never sees the answer. A device that cannot listen (idle, no channel) or that does not
answer gives a clear error, never a call that waits forever.
"""

import asyncio
from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import async_fire_time_changed

from xiaozhi_sim import SimulatedDevice

from .conftest import mqtt_online, ws_url
from .helpers import until
from .internals import hub_of
from .test_voice import tts_stops, wait_state
from .voice import Voice, speech_pcm

SATELLITE = "assist_satellite.kitchen"
ANSWERS_EN = [
    {"id": "yes", "sentences": ["yes", "yes please", "sure"]},
    {"id": "no", "sentences": ["no", "no thanks"]},
    {"id": "minutes", "sentences": ["in {minutes} minutes"]},
]
ANSWERS_ZH = [
    {"id": "yes", "sentences": ["好的", "好", "可以"]},
    {"id": "no", "sentences": ["不要", "不用了"]},
]


async def ask(hass: HomeAssistant, question: str, answers: list[dict[str, Any]] | None) -> asyncio.Task[Any]:
    """The action, as an automation calls it (its response is the answer)."""
    data: dict[str, Any] = {"entity_id": SATELLITE, "question": question, "preannounce": False}
    if answers is not None:
        data["answers"] = answers
    task = hass.async_create_task(
        hass.services.async_call("assist_satellite", "ask_question", data, blocking=True, return_response=True)
    )
    await asyncio.sleep(0)
    return task


async def answer(device: SimulatedDevice) -> None:
    """The question has played; the device listens (auto: its own listen start) and the user speaks."""
    await tts_stops(device)
    assert device.device_state == "listening"
    await device.say(speech_pcm(), start=False)


@pytest.mark.parametrize(
    ("language", "answers", "heard", "expected"),
    [
        ("en", ANSWERS_EN, "Yes please", {"id": "yes", "sentence": "Yes please", "slots": {}}),
        ("en", ANSWERS_EN, "in 10 minutes", {"id": "minutes", "sentence": "in 10 minutes", "slots": {"minutes": "10"}}),
        ("en", ANSWERS_EN, "maybe later", {"id": None, "sentence": "maybe later", "slots": {}}),
        ("en", None, "whatever you like", {"id": None, "sentence": "whatever you like", "slots": {}}),
        ("zh-Hans", ANSWERS_ZH, "不用了", {"id": "no", "sentence": "不用了", "slots": {}}),
        ("zh-Hans", ANSWERS_ZH, "好的", {"id": "yes", "sentence": "好的", "slots": {}}),
    ],
)
async def test_a_question_is_answered(
    hass: HomeAssistant,
    ready: Voice,
    talking: SimulatedDevice,
    language: str,
    answers: list[dict[str, Any]] | None,
    heard: str,
    expected: dict[str, Any],
) -> None:
    hass.config.language = language
    ready.stt.text = heard
    asking = await ask(hass, "Shall I turn off the lights?", answers)
    question = await talking.wait_message(lambda m: m.get("state") == "sentence_start", timeout=15)
    assert question["text"] == "Shall I turn off the lights?"
    await answer(talking)
    async with asyncio.timeout(15):
        result = await asking
    assert result == expected
    stt = await talking.wait_message(lambda m: m.get("type") == "stt")
    assert stt["text"] == heard  # the device shows what it heard
    assert ready.agent.inputs == []  # the answer went to the automation, not to the agent
    assert ready.tts.messages == ["Shall I turn off the lights?"]
    await wait_state(hass, SATELLITE, "listening")  # then it listens on, as after any answer


async def test_push_to_talk_answers_with_a_press(hass: HomeAssistant, ready: Voice, talking: SimulatedDevice) -> None:
    """Manual mode: after the question the firmware goes idle; the user presses to answer."""
    talking.listening_mode = "manual"  # its last turn was push-to-talk
    ready.stt.text = "no thanks"
    asking = await ask(hass, "Shall I turn off the lights?", ANSWERS_EN)
    await tts_stops(talking)
    assert talking.device_state == "idle"
    assert talking.count(lambda m: m.get("type") == "tts" and m.get("state") == "start") == 1
    await talking.say(speech_pcm(), mode="manual")  # press, speak, release
    async with asyncio.timeout(15):
        result = await asking
    assert result["id"] == "no"
    assert ready.agent.inputs == []


async def test_an_idle_device_cannot_be_asked(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    """Over MQTT without a conversation the device cannot be made to listen: a clear error at once."""
    hub = hub_of(hass)
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client)})
    await hass.async_block_till_done()
    device = await mqtt_online(hub, client)
    with pytest.raises(HomeAssistantError) as err:
        async with asyncio.timeout(10):
            await (await ask(hass, "Shall I turn off the lights?", ANSWERS_EN))
    assert err.value.translation_key == "question_no_channel"
    assert "Kitchen" in str(err.value)
    assert ready.tts.messages == []  # refused before any speech was made
    assert not any(m.get("type") in ("tts", "alert", "notify") for m in device.log)
    await device.drop()


async def test_nobody_answers(hass: HomeAssistant, ready: Voice, talking: SimulatedDevice) -> None:
    """Silence after the question: the conversation ends as after any silence, and the action fails."""
    asking = await ask(hass, "Shall I turn off the lights?", ANSWERS_EN)
    await tts_stops(talking)
    await talking.say(b"", silence_after=0.5, start=False)  # listening, nobody speaks
    await wait_state(hass, SATELLITE, "listening")
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=25))
    with pytest.raises(HomeAssistantError) as err:
        async with asyncio.timeout(10):
            await asking
    assert err.value.translation_key == "question_unanswered"
    assert ready.agent.inputs == []


async def test_the_device_vanishing_ends_the_question(
    hass: HomeAssistant, ready: Voice, talking: SimulatedDevice
) -> None:
    asking = await ask(hass, "Shall I turn off the lights?", ANSWERS_EN)
    await tts_stops(talking)
    await talking.drop()
    with pytest.raises(HomeAssistantError) as err:
        async with asyncio.timeout(10):
            await asking
    assert err.value.translation_key == "question_unanswered"
    # Back to idle on WebSocket (away between conversations by design); an always-connected device
    # that dropped is off: its satellite is unavailable until it is back.
    await wait_state(hass, SATELLITE, "unavailable" if talking.speaks_mqtt else "idle")


async def test_two_questions_at_once_then_the_device_drops(
    hass: HomeAssistant, ready: Voice, talking: SimulatedDevice
) -> None:
    """Every waiter ends, and with a translated reason: the first question is dismissed by the
    second, the second by the device going away."""
    first = await ask(hass, "Shall I turn off the lights?", ANSWERS_EN)
    await talking.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "start")
    second = await ask(hass, "Shall I lock the door?", ANSWERS_EN)
    await until(first.done)  # the second dismissed it: the second waits now
    await talking.drop()
    for asking in (first, second):
        with pytest.raises(HomeAssistantError) as err:
            async with asyncio.timeout(10):
                await asking
        assert err.value.translation_key in ("question_unanswered", "device_offline"), err.value
        assert str(err.value)  # said, not empty
