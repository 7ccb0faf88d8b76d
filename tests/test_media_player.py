"""The device as Home Assistant's speaker: media through a conversation channel, or ``notify`` while idle.

Media really goes through HA's ffmpeg: a local file of HA's media source, a radio-like endless
HTTP stream served on loopback. The simulated devices decode what they receive as the firmware
plays it (only while speaking, into a bounded queue).
"""

from array import array
import asyncio
from collections.abc import AsyncIterator
import contextlib
import math
import os
from pathlib import Path
import re
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import WebSocketGenerator

from bench.bench_probe.engines import mp3_of, tone_wav, wav_of
from custom_components.xiaozhi_local.hub import XiaozhiHub
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import CLIENT_ID, MAC, TOKEN, mqtt_in_conversation, mqtt_online, served_hub, wait_settled, ws_url
from .helpers import Clock, wait_entity
from .internals import hub_of
from .voice import Voice, speech_pcm

PLAYER = "media_player.kitchen_speaker"
SONG_SECONDS = 2.0


@pytest.fixture
async def media(hass: HomeAssistant, tmp_path: Path, setup_integration: MockConfigEntry) -> Path:
    """HA's media source (a dependency of ours, so already set up) with a local folder.

    The local source keeps the very dict of ``hass.config.media_dirs``: change it in place.
    """
    folder = tmp_path / "media"
    folder.mkdir()
    (folder / "song.wav").write_bytes(tone_wav(SONG_SECONDS))
    assert "media_source" in hass.config.components
    hass.config.media_dirs.clear()
    hass.config.media_dirs["local"] = str(folder)
    assert await async_setup_component(hass, "websocket_api", {})  # the UI's API, before the server starts
    return folder


@pytest.fixture
async def hub(
    hass: HomeAssistant, media: Path, ready: Voice, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> XiaozhiHub:
    """Devices reach the test server; so does ffmpeg, through HA's internal URL."""
    await hass.config.async_update(internal_url=str(client.make_url("/")).rstrip("/"))
    hub = await served_hub(hass, setup_integration, client)
    hub.hass.data["ffmpeg_before_test"] = set(ffmpeg_children())  # HA's own version check, unreaped
    return hub


class Radio:
    """A radio station on loopback: an endless MP3 stream, as Radio Browser's stations send."""

    def __init__(self) -> None:
        self.chunk = mp3_of(tone_wav(1.0, 22050))
        self.listeners = 0
        self.changed = asyncio.Condition()
        app = web.Application()
        app.router.add_get("/stream.mp3", self.stream)
        app.router.add_get("/garbage.mp3", self.garbage)
        self.server = TestServer(app, host="127.0.0.1")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        await self._count(+1)
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg", "icy-name": "Loopback FM"})
        await response.prepare(request)
        try:
            while True:
                await response.write(self.chunk)
                await asyncio.sleep(0.5)  # faster than real time, never ahead by much
        except ConnectionError, asyncio.CancelledError:
            pass
        finally:
            await self._count(-1)
        return response

    async def _count(self, step: int) -> None:
        async with self.changed:
            self.listeners += step
            self.changed.notify_all()

    async def wait_no_listeners(self) -> None:
        """Until every listener hung up (the station notices at its next write, within 0.5 s)."""
        async with asyncio.timeout(5), self.changed:
            await self.changed.wait_for(lambda: self.listeners == 0)

    async def garbage(self, request: web.Request) -> web.Response:
        return web.Response(body=b"\x00not audio\x17" * 500, content_type="audio/mpeg")

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))


@pytest.fixture
async def radio() -> AsyncIterator[Radio]:
    station = Radio()
    await station.server.start_server()
    yield station
    await station.server.close()


@pytest.fixture
async def ws_device(hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[SimulatedDevice]:
    """A device in a conversation over WebSocket."""
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, client_id=CLIENT_ID))
    await device.connect()
    await wait_settled(hub.devices[MAC])
    yield device
    await device.drop()


