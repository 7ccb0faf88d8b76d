"""The nearest device answers, with one paired device in hostile hands.

It may send any recording as its wake audio, wake as often as it likes and report whenever it
likes. It cannot win with a recording no microphone makes, cannot keep winning by waking far more
often than people speak, and cannot make a real device lose by reporting first.
"""

import asyncio
from collections.abc import AsyncIterator
import functools
import math
import random
import struct
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest

from custom_components.xiaozhi_local.const import EVENT_NEAREST
from custom_components.xiaozhi_local.home import nearest, wake_rate
from custom_components.xiaozhi_local.protocol.loudness import MAX_SCORE, speech_over_noise, wake_score
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.voice import frame, mic_packets, wake_clip

from .conftest import MAC, MAC2, TOKEN, TOKEN2, wait_settled, ws_url
from .helpers import EventWaiter, until
from .internals import hub_of
from .test_nearest import NEAR, answered, answered_since
from .voice import Voice, speech_pcm

RATE = 16000


def pcm_of(samples: list[float]) -> bytes:
    return struct.pack(f"<{len(samples)}h", *(max(-32768, min(32767, round(v))) for v in samples))


def voiced(level: float, n: int) -> float:
    return level * sum(math.sin(2 * math.pi * 180 * k * n / RATE) / k for k in (1, 2, 3))


CRAFTED = {
    # The 98.8 dB clip of the report: digital silence, then a full-scale voice.
    "silence-then-full-scale": pcm_of([voiced(20000, n) if 6400 <= n < 25600 else 0 for n in range(32000)]),
    "clipped": pcm_of(
        [voiced(60000, n) if 6400 <= n < 25600 else random.Random(n).uniform(-300, 300) for n in range(32000)]
    ),
    "steady-tone": pcm_of([12000 * math.sin(2 * math.pi * 440 * n / RATE) for n in range(32000)]),
    "digital-silence": bytes(64000),
}


@pytest.mark.parametrize("clip", CRAFTED.values(), ids=CRAFTED.keys())
def test_made_recordings_score_nothing_special(clip: bytes) -> None:
    """No score, or a steady tone's ~0: below a real wake's, never above the bound."""
    real = speech_over_noise(wake_clip(-20, -50))
    assert real is not None
    score = wake_score(mic_packets(clip))
    assert score is None or score < 5
    assert (wake_score(mic_packets(wake_clip(-1, -75))) or 0) <= MAX_SCORE  # made quieter than a room: none


async def wake(sim: SimulatedDevice, recording: bytes | None) -> asyncio.Task[None]:
    """``sim`` wakes as the firmware does, its wake audio ``recording`` (None: its own options')."""
    if recording is not None:
        for packet in mic_packets(recording, sim.frame_ms):
            await sim.send_raw(frame(sim.options.protocol_version, packet))
    return asyncio.create_task(sim.say(speech_pcm(), wake_word="你好小智", silence_after=1.0))


@pytest.fixture
async def pair(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> AsyncIterator[tuple[SimulatedDevice, SimulatedDevice]]:
    """Kitchen is in hostile hands (it sends what it likes); Desk is a real device near the speaker."""
    hostile = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    real = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN2, mac=MAC2, **NEAR))
    for sim, mac in ((hostile, MAC), (real, MAC2)):
        await sim.connect()
        await wait_settled(hub_of(hass).devices[mac])
        sim.relisten = False
    yield hostile, real
    for sim in (hostile, real):
        await sim.drop()


async def again(sim: SimulatedDevice) -> None:
    """A new conversation: over WebSocket, a new connection."""
    if sim.closed.is_set():
        await sim.connect()
        sim.relisten = False


@pytest.mark.parametrize("clip", CRAFTED.values(), ids=CRAFTED.keys())
async def test_a_made_recording_reported_first_does_not_win(
    hass: HomeAssistant, ready: Voice, pair: tuple[SimulatedDevice, SimulatedDevice], clip: bytes
) -> None:
    """The hostile device reports first with a made recording; the real device, 30 ms later, answers."""
    hostile, real = pair
    decisions = EventWaiter(hass, EVENT_NEAREST)
    first = await wake(hostile, clip)
    await asyncio.sleep(0.03)  # the scenario's spacing, not a wait for a result
    second = await wake(real, None)
    await until(lambda: answered(real), timeout=30)
    await hostile.wait_closed()
    await asyncio.gather(first, second)
    assert not answered(hostile)
    (event,) = await decisions.wait()
    hub = hub_of(hass)
    assert event.data["winner"] == hub.devices[MAC2].device_id
    hostile_score = event.data["scores"][hub.devices[MAC].device_id]
    assert hostile_score is None or hostile_score < 5


async def test_a_device_that_wakes_far_too_often_stops_competing(
    hass: HomeAssistant,
    ready: Voice,
    pair: tuple[SimulatedDevice, SimulatedDevice],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plausible lie wins a round (a loud, clean recording: what a device near the speaker sends).
    Waking again and again (the report: every 0.9 s, the real device lost 75 of 75), the hostile
    device is benched after ``WAKES_PER_MINUTE``: the real device answers from then on."""
    monkeypatch.setattr(wake_rate, "WAKE_WINDOW", 3600.0)  # "a minute" without a race against the machine's load
    hostile, real = pair
    hub = hub_of(hass)
    loud = wake_clip(-8, -62)  # 50 dB over its noise: the bound, above the real device's 30
    first = await wake(hostile, loud)
    await asyncio.sleep(0.03)
    second = await wake(real, None)
    await until(lambda: answered(hostile), timeout=30)
    await real.wait_closed()
    await asyncio.gather(first, second)
    assert not answered(real)
    for count in range(2, wake_rate.WAKES_PER_MINUTE + 1):  # alone, as fast as it is answered
        await again(hostile)
        task = await wake(hostile, loud)
        await until(functools.partial(lambda at_least: hub.nearest.rounds >= at_least, count), timeout=30)
        assert not hub.nearest.benched(hub.devices[MAC]), count
        await hostile.drop()
        await asyncio.gather(task, return_exceptions=True)
    for _ in range(3):  # the 11th wake and on: benched
        await again(hostile)
        await again(real)
        mark = len(real.log)
        first = await wake(hostile, loud)
        await asyncio.sleep(0.03)
        second = await wake(real, None)
        await until(functools.partial(answered_since, real, mark), 30)
        await hostile.wait_closed()
        await asyncio.gather(first, second)
        assert hub.nearest.benched(hub.devices[MAC])
    assert len([r for r in caplog.records if "woke more than" in r.getMessage() and r.levelname == "WARNING"]) == 1


async def test_reporting_first_does_not_make_a_better_device_lose(
    hass: HomeAssistant,
    ready: Voice,
    pair: tuple[SimulatedDevice, SimulatedDevice],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hostile device reports first, alone, and is chosen; the real device reports the word
    after the choice (the report: this alone won 59 of 60). It heard the word better than the
    winner (which sent no recording a microphone makes): it answers too."""
    monkeypatch.setattr(nearest, "LATE", 60.0)  # "soon after" without a race against the machine's load
    hostile, real = pair
    hub = hub_of(hass)
    first = await wake(hostile, CRAFTED["digital-silence"])
    await until(lambda: hub.nearest.rounds == 1)  # chosen: nobody else reported within the window
    await real.say(speech_pcm(), wake_word="你好小智", silence_after=1.0)
    await until(lambda: answered(real), timeout=30)
    await first
    assert list(hub.nearest.recent) == [] or "Desk" not in list(hub.nearest.recent)[-1]["late"]
