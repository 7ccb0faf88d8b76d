"""Saves of the token journal: queued, never re-entered from the update listener they trigger.

At an upgrade, tokens still sit in the devices' subentries: each leaves its subentry once the
journal holding it is on disk. Updating a subentry calls the entry's update listener at once,
which syncs the devices and asks for a save; a save started from there updated the next
subentry before it ever yielded, one stack level per device (RecursionError past ~100).
"""

import asyncio
import contextlib
import inspect
import logging
from typing import Any

from homeassistant.const import CONF_TOKEN, EVENT_HOMEASSISTANT_CLOSE, EVENT_HOMEASSISTANT_FINAL_WRITE
from homeassistant.core import CoreState, Event, HomeAssistant, callback
from homeassistant.util.async_ import get_scheduled_timer_handles
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.home import volumes

from .conftest import device_subentry
from .internals import hub_of, runner_of

DEVICES = 500


def _mac(index: int) -> str:
    return f"cc:ba:97:{index // 65536:02x}:{index // 256 % 256:02x}:{index % 256:02x}"


@pytest.fixture
def config_entry() -> MockConfigEntry:
    """500 paired devices whose tokens are still in their subentries (the upgrade's shape)."""
    return MockConfigEntry(
        domain=DOMAIN,
        title="Xiaozhi Local",
        data={},
        subentries_data=[
            device_subentry(_mac(index), f"token-{index:04d}-" + "x" * 40, f"Device {index}", f"client-{index}")
            for index in range(DEVICES)
        ],
    )


async def test_tokens_leave_500_subentries_without_recursion(
    hass: HomeAssistant, config_entry: MockConfigEntry, capfd: pytest.CaptureFixture[str]
) -> None:
    """Loaded with every token still in its subentry (the first save was overtaken by check-ins, as
    after an upgrade or a bulk pairing), a sync asks for a save: every token leaves its subentry
    once the journal is on disk, and no save is started from inside another."""
    from custom_components.xiaozhi_local.store import storage

    errors: list[Any] = []
    hass.loop.set_exception_handler(lambda _loop, context: errors.append(context))
    original = storage.HubStorage.async_save_identities
    depths: list[int] = []

    async def skipped(self: Any, stopping: Any) -> None:
        """The first save, overtaken: it leaves the tokens where they are."""

    async def measured(self: Any, stopping: Any) -> None:
        depths.append(len(inspect.stack(0)))
        await original(self, stopping)

    storage.HubStorage.async_save_identities = skipped  # type: ignore[method-assign]
    try:
        config_entry.add_to_hass(hass)
        assert await hass.config_entries.async_setup(config_entry.entry_id)
        await hass.async_block_till_done(wait_background_tasks=True)
        assert all(CONF_TOKEN in sub.data for sub in config_entry.subentries.values())
        storage.HubStorage.async_save_identities = measured  # type: ignore[method-assign]
        hub_of(config_entry).request_sync()  # what a check-in or any entry update does
        await _tokens_left_subentries(hass, config_entry)
    finally:
        storage.HubStorage.async_save_identities = original  # type: ignore[method-assign]
    assert errors == []
    assert "RecursionError" not in capfd.readouterr().err
    assert max(depths) - min(depths) < 10, (min(depths), max(depths))  # never started from inside another
    assert [s.title for s in config_entry.subentries.values() if CONF_TOKEN in s.data] == []
    journal = hub_of(config_entry).identities
    assert len([mac for mac in (_mac(i) for i in range(DEVICES)) if (r := journal.get(mac)) and r.token]) == DEVICES