async def idle_once_heard(hass: HomeAssistant) -> None:
    """The song's length passes (on the loop's clock): the player is idle, not before."""
    clock = Clock(hass)
    try:
        await clock.advance(SONG_SECONDS)
        await wait_entity(hass, PLAYER, lambda s: s.state == "idle")
    finally:
        clock.restore()


async def play(hass: HomeAssistant, media_id: str, **extra: Any) -> None:
    await hass.services.async_call(
        "media_player",
        "play_media",
        {"entity_id": PLAYER, "media_content_id": media_id, "media_content_type": "music", **extra},
        blocking=True,
    )


async def tts_stopped(device: SimulatedDevice, timeout: float = 15) -> None:
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout)


def pattern_wav(pattern: list[tuple[float, bool]], rate: int = 44100) -> bytes:
    """A 440 Hz tone switched on and off: (seconds, sounding) in turn."""
    samples = array("h")
    for seconds, on in pattern:
        start = len(samples)
        samples.extend(
            int(9000 * math.sin(2 * math.pi * 440 * (start + i) / rate)) if on else 0
            for i in range(round(seconds * rate))
        )
    return wav_of(samples, rate)


def ffmpeg_children() -> list[str]:
    """This process's ffmpeg children that still run or wait to be reaped: pid, state, command."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            pid, rest = (proc / "stat").read_text().split(" (", 1)
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        name, fields = rest.rsplit(") ", 1)
        if name == "ffmpeg" and int(fields.split()[1]) == os.getpid():
            found.append(f"{pid} {fields.split()[0]} {cmdline}")
    return found


async def media_tasks_done(hass: HomeAssistant) -> None:
    """Until the media tasks have ended, a cancelled one too (which HA's block_till_done skips)."""
    await hass.async_block_till_done(wait_background_tasks=True)
    tasks = [task for task in asyncio.all_tasks() if task.get_name().startswith("xiaozhi_local media")]
    async with asyncio.timeout(5):
        await asyncio.gather(*tasks, return_exceptions=True)


def ffmpeg_left(hass: HomeAssistant) -> list[str]:
    """The ffmpeg children that this test started and that are still there."""
    before: set[str] = hass.data["ffmpeg_before_test"]
    return [child for child in ffmpeg_children() if child not in before]


async def ffmpeg_ended(hass: HomeAssistant) -> list[str]:
    """What is left of this test's ffmpeg children once they had time to end (empty: nothing).

    A killed child is reaped at the loop's next look at its children, not by the task that killed
    it when that task was cancelled meanwhile: "Z" for a moment is an ending, not a leak.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while ffmpeg_left(hass):  # noqa: ASYNC110 - nothing announces a child's end here
                await asyncio.sleep(0.05)
    return ffmpeg_left(hass)


def late_packets(device: SimulatedDevice) -> list[float]:
    """How late each packet came after the speaker, playing since the first, needed it (s)."""
    first = device.audio_at[0]
    return [at - (first + index * 0.06) for index, at in enumerate(device.audio_at) if at > first + index * 0.06 + 0.1]


def envelope(pcm: bytes, rate: int) -> list[bool]:
    """Per 50 ms: sound (True) or silence; from the first sound on."""
    samples = array("h", pcm[: len(pcm) - len(pcm) % 2])
    block = rate // 20
    windows = [
        sum(abs(v) for v in samples[i : i + block]) / block > 1000 for i in range(0, len(samples) - block + 1, block)
    ]
    return windows[windows.index(True) :] if True in windows else []


async def test_a_local_file_plays_through_the_conversation(
    hass: HomeAssistant, hub: XiaozhiHub, talking: SimulatedDevice, media: Path
) -> None:
    # A song of sound and silence of different lengths: the device must hear the same pattern.
    pattern = [(0.3, True), (0.2, False), (0.5, True), (0.3, False), (0.2, True), (0.5, False)]
    (media / "steps.wav").write_bytes(pattern_wav(pattern))
    state = hass.states.get(PLAYER)
    assert state is not None
    assert state.state == "idle"
    marker = len(talking.log)
    await play(hass, "media-source://media_source/local/steps.wav")
    state = await wait_entity(hass, PLAYER, lambda s: s.state == "playing")
    assert state.attributes["media_title"] == "steps"
    await tts_stopped(talking)
    # Framed like speech: tts start, the title, the audio, tts stop; all of it, nothing late or dropped.
    kinds = [(m["type"], m.get("state"), m.get("text")) for m in talking.log[marker:] if m["type"] == "tts"]
    assert kinds == [("tts", "start", None), ("tts", "sentence_start", "steps"), ("tts", "stop", None)]
    heard = len(talking.speaker_pcm) / 2 / 24000
    assert 2.0 - 0.1 <= heard <= 2.0 + 0.2
    # In order: each 50 ms window as in the file, but for one window at each edge.
    expected = [on for seconds, on in pattern for _ in range(round(seconds * 20))]
    got = envelope(bytes(talking.speaker_pcm), 24000)[: len(expected) - 10]
    edges = {i + d for i in range(1, len(expected)) if expected[i] != expected[i - 1] for d in (-1, 0)}
    assert [i for i, on in enumerate(got) if on != expected[i] and i not in edges] == []
    assert talking.queue_dropped == 0
    assert getattr(talking, "datagrams_dropped", 0) == 0
    assert late_packets(talking) == []
    await wait_entity(hass, PLAYER, lambda s: s.state == "idle")
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []


async def test_a_radio_stream_over_mqtt_plays_until_stopped(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], radio: Radio
) -> None:
    device = await mqtt_online(hub, client)
    await mqtt_in_conversation(hub, device)
    # As Music Assistant hands a stream to a player: its URL, enqueue, the title in extra.metadata.
    metadata = {"title": "Jazz", "artist": "Loopback FM", "album": None, "imageUrl": None, "duration": None}
    await play(hass, radio.url("/stream.mp3"), enqueue="replace", extra={"metadata": metadata})
    state = await wait_entity(hass, PLAYER, lambda s: s.state == "playing")
    assert state.attributes["media_title"] == "Jazz - Loopback FM"
    shown = await device.wait_message(lambda m: m.get("state") == "sentence_start")
    assert shown["text"] == "Jazz - Loopback FM"
    await device.wait_audio(30, timeout=10)  # 1.8 s of it, over encrypted UDP
    assert radio.listeners == 1
    assert len(ffmpeg_left(hass)) == 1  # one ffmpeg reads the station
    await hass.services.async_call("media_player", "media_stop", {"entity_id": PLAYER}, blocking=True)
    await tts_stopped(device)
    await wait_entity(hass, PLAYER, lambda s: s.state == "idle")
    assert device.mqtt.udp.datagrams_dropped == 0
    assert late_packets(device) == []
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []
    await radio.wait_no_listeners()
    await device.drop()


async def test_a_wake_word_stops_the_music_and_the_next_question_works(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice, radio: Radio, ready: Voice
) -> None:
    await play(hass, radio.url("/stream.mp3"))
    await ws_device.wait_audio(10, timeout=10)
    await ws_device.abort("wake_word_detected")
    await tts_stopped(ws_device)
    await wait_entity(hass, PLAYER, lambda s: s.state == "idle")
    marker = len(ws_device.log)
    ws_device.relisten = False
    await ws_device.say(speech_pcm())  # a new question after the music: answered
    stt = await ws_device.wait_message(lambda m: m.get("type") == "stt", timeout=30, after=marker)
    assert stt["text"].startswith("heard ")
    await ws_device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []
    await radio.wait_no_listeners()


async def test_volume_is_the_devices_own(hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice) -> None:
    await hass.services.async_call(
        "media_player", "volume_set", {"entity_id": PLAYER, "volume_level": 0.3}, blocking=True
    )
    assert ws_device.state.volume == 30
    state = await wait_entity(hass, PLAYER, lambda s: s.attributes.get("volume_level") == 0.3)
    assert state.attributes["volume_level"] == 0.3
    await hass.services.async_call("media_player", "volume_up", {"entity_id": PLAYER}, blocking=True)
    assert ws_device.state.volume == 40  # HA's step of 10 %


async def test_an_idle_24_device_says_why_it_cannot_play(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], radio: Radio
) -> None:
    device = await mqtt_online(hub, client)  # online, no conversation, firmware 2.4.2
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, radio.url("/stream.mp3"))
    assert err.value.translation_key == "media_no_channel"
    assert "talk to it first" in str(err.value)
    assert radio.listeners == 0  # nothing was opened
    await device.drop()


async def test_an_idle_25_device_plays_it_by_notify(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    device = await mqtt_online(hub, client, firmware_version="2.5.0")
    await play(hass, "media-source://media_source/local/song.wav")
    await wait_entity(hass, PLAYER, lambda s: s.state == "playing")
    notify = await device.wait_message(lambda m: m.get("type") == "notify")
    assert notify["subtitles"] == [{"start_ms": 0, "text": "song"}]
    await asyncio.gather(*device.notify_tasks)
    assert device.notify_status == [200]
    assert abs(len(device.notify_pcm) / 2 / 24000 - SONG_SECONDS) < 0.2
    # Fetched whole long before it is heard: playing until its audio has been played.
    for _ in range(5):
        await asyncio.sleep(0.01)
    assert hass.states.get(PLAYER).state == "playing"  # type: ignore[union-attr]
    await idle_once_heard(hass)
    await device.drop()


async def test_media_ffmpeg_cannot_read_is_refused_and_nothing_is_stuck(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice, radio: Radio
) -> None:
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, radio.url("/garbage.mp3"))
    assert err.value.translation_key == "media_unreadable"
    with pytest.raises(HomeAssistantError):
        await play(hass, "media-source://media_source/local/missing.wav")
    state = hass.states.get(PLAYER)
    assert state is not None
    assert state.state == "idle"
    assert not any(m.get("type") == "tts" for m in ws_device.log)  # the device was told nothing
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []


async def test_the_device_vanishing_mid_stream_leaves_nothing_running(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice, radio: Radio
) -> None:
    await play(hass, radio.url("/stream.mp3"))
    await ws_device.wait_audio(5, timeout=10)
    await ws_device.drop()
    await wait_entity(hass, PLAYER, lambda s: s.state == "off")
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []
    await radio.wait_no_listeners()
    with pytest.raises(HomeAssistantError, match="not connected"):  # away: a condition of the moment
        await play(hass, radio.url("/stream.mp3"))


async def test_an_announcement_from_the_media_player_is_the_satellites(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice
) -> None:
    await play(hass, "media-source://media_source/local/song.wav", announce=True)
    await tts_stopped(ws_device)
    assert [m.get("state") for m in ws_device.log if m["type"] == "tts"] == ["start", "stop"]
    assert abs(len(ws_device.speaker_pcm) / 2 / 24000 - SONG_SECONDS) < 0.2
    state = hass.states.get(PLAYER)
    assert state is not None
    assert state.state == "idle"


async def test_browsing_shows_audio_only(
    hass: HomeAssistant, hub: XiaozhiHub, media: Path, hass_ws_client: WebSocketGenerator
) -> None:
    """The media browser, as the UI asks for it: audio only (the device has no screen for video)."""
    (media / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    ws = await hass_ws_client(hass)
    await ws.send_json_auto_id(
        {
            "type": "media_player/browse_media",
            "entity_id": PLAYER,
            "media_content_id": "media-source://media_source/local/.",
            "media_content_type": "",
        }
    )
    answer = await ws.receive_json()
    assert answer["success"], answer
    names = [child["title"] for child in answer["result"]["children"]]
    assert "song.wav" in names
    assert "photo.jpg" not in names


async def test_the_agent_starts_music_on_the_device_it_talks_to(
    hass: HomeAssistant, hub: XiaozhiHub, talking: SimulatedDevice, radio: Radio, ready: Voice
) -> None:
    """ "Play some jazz": the agent plays the station on this device while answering. The reply is
    heard first, then the music, in one speech (no ``tts stop`` in between that would make the
    device listen); the wake word stops it, and the next question is answered."""

    async def play_jazz(user_input: Any) -> None:
        await hass.services.async_call(
            "media_player",
            "play_media",
            {"entity_id": PLAYER, "media_content_id": radio.url("/stream.mp3"), "media_content_type": "music",
             "extra": {"title": "Jazz"}},
            blocking=True,
            context=user_input.context,
        )  # fmt: skip

    ready.agent.action = play_jazz
    ready.agent.reply = "Playing jazz."
    talking.relisten = False
    marker = len(talking.log)
    await talking.say(speech_pcm(), start=talking.listening_mode is None or True)
    state = await wait_entity(hass, PLAYER, lambda s: s.state == "playing", timeout=15)
    assert state.attributes["media_title"] == "Jazz"
    await talking.wait_audio(60, timeout=15)  # the reply (about 1.2 s), then music
    said = [(m["type"], m.get("state"), m.get("text")) for m in talking.log[marker:] if m["type"] in ("tts", "stt")]
    assert said[:4] == [
        ("stt", None, said[0][2]),
        ("tts", "start", None),
        ("tts", "sentence_start", "Playing jazz."),
        ("tts", "sentence_start", "Jazz"),
    ]
    assert ("tts", "stop", None) not in said
    assert radio.listeners == 1
    satellite = hass.states.get("assist_satellite.kitchen")
    assert satellite is not None
    assert satellite.state == "idle"  # the answer is over; the speaker plays
    assert late_packets(talking) == []
    await talking.abort("wake_word_detected")
    await tts_stopped(talking)
    await wait_entity(hass, PLAYER, lambda s: s.state == "idle")
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []
    ready.agent.action = None
    marker = len(talking.log)
    await talking.say(speech_pcm())
    await talking.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)
    assert len(ready.agent.inputs) == 2
    await radio.wait_no_listeners()


async def test_music_the_agent_could_not_start_leaves_nothing(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice, radio: Radio, ready: Voice
) -> None:
    """The play fails (unreadable) inside the agent's turn: the agent gets the error; the reply is heard."""
    errors: list[str] = []

    async def play_garbage(user_input: Any) -> None:
        try:
            await hass.services.async_call(
                "media_player", "play_media",
                {"entity_id": PLAYER, "media_content_id": radio.url("/garbage.mp3"), "media_content_type": "music"},
                blocking=True, context=user_input.context,
            )  # fmt: skip
        except HomeAssistantError as err:
            errors.append(str(err.translation_key))

    ready.agent.action = play_garbage
    ready.agent.reply = "Sorry."
    ws_device.relisten = False
    await ws_device.say(speech_pcm())
    await tts_stopped(ws_device, 30)
    assert errors == ["media_unreadable"]
    assert [m.get("state") for m in ws_device.log if m["type"] == "tts"] == ["start", "sentence_start", "stop"]
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []


async def test_music_queued_for_a_turn_that_is_then_interrupted_is_closed(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice, radio: Radio, ready: Voice
) -> None:
    """Asked for during the turn, the turn is interrupted before its reply: the stream is closed, never played."""
    asked = asyncio.Event()
    release = asyncio.Event()

    async def play_then_wait(user_input: Any) -> None:
        await hass.services.async_call(
            "media_player", "play_media",
            {"entity_id": PLAYER, "media_content_id": radio.url("/stream.mp3"), "media_content_type": "music"},
            blocking=True, context=user_input.context,
        )  # fmt: skip
        asked.set()
        await release.wait()  # the agent is still thinking

    ready.agent.action = play_then_wait
    ws_device.relisten = False
    await ws_device.say(speech_pcm())
    async with asyncio.timeout(15):
        await asked.wait()
    assert radio.listeners == 1
    assert len(ffmpeg_left(hass)) == 1
    await ws_device.abort()  # the button: the turn ends unanswered
    await wait_entity(hass, "assist_satellite.kitchen", lambda s: s.state == "idle")
    release.set()
    await media_tasks_done(hass)
    await hass.async_block_till_done(wait_background_tasks=True)
    assert await ffmpeg_ended(hass) == []
    await radio.wait_no_listeners()
    state = hass.states.get(PLAYER)
    assert state is not None
    assert state.state == "idle"
    assert not ws_device.audio  # nothing of it was played


async def test_speech_from_the_media_browser_to_an_idle_24_device_says_why(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """Announced media without text (a TTS item picked in the media browser) reaches no idle 2.4
    device: the action fails with the reason, and the device is not shown the media's address."""
    device = await mqtt_online(hub, client)  # online, no conversation, firmware 2.4.2
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, "media-source://media_source/local/song.wav", announce=True)
    assert err.value.translation_key == "media_no_channel"
    assert not any(m.get("type") in ("alert", "notify", "tts") for m in device.log)
    await device.drop()


async def test_the_speaker_plays_with_the_satellite_disabled(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """The voice satellite's entity disabled (no Assist on this device): the speaker still plays,
    idle by notify (2.5) and in a conversation over its channel, shows it, and stops it."""
    from homeassistant.helpers import entity_registry as er

    registry = er.async_get(hass)
    registry.async_update_entity("assist_satellite.kitchen", disabled_by=er.RegistryEntryDisabler.USER)
    await hass.config_entries.async_reload(hub.entry.entry_id)
    await hass.async_block_till_done()
    hub = hub_of(hub.entry)
    assert hub.devices[MAC].voice is None
    device = await mqtt_online(hub, client, firmware_version="2.5.0")
    await play(hass, "media-source://media_source/local/song.wav")  # idle: by notify
    await wait_entity(hass, PLAYER, lambda s: s.state == "playing" and s.attributes.get("media_title") == "song")
    await asyncio.gather(*device.notify_tasks)
    assert abs(len(device.notify_pcm) / 2 / 24000 - SONG_SECONDS) < 0.2
    await idle_once_heard(hass)
    await mqtt_in_conversation(hub, device)  # woken: over the conversation's UDP channel
    await play(hass, "media-source://media_source/local/song.wav")
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "start")
    await wait_entity(hass, PLAYER, lambda s: s.state == "playing")
    await hass.services.async_call("media_player", "media_stop", {"entity_id": PLAYER}, blocking=True)
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop")
    await wait_entity(hass, PLAYER, lambda s: s.state == "idle")
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []
    await device.drop()


async def test_a_signed_address_is_never_shown_or_logged(
    hass: HomeAssistant, hub: XiaozhiHub, ws_device: SimulatedDevice, caplog: pytest.LogCaptureFixture
) -> None:
    """A relative path is signed by Home Assistant (authSig, valid for a day without a login); when
    the media cannot be read, what ffmpeg said reaches the user and the log without the signature."""
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, "/api/xiaozhi_local/no/such/media.mp3")
    assert err.value.translation_key == "media_unreadable"
    assert "authSig=" in str(err.value) or "404" in str(err.value)  # ffmpeg's own words, kept
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("custom_components.xiaozhi_local"))
    assert re.findall(r"authSig=([^&\s'\"…]+)", str(err.value) + ours) == []


async def test_media_by_notify_ends_when_the_device_goes(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any], radio: Radio
) -> None:
    """A radio station played by notify to an idle 2.5 device; its MQTT link drops while it still
    holds the stream (it stops reading, say): the player is off, and the station's stream and
    its ffmpeg end now, not when the device's socket finally times out."""
    device = await mqtt_online(hub, client, firmware_version="2.5.0")
    await play(hass, radio.url("/stream.mp3"))
    await wait_entity(hass, PLAYER, lambda s: s.state == "playing")
    await device.wait_message(lambda m: m.get("type") == "notify")
    await device.mqtt.drop_mqtt()  # the link goes; its notify fetch goes on
    await wait_entity(hass, PLAYER, lambda s: s.state == "off")
    await radio.wait_no_listeners()
    await media_tasks_done(hass)
    assert await ffmpeg_ended(hass) == []
    await device.drop()
