"""A neighbour that hogs Home Assistant's event loop: ``GET /api/bench_probe?hog=15,20``.

Blocks the loop for 15 ms of every 20 (a busy-looping callback, what a CPU-bound integration does)
until ``?hog=0``. The benches use it to show that what they measure holds on a slowed loop.
"""

import asyncio
import time


class LoopHog:
    """Blocks the running loop for ``block`` seconds every ``every`` seconds while set."""

    def __init__(self) -> None:
        self.block = 0.0
        self.every = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def set(self, spec: str) -> None:
        """``"15,20"``: 15 ms blocked of every 20; ``"0"``: off."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        parts = [float(part) / 1000 for part in spec.split(",")]
        self.block, self.every = [*parts, 0.0, 0.0][:2]
        if self.block > 0 and self.every > 0:
            self._handle = asyncio.get_running_loop().call_later(self.every, self._hog)

    def _hog(self) -> None:
        end = time.monotonic() + self.block
        while time.monotonic() < end:
            pass
        self._handle = asyncio.get_running_loop().call_later(self.every, self._hog)
