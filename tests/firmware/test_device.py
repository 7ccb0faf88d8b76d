"""Tools, settings, announcements, a power cut and a reboot, on the stock firmware's own code."""

import asyncio
import signal
import time
from typing import Any

from homeassistant.const import STATE_UNAVAILABLE
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
import pytest

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.hub import XiaozhiHub

from ..conftest import wait_for
from ..voice import Voice
from .conftest import FwFactory, device_of
from .fwhost import POLL, FwHost
from .test_conversations import SPEECH, replies

POWER_CUT_SHOWN: float = 45.0
"""Seconds within which a device whose power is cut must be shown unavailable."""


async def entity_of(
    hass: HomeAssistant, hub: XiaozhiHub, fw: FwHost, domain: str, key: str = "", timeout: float = 30
) -> str:
    """The entity id of the device's ``domain`` entity (whose unique id ends with ``key``), once it
    is registered (entities follow the device's tools and facts a moment after it connects)."""
    registry = er.async_get(hass)
    device_id = device_of(hub, fw).device_id
    deadline = time.monotonic() + timeout
    while True:
        entries = [
            e
            for e in er.async_entries_for_device(registry, device_id)
            if e.domain == domain and e.unique_id.endswith(key)
        ]
        if entries:
            return entries[0].entity_id
        assert time.monotonic() < deadline, f"no {domain} entity {key!r} for {fw.mac} within {timeout} s"
        await asyncio.sleep(POLL)


def state_of(hass: HomeAssistant, entity_id: str) -> str:
    """The entity's state now."""
    state = hass.states.get(entity_id)
    assert state is not None
    return state.state


async def call_tool(hass: HomeAssistant, hub: XiaozhiHub, fw: FwHost, tool: str, **arguments: Any) -> Any:
    """``xiaozhi_local.call_tool`` as an automation calls it, with its response."""
    return await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": device_of(hub, fw).device_id, "tool": tool, "arguments": arguments},
        blocking=True,
        return_response=True,
    )


async def in_conversation(fw: FwHost) -> int:
    """Talk and wait for the answer: the conversation is open (until the silence ends it)."""
    mark = fw.mark()
    fw.command(f"talk {SPEECH}")
    await fw.wait(lambda f: replies(f.received(mark)) >= 1, 60, "an answer")
    return mark


async def test_call_tool_and_a_setting(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory, transport: str
) -> None:
    """The volume set from Home Assistant reaches the firmware (at once, or at its next connection
    over WebSocket), and ``call_tool`` returns the firmware's own answer."""
    fw = await paired()
    if transport == "websocket":  # its tools are known from its first conversation on
        mark = await in_conversation(fw)
        await fw.wait_state("idle", 60, since=mark)
    volume = await entity_of(hass, hub, fw, "number", "volume")
    await hass.services.async_call("number", "set_value", {"entity_id": volume, "value": 35}, blocking=True)
    if transport == "websocket":  # not connected between conversations: it waits for the next one
        # Pressed and held (push-to-talk): open until released, however slow the machine. A
        # conversation that ends by its 5 s of silence could close before the calls below.
        fw.command(f"ptt {SPEECH}")
    device = device_of(hub, fw)
    await wait_for(device, lambda d: d.link is not None, timeout=30)
    await fw.wait(
        lambda f: any(
            m.get("payload", {}).get("params", {}).get("name") == "self.audio_speaker.set_volume" for m in f.received()
        ),
        30,
        "set_volume",
    )
    status = await call_tool(hass, hub, fw, "self.get_device_status")
    assert status["data"]["audio_speaker"] == {"volume": 35}
    assert status["is_error"] is False
    info = await call_tool(hass, hub, fw, "self.get_system_info")  # a user-only tool
    assert info["data"]["mac_address"] == fw.mac
    if transport == "websocket":
        fw.command("stop")  # released


@pytest.mark.parametrize("transport", ["mqtt"], indirect=True)
async def test_an_announcement_while_idle(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory
) -> None:
    """Always connected and idle: 2.4.2 plays no speech while idle, so it shows the text as an alert."""
    fw = await paired()
    mark = fw.mark()
    satellite = await entity_of(hass, hub, fw, "assist_satellite")
    await hass.services.async_call(
        "assist_satellite", "announce", {"entity_id": satellite, "message": "Dinner is ready"}, blocking=True
    )
    alert = await fw.wait_received(lambda m: m.get("type") == "alert", 10, "the alert", since=mark)
    assert alert["message"] == "Dinner is ready"
    await fw.wait_log(r"Application: Alert \[\w+\] \S+: Dinner is ready", 10, since=mark)  # shown
    assert fw.state_changes(mark) == []  # shown, not a conversation


@pytest.mark.parametrize("transport", ["mqtt"], indirect=True)
async def test_a_power_cut_is_shown_within_45_s(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory
) -> None:
    """The power goes (the process stops; its sockets stay open, nothing more is sent): Home
    Assistant shows it unavailable within 45 s, an announcement meanwhile is not reported as
    delivered; power back, it reconnects by itself; a reboot brings it back too."""
    fw = await paired()
    assert fw.nvs()["mqtt"]["keepalive"] == 20  # the firmware pings as often as we need
    satellite = await entity_of(hass, hub, fw, "assist_satellite")
    device = device_of(hub, fw)
    fw.power_cut()
    cut = time.monotonic()
    await wait_for(device, lambda d: d.off, timeout=POWER_CUT_SHOWN + 5)
    assert time.monotonic() - cut <= POWER_CUT_SHOWN
    assert state_of(hass, satellite) == STATE_UNAVAILABLE

    # Power back: its TCP connection was closed under it; it connects again on its own.
    assert fw.process is not None
    fw.process.send_signal(signal.SIGCONT)
    await wait_for(device, lambda d: d.link is not None and not d.off, timeout=60)
    await hass.async_block_till_done()
    assert state_of(hass, satellite) != STATE_UNAVAILABLE

    # A reboot: the process ends (its sockets close) and starts again from its flash.
    fw.stop()
    await wait_for(device, lambda d: d.off, timeout=30)
    mark = fw.mark()
    fw.start()
    await fw.wait_log(r"CONNACK rc=0", 60, since=mark)
    await wait_for(device, lambda d: d.link is not None and d.link.settled.is_set(), timeout=60)


@pytest.mark.parametrize("transport", ["mqtt"], indirect=True)
async def test_an_announcement_to_a_device_without_power_is_not_delivered(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, paired: FwFactory
) -> None:
    """Its sockets still look open: the alert is written, but the device answers nothing after it.
    The action fails with the reason, and the device is shown unavailable at once."""
    fw = await paired()
    satellite = await entity_of(hass, hub, fw, "assist_satellite")
    fw.power_cut()
    with pytest.raises(HomeAssistantError) as raised:
        await hass.services.async_call(
            "assist_satellite", "announce", {"entity_id": satellite, "message": "Dinner is ready"}, blocking=True
        )
    assert raised.value.translation_key == "announcement_not_delivered"
    await wait_for(device_of(hub, fw), lambda d: d.off, timeout=10)
    assert state_of(hass, satellite) == STATE_UNAVAILABLE
