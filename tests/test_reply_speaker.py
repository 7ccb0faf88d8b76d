"""The reply on the room's speaker, and a quieter room while the device talks (satellite/reply_speaker.py, quiet.py).

Real parts: the players fetch the reply over HTTP from Home Assistant's TTS proxy (a WAV of the
test engine's), the device is the simulator over a real socket, and the pipeline is HA's.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
import logging
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.components.media_player import MediaPlayerEntityFeature, MediaPlayerState
from homeassistant.config_entries import ConfigSubentry
from homeassistant.const import CONF_MAC, CONF_TOKEN, EVENT_HOMEASSISTANT_FINAL_WRITE
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr, entity_registry as er, intent, issue_registry as ir
from homeassistant.helpers.event import async_track_state_change_event
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, async_fire_time_changed

from custom_components.xiaozhi_local.const import DOMAIN, SUBENTRY_DEVICE
from custom_components.xiaozhi_local.home import volumes
from custom_components.xiaozhi_local.satellite import reply_speaker
from custom_components.xiaozhi_local.satellite.quiet import DUCK_FACTOR, MAX_HOLD
from custom_components.xiaozhi_local.satellite.reply_speaker import END_GRACE
from custom_components.xiaozhi_local.store import ducked
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import (
    CLIENT_ID2,
    MAC,
    MAC2,
    TOKEN2,
    mqtt_online,
    wait_settled,
    ws_url,
)
from .helpers import hub_device, logged_by_us, until, wait_entity
from .internals import hub_of
from .room import Room, RoomPlayer, async_setup_room, put_in_area
from .voice import Voice, speech_pcm, speech_seconds

SELECT = "select.kitchen_reply_speaker"
SWITCH = "switch.kitchen_quieter_room_while_talking"
SATELLITE = "assist_satellite.kitchen"
ISSUE = f"reply_player_failed_{MAC}"


@pytest.fixture
async def room(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> Room:
    """A living room (the device's area) with a speaker and a TV playing music; a bedroom player."""
    await hass.config.async_update(internal_url=str(client.make_url("/")).rstrip("/"))
    players = await async_setup_room(
        hass,
        RoomPlayer("living_room_speaker"),
        RoomPlayer("living_room_tv", state=MediaPlayerState.PLAYING, volume=0.63),
        RoomPlayer("living_room_radio", state=MediaPlayerState.PAUSED, volume=0.4),
        RoomPlayer("bedroom_speaker", state=MediaPlayerState.PLAYING, volume=0.7),
    )
    for key in ("living_room_speaker", "living_room_tv", "living_room_radio"):
        put_in_area(hass, "Living room", entity_id=players.entity_id(key))
    put_in_area(hass, "Bedroom", entity_id=players.entity_id("bedroom_speaker"))
    put_in_area(hass, "Living room", device_id=hub_device(hass).device_id)
    return players


@pytest.fixture
def device(room: Room, talking: SimulatedDevice) -> SimulatedDevice:
    """The device of the living room in a conversation, over WebSocket or MQTT+UDP (``talking``)."""
    talking.relisten = False
    return talking


async def choose(hass: HomeAssistant, player: str) -> None:
    """Choose ``player`` (an entity id, or ``device``) as the UI does: by the name it shows."""
    option = player if player == "device" else hass.states.get(player).name  # type: ignore[union-attr]
    await hass.services.async_call("select", "select_option", {"entity_id": SELECT, "option": option}, blocking=True)


def tts(state: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == "tts" and m.get("state") == state


async def seen_at(device: SimulatedDevice, predicate: Callable[[dict[str, Any]], bool], after: int) -> float:
    """The loop time the device logged the first message matching ``predicate`` (woken at once)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(30):
        while not any(predicate(m) for m in device.log[after:]):
            device.logged.clear()
            await device.logged.wait()
    return loop.time()


async def test_the_options_are_the_device_and_the_media_players_not_a_xiaozhis(
    hass: HomeAssistant, room: Room, setup_integration: MockConfigEntry
) -> None:
    """Every player of the home, not the xiaozhis' own small speakers: pairing twenty devices adds
    twenty speakers and rewrites no device's select (it did, each time, for every device)."""
    state = hass.states.get(SELECT)
    assert state is not None
    assert state.state == "device"
    assert state.attributes["player"] is None
    options = state.attributes["options"]
    assert options == ["device", "Bedroom Speaker", "Living Room Radio", "Living Room Speaker", "Living Room Tv"]
    assert hass.states.get("media_player.kitchen_speaker") is not None
    assert hass.states.get("media_player.desk_speaker") is not None
    writes: list[Any] = []
    stop = async_track_state_change_event(hass, SELECT, writes.append)
    for index in range(20):
        mac = f"aa:bb:cc:00:40:{index:02x}"
        subentry = ConfigSubentry(
            data={CONF_MAC: mac, CONF_TOKEN: "t" * 43},  # type: ignore[arg-type]
            subentry_type=SUBENTRY_DEVICE,
            title=f"Shelf {index}",
            unique_id=mac,
        )
        hass.config_entries.async_add_subentry(setup_integration, subentry)
    await hass.async_block_till_done()
    stop()
    assert hass.states.get("media_player.shelf_19_speaker") is not None
    assert writes == []
    await choose(hass, room.entity_id("living_room_speaker"))
    subentry = next(iter(hub_of(hass).entry.subentries.values()))
    assert subentry.data["reply_player"] == room.entity_id("living_room_speaker")
    state = hass.states.get(SELECT)
    assert state is not None
    assert (state.state, state.attributes["player"]) == ("Living Room Speaker", "media_player.living_room_speaker")
    await choose(hass, "device")
    subentry = next(iter(hub_of(hass).entry.subentries.values()))
    assert "reply_player" not in subentry.data


async def test_the_options_follow_names_renames_and_players_that_go(
    hass: HomeAssistant, room: Room, setup_integration: MockConfigEntry, entity_registry: er.EntityRegistry
) -> None:
    """Players show by name; a name two share shows each one's entity id too; a rename (name or
    entity id) is followed, and the choice stays with the player; a player that went stays listed."""
    registry = entity_registry
    for key in ("living_room_radio", "bedroom_speaker"):
        registry.async_update_entity(room.entity_id(key), name="Speaker")
    registry.async_update_entity(room.entity_id("living_room_tv"), name="device")  # our own option's key
    await hass.async_block_till_done()
    options = hass.states.get(SELECT).attributes["options"]  # type: ignore[union-attr]
    assert options == [
        "device",
        "device (media_player.living_room_tv)",
        "Living Room Speaker",
        "Speaker (media_player.bedroom_speaker)",
        "Speaker (media_player.living_room_radio)",
    ]
    await hass.services.async_call(
        "select",
        "select_option",
        {"entity_id": SELECT, "option": "Speaker (media_player.bedroom_speaker)"},
        blocking=True,
    )
    subentry = next(iter(hub_of(hass).entry.subentries.values()))
    assert subentry.data["reply_player"] == "media_player.bedroom_speaker"

    registry.async_update_entity("media_player.bedroom_speaker", name="Bed")
    await wait_entity(hass, SELECT, lambda s: s.state == "Bed")
    registry.async_update_entity("media_player.bedroom_speaker", new_entity_id="media_player.bed")
    await wait_entity(hass, SELECT, lambda s: s.attributes["player"] == "media_player.bed")
    assert hub_of(hass).entry.subentries[subentry.subentry_id].data["reply_player"] == "media_player.bed"
    assert hass.states.get(SELECT).state == "Bed"  # type: ignore[union-attr]

    registry.async_remove("media_player.bed")
    await wait_entity(hass, SELECT, lambda s: s.state == "media_player.bed")
    assert hass.states.get(SELECT).attributes["options"][-1] == "media_player.bed"  # type: ignore[union-attr]


async def test_the_reply_plays_on_the_chosen_speaker_and_the_device_shows_it(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, issue_registry: ir.IssueRegistry
) -> None:
    """The player fetches the reply (announce), the device shows its text while speaking and gets no
    audio; its ``tts stop`` (which reopens the microphone) comes only once the player has finished."""
    speaker = room.players["living_room_speaker"]
    await choose(hass, room.entity_id("living_room_speaker"))
    marker, packets = len(device.log), len(device.audio_at)
    stop = asyncio.ensure_future(seen_at(device, tts("stop"), marker))
    await device.say(speech_pcm())
    await until(lambda: bool(speaker.played), timeout=30)
    played = speaker.played[0]
    assert played.extra.get("announce") is True
    assert "/api/tts_proxy/" in played.media_id
    assert played.media_id.startswith("http://127.0.0.1")
    assert abs(played.seconds - speech_seconds(ready.agent.reply)) < 0.1  # the test engine's reply, whole
    await device.wait_message(tts("sentence_start"), after=marker)
    assert device.device_state == "speaking"
    stopped = await stop
    shown = [m["text"] for m in device.log[marker:] if tts("sentence_start")(m)]
    assert " ".join(shown) == ready.agent.reply  # each sentence when the player says it
    assert played.ended is not None
    assert stopped >= played.ended
    assert len(device.audio_at) == packets  # the device played nothing itself
    assert hass.states.get(SATELLITE).state in ("idle", "listening")  # type: ignore[union-attr]
    assert issue_registry.async_get_issue(DOMAIN, ISSUE) is None
    times = hub_device(hass).response_times.recent
    assert times
    assert times[-1]["response_ms"] > 0


async def said_by_the_device(device: SimulatedDevice, issue_registry: ir.IssueRegistry) -> dict[str, str]:
    """A turn whose reply the device had to say itself; the repair's placeholders (it must be there)."""
    marker, packets = len(device.log), len(device.audio_at)
    await device.say(speech_pcm())
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    assert len(device.audio_at) > packets  # the device said it
    issue = issue_registry.async_get_issue(DOMAIN, ISSUE)
    assert issue is not None
    return {"why": issue.translation_key or "", **(issue.translation_placeholders or {})}


async def test_a_player_that_cannot_play_leaves_the_reply_on_the_device_and_a_repair_says_why(
    hass: HomeAssistant,
    ready: Voice,
    room: Room,
    device: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
    issue_registry: ir.IssueRegistry,
) -> None:
    speaker = room.players["living_room_speaker"]
    await choose(hass, room.entity_id("living_room_speaker"))
    speaker.fail = "the speaker is asleep"
    # Named as the user named them: the device on its page, the player as Home Assistant shows it.
    dr.async_get(hass).async_update_device(hub_device(hass).device_id, name_by_user="Kitchen counter")
    assert await said_by_the_device(device, issue_registry) == {
        "why": "reply_player_error",  # an error of the player's own: its words quoted
        "device": "Kitchen counter",
        "player": "Living Room Speaker",
        "error": "the speaker is asleep",
    }
    assert "could not play (the speaker is asleep)" in caplog.text
    # Unavailable: the same, without a call.
    speaker.fail = None
    speaker.set_down(True)
    assert (await said_by_the_device(device, issue_registry))["why"] == "reply_player_unavailable"
    assert not speaker.played
    # Back: the reply plays there again, and the notice goes.
    speaker.set_down(False)
    marker = len(device.log)
    await device.say(speech_pcm())
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    assert len(speaker.played) == 1
    assert issue_registry.async_get_issue(DOMAIN, ISSUE) is None
    # Its advice followed (this device says the replies): the notice goes at once.
    speaker.set_down(True)
    await said_by_the_device(device, issue_registry)
    await choose(hass, "device")
    assert issue_registry.async_get_issue(DOMAIN, ISSUE) is None


async def test_a_player_that_takes_the_reply_too_late_does_not_play_it_over_the_device(
    hass: HomeAssistant,
    ready: Voice,
    room: Room,
    device: SimulatedDevice,
    issue_registry: ir.IssueRegistry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``play_media`` hangs past the limit: the device says the reply; when the player starts it
    after all, it is stopped at once, and the player's music of before is never touched."""
    monkeypatch.setattr(reply_speaker, "PLAY_TIMEOUT", 0.2)
    tv = room.players["living_room_tv"]
    tv.late = arrived = asyncio.Event()
    await choose(hass, room.entity_id("living_room_tv"))
    assert (await said_by_the_device(device, issue_registry))["why"] == "reply_player_timeout"
    assert (tv.stops, tv.played) == (0, [])  # its music plays on
    arrived.set()
    await until(lambda: bool(tv.played) and tv.played[0].ended is not None, timeout=10)
    assert tv.stops == 1
    played = tv.played[0]
    assert played.ended is not None
    assert played.ended - played.began < played.seconds  # cut short, not heard over the device
    state = hass.states.get(room.entity_id("living_room_tv"))
    assert state is not None
    assert (state.state, state.attributes["media_content_id"]) == ("playing", "music")


async def test_a_player_that_does_not_say_it_ended_is_waited_for_the_replys_length(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """An announcement over music keeps the player ``playing``: the reply's length decides."""
    tv = room.players["living_room_tv"]
    tv.reports = False
    await choose(hass, room.entity_id("living_room_tv"))
    marker = len(device.log)
    stop = asyncio.ensure_future(seen_at(device, tts("stop"), marker))
    await device.say(speech_pcm())
    await until(lambda: bool(tv.played), timeout=30)
    stopped = await stop
    played = tv.played[0]
    assert stopped >= played.began + played.seconds  # not before the reply could have been heard
    assert hass.states.get(room.entity_id("living_room_tv")).state == "playing"  # type: ignore[union-attr]
    assert END_GRACE < 5


async def test_a_wake_word_during_the_reply_stops_the_player(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    speaker = room.players["living_room_speaker"]
    ready.agent.reply = "A long story. " * 20
    await choose(hass, room.entity_id("living_room_speaker"))
    marker = len(device.log)
    await device.say(speech_pcm())
    await until(lambda: bool(speaker.played), timeout=30)
    await device.wait_message(tts("start"), after=marker)
    await device.abort("wake_word_detected")
    await until(lambda: speaker.stops == 1)
    assert speaker.played[0].ended is not None
    await device.wait_message(tts("stop"), after=marker)


async def test_the_rooms_players_go_quieter_and_come_back_exactly(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """Only the playing players of the device's area: the TV (0.63) goes to a quarter and back to
    0.63; the paused radio and the bedroom's speaker are not touched."""
    tv = room.players["living_room_tv"]
    await hass.services.async_call("switch", "turn_on", {"entity_id": SWITCH}, blocking=True)
    for _ in range(2):  # twice: the volume it comes back to is the first one, not the quieter one
        marker = len(device.log)
        await device.say(speech_pcm())
        await until(lambda: tv.volume == round(0.63 * DUCK_FACTOR, 3))
        await device.wait_message(tts("stop"), timeout=30, after=marker)
        await until(lambda: tv.volume == 0.63, timeout=10)
    assert tv.volumes == [round(0.63 * DUCK_FACTOR, 3), 0.63] * 2
    assert room.players["living_room_radio"].volumes == []
    assert room.players["bedroom_speaker"].volumes == []
    # Off: the room is left alone.
    await hass.services.async_call("switch", "turn_off", {"entity_id": SWITCH}, blocking=True)
    marker = len(device.log)
    await device.say(speech_pcm())
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    assert len(tv.volumes) == 4


async def test_two_devices_of_the_room_share_the_quiet(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, client: TestClient[Any, Any]
) -> None:
    """The second device talks while the first speaks: the TV stays down until both are done, and
    comes back to the volume it had before either (not to the quieter one)."""
    tv = room.players["living_room_tv"]
    put_in_area(hass, "Living room", device_id=hub_device(hass, MAC2).device_id)
    for switch in (SWITCH, "switch.desk_quieter_room_while_talking"):
        await hass.services.async_call("switch", "turn_on", {"entity_id": switch}, blocking=True)
    desk = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN2, mac=MAC2, client_id=CLIENT_ID2))
    await desk.connect()
    desk.relisten = False
    try:
        await wait_settled(hub_device(hass, MAC2))
        ready.agent.reply = "A long story. " * 8
        marker = len(device.log)
        await device.say(speech_pcm())
        await device.wait_message(tts("start"), timeout=30, after=marker)
        desk_marker = len(desk.log)
        await desk.say(speech_pcm())
        await device.wait_message(tts("stop"), timeout=30, after=marker)
        await desk.wait_message(tts("stop"), timeout=30, after=desk_marker)
        await until(lambda: tv.volume == 0.63, timeout=10)
        assert tv.volumes == [round(0.63 * DUCK_FACTOR, 3), 0.63]
    finally:
        await desk.drop()


async def test_the_volume_comes_back_when_the_device_drops_mid_turn(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    tv = room.players["living_room_tv"]
    await hass.services.async_call("switch", "turn_on", {"entity_id": SWITCH}, blocking=True)
    ready.agent.reply = "A long story. " * 20
    marker = len(device.log)
    await device.say(speech_pcm())
    await device.wait_message(tts("start"), timeout=30, after=marker)
    assert tv.volume == round(0.63 * DUCK_FACTOR, 3)
    await device.drop()
    await until(lambda: tv.volume == 0.63, timeout=10)


async def ducked_turn(hass: HomeAssistant, device: SimulatedDevice, tv: RoomPlayer) -> int:
    """The Quieter room switch on, then a turn under way with the TV turned down; the log's marker."""
    await hass.services.async_call("switch", "turn_on", {"entity_id": SWITCH}, blocking=True)
    marker = len(device.log)
    await device.say(speech_pcm())
    await until(lambda: tv.volume == round(0.63 * DUCK_FACTOR, 3))
    return marker


async def owed_a_volume(
    hass: HomeAssistant, device: SimulatedDevice, tv: RoomPlayer, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn that turned the TV down, which is off the network when its volume is due back."""
    marker = await ducked_turn(hass, device, tv)
    tv.set_down(True)
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    await until(lambda: "cannot be put back to 0.63 now" in caplog.text, timeout=10)


async def test_a_volume_that_cannot_be_put_back_now_is_when_the_player_returns(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, caplog: pytest.LogCaptureFixture
) -> None:
    tv = room.players["living_room_tv"]
    await owed_a_volume(hass, device, tv, caplog)
    assert tv.volume == round(0.63 * DUCK_FACTOR, 3)
    with caplog.at_level(logging.WARNING):
        tv.set_down(False)
    await until(lambda: tv.volume == 0.63)


async def test_a_volume_still_to_give_back_survives_a_restart(
    hass: HomeAssistant,
    ready: Voice,
    room: Room,
    device: SimulatedDevice,
    hass_storage: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The TV is off the network when the turn ends, and Home Assistant restarts before it is back:
    the volume it had is on disk, and it gets it when it returns after the restart."""
    tv = room.players["living_room_tv"]
    await owed_a_volume(hass, device, tv, caplog)
    entry_id = hub_of(hass).entry.entry_id
    await device.drop()
    assert await hass.config_entries.async_unload(entry_id)
    hass.bus.async_fire(EVENT_HOMEASSISTANT_FINAL_WRITE)  # Home Assistant stops: its stores are written
    await hass.async_block_till_done()
    saved = hass_storage["xiaozhi_local.ducked"]["data"]["players"]
    assert saved == {room.entity_id("living_room_tv"): {"before": 0.63, "quieter": round(0.63 * DUCK_FACTOR, 3)}}
    for key in (volumes.DUCKED, ducked.STORE):  # a new process: nothing of the old one in memory
        hass.data.pop(key)
    assert await hass.config_entries.async_setup(entry_id)
    await hass.async_block_till_done()
    assert tv.volume == round(0.63 * DUCK_FACTOR, 3)  # still away
    tv.set_down(False)
    await until(lambda: tv.volume == 0.63)
    await hass.async_block_till_done()  # the volume-back task, after the player took it
    hass.bus.async_fire(EVENT_HOMEASSISTANT_FINAL_WRITE)
    await hass.async_block_till_done()
    assert hass_storage["xiaozhi_local.ducked"]["data"]["players"] == {}


async def test_a_player_deleted_while_it_is_owed_its_volume_is_forgotten(
    hass: HomeAssistant,
    ready: Voice,
    room: Room,
    device: SimulatedDevice,
    hass_storage: dict[str, Any],
    entity_registry: er.EntityRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tv = room.players["living_room_tv"]
    await owed_a_volume(hass, device, tv, caplog)
    assert room.entity_id("living_room_tv") in hass.data[volumes.DUCKED]
    entity_registry.async_remove(room.entity_id("living_room_tv"))
    await hass.async_block_till_done()
    assert hass.data[volumes.DUCKED] == {}
    hass.bus.async_fire(EVENT_HOMEASSISTANT_FINAL_WRITE)
    await hass.async_block_till_done()
    assert hass_storage["xiaozhi_local.ducked"]["data"]["players"] == {}


@pytest.mark.parametrize(
    ("saved", "warning"),
    [
        (
            {"players": {"media_player.living_room_tv": "loud", "light.kitchen": {"before": 1, "quieter": 0.2}}},
            "saved volume of media_player.living_room_tv is unreadable",
        ),
        ({"players": ["media_player.living_room_tv"]}, "saved volumes are unreadable"),
        (["media_player.living_room_tv"], "saved volumes are unreadable"),
        (
            {"players": {"media_player.living_room_tv": {"before": "0.63", "quieter": None}}},
            "saved volume of media_player.living_room_tv is unreadable",
        ),
        ({}, None),
    ],
)
async def test_an_unreadable_saved_volume_is_skipped_with_a_warning(
    hass: HomeAssistant,
    room: Room,
    hass_storage: dict[str, Any],
    setup_integration: MockConfigEntry,
    caplog: pytest.LogCaptureFixture,
    saved: Any,
    warning: str | None,
) -> None:
    """Nothing is set from it, the warning names what is wrong, and the store is written clean."""
    tv = room.players["living_room_tv"]
    assert await hass.config_entries.async_unload(setup_integration.entry_id)
    hass.data.pop(volumes.DUCKED, None)
    hass.data.pop(ducked.STORE, None)
    key = "xiaozhi_local.ducked"
    hass_storage[key] = {"version": 1, "minor_version": 1, "key": key, "data": saved}
    assert await hass.config_entries.async_setup(setup_integration.entry_id)
    await hass.async_block_till_done()
    assert tv.volumes == []
    assert hass.data[volumes.DUCKED] == {}
    assert (warning in logged_by_us(caplog)) if warning else "unreadable" not in logged_by_us(caplog)
    hass.bus.async_fire(EVENT_HOMEASSISTANT_FINAL_WRITE)
    await hass.async_block_till_done()
    assert hass_storage[key]["data"] == ({"players": {}} if saved else saved)


async def test_a_volume_changed_meanwhile_is_left_as_set(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    tv = room.players["living_room_tv"]
    marker = await ducked_turn(hass, device, tv)
    await hass.services.async_call(
        "media_player",
        "volume_set",
        {"entity_id": room.entity_id("living_room_tv"), "volume_level": 0.3},
        blocking=True,
    )
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    await hass.async_block_till_done()
    async_fire_time_changed(hass)
    await asyncio.sleep(2)  # nothing happens: past RESTORE_AFTER, the volume stays as the user set it
    assert tv.volume == 0.3


async def test_announcements_and_questions_follow_the_choice(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    speaker = room.players["living_room_speaker"]
    await choose(hass, room.entity_id("living_room_speaker"))
    # An announcement: Home Assistant's chime, then the message, on the speaker; the device shows
    # the message's text once it is said, and plays nothing.
    marker, packets = len(device.log), len(device.audio_at)
    shown = asyncio.ensure_future(seen_at(device, tts("sentence_start"), marker))
    await hass.services.async_call(
        "assist_satellite", "announce", {"entity_id": SATELLITE, "message": "Dinner is ready"}, blocking=True
    )
    chime, message = speaker.played
    assert chime.media_id.endswith("/api/assist_satellite/static/preannounce.mp3")
    assert 0.5 < chime.seconds < 3
    assert chime.ended is not None
    assert message.began >= chime.ended  # the message waits for the chime
    assert (chime.extra.get("announce"), message.extra.get("announce")) == (True, True)
    assert message.ended is not None  # the action returned once it was played
    assert await shown >= message.began  # not during the chime
    sentence = await device.wait_message(tts("sentence_start"), after=marker)
    assert sentence["text"] == "Dinner is ready"
    assert len(device.audio_at) == packets
    # A question: asked on the speaker; the device listens once it has been asked.
    ready.stt.text = "yes please"
    device.relisten = True  # auto mode: it listens once the question has played (its tts stop)
    marker = len(device.log)
    stop = asyncio.ensure_future(seen_at(device, tts("stop"), marker))
    asking = hass.async_create_task(
        hass.services.async_call(
            "assist_satellite",
            "ask_question",
            {
                "entity_id": SATELLITE,
                "question": "Shall I turn off the lights?",
                "preannounce": False,
                "answers": [{"id": "yes", "sentences": ["yes please"]}],
            },
            blocking=True,
            return_response=True,
        )
    )
    await until(lambda: len(speaker.played) == 3, timeout=30)  # preannounce=False: no chime
    stopped = await stop
    assert speaker.played[2].ended is not None
    assert stopped >= speaker.played[2].ended
    await until(lambda: device.device_state == "listening")
    device.relisten = False  # the answer ends the exchange: no new turn opens after it
    await device.say(speech_pcm(), start=False)
    async with asyncio.timeout(30):
        result = await asking
    assert result["id"] == "yes"  # type: ignore[index]


async def test_a_message_the_player_fails_after_its_chime_is_said_by_the_device_without_it(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, issue_registry: ir.IssueRegistry
) -> None:
    """The chime was heard on the speaker: the device says the message only, not the chime again."""
    speaker = room.players["living_room_speaker"]
    speaker.fails_from = 1
    await choose(hass, room.entity_id("living_room_speaker"))
    marker, packets = len(device.log), len(device.audio_at)
    await hass.services.async_call(
        "assist_satellite", "announce", {"entity_id": SATELLITE, "message": "Dinner is ready"}, blocking=True
    )
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    assert [p.media_id.rsplit("/", 1)[-1] for p in speaker.played] == ["preannounce.mp3"]
    heard = (len(device.audio_at) - packets) * device.frame_ms / 1000
    assert abs(heard - speech_seconds("Dinner is ready")) < 0.3, heard  # the chime (1.25 s) not again
    assert issue_registry.async_get_issue(DOMAIN, ISSUE) is not None


async def test_a_timer_rings_on_the_device_not_on_the_reply_speaker(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """Its own test: the two minutes it moves the clock by fire every timer due, a turn's too."""
    speaker = room.players["living_room_speaker"]
    await choose(hass, room.entity_id("living_room_speaker"))
    await wait_entity(hass, SATELLITE, lambda s: s.state == "idle")
    marker, packets = len(device.log), len(device.audio_at)
    response = await intent.async_handle(
        hass, "test", intent.INTENT_START_TIMER, {"minutes": {"value": 2}}, device_id=hub_device(hass).device_id
    )
    assert response.response_type == intent.IntentResponseType.ACTION_DONE
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(minutes=2, seconds=1))
    ring = await device.wait_message(lambda m: "Timer done" in str(m.get("text") or m.get("message")), after=marker)
    await device.wait_message(tts("stop"), timeout=30, after=device.log.index(ring))
    assert len(device.audio_at) > packets, (device.log[marker:], len(speaker.played))
    assert speaker.played == []


async def test_an_idle_device_announces_on_its_speaker_without_opening_a_conversation(
    hass: HomeAssistant, ready: Voice, room: Room, client: TestClient[Any, Any]
) -> None:
    """Always connected but idle (MQTT, no audio channel): the speaker says it; the device is not
    woken, and gets no alert (that would ring its own sound)."""
    hub = hub_of(hass)
    hass.config_entries.async_update_entry(hub.entry, options={"websocket_url": ws_url(client)})
    await hass.async_block_till_done()
    sim = await mqtt_online(hub, client)
    try:
        await wait_settled(hub.devices[MAC])
        speaker = room.players["living_room_speaker"]
        await choose(hass, room.entity_id("living_room_speaker"))
        marker = len(sim.log)
        announce = {"entity_id": SATELLITE, "message": "The door is open", "preannounce": False}
        await hass.services.async_call("assist_satellite", "announce", announce, blocking=True)
        assert len(speaker.played) == 1
        assert speaker.played[0].ended is not None
        assert not sim.mqtt.audio_channel_open
        assert sim.log[marker:] == []
    finally:
        await sim.drop()


@pytest.mark.parametrize(
    ("rate", "channels", "bits", "fmt"),
    [(22050, 1, 16, 1), (24000, 1, 24, 1), (44100, 2, 16, 1), (48000, 1, 32, 1), (16000, 1, 32, 3), (8000, 1, 8, 1)],
)
async def test_a_replys_length_is_read_from_its_wav_in_any_form(rate: int, channels: int, bits: int, fmt: int) -> None:
    """The wait for a reply speaker: every WAV an engine may return, arriving in pieces as small as a
    byte (header split too), its RIFF sizes bogus as piped WAV's are; nothing decoded."""
    from custom_components.xiaozhi_local.sound.media import wav_seconds

    from .protocol.test_audio import _samples, wav_header

    data = wav_header(rate, channels, bits, fmt) + _samples(bits, fmt, [0.25] * (2 * rate * channels))
    firsts: list[bool] = []

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, 200):
            yield data[start : start + 1]
        for start in range(200, len(data), 997):
            yield data[start : start + 997]

    seconds = await wav_seconds(pieces(), lambda: firsts.append(True))
    assert abs(seconds - 2.0) < 0.001
    assert firsts  # the first audio is marked (Response time's first_audio)


# -- the quieter room always gives its volume back ------------------------------------------

TV = "living_room_tv"


async def conversation(device: SimulatedDevice) -> None:
    marker = len(device.log)
    await device.say(speech_pcm())
    await device.wait_message(tts("stop"), timeout=30, after=marker)


async def switch_on(hass: HomeAssistant) -> None:
    await hass.services.async_call("switch", "turn_on", {"entity_id": SWITCH}, blocking=True)


async def test_a_coarse_player_comes_back_each_time(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """A player of 15 volume steps takes 0.15 as 0.133: that is still ours, so 0.6 comes back after
    every conversation (it stayed at 0.133 for good)."""
    tv = room.players[TV]
    tv.steps = 15
    await tv.async_set_volume_level(0.6)
    tv.volumes.clear()
    await switch_on(hass)
    for _ in range(3):
        await conversation(device)
        await until(lambda: len(tv.volumes) % 2 == 0 and tv.volume == 0.6, timeout=10)
    assert tv.volumes == [0.133, 0.6] * 3


async def test_a_polled_player_comes_back_each_time(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """Home Assistant learns a polled player's volume seconds late. The give-back saw 0.63 (the
    lowering not shown yet) and took it for the user's; the next exchange saw the quieter one and
    took it for the player's own. Neither happens: back to 0.63 after every conversation, the next
    one starting while the state still shows the quieter volume."""
    tv = room.players[TV]
    tv.polled = 2.5
    await switch_on(hass)
    quieter = round(0.63 * DUCK_FACTOR, 3)
    for _ in range(3):
        await conversation(device)
        await until(lambda: tv.volumes[-1:] == [0.63], timeout=10)
    assert tv.volumes == [quieter, 0.63] * 3
    player = room.entity_id(TV)
    await until(lambda: hass.states.get(player).attributes.get("volume_level") == 0.63, timeout=10)  # type: ignore[union-attr]


async def test_a_slow_player_cut_off_mid_lowering_comes_back(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """The player takes a second for each volume, and the device drops right after the lowering was
    sent: the volume back waits for ours to land, then comes (it was read before ours had landed)."""
    tv = room.players[TV]
    tv.slow = 1.0
    await switch_on(hass)
    turn = asyncio.create_task(device.say(speech_pcm()))
    player = room.entity_id(TV)
    await until(lambda: player in hass.data.get(volumes.DUCKED, {}))
    await device.drop()
    await asyncio.gather(turn, return_exceptions=True)
    await until(lambda: tv.volumes == [round(0.63 * DUCK_FACTOR, 3), 0.63], timeout=15)
    await hass.async_block_till_done()
    assert tv.volume == 0.63


async def test_the_volume_to_give_back_is_on_disk_before_the_player_is_lowered(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, hass_storage: dict[str, Any]
) -> None:
    """Home Assistant killed the moment the player went quieter: the volume it had is on disk."""
    tv = room.players[TV]
    on_disk: list[Any] = []
    lower = tv.async_set_volume_level

    async def noting(volume: float) -> None:
        on_disk.append(hass_storage.get("xiaozhi_local.ducked", {}).get("data"))
        await lower(volume)

    tv.async_set_volume_level = noting  # type: ignore[method-assign]
    await switch_on(hass)
    await conversation(device)
    await until(lambda: len(on_disk) == 2, timeout=10)
    player = room.entity_id(TV)
    assert on_disk[0] == {"players": {player: {"before": 0.63, "quieter": round(0.63 * DUCK_FACTOR, 3)}}}


async def test_a_device_that_keeps_talking_does_not_hold_the_room_down(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, caplog: pytest.LogCaptureFixture
) -> None:
    """A reply that never ends (or a device that opens exchange after exchange): after ``MAX_HOLD``
    the volume comes back, once said, and the next exchanges leave the room alone for as long."""
    tv = room.players[TV]
    ready.agent.reply = "A long story. " * 30
    await switch_on(hass)
    marker = len(device.log)
    turn = asyncio.create_task(device.say(speech_pcm()))
    await device.wait_message(tts("start"), timeout=30, after=marker)
    assert tv.volume == round(0.63 * DUCK_FACTOR, 3)
    with caplog.at_level(logging.WARNING):
        async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=MAX_HOLD + 1))
        await until(lambda: tv.volume == 0.63, timeout=10)
    await device.abort("wake_word_detected")
    await asyncio.gather(turn, return_exceptions=True)
    await conversation(device)  # within the rest: not lowered again
    assert tv.volumes == [round(0.63 * DUCK_FACTOR, 3), 0.63]
    assert len([r for r in caplog.records if "has kept its room quieter" in r.getMessage()]) == 1


async def test_a_polled_player_ends_the_reply_within_a_moment_of_its_end(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """Home Assistant learns a polled player's end at its next poll (MPD: ~10 s; ``tts stop``
    came 2.7 to 9.9 s late, and a follow-up's microphone with it): the device's ``tts stop`` comes
    at the reply's length from when it began to play, within 1.5 s of its end."""
    speaker = room.players["living_room_speaker"]
    speaker.polls = True
    await choose(hass, room.entity_id("living_room_speaker"))
    for _ in range(2):
        marker = len(device.log)
        stop = asyncio.ensure_future(seen_at(device, tts("stop"), marker))
        await device.say(speech_pcm())
        stopped = await asyncio.wait_for(stop, 30)
        played = speaker.played[-1]
        assert played.ended is not None
        assert played.ended - 0.5 <= stopped <= played.ended + 1.5
        speaker.async_write_ha_state()  # its next poll


async def test_a_player_without_announce_gets_its_music_back(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice
) -> None:
    """The TV plays music and cannot announce: the reply replaces its music while it plays, then
    the music comes back where it was (it was replaced for good)."""
    tv = room.players["living_room_tv"]
    tv._attr_supported_features &= ~MediaPlayerEntityFeature.MEDIA_ANNOUNCE
    tv._attr_media_position = 42
    tv._attr_media_position_updated_at = dt_util.utcnow()
    tv.async_write_ha_state()
    await choose(hass, room.entity_id("living_room_tv"))
    marker = len(device.log)
    await device.say(speech_pcm())
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    await until(lambda: tv.seeks != [], timeout=10)
    assert len(tv.played) == 1  # the reply, not over the device
    assert "announce" not in tv.played[0].extra
    state = hass.states.get(room.entity_id("living_room_tv"))
    assert state is not None
    assert (state.state, state.attributes.get("media_content_id")) == ("playing", "music")
    assert 42.0 <= tv.seeks[0] < 42.0 + 10


async def test_a_player_without_announce_playing_what_cannot_be_named_is_left_alone(
    hass: HomeAssistant, ready: Voice, room: Room, device: SimulatedDevice, issue_registry: ir.IssueRegistry
) -> None:
    """Its music cannot be given back (no content id): the device says the reply, no repair."""
    tv = room.players["living_room_tv"]
    tv._attr_supported_features &= ~MediaPlayerEntityFeature.MEDIA_ANNOUNCE
    tv._attr_media_content_id = None
    tv.async_write_ha_state()
    await choose(hass, room.entity_id("living_room_tv"))
    marker, packets = len(device.log), len(device.audio)
    await device.say(speech_pcm())
    await device.wait_message(tts("stop"), timeout=30, after=marker)
    assert tv.played == []
    assert len(device.audio) > packets  # the device said it
    assert [i for i in issue_registry.issues.values() if i.domain == DOMAIN] == []
