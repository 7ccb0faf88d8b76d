"""Real conversations, turn after turn: every exchange belongs to its connection.

Through real WebSockets, with simulator flavours that behave as the clients do: the firmware
(auto, manual, realtime), a client that streams its microphone without pause, typed text.
"""

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
import logging
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.components.assist_pipeline import async_get_pipeline, async_update_pipeline
from homeassistant.core import HomeAssistant
from homeassistant.helpers import issue_registry as ir
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed

from custom_components.xiaozhi_local.const import DEFAULT_SILENCE_TIMEOUT, DOMAIN
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.voice import UPLINK_RATE, MicEncoder, frame

from .conftest import MAC, TOKEN, wait_settled, ws_url
from .helpers import until
from .internals import hub_of
from .test_voice import kinds, tts_stops, wait_state
from .voice import Voice, loud_seconds, speech_pcm

SATELLITE = "assist_satellite.kitchen"


def satellite(hass: HomeAssistant) -> Any:
    return hub_of(hass).devices[MAC].voice


@pytest.fixture
async def make(hass: HomeAssistant, client: TestClient[Any, Any]) -> AsyncIterator[Any]:
    """Connected simulated devices (dropped at the end)."""
    made: list[SimulatedDevice] = []

    async def factory(**kwargs: Any) -> SimulatedDevice:
        options: dict[str, Any] = {"url": ws_url(client), "token": TOKEN, "mac": MAC} | kwargs
        sim = SimulatedDevice(SimulatorOptions(**options))
        made.append(sim)
        await sim.connect()
        await wait_settled(hub_of(hass).devices[MAC])
        return sim

    yield factory
    for sim in made:
        await sim.drop()


async def speak_part(device: SimulatedDevice, seconds: float, mode: str = "auto") -> None:
    """``listen start`` and the first ``seconds`` of speech, then nothing (no silence, no stop)."""
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": mode})
    pcm = speech_pcm()[: int(UPLINK_RATE * 2 * seconds)]
    for packet in MicEncoder(60).packets(pcm):
        await device.send_raw(frame(1, packet))


@pytest.mark.parametrize("mode", ["auto", "manual", "realtime"])
async def test_a_disconnect_while_listening_ends_the_run(
    hass: HomeAssistant, ready: Voice, make: Any, mode: str
) -> None:
    """Connect, talk, drop, again and again: the satellite is idle after each drop, and nothing of an
    earlier run (its answer, an empty tts start/stop) reaches the next connection."""
    for _ in range(4):
        device = await make()
        await speak_part(device, 1.0, mode)
        await wait_state(hass, SATELLITE, "listening")
        await device.drop()
        await wait_state(hass, SATELLITE, "idle")
        assert not hub_of(hass).devices[MAC].exchanging
        await hass.async_block_till_done(wait_background_tasks=True)  # the cancelled run winds down
    device = await make()
    device.relisten = False
    await device.say(speech_pcm(), mode=mode)
    await tts_stops(device)
    assert kinds(device)[0] == "stt"  # no stale tts start/stop came first
    assert [k for k in kinds(device) if k.startswith("tts:")].count("tts:start") == 1
    assert ready.agent.inputs[-1].text.startswith("heard ")
    assert len(ready.agent.inputs) == 1  # none of the dropped turns was answered
    await wait_state(hass, SATELLITE, "idle")


async def test_barge_in_in_manual_mode_starts_the_new_turn(hass: HomeAssistant, ready: Voice, make: Any) -> None:
    device = await make()
    await device.say(speech_pcm(), mode="manual")
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "start", timeout=30)
    await device.abort()  # the button, while it speaks
    await tts_stops(device)  # the speech stopped
    await device.say(speech_pcm(), mode="manual")  # and the new question is asked at once
    await tts_stops(device, 2)
    assert not device.closed.is_set()
    assert len(ready.agent.inputs) == 2


