"""A device's life, not an episode: many conversations in a row, each ending its own way.

Time passes between them as it does for a user (``Clock``): longer than the silence timeout,
so that nothing of one conversation (its silence clock above all) can reach the next. Every
conversation must be answered or end on time, and nothing may grow with use: tasks, OS threads
(PyAV's native ones too), file descriptors, child processes.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator
import contextlib
import gc
import json
from pathlib import Path
from typing import Any
import weakref

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DEFAULT_SILENCE_TIMEOUT
from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.driver import HubDriver
from custom_components.xiaozhi_local.hub import XiaozhiHub
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import CLIENT_ID, MAC, DeviceFactory, mqtt_online, served_hub, wait_for, wait_settled, ws_url
from .helpers import Clock, announce, resources, until
from .internals import hub_of, listening_turn, mcp_of
from .voice import Voice, speech_pcm

TIMEOUT = DEFAULT_SILENCE_TIMEOUT
BETWEEN = 45.0
"""Seconds a user waits between two conversations (longer than the silence timeout)."""


@pytest.fixture(autouse=True)
def no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off, as it is in effect for long-lived objects in Home
    Assistant (a full collection is rare): whatever only it would release counts as kept."""
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def clock(hass: HomeAssistant) -> Iterator[Clock]:
    moved = Clock(hass)
    yield moved
    moved.restore()


@pytest.fixture
async def hub(hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]) -> XiaozhiHub:
    return await served_hub(hass, setup_integration, client)


@pytest.fixture
async def mqtt_device(hub: XiaozhiHub, client: TestClient[Any, Any]) -> AsyncIterator[SimulatedDevice]:
    device = await mqtt_online(hub, client)
    yield device
    await device.drop()


def nothing_grew(baseline: dict[str, int] | None) -> None:
    """Tasks, OS threads, fds and child processes are where they were at ``baseline`` (a thread
    and two fds of slack: HA's executor may start one more worker)."""
    assert baseline is not None
    after = resources()
    assert after["tasks"] <= baseline["tasks"], (baseline, after)
    assert after["threads"] <= baseline["threads"] + 1, (baseline, after)
    assert after["fds"] <= baseline["fds"] + 2, (baseline, after)
    assert after["children"] == 0, (baseline, after)


def goodbyes(device: SimulatedDevice) -> int:
    return device.count(lambda m: m.get("type") == "goodbye")


async def no_goodbye_yet(device: SimulatedDevice, before: int) -> None:
    """The conversation is still open: the server has not ended it."""
    for _ in range(5):
        await asyncio.sleep(0.01)
    assert goodbyes(device) == before, "the conversation was ended at once"
    assert device.mqtt.audio_channel_open


async def silence_ends_it(device: SimulatedDevice, clock: Clock, before: int) -> None:
    """Nobody speaks: not before the silence timeout, then ``goodbye``."""
    await clock.advance(TIMEOUT - 3)
    await no_goodbye_yet(device, before)
    marker = len(device.log)
    await clock.advance(4)
    await device.wait_message(lambda m: m.get("type") == "goodbye", timeout=5, after=marker)
    assert goodbyes(device) == before + 1
    assert not device.mqtt.audio_channel_open


async def listening_again(device: SimulatedDevice, xdev: XiaozhiDevice, sent: int) -> None:
    """After its reply an auto-mode device listens again (``listen start``); the server has it.

    The reply's run had a turn whose audio ended, or none (typed text): a turn taking audio is
    the new one, its silence clock running.
    """
    await until(lambda: any(m.get("type") == "listen" and m.get("state") == "start" for m in device.sent[sent:]))
    await until(lambda: listening_turn(xdev))


async def answered(device: SimulatedDevice, marker: int) -> None:
    """The question after ``marker`` was heard (``stt``), answered, and the answer played out."""
    stt = await device.wait_message(lambda m: m.get("type") == "stt", 30, after=marker)
    heard = next(i for i in range(marker, len(device.log)) if device.log[i] is stt)
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=heard)
    assert any(m.get("type") == "llm" for m in device.log[heard:]), device.log[marker:]


