"""Test helpers that wait on the event that proves a thing, never on the clock."""

import asyncio
from typing import Any

from homeassistant.core import Event, HomeAssistant, callback


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
