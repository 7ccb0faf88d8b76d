"""Pairing and conversations, on the stock firmware's own code (fwhost), over both transports."""

import asyncio
from collections.abc import Callable

from homeassistant.core import HomeAssistant

from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.hub import XiaozhiHub

from ..conftest import wait_for
from ..voice import FIXTURES, Voice, loud_seconds
from .conftest import SILENCE_TIMEOUT, FwFactory, device_of
from .fwhost import FwHost

SPEECH = FIXTURES / "speech_16k.wav"


def replies(messages: list[dict[str, object]]) -> int:
    """``tts start`` messages among ``messages``: the answers the device got."""
    return sum(1 for m in messages if m.get("type") == "tts" and m.get("state") == "start")


def answered_since(mark: int) -> Callable[[FwHost], bool]:
    """Whether the device got an answer after ``mark``."""
    return lambda fw: replies(fw.received(mark)) >= 1


def spoken_after(before: int) -> Callable[[XiaozhiDevice], bool]:
    """Whether the whole clip (38 packets of 60 ms) reached the link after ``before`` packets."""
    return lambda d: d.link is not None and d.link.audio_frames >= before + 38


async def test_pairing_by_the_spoken_code(
    hass: HomeAssistant, hub: XiaozhiHub, paired: FwFactory, transport: str
) -> None:
    """The device speaks a code, the user types it: the device gets its token and its transport."""
    fw = await paired()
    device = device_of(hub, fw)
    nvs = fw.nvs()
    if transport == "mqtt":
        assert nvs["mqtt"]["password"] == device.token
        assert device.link is not None
        assert device.link.transport_name == "mqtt"
    else:
        assert nvs["websocket"]["token"].removeprefix("Bearer ") == device.token
        assert "endpoint" not in nvs.get("mqtt", {})


async def test_three_conversations_in_a_row(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory, transport: str
) -> None:
    """Talk, then silence ends it; three times over, with pauses longer than the silence timeout."""
    fw = await paired()
    for round_ in range(3):
        mark = fw.mark()
        fw.command(f"talk {SPEECH}")
        await fw.wait(answered_since(mark), 60, f"an answer in conversation {round_ + 1}")
        await fw.wait_state("idle", SILENCE_TIMEOUT * 4 + 30, since=mark)
        assert replies(fw.received(mark)) == 1
    assert len(ready.stt.received) == 3


async def test_three_push_to_talk_turns_in_a_row(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory, transport: str
) -> None:
    """Press, speak, release: the answer; three times, the pauses longer than the silence timeout
    (which a push-to-talk device, idle between its turns, must not be ended by)."""
    fw = await paired()
    device = device_of(hub, fw)
    for round_ in range(3):
        mark = fw.mark()
        before = device.link.audio_frames if device.link is not None else 0
        fw.command(f"ptt {SPEECH}")
        await wait_for(device, spoken_after(before), timeout=30)
        fw.command("stop")  # released once the whole clip is out
        await fw.wait(answered_since(mark), 60, f"an answer to turn {round_ + 1}")
        await fw.wait_state("idle", 30, since=mark)
        # The user waits longer than the silence timeout before the next press (part of the case).
        await asyncio.sleep(SILENCE_TIMEOUT + 1)
    assert len(ready.stt.received) == 3
    assert all(loud_seconds(pcm) > 1.0 for pcm in ready.stt.received)
