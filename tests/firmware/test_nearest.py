"""The nearest device answers, on the stock firmware's code: two fwhosts hear one wake word.

Each device has held conversations before (the firmware's MQTT session outlives them), then both
hear the word 30 ms apart, the near one at -20 dBFS and the far one at -32 dBFS over the same
-50 dBFS room: the firmware's 2 s of wake audio, ``listen detect``, ``listen start``.
"""

import time
import wave

from homeassistant.core import HomeAssistant
import pytest

from bench.bench_probe.hog import LoopHog
from custom_components.xiaozhi_local.const import EVENT_NEAREST
from custom_components.xiaozhi_local.hub import XiaozhiHub

from ..helpers import EventWaiter
from ..voice import FIXTURES, Voice
from .conftest import SILENCE_TIMEOUT, FwFactory, device_of
from .fwhost import FwHost
from .test_conversations import SPEECH, answered_since, replies

NEAR_MAC = "f0:9e:9e:00:00:01"
FAR_MAC = "f0:9e:9e:00:00:02"


@pytest.fixture
def wake_wav(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A spoken clip for the wake buffer (the fixture's speech, its first 1.6 s)."""
    path = tmp_path_factory.mktemp("wake") / "wake16k.wav"
    with wave.open(str(FIXTURES / "speech_16k.wav")) as src, wave.open(str(path), "wb") as dst:
        dst.setparams(src.getparams())
        dst.writeframes(src.readframes(int(1.6 * src.getframerate())))
    return str(path)


async def converse(fw: FwHost) -> None:
    """One plain conversation: talk, the answer, silence ends it."""
    mark = fw.mark()
    fw.command(f"talk {SPEECH}")
    await fw.wait(lambda f: replies(f.received(mark)) >= 1, 60, "an answer")
    await fw.wait_state("idle", SILENCE_TIMEOUT * 4 + 30, since=mark)


async def wake_both(first: FwHost, second: FwHost, levels: dict[str, int], wav: str) -> tuple[int, int]:
    """Both hear the word, ``second`` 30 ms after ``first``; each goes on talking (its question)."""
    marks = first.mark(), second.mark()
    at = int(time.time() * 1000) + 500
    for fw, offset in ((first, 0), (second, 30)):
        fw.command(f"say {SPEECH}")
        fw.command(f"wake wav={wav} level={levels[fw.mac]} noise=-50 at={at + offset}")
    return marks


@pytest.mark.parametrize("near_first", [True, False], ids=["near_first", "far_first"])
async def test_the_nearer_device_answers_in_later_conversations(
    hass: HomeAssistant,
    ready: Voice,
    hub: XiaozhiHub,
    paired: FwFactory,
    transport: str,
    wake_wav: str,
    near_first: bool,
) -> None:
    """Conversations 2 and 3 of each device: the near one answers, the far one ends quietly."""
    near, far = await paired(NEAR_MAC), await paired(FAR_MAC)
    levels = {NEAR_MAC: -20, FAR_MAC: -32}
    for fw in (near, far):
        await converse(fw)  # the first conversation: the MQTT session goes on after it
    for round_ in (2, 3):
        decisions = EventWaiter(hass, EVENT_NEAREST)
        order = (near, far) if near_first else (far, near)
        marks = dict(zip((order[0].mac, order[1].mac), await wake_both(*order, levels, wake_wav), strict=True))
        await near.wait(answered_since(marks[NEAR_MAC]), 60, f"the answer, round {round_}")
        await far.wait_state("idle", 30, since=marks[FAR_MAC])
        (event,) = await decisions.wait()
        decisions.unsub()
        assert event.data["winner"] == device_of(hub, near).device_id, event.data
        assert replies(far.received(marks[FAR_MAC])) == 0
        assert not [m for m in far.received(marks[FAR_MAC]) if m.get("type") == "alert"]
        await near.wait_state("idle", SILENCE_TIMEOUT * 4 + 30, since=marks[NEAR_MAC])


@pytest.mark.parametrize("transport", ["mqtt"], indirect=True)
async def test_the_nearer_device_answers_on_a_slowed_loop(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory, wake_wav: str
) -> None:
    """Home Assistant's loop busy (15 ms blocked of every 20: a neighbour hogging it): the far device
    reports first, in its second conversation; the choice still waits for both bursts of wake audio."""
    near, far = await paired(NEAR_MAC), await paired(FAR_MAC)
    for fw in (near, far):
        await converse(fw)
    busy = LoopHog()
    busy.set("15,20")  # ms blocked, of every
    try:
        decisions = EventWaiter(hass, EVENT_NEAREST)
        marks = dict(
            zip((far.mac, near.mac), await wake_both(far, near, {NEAR_MAC: -20, FAR_MAC: -32}, wake_wav), strict=True)
        )
        await near.wait(answered_since(marks[NEAR_MAC]), 90, "the answer on a slowed loop")
        (event,) = await decisions.wait(timeout=30)
        decisions.unsub()
        assert event.data["winner"] == device_of(hub, near).device_id, event.data
        assert replies(far.received(marks[FAR_MAC])) == 0
    finally:
        busy.set("0")