async def test_abort_while_listening_cancels_the_turn(hass: HomeAssistant, ready: Voice, make: Any) -> None:
    device = await make()
    await speak_part(device, 1.2)
    await wait_state(hass, SATELLITE, "listening")
    await device.abort()
    await wait_state(hass, SATELLITE, "idle")
    device.relisten = False
    await device.say(speech_pcm())
    await tts_stops(device)
    assert len(ready.agent.inputs) == 1  # the partial audio was not answered
    assert kinds(device)[0] == "stt"


async def test_a_streaming_client_gets_an_answer_for_every_utterance(
    hass: HomeAssistant, ready: Voice, make: Any
) -> None:
    """``listen start`` once (realtime), then the microphone streams on: each utterance is a turn."""
    device = await make()
    await device.say(speech_pcm(), mode="realtime")
    await tts_stops(device)
    await device.say(speech_pcm(), mode="realtime", start=False)  # no listen start: it just speaks again
    await tts_stops(device, 2)
    await device.type_text("what time is it")
    await tts_stops(device, 3)
    await device.say(speech_pcm(), mode="realtime", start=False)  # speech after a typed message
    await tts_stops(device, 4)
    assert [i.text.split(" ")[0] for i in ready.agent.inputs] == ["heard", "heard", "what", "heard"]


async def test_a_microphone_that_stops_sending_ends_the_utterance(hass: HomeAssistant, ready: Voice, make: Any) -> None:
    device = await make()
    device.relisten = False
    await speak_part(device, 1.5)  # cut off mid-speech: no trailing silence, no listen stop
    await wait_state(hass, SATELLITE, "listening")
    await asyncio.sleep(0)
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=5))
    await tts_stops(device)
    assert ready.agent.inputs[0].text.startswith("heard ")


async def test_typed_text_is_echoed_and_answered_without_an_empty_pair(
    hass: HomeAssistant, ready: Voice, make: Any
) -> None:
    device = await make(flavor="browser")
    await device.send_json({"type": "listen", "state": "start", "mode": "auto"})  # the page starts listening
    await device.type_text("turn on the light")
    await tts_stops(device)
    assert kinds(device)[:2] == ["stt", "llm"]
    assert device.log[0]["text"] == "turn on the light"  # the user's line, drawn by the client
    assert kinds(device).count("tts:start") == 1
    assert ready.agent.inputs[0].text == "turn on the light"


async def test_a_typed_run_can_be_cancelled(hass: HomeAssistant, ready: Voice, make: Any) -> None:
    device = await make(flavor="browser")
    release = asyncio.Event()
    original = ready.agent._async_handle_message

    async def slow(user_input: Any, chat_log: Any) -> Any:
        await release.wait()
        return await original(user_input, chat_log)

    ready.agent._async_handle_message = slow  # type: ignore[method-assign]
    await device.type_text("a long question")
    await device.wait_message(lambda m: m.get("type") == "llm", timeout=10)
    await device.abort()
    await wait_state(hass, SATELLITE, "idle")
    release.set()
    await hass.async_block_till_done()
    assert kinds(device).count("tts:start") == 0  # cancelled: never answered


async def test_start_conversation_prompt_applies_to_a_typed_answer(
    hass: HomeAssistant, ready: Voice, make: Any
) -> None:
    device = await make(flavor="browser")
    device.relisten = False  # the page does not open its microphone after the question: the user types
    await hass.services.async_call(
        "assist_satellite",
        "start_conversation",
        {
            "entity_id": SATELLITE,
            "start_message": "Dinner?",
            "extra_system_prompt": "Ask about dinner.",
            "preannounce": False,
        },
        blocking=True,
    )
    await device.type_text("pasta")
    await tts_stops(device, 2)
    assert ready.agent.inputs[-1].text == "pasta"
    assert ready.agent.inputs[-1].extra_system_prompt == "Ask about dinner."


@pytest.fixture
async def no_speech_engines(hass: HomeAssistant, voice: Voice, setup_integration: MockConfigEntry) -> Voice:
    """A fresh Home Assistant's default assistant: a conversation agent, no STT, no TTS."""
    await async_update_pipeline(
        hass,
        async_get_pipeline(hass),
        stt_engine=None,
        tts_engine=None,
        conversation_engine=voice.agent.entity_id,
        conversation_language="en",
        language="en",
    )
    return voice


