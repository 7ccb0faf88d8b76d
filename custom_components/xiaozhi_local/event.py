"""The "Notification" event entity: fires for every notification the device sends."""

from collections.abc import Callable, Iterable
from typing import Any, Final

from homeassistant.components.event import EventEntity, EventEntityDescription
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import XiaozhiDevice
from .entity import XiaozhiEntity, async_setup_device_entities
from .hub import XiaozhiConfigEntry

PARALLEL_UPDATES = 0

KNOWN_METHODS: Final = {
    "notifications/state_changed": "state_changed",
    "notifications/message": "message",
    "notifications/progress": "progress",
    "notifications/tools/list_changed": "tools_changed",
}
OTHER: Final = "other"

NOTIFICATION = EventEntityDescription(
    key="notification",
    translation_key="notification",
    event_types=[*KNOWN_METHODS.values(), OTHER],
)


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """One event entity per device."""

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [("notification", lambda: XiaozhiNotificationEvent(device, NOTIFICATION))]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiNotificationEvent(XiaozhiEntity, EventEntity):
    """Known methods are event types of their own; the rest are ``other``, with the method given."""

    async def async_added_to_hass(self) -> None:
        """Listen to the device's notifications."""
        await super().async_added_to_hass()
        self.async_on_remove(self.device.notifications.async_add_listener(self._on_notification))

    @callback
    def _on_notification(self, method: str, params: Any) -> None:
        self._trigger_event(KNOWN_METHODS.get(method, OTHER), {"method": method, "params": params})
        self.async_write_ha_state()
