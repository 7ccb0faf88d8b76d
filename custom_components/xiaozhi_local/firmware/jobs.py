"""One install on one device, and where it is (the installer drives it, the server feeds it)."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from homeassistant.exceptions import HomeAssistantError

from ..device import XiaozhiDevice
from ..errors import translated_error
from .files import ImageFile, Offer


class Phase(StrEnum):
    """Where an install is."""

    WAITING = "waiting"
    """For the device: a conversation turn to end, or to come online."""
    STARTING = "starting"
    """Told; the device has not started its download yet."""
    DOWNLOADING = "downloading"
    REBOOTING = "rebooting"
    """Downloaded; until the device is back with a version."""


@dataclass(eq=False)
class InstallJob:
    """One install on one device."""

    device: XiaozhiDevice
    offer: Offer
    image: ImageFile
    force: bool
    phase: Phase = Phase.WAITING
    via_ota: bool = False
    """The device is told by its OTA answer (not its tool): the answer carries ``firmware`` now."""
    url: str | None = None
    sent: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    """The download ended, completely or not (``interrupted`` says)."""
    interrupted: str | None = None
    returned: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    """The version the device reports once it is back after its download."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Something the waiting install may care about (connected, idle, cancelled)."""
    cancelled: bool = False
    shown: float = 0.0
    """When the entity last showed a new percentage (loop time)."""
    tool_call: asyncio.Task[None] | None = None
    """``self.upgrade_firmware`` under way (cancelled with the install: no call outlives it)."""

    async def async_wait(
        self,
        event: asyncio.Event | None,
        timeout: float | None,
        expired: Callable[[], HomeAssistantError],
        *,
        until: Callable[[], bool] | None = None,
    ) -> None:
        """Until ``event`` is set or ``until()`` holds; raises ``expired()`` on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not (event is not None and event.is_set()) and not (until is not None and until()):
            if self.cancelled:
                raise translated_error("update_cancelled", device=self.device.name)
            if self.interrupted is not None and event is not self.finished:
                raise translated_error(
                    "update_device_refused", device=self.device.name, version=self.version, reason=self.interrupted
                )
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise expired()
            self.changed.clear()
            waiters = {asyncio.ensure_future(self.changed.wait())}
            if event is not None:
                waiters.add(asyncio.ensure_future(event.wait()))
            try:
                await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    @property
    def version(self) -> str:
        """The version being installed."""
        return self.offer.version

    @property
    def percentage(self) -> int | None:
        """Bytes the device has read so far, in percent; None before and after the download."""
        if self.phase is not Phase.DOWNLOADING:
            return None
        return min(100, self.sent * 100 // max(1, self.image.image.size))
