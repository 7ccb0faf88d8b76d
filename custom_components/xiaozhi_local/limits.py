"""Rate limits: the three shapes the integration bounds things with, in one place.

- ``TokenBucket``: a steady rate with bursts (frames a connection may send, notifications a
  device may turn into events).
- ``SlidingWindow``: at most so many events in any window (devices paired without a code an
  hour, wrong MQTT credentials a minute from anywhere).
- ``Strikes``: events per key within a period that starts at the key's first one, for a bounded
  number of keys (wrong MQTT credentials per address).
- ``ExpiringToken``: a secret valid for a while (a camera board's upload).
- ``MessageGate``: messages bounded in size and rate, the excess counted and logged once (a
  device's notifications, which become events in the recorder).

Plain Python: the caller passes the time (or a clock), so tests need no real waiting.
"""

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
import hmac
import secrets
import time
from typing import Any, Protocol


@dataclass(slots=True)
class TokenBucket:
    """``rate`` events a second on average, ``burst`` at once; starts full."""

    rate: float
    burst: float
    _tokens: float = field(init=False)
    _refilled: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._tokens = self.burst

    def allow(self, now: float) -> bool:
        """Take one event at ``now`` (seconds, any monotonic origin); False when the bucket is empty."""
        if self._refilled is not None:
            self._tokens = min(self.burst, self._tokens + max(0.0, now - self._refilled) * self.rate)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


@dataclass
class SlidingWindow:
    """At most ``limit`` events in any ``window`` seconds."""

    limit: int
    window: float
    clock: Callable[[], float] = time.monotonic
    _times: deque[float] = field(default_factory=deque)

    def _expire(self, now: float) -> None:
        while self._times and self._times[0] <= now - self.window:
            self._times.popleft()

    def allow(self) -> bool:
        """Count one event now, unless the window is full (then False, and nothing is counted)."""
        now = self.clock()
        self._expire(now)
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True

    def count(self) -> int:
        """Count one event now whatever the limit (the oldest are forgotten past it); events in the window."""
        now = self.clock()
        self._expire(now)
        self._times.append(now)
        while len(self._times) > self.limit:
            self._times.popleft()
        return len(self._times)


@dataclass
class Strikes:
    """Events per key, each key counted over ``period`` seconds from its first one; ``max_keys`` kept."""

    period: float
    max_keys: int = 1024
    clock: Callable[[], float] = time.monotonic
    _keys: dict[str, tuple[int, float]] = field(default_factory=dict)  # key: (count, first)

    def add(self, key: str) -> int:
        """One more for ``key``; its count in its current period."""
        now = self.clock()
        count, first = self._keys.get(key, (0, now))
        if now - first > self.period:
            count, first = 0, now
        elif key not in self._keys and len(self._keys) >= self.max_keys:
            del self._keys[min(self._keys, key=lambda k: self._keys[k][1])]  # the oldest goes
        self._keys[key] = (count + 1, first)
        return count + 1

    def __len__(self) -> int:
        return len(self._keys)


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


class _Reporter(Protocol):
    def report(self, kind: str, message: str) -> None: ...


@dataclass(slots=True)
class MessageGate:
    """Messages of at most ``max_size`` bytes (``size_of``), ``rate`` a second with ``burst``.

    The rest are dropped, counted and told to ``log`` (once per kind: a flood is one line).
    """

    rate: float
    burst: float
    max_size: int
    size_of: Callable[[Any], int]
    log: _Reporter
    dropped: int = 0
    _bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        self._bucket = TokenBucket(self.rate, self.burst)

    def allow(self, name: str, payload: Any, now: float) -> bool:
        """Whether the message ``name`` carrying ``payload`` may pass now."""
        try:
            size = self.size_of(payload)
        except TypeError, ValueError:
            size = self.max_size + 1
        if size > self.max_size:
            self.dropped += 1
            self.log.report("notification_too_large", f"dropped notification {name[:64]!r}: params of {size} bytes")
            return False
        if not self._bucket.allow(now):
            self.dropped += 1
            self.log.report("notification_flood", f"sends more than {self.rate:g} notifications a second; dropping")
            return False
        return True
