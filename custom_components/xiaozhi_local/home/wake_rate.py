"""How often each device wakes: one that wakes far more often than people speak stops competing.

People say a wake word a few times a minute at most (a conversation's follow-ups do not wake); past
``WAKES_PER_MINUTE`` the device is a TV, a fault or a hostile client. For ``BENCHED_FOR`` it goes
on only when no other device heard the word (it never makes another lose), and loses to any that
did (``nearest.py``).
"""

from collections.abc import Callable, Iterable
from typing import Final

from ..device import XiaozhiDevice
from ..limits import SlidingWindow

WAKES_PER_MINUTE: Final = 10
WAKE_WINDOW: Final = 60.0
"""Rounds a device may open or join in ``WAKE_WINDOW`` s."""
BENCHED_FOR: Final = 600.0
"""Seconds a device that woke too often does not compete."""


class WakeRate:
    """Each competing device's recent wakes, and the devices benched until when (by MAC)."""

    def __init__(self, devices: Callable[[], Iterable[XiaozhiDevice]], clock: Callable[[], float]) -> None:
        self._devices = devices
        self._clock = clock
        self._wakes: dict[str, SlidingWindow] = {}
        self._benched: dict[str, float] = {}

    def count(self, device: XiaozhiDevice) -> bool:
        """One more wake of ``device``; whether it does not compete now (it woke too often)."""
        now = self._clock()
        until = self._benched.get(device.mac)
        if until is not None and now < until:
            return True
        self._benched.pop(device.mac, None)
        if device.mac not in self._wakes:
            known = {d.mac for d in self._devices()}
            for gone in [mac for mac in (*self._wakes, *self._benched) if mac not in known]:  # removed devices
                self._wakes.pop(gone, None)
                self._benched.pop(gone, None)
            self._wakes[device.mac] = SlidingWindow(WAKES_PER_MINUTE + 1, WAKE_WINDOW, clock=self._clock)
        if self._wakes[device.mac].count() <= WAKES_PER_MINUTE:
            return False
        self._benched[device.mac] = now + BENCHED_FOR
        del self._wakes[device.mac]
        device.log.report(
            "wakes_too_often",
            f"woke more than {WAKES_PER_MINUTE} times in a minute: for {int(BENCHED_FOR // 60)} minutes it answers "
            "only when no other device heard the wake word",
        )
        return True

    def benched(self, device: XiaozhiDevice) -> bool:
        """Whether ``device`` does not compete now."""
        return self._benched.get(device.mac, 0.0) > self._clock()