async def test_an_assistant_without_speech_engines_does_not_loop_the_device(
    hass: HomeAssistant,
    issue_registry: ir.IssueRegistry,
    no_speech_engines: Voice,
    make: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    device = await make()
    await device.say(speech_pcm())  # auto mode: it would listen again after any tts stop
    await device.wait_closed()
    assert kinds(device) == ["alert"]  # one clear alert, no tts start/stop to re-arm it
    assert "speech-to-text" in device.log[0]["message"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "has no" in r.getMessage()]
    assert len(warnings) == 1
    assert "speech-to-text" in warnings[0]
    issue_ids = {issue_id for (domain, issue_id) in issue_registry.issues if domain == DOMAIN}
    assert "pipeline_incomplete_stt_tts" in issue_ids
    again = await make()  # a second try: the same, and no second warning
    await again.say(speech_pcm())
    await again.wait_closed()
    assert kinds(again) == ["alert"]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING and "has no" in r.getMessage()]) == 1


async def test_typed_text_gets_its_reply_as_text_without_text_to_speech(
    hass: HomeAssistant, no_speech_engines: Voice, make: Any
) -> None:
    device = await make(flavor="browser")
    await device.type_text("turn on the light")
    await tts_stops(device)
    assert kinds(device)[0] == "stt"
    shown = [m["text"] for m in device.log if m.get("state") == "sentence_start"]
    assert shown == ["The kitchen light is on.", "Anything else?"]
    assert device.audio == []  # shown, not spoken


async def test_the_xinnan_test_page_pairs_and_answers_typed_text(
    hass: HomeAssistant, no_speech_engines: Voice, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """The page's own sequence (``ota-connector.js``, ``websocket.js``): OTA, query auth, its hello, its
    wake-up messages, typed text. On a Home Assistant whose assistant has no speech engines yet."""
    from custom_components.xiaozhi_local.const import OTA_PATH, WS_PATH

    hass.config_entries.async_update_entry(setup_integration, options={"accept_without_code": True})
    await hass.async_block_till_done()
    page_mac, page_client = "02:11:22:33:44:55", "web_test_client_1"
    resp = await client.post(
        OTA_PATH,
        json={"version": 0, "uuid": "", "mac_address": page_mac, "board": {"type": "xiaozhi-web-test"}},
        headers={"Device-Id": page_mac, "Client-Id": page_client},
    )
    websocket = (await resp.json())["websocket"]
    assert websocket["token"]
    params = {"authorization": f"Bearer {websocket['token']}", "device-id": page_mac, "client-id": page_client}
    async with client.ws_connect(WS_PATH, params=params) as ws:
        await ws.send_json({"type": "hello", "device_id": page_mac, "features": {"mcp": True, "emoji": True}})
        hello = await ws.receive_json()
        assert hello["type"] == "hello"
        assert hello["session_id"]
        sid = hello["session_id"]
        await ws.send_json({"session_id": sid, "type": "listen", "state": "detect", "text": "嘿，你好呀"})
        await ws.send_json({"session_id": sid, "type": "listen", "state": "start", "mode": "auto"})
        await ws.send_json({"type": "listen", "state": "detect", "text": "what time is it"})
        seen: list[dict[str, Any]] = []
        while not (seen and seen[-1].get("type") == "tts" and seen[-1].get("state") == "stop"):
            message = await ws.receive_json(timeout=10)
            if message.get("type") != "mcp":
                seen.append(message)
    assert seen[0] == {"type": "stt", "text": "what time is it"}
    assert any(m.get("state") == "sentence_start" for m in seen)  # shown as text: no TTS yet


@pytest.mark.parametrize("flavor", ["firmware", "py-xiaozhi"])
@pytest.mark.parametrize("mode", ["auto", "realtime"])
async def test_the_agent_asks_back_and_the_device_listens_again(
    hass: HomeAssistant, ready: Voice, make: Any, flavor: str, mode: str
) -> None:
    """``continue_conversation``: the next utterance needs no wake word, and it is the same conversation.

    Auto mode: the client sends ``listen start`` again once the answer has played; realtime: it
    sends nothing and just streams on (the firmware, and py-xiaozhi, which even listens while it plays).
    """
    ready.agent.continue_conversation = True
    ready.agent.reply = "Which room?"
    device = await make(flavor=flavor)
    await device.say(speech_pcm(), mode=mode)
    await tts_stops(device)
    assert device.device_state == "listening"
    listen_starts = [m for m in device.sent if m.get("type") == "listen" and m.get("state") == "start"]
    assert len(listen_starts) == (2 if mode == "auto" else 1)
    ready.agent.continue_conversation = False
    await device.say(speech_pcm(), mode=mode, start=False)  # the answer to "Which room?", no wake word
    await tts_stops(device, 2)
    first, second = ready.agent.inputs
    assert first.conversation_id == second.conversation_id
    assert device.closed.is_set() is False


async def test_push_to_talk_asked_back_waits_for_the_next_press(hass: HomeAssistant, ready: Voice, make: Any) -> None:
    """Manual mode: the firmware goes idle after the answer; the socket stays for the next press,
    which continues the same conversation. Nothing is sent to make it listen."""
    ready.agent.continue_conversation = True
    ready.agent.reply = "Which room?"
    device = await make()
    await device.say(speech_pcm(), mode="manual")
    await tts_stops(device)
    assert device.device_state == "idle"
    assert [k for k in kinds(device) if k.startswith("tts:")] == ["tts:start", "tts:sentence_start", "tts:stop"]
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=25))  # past the silence limit
    await hass.async_block_till_done()
    assert not device.closed.is_set()
    await device.say(speech_pcm(), mode="manual")  # the next press
    await tts_stops(device, 2)
    first, second = ready.agent.inputs
    assert first.conversation_id == second.conversation_id


