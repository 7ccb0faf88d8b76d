"""The device as an Assist satellite: real pipeline, real Opus both ways, real ffmpeg."""

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.event import async_track_state_change_event
from homeassistant.util import dt as dt_util
import pytest

from custom_components.xiaozhi_local.const import DOMAIN, EVENT_NOTIFICATION
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.voice import mic_packets

from .conftest import MAC, TOKEN, wait_settled, ws_url
from .helpers import EventWaiter, announce, logged_by_us, until
from .internals import hub_of, uplink_decoded
from .voice import Voice, loud_seconds, speech_pcm, speech_seconds


@pytest.fixture
async def device(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> AsyncIterator[SimulatedDevice]:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    await sim.connect()
    await wait_settled(hub_of(hass).devices[MAC])
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
    # Emotions carry their emoji in "text", as the firmware's servers send them (xiaozhi-sdk needs it).
    assert (device.log[1]["emotion"], device.log[1]["text"]) == ("thinking", "🤔")
    assert all(isinstance(m.get("text"), str) and m["text"] for m in device.log if m["type"] == "llm")
    # The answer's audio arrived whole and decodable: as long as the TTS made it (60 ms packets).
    played = len(device.speaker_pcm) / 2 / 24000
    expected = speech_seconds(ready.agent.reply)
    assert expected - 0.1 <= played <= expected + 0.2
    assert loud_seconds(bytes(device.speaker_pcm), 24000) > expected * 0.8
    assert ready.agent.inputs[0].text == stt["text"]
    state = hass.states.get("assist_satellite.kitchen")
    assert state is not None
    assert state.state == "idle"


async def wait_state(hass: HomeAssistant, entity_id: str, wanted: str) -> None:
    """Until the entity has the state (woken by its state changes)."""
    changed = asyncio.Event()

    @callback
    def on_change(_event: Any) -> None:
        changed.set()

    unsub = async_track_state_change_event(hass, entity_id, on_change)
    try:
        async with asyncio.timeout(5):
            while (state := hass.states.get(entity_id)) is None or state.state != wanted:
                changed.clear()
                await changed.wait()
    finally:
        unsub()


async def tts_stops(device: SimulatedDevice, count: int = 1) -> None:
    async with asyncio.timeout(30):
        while device.count(lambda m: m.get("type") == "tts" and m.get("state") == "stop") < count:
            device.logged.clear()
            await device.logged.wait()


async def test_custom_wake_word(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    """An unknown phrase followed at once by listen start is a custom wake word, not a question."""
    device.relisten = False
    await device.say(speech_pcm(), wake_word="你好小明")
    await tts_stops(device)
    assert len(ready.agent.inputs) == 1
    assert ready.agent.inputs[0].text.startswith("heard ")  # the speech was the question


@pytest.mark.parametrize("version", [2, 3])
async def test_framing_v2_v3(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any], version: int) -> None:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, protocol_version=version))
    await sim.connect()
    await wait_settled(hub_of(hass).devices[MAC])
    sim.relisten = False
    await sim.say(speech_pcm())
    await tts_stops(sim)
    assert float(next(m for m in sim.log if m["type"] == "stt")["text"].split()[1]) >= 1.0
    assert len(sim.speaker_pcm) / 2 / 24000 >= speech_seconds(ready.agent.reply) - 0.1
    await sim.drop()


async def test_manual_mode_keeps_the_socket_until_idle(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice
) -> None:
    """Push-to-talk: after the answer the device is idle but its socket stays (no "connection lost"
    on py-xiaozhi), its tools stay callable, and the hub's idle timeout closes it later."""
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    from custom_components.xiaozhi_local.const import DEFAULT_IDLE_TIMEOUT

    await device.say(speech_pcm(), mode="manual")  # press, speak, release
    await tts_stops(device)
    assert device.device_state == "idle"
    assert ready.agent.inputs[0].text.startswith("heard ")
    xdev = hub_of(hass).devices[MAC]
    assert xdev.link is not None
    result = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": xdev.device_id, "tool": "self.audio_speaker.set_volume", "arguments": {"volume": 40}},
        blocking=True,
        return_response=True,
    )
    assert result is not None
    assert result["text"] == "true"
    assert not device.closed.is_set()
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=DEFAULT_IDLE_TIMEOUT + 1))
    await device.wait_closed()  # then the idle connection is closed


