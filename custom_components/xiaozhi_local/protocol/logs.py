"""Logging what devices do wrong without flooding the log: each kind of problem warned about once."""

from collections import Counter
from collections.abc import Callable
import logging
import time

_LOGGER = logging.getLogger(__package__)


class OnceLogger:
    """Warn about each kind of problem once (again after ``again_after`` seconds, if given).

    ``level`` is that of the first line of a kind (a warning unless told).
    Repeats go to debug; all are counted (diagnostics show ``counts``). ``device_id`` names whose
    problems they are (``Device <id>: …``); empty for the hub's own.
    """

    def __init__(
        self,
        device_id: str,
        logger: logging.Logger = _LOGGER,
        *,
        again_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        level: int = logging.WARNING,
    ) -> None:
        self.device_id = device_id
        self.level = level
        self.logger = logger
        self.again_after = again_after
        self.counts: Counter[str] = Counter()
        self._clock = clock
        self._warned: dict[str, float] = {}

    def report(self, kind: str, message: str) -> None:
        """Log a problem of ``kind``."""
        self.counts[kind] += 1
        now = self._clock()
        last = self._warned.get(kind)
        warn = last is None or (self.again_after is not None and now - last >= self.again_after)
        if warn:
            self._warned[kind] = now
        where = f"Device {self.device_id}: " if self.device_id else ""
        self.logger.log(self.level if warn else logging.DEBUG, "%s%s (%s)", where, message, kind)

    def note(self, kind: str, message: str) -> None:
        """Something normal clients do that is still worth counting: debug only, counted (diagnostics)."""
        self.counts[kind] += 1
        where = f"Device {self.device_id}: " if self.device_id else ""
        self.logger.debug("%s%s (%s)", where, message, kind)
