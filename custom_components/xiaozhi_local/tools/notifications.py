"""A device's notifications: bounded in size and rate, then handed to whoever listens.

They become events (its event entity, the bus), which go to the recorder's database: a device
that floods, or sends large ones, would fill it.
"""

import asyncio
from collections.abc import Callable
from typing import Any

from homeassistant.core import CALLBACK_TYPE, callback
from homeassistant.helpers.json import json_bytes

from ..const import MAX_NOTIFICATION_PARAMS, NOTIFICATION_BURST, NOTIFICATION_RATE
from ..limits import MessageGate
from ..protocol.logs import OnceLogger

type NotificationListener = Callable[[str, Any], None]


class DeviceNotifications:
    """What one device notifies: the excess dropped, counted (diagnostics) and logged once."""

    def __init__(self, log: OnceLogger, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._gate = MessageGate(
            NOTIFICATION_RATE, NOTIFICATION_BURST, MAX_NOTIFICATION_PARAMS, lambda p: len(json_bytes(p)), log
        )
        self._listeners: list[NotificationListener] = []

    @property
    def dropped(self) -> int:
        """Notifications dropped for their size or their rate since start."""
        return self._gate.dropped

    @callback
    def async_add_listener(self, listener: NotificationListener) -> CALLBACK_TYPE:
        """Be told of each notification the device sends (method, params)."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    @callback
    def async_allow(self, method: str, params: Any) -> bool:
        """Whether a notification may become an event (within its size and the device's rate)."""
        return self._gate.allow(method, params, self._loop.time())

    @callback
    def async_dispatch(self, method: str, params: Any) -> None:
        """An allowed notification, told to the listeners."""
        for listener in list(self._listeners):
            listener(method, params)
