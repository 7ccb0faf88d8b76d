"""Letting devices in: why one is refused, and what a transport needs of the hub to accept one.

Transports (``transport/mqtt.py``, ``transport/endpoint.py`` and the views) get this narrow interface, not the hub: they
ask who a device is, run its connection, and name the addresses devices use. The hub implements it.
"""

from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..device import XiaozhiDevice
    from ..link import DeviceLink


class Refused(StrEnum):
    """Why a connection was refused."""

    GUESS = "guess"
    """An unknown device, or a token that was never this device's: counts towards HA's IP ban."""
    EARLIER = "earlier_token"
    """A token this device had before the user regenerated it or deleted the device: not a guess."""
    NO_TOKEN = "no_token"
    """No token at all: nothing was guessed (a client not paired yet)."""
    PENDING = "pending"
    """The token handed out with a code that has not been typed yet: not a guess."""
    CAPPED = "capped"
    """A new device without a code past the hour's number of them (the hub option): not a guess."""


class DeviceGate(Protocol):
    """What a transport asks of the hub."""

    @property
    def stopping(self) -> bool:
        """Unloading, or Home Assistant stopping: no new connections."""

    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | Refused:
        """The device whose MAC and token these are, or why not."""

    async def async_run_connection(self, link: DeviceLink) -> None:
        """Run a device's connection to its end."""

    def device_host(self) -> str:
        """The host name devices reach Home Assistant by."""

    def vision_url(self) -> str:
        """Where camera boards upload photos."""
