"""The logbook (Activity) says which device answered a wake word that several heard (``home/nearest.py``)."""

from collections.abc import Callable
from typing import Any

from homeassistant.components.logbook import LOGBOOK_ENTRY_ICON, LOGBOOK_ENTRY_MESSAGE, LOGBOOK_ENTRY_NAME
from homeassistant.core import Event, HomeAssistant, callback
from homeassistant.helpers import device_registry as dr

from .const import DOMAIN, EVENT_NEAREST, EVENT_WAKE_IGNORED

ICON = "mdi:account-voice"


@callback
def async_describe_events(
    hass: HomeAssistant,
    async_describe_event: Callable[[str, str, Callable[[Event], dict[str, str]]], None],
) -> None:
    """``xiaozhi_local_nearest``: the device that answered, and how far above its room noise each heard you."""

    def name(device_id: Any) -> str:
        device = dr.async_get(hass).async_get(device_id) if isinstance(device_id, str) else None
        return (device.name_by_user or device.name or device_id) if device is not None else str(device_id)

    @callback
    def describe(event: Event) -> dict[str, str]:
        data = event.data
        winner = name(data.get("winner"))
        others = [name(other) for other in data.get("others") or []]
        if data.get("late"):
            return {
                LOGBOOK_ENTRY_ICON: ICON,
                LOGBOOK_ENTRY_NAME: ", ".join(others),
                LOGBOOK_ENTRY_MESSAGE: f"heard the wake word too late to answer; {winner} answered",
            }
        scores = data.get("scores") or {}
        heard = ", ".join(
            f"{name(device_id)} {score:.0f} dB"
            if isinstance(score, (int, float))
            else f"{name(device_id)} no wake audio"
            for device_id, score in scores.items()
        )
        return {
            LOGBOOK_ENTRY_ICON: ICON,
            LOGBOOK_ENTRY_NAME: winner,
            LOGBOOK_ENTRY_MESSAGE: f"answered as the nearest of {len(others) + 1} devices that heard the wake word"
            + (f" (your voice above the room's noise: {heard})" if heard else ""),
        }

    async_describe_event(DOMAIN, EVENT_NEAREST, describe)

    @callback
    def describe_ignored(event: Event) -> dict[str, str]:
        return {
            LOGBOOK_ENTRY_ICON: ICON,
            LOGBOOK_ENTRY_NAME: name(event.data.get("device_id")),
            LOGBOOK_ENTRY_MESSAGE: "heard the wake word, but Home Assistant ignored it: the same wake word "
            "had started a conversation on another voice assistant less than 2 seconds before",
        }

    async_describe_event(DOMAIN, EVENT_WAKE_IGNORED, describe_ignored)
