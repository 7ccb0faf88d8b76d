"""Pairing by spoken code: the codes handed to unknown devices, and who may still claim one.

A device is known by its MAC (``Device-Id``), which anyone on the LAN can see, and by its
identity, which only it sends: the ``Client-Id`` the firmware generates once and keeps, and
the serial number of boards that do activation v2. A waiting device is one MAC *and* one
identity: a stranger asking with a paired or waiting MAC gets a code of its own, and the code
the user types binds the identity that heard it.

Plain Python with an injectable clock. Everything here is bounded: at most ``MAX_PENDING``
devices wait at once and ``MAX_PER_SOURCE`` of them per source address (a flood from one
address only pushes out its own), each code lives ``CODE_TTL`` seconds, and ``MAX_FAILURES``
wrong tries for a MAC lock its codes for ``LOCKOUT`` seconds.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
import secrets
import time
from typing import Final

from .identities import Identity
from .reports import DeviceReport

MAX_PENDING: Final = 64
MAX_PER_SOURCE: Final = 8
"""Devices one source address may have waiting at once; more push out its own oldest."""
CODE_TTL: Final = 15 * 60.0
MAX_FAILURES: Final = 5
LOCKOUT: Final = 5 * 60.0
CODE_DIGITS: Final = 6

_MESSAGES: Final = {
    "en": "Enter {code} in Home Assistant",
    "zh": "请在 Home Assistant 中输入 {code}",
}


TOKEN_BYTES: Final = 32  # 256 bits


def new_token() -> str:
    """A per-device secret (URL-safe, no spaces: the firmware prepends "Bearer ")."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def activation_message(code: str, language: str | None) -> str:
    """The short text the device shows with the code, in its language (``Accept-Language``)."""
    lang = (language or "").strip().lower()
    return _MESSAGES["zh" if lang.startswith("zh") else "en"].format(code=code)


@dataclass(slots=True)
class PendingDevice:
    """A device that asked to join and has not been paired yet."""

    mac: str
    code: str
    challenge: str
    created: float
    seen: float
    report: DeviceReport
    source: str = ""
    """The address the request came from (bounds what one address can hold)."""
    token: str = field(default_factory=new_token)
    """The token it will have once paired, handed out with the code: clients that do not ask OTA
    again after pairing (py-xiaozhi, xiaozhi-sdk) connect with it. It opens nothing before."""

    @property
    def key(self) -> tuple[str, str]:
        """One MAC and one identity."""
        return self.mac, self.report.client_id or ""


class CheckResult(StrEnum):
    """Outcome of checking a code."""

    OK = "ok"
    WRONG = "invalid_code"
    LOCKED = "code_locked"
    UNKNOWN = "not_pending"


@dataclass(slots=True)
class _Lock:
    """Wrong codes in a row: ``MAX_FAILURES`` of them lock code entry for ``LOCKOUT`` seconds."""

    failures: int = 0
    until: float = 0.0

    def fail(self, now: float) -> CheckResult:
        """One more wrong code."""
        self.failures += 1
        if self.failures < MAX_FAILURES:
            return CheckResult.WRONG
        self.failures = 0
        self.until = now + LOCKOUT
        return CheckResult.LOCKED