@contextlib.asynccontextmanager
async def staying_online(
    hass: HomeAssistant, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> AsyncIterator[SimulatedDevice]:
    """A stock device over MQTT that reconnects by itself, on ports that stay the same across reloads."""
    from .test_mqtt import free_port

    port = free_port()
    hass.config_entries.async_update_entry(
        hub.entry, options={"websocket_url": ws_url(client), "mqtt_port": port, "udp_port": port}
    )
    await hass.async_block_till_done()
    device = await mqtt_online(hub, client)
    online = asyncio.create_task(device.mqtt.stay_online(reconnect_interval=0.05))
    try:
        yield device
    finally:
        online.cancel()
        await asyncio.gather(online, return_exceptions=True)
        await device.drop()


async def test_mqtt_device_through_twenty_conversations(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, mqtt_device: SimulatedDevice, clock: Clock
) -> None:
    """The default transport: the link outlives its conversations; each one starts anew.

    Endings in turn: a reply and then silence (the firmware listens again after its reply), a
    false wake (silence only), a reply then the device's own goodbye, an abort while it speaks,
    and push-to-talk. Before each, the user waits longer than the silence timeout.
    """
    device = mqtt_device
    xdev = hub.devices[MAC]
    endings = ["reply", "false_wake", "device_goodbye", "abort", "push_to_talk"]
    baseline: dict[str, int] | None = None
    for index in range(20):
        ending = endings[index % len(endings)]
        await clock.advance(BETWEEN)
        before = goodbyes(device)
        marker = len(device.log)
        await device.connect()  # the wake word: hello, the UDP channel
        assert xdev.conversation is not None
        assert xdev.conversation.link is xdev.link
        if ending == "false_wake":
            await device.send_json(
                {"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"}
            )
            await until(lambda: xdev.exchanging)
            await no_goodbye_yet(device, before)
            await silence_ends_it(device, clock, before)
        elif ending == "reply":
            device.relisten = True  # after the reply it listens again, and nobody speaks
            await device.say(speech_pcm())
            sent = len(device.sent)
            await answered(device, marker)
            await listening_again(device, xdev, sent)
            await silence_ends_it(device, clock, before)
        elif ending == "device_goodbye":
            device.relisten = False
            await device.say(speech_pcm())
            await answered(device, marker)
            await device.mqtt.goodbye()
        elif ending == "abort":
            device.relisten = False
            await device.say(speech_pcm())
            await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "start", 30, after=marker)
            await device.abort()
            await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 10, after=marker)
            await device.mqtt.goodbye()
        else:  # push-to-talk: held, spoken, released; idle after the reply, ended by the idle timeout
            device.relisten = False
            await device.say(speech_pcm(), mode="manual")
            await answered(device, marker)
            await device.mqtt.goodbye()
        await wait_for(xdev, lambda d: d.idle)
        await hass.async_block_till_done(wait_background_tasks=True)
        if index == len(endings) - 1:
            baseline = resources()  # once each ending ran (the codec thread and HA's caches exist)
    nothing_grew(baseline)
    assert xdev.link is not None  # the link lived through all of them


async def test_typed_text_counts_as_taking_part(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_device: DeviceFactory, clock: Clock
) -> None:
    """A browser page listens (auto), types a question, then speaks 10 s after the reply: answered.

    Typing takes part in the conversation: silence is counted anew from it, not from when the
    page began listening.
    """
    device = await make_device(flavor="browser")
    xdev = hub.devices[MAC]
    await wait_settled(xdev)
    await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"})
    await until(lambda: xdev.exchanging)  # the server has it
    await clock.advance(TIMEOUT - 5)
    marker, sent = len(device.log), len(device.sent)
    await device.type_text("what time is it")
    await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)
    await listening_again(device, xdev, sent)  # the page listens on after the reply
    await clock.advance(10)  # over the timeout since it began listening; far less since it typed
    for _ in range(10):
        await asyncio.sleep(0.01)
    assert not device.closed.is_set(), "the page was disconnected for silence although it typed"
    assert xdev.link is not None
    marker = len(device.log)
    await device.say(speech_pcm(), start=False)
    await answered(device, marker)
    assert not device.closed.is_set()


