"""The nearest device answers: two devices hear one wake word, the one nearer the speaker goes on.

The simulated devices wake as the firmware does: the wake word's own audio (Opus, in a burst),
then ``listen detect``, then ``listen start``. Their recordings differ in speech over noise.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
import functools
import re
from types import SimpleNamespace
from typing import Any, cast

from aiohttp.test_utils import TestClient
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import area_registry as ar, device_registry as dr
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import WebSocketGenerator

from custom_components.xiaozhi_local import logbook
from custom_components.xiaozhi_local.const import (
    CONF_NEAREST,
    CONF_NEAREST_BY_AREA,
    DOMAIN,
    EVENT_NEAREST,
    EVENT_WAKE_IGNORED,
)
from custom_components.xiaozhi_local.diagnostics import async_get_config_entry_diagnostics
from custom_components.xiaozhi_local.home import nearest
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.protocol.loudness import speech_over_noise, wake_score
from custom_components.xiaozhi_local.satellite import listening
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.voice import mic_packets, wake_clip

from .conftest import (
    CLIENT_ID,
    CLIENT_ID2,
    FAST,
    MAC,
    MAC2,
    TOKEN,
    TOKEN2,
    ota_url,
    served_hub,
    wait_for,
    wait_settled,
    ws_url,
)
from .helpers import EventWaiter, until
from .internals import hub_of, wake_audio_kept
from .voice import Voice, speech_pcm

NEAR: dict[str, Any] = {"wake_level_db": -20.0, "noise_db": -50.0}  # 30 dB over its room's noise
FAR: dict[str, Any] = {
    "wake_level_db": -14.0,
    "noise_db": -32.0,
}  # louder, more gain: 18 dB over it


def answered(sim: SimulatedDevice) -> bool:
    return any(m.get("type") == "tts" and m.get("state") == "stop" for m in sim.log)


def no_alert(sim: SimulatedDevice) -> bool:
    return not any(m.get("type") == "alert" for m in sim.log)


async def wake_together(first: SimulatedDevice, second: SimulatedDevice) -> list[asyncio.Task[None]]:
    """``first`` wakes, ``second`` 30 ms later (a room's width of difference): both say a question."""
    one = asyncio.create_task(first.say(speech_pcm(), wake_word="你好小智", silence_after=1.0))
    await asyncio.sleep(0.03)  # the scenario's spacing, not a wait for a result
    two = asyncio.create_task(second.say(speech_pcm(), wake_word="你好小智", silence_after=1.0))
    return [one, two]


@pytest.fixture
async def hub(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> XiaozhiHub:
    """The hub, its URLs pointing at the test server (the MQTT endpoint on)."""
    return await served_hub(hass, setup_integration, client)


@pytest.fixture
async def websocket_pair(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> AsyncIterator[tuple[SimulatedDevice, SimulatedDevice]]:
    """Kitchen is far from the speaker, Desk is near; both connected over WebSocket."""
    far = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, **FAR))
    near = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN2, mac=MAC2, **NEAR))
    for sim, mac in ((far, MAC), (near, MAC2)):
        await sim.connect()
        await wait_settled(hub_of(hass).devices[mac])
        sim.relisten = False
    yield far, near
    for sim in (far, near):
        await sim.drop()


async def test_the_nearer_device_answers_over_websocket(
    hass: HomeAssistant, ready: Voice, websocket_pair: tuple[SimulatedDevice, SimulatedDevice]
) -> None:
    """The far one reports first and is louder in absolute terms: the near one answers all the same;
    the far one's conversation ends quietly; the event names both."""
    far, near = websocket_pair
    decisions = EventWaiter(hass, EVENT_NEAREST)
    tasks = await wake_together(far, near)
    await until(lambda: answered(near), timeout=30)
    await far.wait_closed()  # ended the way the firmware expects: back to waiting for its wake word
    await asyncio.gather(*tasks)
    assert not answered(far)
    assert no_alert(far)
    assert no_alert(near)
    assert len(ready.agent.inputs) == 1
    (event,) = await decisions.wait()
    hub = hub_of(hass)
    assert event.data["winner"] == hub.devices[MAC2].device_id
    assert event.data["others"] == [hub.devices[MAC].device_id]
    scores = event.data["scores"]
    assert scores[hub.devices[MAC2].device_id] > scores[hub.devices[MAC].device_id] + 5
    assert event.data["device_id"] == hub.devices[MAC2].device_id  # on the winner's page in the logbook
    name, message = logbook_line(hass, event)
    assert name == "Desk"
    assert message.startswith("answered as the nearest of 2 devices that heard the wake word (")
    assert re.search(r"\(your voice above the room's noise: (Desk|Kitchen) \d+ dB, (Desk|Kitchen) \d+ dB\)$", message)
    entry = hub.entry
    diagnostics = await async_get_config_entry_diagnostics(hass, entry)
    assert diagnostics["nearest"][-1]["winner"] == "Desk"