@dataclass
class PairingManager:
    """Waiting devices by MAC and identity, and by code."""

    clock: Callable[[], float] = time.monotonic
    max_pending: int = MAX_PENDING
    max_per_source: int = MAX_PER_SOURCE
    code_ttl: float = CODE_TTL
    on_drop: Callable[[str], None] | None = None
    """Told the MAC of each device dropped unpaired (expired, or making room) once none of it waits."""
    _pending: dict[tuple[str, str], PendingDevice] = field(default_factory=dict)
    _locks: dict[str, _Lock] = field(default_factory=dict)  # wrong tries, by MAC
    _code_lock: _Lock = field(default_factory=_Lock)  # "Add device": wrong codes count for the hub

    def __len__(self) -> int:
        return len(self._pending)

    def find(self, mac: str, identity: Identity) -> PendingDevice | None:
        """The waiting device with this MAC and this identity, if its code is still valid."""
        self._expire()
        return self._pending.get((mac, identity.client_id or ""))

    def with_token(self, mac: str, token: str) -> PendingDevice | None:
        """The waiting identity of ``mac`` that was handed ``token`` (constant-time comparisons)."""
        found = None
        for pending in self.for_mac(mac):
            if secrets.compare_digest(pending.token.encode(), token.encode()):
                found = pending
        return found

    def for_mac(self, mac: str) -> list[PendingDevice]:
        """Every identity waiting with this MAC."""
        self._expire()
        return [p for p in self._pending.values() if p.mac == mac]

    def request(self, mac: str, report: DeviceReport, source: str = "") -> tuple[PendingDevice, bool]:
        """A device asks to join: its waiting record (created when new). True when new."""
        now = self.clock()
        self._expire()
        key = (mac, report.client_id or "")
        if (pending := self._pending.get(key)) is not None:
            pending.seen = now
            pending.report = report
            return pending, False
        self._make_room(source)
        pending = PendingDevice(mac, self._new_code(), secrets.token_hex(16), now, now, report, source)
        self._pending[key] = pending
        return pending, True

    def _make_room(self, source: str) -> None:
        """Make room before a new device waits.

        The source's oldest goes when the source is at its cap; when the table is full, the
        oldest of whichever source holds the most (so a flood evicts itself, not the others).
        """
        mine = [p for p in self._pending.values() if p.source == source]
        if len(mine) >= self.max_per_source:
            self._drop(min(mine, key=lambda p: p.seen))
        while len(self._pending) >= self.max_pending:
            counts = Counter(p.source for p in self._pending.values())
            most = max(counts.values())
            crowd = [p for p in self._pending.values() if counts[p.source] == most]
            self._drop(min(crowd, key=lambda p: p.seen))

    def touch(self, mac: str, identity: Identity) -> bool:
        """The device polls ``/activate``: keep it as recently seen. False when not waiting."""
        if (pending := self.find(mac, identity)) is None:
            return False
        pending.seen = self.clock()
        return True

    def check(self, mac: str, code: str) -> tuple[CheckResult, PendingDevice | None]:
        """Check the code typed for one MAC (whichever of its identities heard it); counts wrong tries."""
        waiting = self.for_mac(mac)
        if not waiting:
            return CheckResult.UNKNOWN, None
        now = self.clock()
        lock = self._locks.setdefault(mac, _Lock())
        if lock.until > now:
            return CheckResult.LOCKED, None
        wanted = _digits(code)
        for pending in waiting:
            if secrets.compare_digest(pending.code, wanted):
                return CheckResult.OK, pending
        return lock.fail(now), None

    def claim(self, code: str) -> tuple[CheckResult, PendingDevice | None]:
        """Find whose code this is, when it was typed without a device ("Add device").

        Wrong tries here cannot be charged to a device, so they count for the hub as a whole:
        ``MAX_FAILURES`` in a row lock code entry for ``LOCKOUT`` seconds.
        """
        self._expire()
        now = self.clock()
        if self._code_lock.until > now:
            return CheckResult.LOCKED, None
        wanted = _digits(code)
        for pending in self._pending.values():
            lock = self._locks.get(pending.mac)
            if (lock is None or lock.until <= now) and secrets.compare_digest(pending.code, wanted):
                self._code_lock.failures = 0
                return CheckResult.OK, pending
        return self._code_lock.fail(now), None

    def remove(self, mac: str) -> None:
        """The device was paired (or forgotten): every identity waiting with its MAC goes."""
        for key in [key for key, p in self._pending.items() if p.mac == mac]:
            del self._pending[key]
        self._locks.pop(mac, None)

    def _expire(self) -> None:
        deadline = self.clock() - self.code_ttl
        for pending in [p for p in self._pending.values() if p.created <= deadline]:
            self._drop(pending)

    def _drop(self, pending: PendingDevice) -> None:
        del self._pending[pending.key]
        if any(p.mac == pending.mac for p in self._pending.values()):
            return
        if (lock := self._locks.get(pending.mac)) is not None and lock.until <= self.clock():
            del self._locks[pending.mac]
        if self.on_drop is not None:
            self.on_drop(pending.mac)

    def _new_code(self) -> str:
        in_use = {p.code for p in self._pending.values()}
        while (code := f"{secrets.randbelow(10**CODE_DIGITS):0{CODE_DIGITS}d}") in in_use:
            pass
        return code


def _digits(code: str) -> str:
    """``"123 456"``, ``"123-456"`` → ``"123456"``."""
    return "".join(ch for ch in code if ch.isdigit())