async def test_pairing_sessions_leave_nothing_behind(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """xiaozhi-sdk asks to be told its code, again and again: each session speaks it (TTS,
    resampled, encoded) and closes; threads, tasks and descriptors stay where they were."""
    new_mac = "aa:bb:cc:00:11:22"
    headers = {"Device-Id": new_mac, "Client-Id": CLIENT_ID, "Content-Type": "application/json"}
    resp = await client.post("/api/xiaozhi_local/ota/", data=json.dumps({"version": 2}), headers=headers)
    token = (await resp.json())["websocket"]["token"]
    baseline: dict[str, int] | None = None
    for index in range(12):
        sdk = SimulatedDevice(
            SimulatorOptions(url=ws_url(client), token=token, mac=new_mac, client_id=CLIENT_ID, flavor="xiaozhi-sdk")
        )
        await sdk.connect()
        await sdk.wait_closed()
        assert sdk.audio  # the code was spoken
        await sdk.drop()
        await hass.async_block_till_done(wait_background_tasks=True)
        if index == 1:
            baseline = resources()
    nothing_grew(baseline)


@pytest.mark.usefixtures(no_cyclic_gc.__name__)
async def test_pairing_sessions_eight_at_a_time_leave_no_thread_behind(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """Eight strangers at once (the most that run) ask again and again to be told their codes: each
    round encodes eight speeches at once, more than the encoders kept idle. With the collector off,
    threads stay where they were (encoders start none), and so do tasks and descriptors."""
    tokens: list[tuple[str, str]] = []
    for index in range(8):
        mac = f"aa:bb:cc:00:12:{index:02x}"
        headers = {"Device-Id": mac, "Client-Id": CLIENT_ID, "Content-Type": "application/json"}
        resp = await client.post("/api/xiaozhi_local/ota/", data=json.dumps({"version": 2}), headers=headers)
        tokens.append((mac, (await resp.json())["websocket"]["token"]))

    async def told(mac: str, token: str) -> bool:
        sdk = SimulatedDevice(
            SimulatorOptions(url=ws_url(client), token=token, mac=mac, client_id=CLIENT_ID, flavor="xiaozhi-sdk")
        )
        try:
            await sdk.connect()
            await sdk.wait_closed()
            return bool(sdk.audio)
        finally:
            await sdk.drop()

    baseline: dict[str, int] | None = None
    for round_ in range(6):
        assert all(await asyncio.gather(*(told(mac, token) for mac, token in tokens)))
        await hass.async_block_till_done(wait_background_tasks=True)
        if round_ == 1:
            baseline = resources()
    nothing_grew(baseline)


async def test_idle_announcements_by_notify_leave_nothing_behind(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any]
) -> None:
    """Firmware 2.5 idle: each announcement is an Ogg Opus stream it fetches (``notify``)."""
    device = await mqtt_online(hub, client, firmware_version="2.5.0")
    baseline: dict[str, int] | None = None
    try:
        for index in range(10):
            fetched = len(device.notify_tasks)
            await announce(hass, f"N{index}")
            assert len(device.notify_tasks) == fetched + 1
            await asyncio.gather(*device.notify_tasks)
            assert device.notify_status[-1] == 200
            await hass.async_block_till_done(wait_background_tasks=True)
            if index == 1:
                baseline = resources()
        assert len(device.notify_pcm) > 0  # spoken: the sim decoded what it fetched
        nothing_grew(baseline)
    finally:
        await device.drop()


@pytest.mark.parametrize("flavor", ["firmware", "py-xiaozhi", "browser", "xiaozhi-sdk"])
async def test_websocket_clients_through_many_conversations(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, make_device: DeviceFactory, clock: Clock, flavor: str
) -> None:
    """Per conversation (a connection each), every client flavour, every way a conversation ends:
    a reply then silence, a false wake, typed text only, an abort while it speaks, a barge-in (a
    new question while it speaks), push-to-talk (then the idle timeout). Each one answered or ended
    on time; nothing left behind."""
    from custom_components.xiaozhi_local.const import DEFAULT_IDLE_TIMEOUT

    xdev = hub.devices[MAC]
    endings = ["reply", "false_wake", "typed", "abort", "barge_in", "push_to_talk"]
    baseline: dict[str, int] | None = None
    for index in range(12):
        ending = endings[index % len(endings)]
        await clock.advance(BETWEEN)
        device = await make_device(flavor=flavor)
        await wait_settled(xdev)
        assert xdev.conversation is not None
        assert xdev.conversation.link is xdev.link
        marker = len(device.log)
        if ending == "false_wake":
            await device.send_json(
                {"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"}
            )
            await until(lambda: xdev.exchanging)
            await clock.advance(TIMEOUT - 3)
            assert not device.closed.is_set(), "the conversation was ended at once"
            await clock.advance(4)
        elif ending == "reply":
            sent = len(device.sent)
            await device.say(speech_pcm())
            await answered(device, marker)
            if flavor != "browser":  # the page streams on instead of a new listen start
                await listening_again(device, xdev, sent)
            await clock.advance(TIMEOUT + 1)
        elif ending == "typed":
            await device.type_text("what time is it")
            await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)
            await device.drop()
        elif ending in ("abort", "barge_in"):
            device.relisten = False
            await device.say(speech_pcm())
            await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "start", 30, after=marker)
            # The button (abort), or the wake word while it speaks (barge-in): the firmware aborts
            # the speech, and with the wake word asks the next question at once.
            await device.abort(None if ending == "abort" else "wake_word_detected")
            await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 10, after=marker)
            if ending == "barge_in":
                again = len(device.log)
                await device.say(speech_pcm())
                await answered(device, again)
            await device.drop()
        else:  # held, spoken, released; idle after the reply; the idle timeout closes it
            device.relisten = False
            await device.say(speech_pcm(), mode="manual")
            await answered(device, marker)
            await clock.advance(DEFAULT_IDLE_TIMEOUT + 1)
        await device.wait_closed()
        await wait_for(xdev, lambda d: d.link is None and d.conversation is None)
        await hass.async_block_till_done(wait_background_tasks=True)
        if index == len(endings) - 1:
            baseline = resources()
    nothing_grew(baseline)