def logbook_line(hass: HomeAssistant, event: Event) -> tuple[str, str]:
    """What the logbook (Activity) shows for the event: the integration's own description."""
    described: dict[tuple[str, str], Any] = {}
    logbook.async_describe_events(hass, lambda domain, kind, describe: described.setdefault((domain, kind), describe))
    line = described[DOMAIN, EVENT_NEAREST](event)
    return line["name"], line["message"]


async def mqtt_device(
    hub: XiaozhiHub, client: TestClient[Any, Any], mac: str, client_id: str, **options: Any
) -> SimulatedDevice:
    device = SimulatedDevice(
        SimulatorOptions(url="", mac=mac, client_id=client_id, hello_timeout=5, **options), speaks_mqtt=True
    )
    await device.boot_mqtt(ota_url(client), timing=FAST)
    await wait_for(hub.devices[mac], lambda d: d.link is not None)
    await wait_settled(hub.devices[mac])
    device.relisten = False
    return device


async def test_the_nearer_device_answers_over_mqtt(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """Always connected: each wake opens the UDP channel with a hello, then the same as above; the
    far one gets ``goodbye`` (its conversation ends, its MQTT session stays)."""
    far = await mqtt_device(hub, client, MAC, CLIENT_ID, **FAR)
    near = await mqtt_device(hub, client, MAC2, CLIENT_ID2, **NEAR)
    try:
        decisions = EventWaiter(hass, EVENT_NEAREST)
        await asyncio.gather(far.connect(), near.connect())
        tasks = await wake_together(far, near)
        await until(lambda: answered(near), timeout=30)
        await far.wait_message(lambda m: m.get("type") == "goodbye", 10)
        await asyncio.gather(*tasks)
        assert not answered(far)
        assert no_alert(far)
        assert no_alert(near)
        assert hub.devices[MAC].link is not None  # its session lives on
        (event,) = await decisions.wait()
        assert event.data["winner"] == hub.devices[MAC2].device_id
    finally:
        for sim in (far, near):
            await sim.drop()


async def test_the_nearer_device_answers_in_later_conversations_over_mqtt(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """The firmware's MQTT session outlives its conversations: after each device's first one
    (auto mode, ended by its button), the next wakes are judged on their wake audio all the same,
    in both orders; what the first conversation's ``listen start`` set is gone with it."""
    far = await mqtt_device(hub, client, MAC, CLIENT_ID, **FAR)
    near = await mqtt_device(hub, client, MAC2, CLIENT_ID2, **NEAR)
    try:
        for sim in (far, near):
            await sim.connect()
            await sim.say(speech_pcm(), silence_after=1.0)
            await until(functools.partial(answered, sim), timeout=30)
            await sim.mqtt.goodbye()  # the button: its conversation ends, its MQTT session stays
        for first, second in ((far, near), (near, far)):
            decisions = EventWaiter(hass, EVENT_NEAREST)
            marks = {sim: len(sim.log) for sim in (far, near)}
            await asyncio.gather(far.connect(), near.connect())
            tasks = await wake_together(first, second)
            await until(functools.partial(answered_since, near, marks[near]), timeout=30)
            await far.wait_message(lambda m: m.get("type") == "goodbye", 10)
            await asyncio.gather(*tasks)
            assert not answered_since(far, marks[far])
            (event,) = await decisions.wait()
            decisions.unsub()
            assert event.data["winner"] == hub.devices[MAC2].device_id
            assert all(score is not None for score in event.data["scores"].values())
            if near.mqtt.audio_channel_open:
                await near.mqtt.goodbye()
    finally:
        for sim in (far, near):
            await sim.drop()


def answered_since(sim: SimulatedDevice, mark: int) -> bool:
    """Whether ``sim`` got a whole answer after its ``mark``-th message."""
    return any(m.get("type") == "tts" and m.get("state") == "stop" for m in sim.log[mark:])


async def test_alone_it_does_not_wait(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """One always-connected device online, the other off: no round (so no wait), no event."""
    other = await mqtt_device(hub, client, MAC2, CLIENT_ID2, **NEAR)
    await other.drop()  # switched off
    await wait_for(hub.devices[MAC2], lambda d: d.off, timeout=10)
    device = await mqtt_device(hub, client, MAC, CLIENT_ID, **NEAR)
    try:
        decisions = EventWaiter(hass, EVENT_NEAREST)
        await device.connect()
        await device.say(speech_pcm(), wake_word="你好小智", silence_after=1.0)
        await until(lambda: answered(device), timeout=30)
        assert decisions.events == []
        assert hub.nearest.rounds == 0  # it went on at once
    finally:
        await device.drop()


async def test_in_other_areas_both_answer_the_same_wake_word(
    hass: HomeAssistant,
    ready: Voice,
    websocket_pair: tuple[SimulatedDevice, SimulatedDevice],
    area_registry: ar.AreaRegistry,
    device_registry: dr.DeviceRegistry,
) -> None:
    """Different areas with "keep areas apart": the same wake word said in each at the same moment
    (two people), no contest, and both answer: Home Assistant's own rule (one wake phrase per 2 s,
    from any satellite) does not silence the second, three times in a row."""
    far, near = websocket_pair
    hub = hub_of(hass)
    for mac, name in ((MAC, "Kitchen"), (MAC2, "Study")):
        area = area_registry.async_get_or_create(name)
        device_registry.async_update_device(hub.devices[mac].device_id, area_id=area.id)
    decisions = EventWaiter(hass, EVENT_NEAREST)
    ignored = EventWaiter(hass, EVENT_WAKE_IGNORED)
    hass.config_entries.async_update_entry(hub.entry, options={**hub.entry.options, CONF_NEAREST_BY_AREA: True})
    await hass.async_block_till_done()
    for _ in range(3):
        for sim in (far, near):
            if sim.closed.is_set():
                await sim.connect()
                sim.relisten = False
        marks = (len(far.log), len(near.log))
        await asyncio.gather(*await wake_together(far, near))
        for sim, mark in zip((far, near), marks, strict=True):
            await sim.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=mark)
    assert decisions.events == []
    assert ignored.events == []


async def test_switched_off_home_assistants_rule_applies_and_says_so(
    hass: HomeAssistant, ready: Voice, websocket_pair: tuple[SimulatedDevice, SimulatedDevice]
) -> None:
    """ "The nearest answers" off: Home Assistant's own rule decides (the second wake of the same
    phrase within 2 s is refused), and the device it silenced gets an event and a logbook line."""
    far, near = websocket_pair
    hub = hub_of(hass)
    hass.config_entries.async_update_entry(hub.entry, options={**hub.entry.options, CONF_NEAREST: False})
    await hass.async_block_till_done()
    decisions = EventWaiter(hass, EVENT_NEAREST)
    ignored = EventWaiter(hass, EVENT_WAKE_IGNORED)
    tasks = await wake_together(far, near)
    await until(lambda: answered(far) or answered(near), timeout=30)
    (event,) = await ignored.wait()
    await asyncio.gather(*tasks)
    silenced = far if event.data["device_id"] == hub.devices[MAC].device_id else near
    await silenced.wait_closed()
    assert not answered(silenced)
    assert no_alert(silenced)
    assert decisions.events == []
    described: dict[tuple[str, str], Any] = {}
    logbook.async_describe_events(hass, lambda domain, kind, describe: described.setdefault((domain, kind), describe))
    line = described[DOMAIN, EVENT_WAKE_IGNORED](event)
    assert line["name"] == ("Kitchen" if silenced is far else "Desk")
    assert line["message"].startswith("heard the wake word, but Home Assistant ignored it")


async def test_a_device_without_wake_audio_loses_to_one_with_it(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    """py-xiaozhi, the browser page or a build without wake audio can win only against its kind."""
    silent = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    near = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN2, mac=MAC2, **FAR))
    for sim, mac in ((silent, MAC), (near, MAC2)):
        await sim.connect()
        await wait_settled(hub_of(hass).devices[mac])
        sim.relisten = False
    try:
        tasks = await wake_together(silent, near)
        await until(lambda: answered(near), timeout=30)
        await silent.wait_closed()
        await asyncio.gather(*tasks)
        assert not answered(silent)
    finally:
        for sim in (silent, near):
            await sim.drop()


def test_the_score_is_speech_over_the_recordings_own_noise() -> None:
    """A microphone's gain raises speech and noise alike: the score stays; distance lowers it."""
    near = wake_score(mic_packets(wake_clip(-20, -50)))
    gained = wake_score(mic_packets(wake_clip(-10, -40)))  # the same sound, 10 dB more gain
    far = wake_score(mic_packets(wake_clip(-32, -50)))
    assert near is not None
    assert gained is not None
    assert far is not None
    assert abs(near - gained) < 3
    assert far < near - 8
    assert wake_score([b"not opus at all"] * 40) is None  # nothing decodes: no score
    assert wake_score(mic_packets(wake_clip(-20, -50))[:2]) is None  # 0.12 s: too short to tell
    assert speech_over_noise(bytes(32000)) is None  # digital silence: no microphone made it


async def test_a_flood_of_wakes_and_endless_audio_stay_bounded(
    hass: HomeAssistant, ready: Voice, websocket_pair: tuple[SimulatedDevice, SimulatedDevice]
) -> None:
    """Audio that never stops and is not Opus, and a hundred wakes: what is kept is bounded, nothing
    fails, and the device that sent real wake audio answers."""
    far, near = websocket_pair
    xfar = hub_of(hass).devices[MAC]
    for _ in range(300):
        await far.send_raw(b"\xff" * 900)  # not Opus, and six times a wake word's packets
    await until(lambda: xfar.link is not None and xfar.link.audio_frames >= 300)
    assert 0 < wake_audio_kept(xfar) <= 64 * 1024
    for _ in range(100):
        await far.send_json({"session_id": far.session_id, "type": "listen", "state": "detect", "text": "你好小智"})
    tasks = await wake_together(far, near)
    await until(lambda: answered(near), timeout=30)
    await far.wait_closed()
    await asyncio.gather(*tasks)
    assert not answered(far)
    assert hub_of(hass).nearest.rounds == 1


async def test_a_slow_device_that_reports_after_the_choice_loses_and_is_named(
    hass: HomeAssistant,
    ready: Voice,
    websocket_pair: tuple[SimulatedDevice, SimulatedDevice],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The near device wakes and is chosen alone; the far one reports the same word only then (a
    slow Wi-Fi): it does not answer, and the event and diagnostics say so."""
    monkeypatch.setattr(nearest, "LATE", 60.0)  # "soon after" without a race against the machine's load
    far, near = websocket_pair
    hub = hub_of(hass)
    decisions = EventWaiter(hass, EVENT_NEAREST)
    first = asyncio.create_task(near.say(speech_pcm(), wake_word="你好小智", silence_after=1.0))
    await until(lambda: hub.nearest.rounds == 1)  # chosen: nobody else reported within the window
    await far.say(speech_pcm(), wake_word="你好小智", silence_after=1.0)
    await far.wait_closed()
    await first
    await until(lambda: answered(near), timeout=30)
    assert not answered(far)
    (event,) = await decisions.wait()
    assert event.data["late"] is True
    assert event.data["winner"] == hub.devices[MAC2].device_id
    assert event.data["others"] == [hub.devices[MAC].device_id]
    assert list(hub.nearest.recent)[-1]["late"] == ["Kitchen"]
    assert logbook_line(hass, event) == ("Kitchen", "heard the wake word too late to answer; Desk answered")


async def test_a_wake_phrase_left_over_is_no_wake_later(
    hass: HomeAssistant,
    ready: Voice,
    websocket_pair: tuple[SimulatedDevice, SimulatedDevice],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A detect older than the wake audio's age (one no listen start followed: a client that gave
    up) does not make a later turn a wake: nothing is arbitrated, the turn is answered."""
    monkeypatch.setattr(listening, "WAKE_AUDIO_AGE", 0.0)  # every detect is "long ago" by its start
    far, _near = websocket_pair
    hub = hub_of(hass)
    await far.say(speech_pcm(), mode="manual", wake_word="你好小智")
    await until(lambda: answered(far), timeout=30)
    assert hub.nearest.rounds == 0


async def test_over_udp_each_device_is_scored_while_the_window_runs(
    hass: HomeAssistant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five devices over UDP (their audio may still be coming at their wake): each recording is
    read and scored ``SCORE_UDP_AFTER`` after its wake, inside the window, so the choice finds
    every score ready and adds nothing to the wait; the nearest goes on."""
    levels = (-34.0, -30.0, -18.0, -26.0, -22.0)
    devices = [
        SimpleNamespace(mac=f"m{i}", name=f"D{i}", device_id=f"d{i}", voice=object(), off=False, conversation=None)
        for i in range(len(levels) + 1)  # one more, in another room: it did not hear the word
    ]
    read: list[str] = []

    def audio_of(device: Any, level: float) -> Callable[[], list[bytes]]:
        def audio() -> list[bytes]:
            read.append(device.mac)
            return list(mic_packets(wake_clip(level, -50.0)))

        return audio

    arbiter = nearest.Nearest(
        hass,
        devices=lambda: devices,  # type: ignore[arg-type,return-value]
        settings=lambda: (True, False),
        area_of=lambda _device: None,
        executor=lambda: cast(Executor, None),  # the loop's default executor
        fire=lambda _data: None,
    )
    original = arbiter._async_decide
    read_at_choice: list[int] = []

    async def deciding(current: Any) -> None:
        read_at_choice.append(len(read))
        await original(current)

    monkeypatch.setattr(arbiter, "_async_decide", deciding)
    claims = [
        arbiter.contend(device, audio_of(device, level), complete=False)  # type: ignore[arg-type]
        for device, level in zip(devices, levels, strict=False)
    ]
    assert read == []  # not at the wake: its burst may still be on its way
    outcomes = await asyncio.gather(*(claim for claim in claims if claim is not None))
    assert read_at_choice == [len(levels)]  # every recording was in (and being scored) before the choice
    assert outcomes == [level == max(levels) for level in levels]
    arbiter.shutdown()


@pytest.fixture
async def websocket_api_first(hass: HomeAssistant) -> None:
    """HA's WebSocket API set up before the test client freezes the HTTP app's router."""
    assert await async_setup_component(hass, "websocket_api", {})


async def test_the_voice_wizard_is_shown_the_wake_word_as_said(
    hass: HomeAssistant,
    websocket_api_first: None,
    ready: Voice,
    hub: XiaozhiHub,
    client: TestClient[Any, Any],
    hass_ws_client: WebSocketGenerator,
) -> None:
    """Home Assistant's voice wizard waits for the next wake word: while the nearest device answers,
    the phrase reaches the pipeline qualified by the device (``phrase_for``), but the wizard is shown
    the word as it was said."""
    other = await mqtt_device(hub, client, MAC2, CLIENT_ID2, **NEAR)  # two devices: the nearest is on
    device = await mqtt_device(hub, client, MAC, CLIENT_ID, **NEAR)
    try:
        assert hub.nearest.phrase_for(hub.devices[MAC], "你好小智") != "你好小智"
        ws = await hass_ws_client(hass)
        await ws.send_json_auto_id(
            {"type": "assist_satellite/intercept_wake_word", "entity_id": "assist_satellite.kitchen"}
        )
        assert (await ws.receive_json())["success"]
        await device.connect()
        speaking = asyncio.create_task(device.say(speech_pcm(), wake_word="你好小智", silence_after=1.0))
        heard = await ws.receive_json()
        assert heard["event"] == {"wake_word_phrase": "你好小智"}
        await speaking
    finally:
        for sim in (device, other):
            await sim.drop()
