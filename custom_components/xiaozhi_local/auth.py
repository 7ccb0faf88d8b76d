"""Letting devices in: why one is refused, and what a transport needs of the hub to accept one.

Transports (``mqtt.py``, ``http.py`` and the views) get this narrow interface, not the hub: they
ask who a device is, run its connection, and name the addresses devices use. The hub implements it.
"""

import asyncio
from enum import StrEnum
import hmac
import secrets
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .device import XiaozhiDevice
    from .link import DeviceLink


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

    async def async_run_connection(self, connection: DeviceLink) -> None:
        """Run a device's connection to its end."""

    def device_host(self) -> str:
        """The host name devices reach Home Assistant by."""

    def vision_url(self) -> str:
        """Where camera boards upload photos."""


class ExpiringToken:
    """A short-lived secret (camera uploads): one at a time, checked in constant time."""

    def __init__(self, ttl: float, loop: asyncio.AbstractEventLoop) -> None:
        self._ttl = ttl
        self._loop = loop
        self._token: tuple[str, float] | None = None  # token, expiry (loop time)

    def async_new(self) -> str:
        """A new token (the previous one is no longer valid)."""
        token = secrets.token_urlsafe(24)
        self._token = (token, self._loop.time() + self._ttl)
        return token

    def check(self, token: str) -> bool | None:
        """True valid, None the right token but expired, False wrong (or none issued)."""
        if self._token is None:
            return False
        expected, expires = self._token
        if not hmac.compare_digest(expected.encode(), token.encode()):
            return False
        return True if self._loop.time() < expires else None