async def test_conversations_go_on_across_a_home_assistant_restart(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any], clock: Clock
) -> None:
    """Talked to, Home Assistant restarts (the entry reloads) in the middle of a conversation, the
    device reconnects by itself: its next conversations are answered and end on time."""
    async with staying_online(hass, hub, client) as device:
        await device.connect()
        marker = len(device.log)
        device.relisten = False
        await device.say(speech_pcm())
        await answered(device, marker)
        assert await hass.config_entries.async_reload(hub.entry.entry_id)  # in the conversation
        await hass.async_block_till_done()
        new_hub: XiaozhiHub = hub_of(hub.entry)
        xdev = new_hub.devices[MAC]
        await wait_for(xdev, lambda d: d.link is not None, timeout=10)
        await wait_settled(xdev)
        assert xdev.conversation is None  # the old one did not survive the restart
        for _ in range(3):
            await clock.advance(BETWEEN)
            before = goodbyes(device)
            await device.connect()
            marker = len(device.log)
            device.relisten = True
            sent = len(device.sent)
            await device.say(speech_pcm())
            await answered(device, marker)
            await listening_again(device, xdev, sent)
            await silence_ends_it(device, clock, before)


async def test_a_setup_that_fails_after_the_mqtt_port_opened_frees_it(
    hass: HomeAssistant, config_entry: MockConfigEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's shutdown is registered before anything starts: a later failure frees the ports."""
    import socket

    from homeassistant.config_entries import ConfigEntryState

    opened: list[tuple[int, int]] = []
    start_mqtt = HubDriver.async_start_mqtt

    async def start_then_fail(driver: HubDriver) -> None:
        await start_mqtt(driver)
        hub = driver.hub
        assert hub.mqtt is not None
        assert hub.mqtt.listening
        opened.append((hub.mqtt.port, hub.mqtt.udp_port))
        raise RuntimeError("a later step of the setup failed")

    monkeypatch.setattr(HubDriver, "async_start_mqtt", start_then_fail)
    config_entry.add_to_hass(hass)
    assert not await hass.config_entries.async_setup(config_entry.entry_id)
    await hass.async_block_till_done()
    assert config_entry.state is ConfigEntryState.SETUP_ERROR
    [(tcp, udp)] = opened
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", tcp))  # free again
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as audio:
        audio.bind(("0.0.0.0", udp))


async def test_deleting_the_hub_deletes_what_it_wrote(
    hass: HomeAssistant, config_entry: MockConfigEntry, hass_storage: dict[str, Any], tmp_path: Path
) -> None:
    """Its store, the token journal (secrets) and the downloaded firmware go; the user's folder stays."""
    from custom_components.xiaozhi_local.const import DOMAIN

    hass.config.config_dir = str(tmp_path)  # its own folders: other tests' firmware cache is not touched
    ducked = f"{DOMAIN}.ducked"  # a volume to give back to a player that never came back
    players = {"media_player.gone": {"before": 0.5, "quieter": 0.125}}
    hass_storage[ducked] = {"version": 1, "minor_version": 1, "key": ducked, "data": {"players": players}}
    config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(config_entry.entry_id)
    entry_id = config_entry.entry_id
    assert await hass.config_entries.async_unload(entry_id)  # everything it holds is on disk now
    journal = f"{DOMAIN}.{entry_id}.identities"
    assert {f"{DOMAIN}.{entry_id}", journal} <= set(hass_storage)
    assert MAC in json.dumps(hass_storage[journal])
    cache = Path(hass.config.cache_path(DOMAIN, "firmware"))
    mine = Path(hass.config.path("xiaozhi_firmware"))

    def write_files() -> None:
        cache.mkdir(parents=True)
        (cache / "bread-compact-wifi_2.5.0.bin").write_bytes(b"\xe9" * 64)
        mine.mkdir(exist_ok=True)
        (mine / "bread-compact-wifi_2.5.1.bin").write_bytes(b"\xe9" * 64)

    await hass.async_add_executor_job(write_files)
    assert await hass.config_entries.async_remove(entry_id)
    await hass.async_block_till_done()
    assert not {key for key in hass_storage if key.startswith(f"{DOMAIN}.{entry_id}")}
    assert ducked not in hass_storage  # the last hub: no volume is given back any more
    assert not await hass.async_add_executor_job(Path(hass.config.cache_path(DOMAIN)).exists)
    assert await hass.async_add_executor_job((mine / "bread-compact-wifi_2.5.1.bin").exists)


async def quiet(xdev: XiaozhiDevice) -> None:
    """Its connect-time round is over and no call is in flight (the moved clock may start a status read)."""
    link = await xdev.async_wait_ready(5)
    await link.settled.wait()
    await until(lambda: mcp_of(link).pending_count == 0)


async def test_the_satellite_switched_off_and_on_again(
    hass: HomeAssistant, ready: Voice, hub: XiaozhiHub, client: TestClient[Any, Any], clock: Clock
) -> None:
    """The user disables the Assist satellite and enables it again, several times, with the device
    always connected: while it is off the device's wake finds nobody (and nothing breaks); once it
    is on again, the device is answered. Home Assistant reloads the hub each time (its own delay)."""
    from homeassistant.config_entries import RELOAD_AFTER_UPDATE_DELAY
    from homeassistant.helpers import entity_registry as er

    from .test_conversation import SATELLITE

    async with staying_online(hass, hub, client) as device:
        registry = er.async_get(hass)
        baseline: dict[str, int] | None = None
        for round_ in range(4):
            registry.async_update_entity(SATELLITE, disabled_by=er.RegistryEntryDisabler.USER)
            await clock.advance(RELOAD_AFTER_UPDATE_DELAY + 1)  # Home Assistant reloads the hub
            xdev = hub_of(hub.entry).devices[MAC]
            await wait_for(xdev, lambda d: d.link is not None, timeout=10)
            await quiet(xdev)
            assert xdev.voice is None
            assert hass.states.get(SATELLITE) is None
            await device.connect()  # a wake with no satellite: the device's hello is still answered
            await device.send_json(
                {"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"}
            )
            await device.mqtt.goodbye()
            registry.async_update_entity(SATELLITE, disabled_by=None)
            await clock.advance(RELOAD_AFTER_UPDATE_DELAY + 1)
            xdev = hub_of(hub.entry).devices[MAC]
            await wait_for(xdev, lambda d: d.link is not None and d.voice is not None, timeout=10)
            await quiet(xdev)
            await clock.advance(BETWEEN)
            await device.connect()
            marker = len(device.log)
            device.relisten = False
            await device.say(speech_pcm())
            await answered(device, marker)
            await device.mqtt.goodbye()
            await wait_for(xdev, lambda d: d.idle)
            await hass.async_block_till_done(wait_background_tasks=True)
            if round_ == 0:
                baseline = resources()
        nothing_grew(baseline)


async def test_removed_devices_leave_nothing_alive(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """Pairing and removal, over and over (the soak saw each removed device, its tools and entities'
    listeners kept by the entry until it unloaded): nothing of a removed device stays alive."""
    from homeassistant.config_entries import ConfigSubentry
    from homeassistant.const import CONF_MAC, CONF_TOKEN

    from custom_components.xiaozhi_local.const import SUBENTRY_DEVICE

    hub = hub_of(hass)
    gone: list[weakref.ref[XiaozhiDevice]] = []
    for index in range(8):
        mac, token = f"aa:bb:cc:00:30:{index:02x}", f"token-{index}-" + "t" * 36
        subentry = ConfigSubentry(
            data={CONF_MAC: mac, CONF_TOKEN: token},  # type: ignore[arg-type]
            subentry_type=SUBENTRY_DEVICE,
            title=f"Churn {index}",
            unique_id=mac,
        )
        hass.config_entries.async_add_subentry(setup_integration, subentry)
        await hass.async_block_till_done()
        sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=token, mac=mac, ir=True, lamp=True))
        await sim.connect()
        await wait_settled(hub.devices[mac])  # its tools made entities, IR buttons among them
        gone.append(weakref.ref(hub.devices[mac]))
        await sim.drop()
        hass.config_entries.async_remove_subentry(setup_integration, subentry.subentry_id)
        await hass.async_block_till_done()
    async with asyncio.timeout(5):
        await hub.async_wait_no_connections()  # the last one's socket handler has returned too
    await hass.async_block_till_done(wait_background_tasks=True)
    gc.collect()
    # The last one's socket may still be referenced for a while by aiohttp (its request task,
    # cancelled when the socket closed, keeps the traceback through our handler): not counted.
    assert [ref() for ref in gone[:-1]] == [None] * 7
    alive = sum(1 for obj in gc.get_objects() if isinstance(obj, XiaozhiDevice) and obj.hass is hass)
    assert alive <= len(hub.devices) + 1