async def test_follow_up_keeps_the_conversation(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    ready.agent.continue_conversation = True
    await device.say(speech_pcm())
    await tts_stops(device)
    # Auto mode: after tts stop the device sent listen start again; it speaks again.
    assert device.device_state == "listening"
    await device.say(speech_pcm(), start=False)
    await tts_stops(device, 2)
    first, second = ready.agent.inputs[:2]
    assert first.conversation_id == second.conversation_id


async def test_wake_phrase_is_passed_on(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    """Two boxes hear the same wake word: HA's duplicate-wake-up rule lets one answer."""
    from .conftest import MAC2, TOKEN2

    one = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    two = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN2, mac=MAC2))
    hub = hub_of(hass)
    for sim, mac in ((one, MAC), (two, MAC2)):
        await sim.connect()
        await wait_settled(hub.devices[mac])
        sim.relisten = False
    await asyncio.gather(one.say(speech_pcm(), wake_word="你好小智"), two.say(speech_pcm(), wake_word="你好小智"))
    waiters = {asyncio.create_task(tts_stops(sim)): sim for sim in (one, two)}
    done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    answered = waiters[done.pop()]
    other = two if answered is one else one
    await other.wait_closed()  # the duplicate ended its conversation quietly
    assert len(ready.agent.inputs) == 1
    for sim in (one, two):
        assert not any(m.get("type") == "alert" for m in sim.log)
        await sim.drop()


async def test_typed_text(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    await device.send_json({"type": "listen", "state": "detect", "text": "what time is it"})
    await device.send_notification("notifications/x")  # frames are handled in order:
    await waiter.wait()  # once this arrived, the detect was handled
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=1))  # and no listen start followed
    await tts_stops(device)
    assert ready.agent.inputs[0].text == "what time is it"
    assert ready.stt.received == []  # no speech-to-text for typed text
    assert len(device.speaker_pcm) > 0