async def test_the_load_tester_that_never_releases_is_answered(
    hass: HomeAssistant, ready: Voice, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """xiaozhi-concurrent: manual listen start, speech, then silence, no listen stop. Push-to-talk
    waits for the release, but seconds of nothing but silence after speech end the turn too (a
    pause held on the button is shorter: ``test_push_to_talk_is_not_cut_at_a_pause``)."""
    hass.config_entries.async_update_entry(setup_integration, options={"accept_without_code": True})
    await hass.async_block_till_done()
    tester = SimulatedDevice(SimulatorOptions(url=ws_url(client), mac="02:00:00:00:00:07", flavor="xiaozhi-concurrent"))
    await tester.connect()
    await tester.say(speech_pcm())
    await tts_stops(tester)
    stt = next(m for m in tester.log if m.get("type") == "stt")
    assert stt["text"].startswith("heard ")
    assert float(stt["text"].split()[1]) == pytest.approx(loud_seconds(speech_pcm()), abs=0.3)
    assert len(ready.agent.inputs) == 1
    assert not any(m.get("state") == "stop" and m.get("type") == "listen" for m in tester.sent)
    await tester.drop()


async def test_a_microphone_of_silence_ends_the_conversation_as_the_option_says(
    hass: HomeAssistant, ready: Voice, make: Any
) -> None:
    """Only silence (auto mode): HA ends each turn at its command limit with no text, the device
    listens again, and the "no speech" time still counts from when it began listening."""
    device = await make()
    device.relisten = False
    started = dt_util.utcnow()
    await device.say(b"", silence_after=16.0)  # more than HA's 15 s command limit, sent fast
    await tts_stops(device)  # no text: the empty answer
    assert not any(m.get("type") == "stt" and m.get("text") for m in device.log)
    await until(lambda: device.device_state == "listening")  # it listens again: a later turn
    await device.say(b"", silence_after=0.5)
    assert not device.closed.is_set()
    async_fire_time_changed(hass, started + timedelta(seconds=DEFAULT_SILENCE_TIMEOUT + 0.1))
    async with asyncio.timeout(5):  # by that timer: 20 s after it began listening, not after the second turn began
        await device.wait_closed()
    assert ready.agent.inputs == []
