"""Test helpers that wait on the event that proves a thing, never on the clock."""

import asyncio
from collections.abc import Callable
from typing import Any, cast

from homeassistant.config_entries import SubentryFlowResult
from homeassistant.core import Event, HomeAssistant, State, callback
from homeassistant.helpers.event import async_track_state_change_event
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.device import XiaozhiDevice
from xiaozhi_sim.mqtt_wire import read_packet, remaining_length

from .conftest import MAC
from .internals import hub_of


def hub_device(hass: HomeAssistant, mac: str = MAC) -> XiaozhiDevice:
    """The paired device ``mac`` of the loaded hub."""
    device: XiaozhiDevice = hub_of(hass).devices[mac]
    return device


class EventWaiter:
    """Collect bus events of one type and wait for the n-th."""

    def __init__(self, hass: HomeAssistant, event_type: str) -> None:
        self.events: list[Event[Any]] = []
        self._changed = asyncio.Event()
        self.unsub = hass.bus.async_listen(event_type, self._on_event)

    @callback
    def _on_event(self, event: Event[Any]) -> None:
        self.events.append(event)
        self._changed.set()

    async def wait(self, count: int = 1, timeout: float = 5) -> list[Event[Any]]:
        async with asyncio.timeout(timeout):
            while len(self.events) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.events


def placeholders_of(result: Any) -> dict[str, str]:
    """A flow result's description placeholders (asserted present)."""
    placeholders = result["description_placeholders"]
    assert placeholders is not None
    return dict(placeholders)


async def until(predicate: Callable[[], bool], timeout: float = 10) -> None:
    """Until ``predicate()`` holds, for state nothing announces (counters, the satellite's run).

    A condition, not a time: it looks every 10 ms and fails after ``timeout``. What has a change
    notification is awaited on it instead (``wait_for``, ``wait_entity``, ``wait_message``).
    """
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - nothing announces it
            await asyncio.sleep(0.01)


async def wait_entity(
    hass: HomeAssistant, entity_id: str, predicate: Callable[[State], bool], timeout: float = 5
) -> State:
    """Until the entity's state satisfies ``predicate`` (woken by its state changes); that state."""
    changed = asyncio.Event()

    @callback
    def on_change(_event: Any) -> None:
        changed.set()

    unsubscribe = async_track_state_change_event(hass, entity_id, on_change)
    try:
        async with asyncio.timeout(timeout):
            while (state := hass.states.get(entity_id)) is None or not predicate(state):
                changed.clear()
                await changed.wait()
    finally:
        unsubscribe()
    return state


async def next_answer(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    """The next MQTT packet from HA that is not a PUBLISH, whole (discovery's requests come meanwhile)."""
    async with asyncio.timeout(timeout):
        while True:
            kind, flags, body = await read_packet(reader)
            if kind != 3:
                return bytes([kind << 4 | flags]) + remaining_length(len(body)) + body


async def announce(hass: HomeAssistant, message: str, entity_id: str = "assist_satellite.kitchen") -> None:
    """``assist_satellite.announce`` without the pre-announcement sound; returns once it was played."""
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": entity_id, "message": message, "preannounce": False},
        blocking=True,
    )


class Clock:
    """Time passing on the event loop, as a user's wait between two questions makes it pass.

    The loop's clock (``loop.time``, which HA's timers and the satellite's silence clock read)
    moves on by ``advance``; timers due by then run at the loop's next turn. Advance only while
    the test itself waits on nothing with a deadline.
    """

    def __init__(self, hass: HomeAssistant) -> None:
        self.hass = hass
        self.offset = 0.0
        self._real = hass.loop.time
        hass.loop.time = self.time  # type: ignore[method-assign]

    def time(self) -> float:
        """The loop's clock, moved on."""
        return self._real() + self.offset

    async def advance(self, seconds: float) -> None:
        """``seconds`` pass; what fell due has run."""
        self.offset += seconds
        for _ in range(3):
            await asyncio.sleep(0)
        await self.hass.async_block_till_done()

    def restore(self) -> None:
        """The loop's own clock again (what was scheduled on the moved one runs that much sooner)."""
        self.hass.loop.time = self._real  # type: ignore[method-assign]


def resources() -> dict[str, int]:
    """What must not grow with use: asyncio tasks, OS threads (native ones too), fds, child processes."""
    import os

    pid = str(os.getpid())
    children = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                    parent = stat.read().rsplit(")", 1)[1].split()[1]
            except OSError:
                continue  # gone meanwhile
            children += parent == pid
    return {
        "tasks": len([task for task in asyncio.all_tasks() if not task.done()]),
        "threads": len(os.listdir("/proc/self/task")),
        "fds": len(os.listdir("/proc/self/fd")),
        "children": children,
    }


async def start_reconfigure(hass: HomeAssistant, entry: MockConfigEntry, subentry_id: str) -> SubentryFlowResult:
    """The device subentry's reconfigure flow (regenerate its token), as the UI starts it.

    ``MockConfigEntry.start_subentry_reconfigure_flow`` is annotated with a config entry's result type.
    """
    return cast(SubentryFlowResult, await entry.start_subentry_reconfigure_flow(hass, subentry_id))


async def regenerate(hass: HomeAssistant, entry: MockConfigEntry, mac: str = MAC) -> str:
    """Regenerate a device's token as the user does (its reconfigure flow); the new token."""
    sub = next(s for s in entry.subentries.values() if s.unique_id == mac)
    result = await start_reconfigure(hass, entry, sub.subentry_id)
    result = await hass.config_entries.subentries.async_configure(result["flow_id"], {})
    token = placeholders_of(result)["token"]
    await hass.config_entries.subentries.async_configure(result["flow_id"], {})
    await hass.async_block_till_done()
    return token


def logged_by(caplog: pytest.LogCaptureFixture, logger: str) -> str:
    """What ``logger`` (and its children) logged: a test reads the module under test, never all the
    log (asyncio's slow-step lines on a busy machine name the test itself)."""
    return "\n".join(r.getMessage() for r in caplog.records if r.name == logger or r.name.startswith(f"{logger}."))


def logged_by_us(caplog: pytest.LogCaptureFixture) -> str:
    """What the integration itself logged."""
    return logged_by(caplog, "custom_components.xiaozhi_local")


HTTP_BAN = "homeassistant.components.http.ban"
"""Home Assistant's failed-login logger: a device's refusal must never count as a failed login."""