async def test_streaming_tts_starts_early(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    ready.agent._attr_supports_streaming = True
    ready.agent.reply = (
        "Here is a longer answer so that the speech starts while the agent is still writing. "
        "It has a second sentence as well."
    )
    device.relisten = False
    await device.say(speech_pcm())
    await tts_stops(device)
    order = kinds(device)
    assert order.count("tts:start") == 1
    assert order.count("tts:stop") == 1
    # Speech began before the agent had finished (its final emotion comes after tts start).
    assert order.index("tts:start") < max(i for i, k in enumerate(order) if k == "llm")
    assert len(device.speaker_pcm) / 2 / 24000 >= speech_seconds(ready.agent.reply) - 0.2


async def test_abort_stops_the_answer(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    ready.agent.reply = "This answer goes on. " * 20  # about 20 seconds of speech
    device.relisten = False
    await device.say(speech_pcm())
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "start", timeout=30)
    await device.wait_audio(3)
    await device.abort()
    await tts_stops(device)
    assert len(device.speaker_pcm) / 2 / 24000 < 5  # stopped long before the end
    await wait_state(hass, "assist_satellite.kitchen", "idle")


async def test_pipeline_error_becomes_an_alert(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    ready.agent.fail = True
    device.relisten = False
    await device.say(speech_pcm())
    alert = await device.wait_message(lambda m: m.get("type") == "alert", timeout=30)
    assert set(alert) == {"type", "status", "message", "emotion"}
    assert all(isinstance(alert[k], str) and alert[k] for k in ("status", "message", "emotion"))
    await tts_stops(device)  # the device is brought back out of listening


async def test_announce(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    await announce(hass, "Dinner is ready")
    # The action returned after playback, with tts stop sent; the device reads it next.
    await tts_stops(device)
    assert kinds(device) == ["tts:start", "tts:sentence_start", "tts:stop"]
    assert device.log[1]["text"] == "Dinner is ready"
    assert len(device.speaker_pcm) / 2 / 24000 >= speech_seconds("Dinner is ready") - 0.1


async def test_announce_during_a_listening_turn_is_the_only_speech(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice
) -> None:
    """No empty tts start/stop pair first: the device goes speaking once, and hears all of it."""
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"})
    device.device_state = "listening"
    await wait_state(hass, "assist_satellite.kitchen", "listening")
    await announce(hass, "Dinner is ready")
    await tts_stops(device)
    assert kinds(device) == ["tts:start", "tts:sentence_start", "tts:stop"]
    assert len(device.speaker_pcm) / 2 / 24000 >= speech_seconds("Dinner is ready") - 0.1
    await hass.async_block_till_done(wait_background_tasks=True)


async def test_announce_while_away(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice, caplog: pytest.LogCaptureFixture
) -> None:
    """A device that connects per conversation, between two: the announcement is skipped with one
    log line (HA's broadcast goes on to the other satellites), no speech is made for nobody."""
    await device.drop()
    hub = hub_of(hass)
    await hub.async_wait_no_connections()
    state = hass.states.get("assist_satellite.kitchen")
    assert state is not None
    assert state.state != "unavailable"  # away by design, not off
    await announce(hass, "Hello")
    await announce(hass, "Hello again")
    assert ready.tts.messages == []
    assert logged_by_us(caplog).count("announcements are skipped between conversations") == 1


async def test_start_conversation(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    await hass.services.async_call(
        "assist_satellite",
        "start_conversation",
        {
            "entity_id": "assist_satellite.kitchen",
            "start_message": "Shall I turn off the lights?",
            "extra_system_prompt": "The user was asked about the lights.",
            "preannounce": False,
        },
        blocking=True,
    )
    # After the question the device listens (auto mode: listen start after tts stop); the user answers.
    await tts_stops(device)
    assert device.device_state == "listening"
    await device.say(speech_pcm(), start=False)
    await tts_stops(device, 2)
    assert ready.agent.inputs[0].extra_system_prompt == "The user was asked about the lights."


async def test_silence_ends_the_conversation(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    await device.say(b"", silence_after=0.5)  # listening, nobody speaks
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=25))
    await device.wait_closed()
    assert not any(m.get("type") == "alert" for m in device.log)


async def test_bad_audio_input_survives(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, protocol_version=2))
    await sim.connect()
    await wait_settled(hub_of(hass).devices[MAC])
    sim.relisten = False
    from xiaozhi_sim.voice import frame

    await sim.send_raw(frame(2, b"\x01\x02\x03"))  # audio before listen start
    await sim.send_json({"type": "listen", "state": "stop"})  # stop without start
    await sim.send_json({"type": "listen", "state": "start", "mode": "auto"})
    await sim.send_raw(frame(2, b"\xff" * 40))  # undecodable Opus
    await sim.send_raw(frame(2, b"\x01" * 10)[:-3] + b"\x00" * 8)  # a v2 header that lies about its length
    await sim.send_raw(frame(2, b""))  # empty (DTX) packet
    await sim.say(speech_pcm())  # a second listen start replaces the first turn; it still works
    await tts_stops(sim)
    assert float(next(m for m in sim.log if m["type"] == "stt")["text"].split()[1]) >= 1.0
    for kind in ("audio_outside_turn", "stop_without_start", "bad_opus", "bad_frame"):
        assert kind in caplog.text, kind
    await sim.drop()


async def test_announce_media_url_with_preannounce(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice, client: TestClient[Any, Any]
) -> None:
    """Media (and the preannounce sound) come from a URL, converted by HA's real ffmpeg."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from bench.bench_probe.engines import tone_wav

    async def chime(request: web.Request) -> web.Response:
        return web.Response(body=tone_wav(0.5, 16000), content_type="audio/wav")

    app = web.Application()
    app.router.add_get("/chime.wav", chime)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("/chime.wav"))
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": "assist_satellite.kitchen", "media_id": url, "preannounce_media_id": url},
        blocking=True,
    )
    await tts_stops(device)
    assert kinds(device) == ["tts:start", "tts:stop"]  # media without text: nothing to show
    played = len(device.speaker_pcm) / 2 / 24000
    assert 0.9 <= played <= 1.3  # the chime twice, both through ffmpeg
    await server.close()


async def test_device_vanishes_mid_answer(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    """TCP gone (no Close frame) while speaking: the satellite returns to idle, nothing keeps running."""
    ready.agent.reply = "This answer goes on. " * 20
    device.relisten = False
    await device.say(speech_pcm())
    await device.wait_audio(3)
    await device.drop()
    hub = hub_of(hass)
    await hub.async_wait_no_connections()
    await wait_state(hass, "assist_satellite.kitchen", "idle")
    # What was cancelled winds down (HA's TTS stops filling its cache); then nothing may be left
    # running: the test harness fails the test on any task or timer that is.
    await hass.async_block_till_done(wait_background_tasks=True)


@pytest.mark.parametrize("mp3", [False, True])
async def test_tts_is_converted_only_when_it_must_be(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice, mp3: bool
) -> None:
    """A WAV engine (22.05 kHz, as Piper) plays with no ffmpeg process; an MP3 engine needs one."""
    from unittest.mock import patch

    from homeassistant.components import tts

    ready.tts.mp3 = mp3
    conversions: list[str] = []
    original = tts._async_convert_audio

    def counting(hass_: HomeAssistant, from_extension: str, *args: Any, **kwargs: Any) -> Any:
        conversions.append(from_extension)
        return original(hass_, from_extension, *args, **kwargs)

    device.relisten = False
    with patch.object(tts, "_async_convert_audio", counting):
        await device.say(speech_pcm())
        await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
    assert conversions == (["mp3"] if mp3 else [])
    played = len(device.speaker_pcm) / 2 / 24000
    expected = speech_seconds(ready.agent.reply)
    assert expected - 0.1 <= played <= expected + 0.3  # (an MP3 encoder adds a little padding)
    assert loud_seconds(bytes(device.speaker_pcm), 24000) > expected * 0.8


@pytest.mark.parametrize("firmware", ["2.4.2", "2.5.0"])
async def test_downlink_fits_the_decode_queue_of_both_generations(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any], firmware: str
) -> None:
    """The satellite's lead (0.3 s) stays within 2.5's 20-packet (1.2 s) queue: nothing is dropped."""
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, firmware_version=firmware))
    await sim.connect()
    try:
        await wait_settled(hub_of(hass).devices[MAC])
        sim.relisten = False
        await sim.say(speech_pcm())
        await sim.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
        assert len(sim.audio) >= speech_seconds(ready.agent.reply) / 0.06 - 2
        assert sim.queue_dropped == 0
    finally:
        await sim.drop()


async def test_push_to_talk_burst_is_heard_whole(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    """A client that sends its recording as fast as it can and ``listen stop`` right after: the audio
    still being decoded when the stop arrives belongs to the utterance."""
    from xiaozhi_sim.voice import MicEncoder, frame

    device.relisten = False
    pcm = speech_pcm()
    await device.send_json({"type": "listen", "state": "start", "mode": "manual"})
    for packet in MicEncoder().packets(pcm):
        await device.send_raw(frame(1, packet))
    await device.send_json({"type": "listen", "state": "stop"})
    await tts_stops(device)
    heard = float(next(m for m in device.log if m["type"] == "stt")["text"].split()[1])
    assert heard == pytest.approx(loud_seconds(pcm), abs=0.15)


async def test_a_microphone_that_stops_sending_ends_the_utterance(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice
) -> None:
    """Auto mode, speech, then no packets at all (not even silence, so HA's VAD never ends it): the
    utterance ends after the audio gap timeout and is answered."""
    from pytest_homeassistant_custom_component.common import async_fire_time_changed

    from custom_components.xiaozhi_local.const import AUDIO_GAP_TIMEOUT

    device.relisten = False
    pcm = speech_pcm()
    block = 320  # 10 ms
    last_loud = max(i for i in range(0, len(pcm) - block, block) if loud_seconds(pcm[i : i + block + 2]) > 0)
    await device.say(pcm[: last_loud + block], silence_after=0)  # ends on speech
    link = hub_of(hass).devices[MAC].link
    assert link is not None
    sent = len(mic_packets(pcm[: last_loud + block], device.frame_ms))
    await until(lambda: link.audio_frames >= sent)  # every packet reached the satellite
    await uplink_decoded(hub_of(hass).devices[MAC])  # … and is decoded, in the pipeline
    assert not any(m["type"] == "stt" for m in device.log)  # still listening
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=AUDIO_GAP_TIMEOUT + 0.5))
    await tts_stops(device)
    assert float(next(m for m in device.log if m["type"] == "stt")["text"].split()[1]) >= 1.0


async def test_push_to_talk_is_not_cut_at_a_pause(hass: HomeAssistant, ready: Voice, device: SimulatedDevice) -> None:
    """Push-to-talk ends when the button is released (``listen stop``), not at a pause in the speech:
    HA's VAD would end the utterance after the "finished speaking" silence."""
    device.relisten = False
    pcm = speech_pcm()
    pause = bytes(16000 * 2 * 2)  # 2 s of silence, longer than any "finished speaking" setting
    await device.say(pcm + pause + pcm, mode="manual", realtime=False)
    await tts_stops(device)
    heard = float(next(m for m in device.log if m["type"] == "stt")["text"].split()[1])
    assert heard == pytest.approx(2 * loud_seconds(pcm), abs=0.2)  # both halves


@pytest.mark.parametrize(
    "media_id",
    ["file://{wav}", "file:{wav}", "FILE:{wav}", "concat:{wav}|{wav}", "subfile,,start,0,end,0,,:{wav}"],
)
async def test_announced_media_never_reads_home_assistants_files(
    hass: HomeAssistant, ready: Voice, device: SimulatedDevice, tmp_path: Path, media_id: str
) -> None:
    """A service's media id reaches ffmpeg: only http(s) is opened, never a local file, however named."""
    import wave

    from homeassistant.exceptions import HomeAssistantError

    wav = tmp_path / "secret.wav"
    with wave.open(str(wav), "wb") as out:  # a file ffmpeg would happily play
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(speech_pcm())
    for service, data in (
        ("announce", {"media_id": media_id.format(wav=wav), "preannounce": False}),
        ("start_conversation", {"start_media_id": media_id.format(wav=wav), "preannounce": False}),
    ):
        with pytest.raises(HomeAssistantError) as err:
            await hass.services.async_call(
                "assist_satellite", service, {"entity_id": "assist_satellite.kitchen", **data}, blocking=True
            )
        assert err.value.translation_key == "media_unreadable"
    assert not any(m.get("type") == "tts" for m in device.log)  # the device was told nothing
    assert device.audio == []