async def test_a_failing_background_task_is_logged_once_with_its_name(
    hass: HomeAssistant, setup_integration: MockConfigEntry, caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody awaits a background task: its failure is said at once, with its name."""
    device = next(iter(hub_of(setup_integration).devices.values()))

    async def broken() -> None:
        raise RuntimeError("something of ours broke")

    task = device.async_create_task(broken(), "xiaozhi_local broken on purpose", background=True)
    with contextlib.suppress(RuntimeError):
        await task
    await hass.async_block_till_done()
    lines = [r for r in caplog.records if "xiaozhi_local broken on purpose" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].exc_info is not None
    assert "something of ours broke" in str(lines[0].exc_info[1])


async def test_a_failing_task_of_a_devices_exchange_is_logged_with_its_name(
    hass: HomeAssistant, setup_integration: MockConfigEntry, caplog: pytest.LogCaptureFixture
) -> None:
    """The satellite's background tasks (a turn, a reply on a player, a late stop): nobody awaits
    most, so a failure is said when it happens, not at a garbage collection much later."""
    device = next(iter(hub_of(setup_integration).devices.values()))

    async def broken() -> None:
        raise RuntimeError("an exchange of ours broke")

    task = runner_of(device).background(broken(), "broken on purpose")
    await asyncio.wait({task})
    await hass.async_block_till_done()
    lines = [r for r in caplog.records if f"xiaozhi_local broken on purpose {device.mac}" in r.getMessage()]
    assert len(lines) == 1
    assert "an exchange of ours broke" in str(lines[0].exc_info[1])  # type: ignore[index]


async def _tokens_left_subentries(hass: HomeAssistant, entry: MockConfigEntry) -> bool:
    for _ in range(200):
        await hass.async_block_till_done(wait_background_tasks=True)
        if not any(CONF_TOKEN in sub.data for sub in entry.subentries.values()):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_bulk_pairing_of_300_devices_keeps_every_token_once(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: Any,
    hass_storage: dict[str, Any],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """300 new devices check in at once while the hub accepts them without a code: each pairing
    updates the entry (its listener runs), and each asks for a save. No save starts inside another,
    none fails, and each token is on disk in the journal and nowhere else."""
    from custom_components.xiaozhi_local.const import CONF_ACCEPT_WITHOUT_CODE, CONF_NEW_PER_HOUR, OTA_PATH

    errors: list[Any] = []
    hass.loop.set_exception_handler(lambda _loop, context: errors.append(context))
    hass.config_entries.async_update_entry(
        setup_integration, options={CONF_ACCEPT_WITHOUT_CODE: True, CONF_NEW_PER_HOUR: 1000}
    )
    await hass.async_block_till_done()
    macs = [_mac(0x10000 + index) for index in range(300)]

    async def check_in(mac: str) -> str:
        resp = await client.post(OTA_PATH, json={"version": 2}, headers={"Device-Id": mac, "Client-Id": f"c-{mac}"})
        assert resp.status == 200, await resp.text()
        return str((await resp.json())["websocket"]["token"])

    handed = dict(zip(macs, await asyncio.gather(*(check_in(mac) for mac in macs)), strict=True))
    assert await _tokens_left_subentries(hass, setup_integration)
    assert errors == []
    assert "RecursionError" not in capfd.readouterr().err
    paired = {sub.data["mac"] for sub in setup_integration.subentries.values()}
    assert set(macs) <= paired
    on_disk = hass_storage[f"{DOMAIN}.{setup_integration.entry_id}.identities"]["data"]["devices"]
    assert {mac: on_disk[mac]["token"] for mac in macs} == handed


async def test_a_stop_in_the_middle_of_the_saves_loses_no_token(
    hass: HomeAssistant, config_entry: MockConfigEntry, hass_storage: dict[str, Any]
) -> None:
    """The hub unloads (Home Assistant stops) while tokens are leaving 500 subentries: every device
    has its token after the next start, from its subentry or from the journal on disk."""
    from custom_components.xiaozhi_local.store import storage

    tokens = {sub.data["mac"]: sub.data[CONF_TOKEN] for sub in config_entry.subentries.values()}
    original = storage.HubStorage.async_save_identities

    async def skipped(self: Any, stopping: Any) -> None:
        """The first save, overtaken (the upgrade's shape)."""

    storage.HubStorage.async_save_identities = skipped  # type: ignore[method-assign]
    try:
        config_entry.add_to_hass(hass)
        assert await hass.config_entries.async_setup(config_entry.entry_id)
        await hass.async_block_till_done(wait_background_tasks=True)
    finally:
        storage.HubStorage.async_save_identities = original  # type: ignore[method-assign]
    hub_of(config_entry).request_sync()  # the saves start
    for _ in range(50):  # until some tokens have left their subentries, and some not yet
        await asyncio.sleep(0)
        if sum(CONF_TOKEN not in sub.data for sub in config_entry.subentries.values()) >= 20:
            break
    left = sum(CONF_TOKEN not in sub.data for sub in config_entry.subentries.values())
    assert 0 < left < DEVICES, left
    assert await hass.config_entries.async_unload(config_entry.entry_id)
    await hass.async_block_till_done(wait_background_tasks=True)
    journal = hass_storage[f"{DOMAIN}.{config_entry.entry_id}.identities"]["data"]["devices"]
    for sub in config_entry.subentries.values():  # what is on disk now: one place or the other
        mac = sub.data["mac"]
        assert sub.data.get(CONF_TOKEN, journal.get(mac, {}).get("token")) == tokens[mac], mac
    assert await hass.config_entries.async_setup(config_entry.entry_id)
    await hass.async_block_till_done(wait_background_tasks=True)
    hub = hub_of(config_entry)
    assert {mac: hub.devices[mac].token for mac in tokens} == tokens
    assert await _tokens_left_subentries(hass, config_entry)


@pytest.mark.parametrize("stage", [EVENT_HOMEASSISTANT_FINAL_WRITE, EVENT_HOMEASSISTANT_CLOSE])
async def test_a_save_asked_for_once_the_final_write_began_is_written_now(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    hass_storage: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    stage: str,
) -> None:
    """A device that leaves late in Home Assistant's stop, a volume given back then: a delayed save
    would wait for a timer that never runs (the stores were written already), and be lost. In the
    close stage the state is ``not_running`` again, as at a start. Once stopped, nothing is asked."""
    hub_key = f"{DOMAIN}.{setup_integration.entry_id}"
    hub = hub_of(setup_integration)
    assert await hass.config_entries.async_unload(setup_integration.entry_id)
    hass_storage.pop(hub_key, None)
    states: list[CoreState] = []

    @callback
    def leaves_late(_event: Event) -> None:
        states.append(hass.state)
        hass.data.setdefault(volumes.DUCKED, {})["media_player.tv"] = volumes.Ducked(0.6, 0.15)
        hub.storage.async_schedule_save()
        volumes.async_changed(hass)

    hass.bus.async_listen_once(stage, leaves_late)
    await hass.async_stop(force=True)
    assert states == [CoreState.final_write if stage == EVENT_HOMEASSISTANT_FINAL_WRITE else CoreState.not_running]
    assert set(hass_storage[hub_key]["data"]) == set(hub.devices)
    ducked = {"media_player.tv": {"before": 0.6, "quieter": 0.15}}
    assert hass_storage[f"{DOMAIN}.ducked"]["data"] == {"players": ducked}
    hass_storage.pop(hub_key)
    caplog.set_level(logging.DEBUG, "custom_components.xiaozhi_local.store.storage")
    hub.storage.async_schedule_save()  # stopped: nothing more is written, nothing waits to be
    assert hub_key not in hass_storage
    assert f"Not saved ({hub_key}): Home Assistant has stopped" in caplog.text
    timers = [h for h in get_scheduled_timer_handles(hass.loop) if not h.cancelled()]
    assert [h for h in timers if "Store" in repr(h)] == []
