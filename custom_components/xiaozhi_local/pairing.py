"""Pairing by spoken code: the codes handed to unknown devices, and who may still claim one.

Plain Python with an injectable clock. Everything here is bounded: at most ``MAX_PENDING``
devices wait at once (the least recently seen one makes room), each code lives ``CODE_TTL``
seconds, and ``MAX_FAILURES`` wrong tries for a device lock its code for ``LOCKOUT`` seconds.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
import secrets
import time
from typing import Any, Final

MAX_PENDING: Final = 64
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
class DeviceReport:
    """What a device says about itself in its OTA request (every field optional)."""

    board: str | None = None
    firmware: str | None = None
    chip: str | None = None
    client_id: str | None = None
    language: str | None = None

    @classmethod
    def from_body(cls, body: dict[str, Any], *, client_id: str | None, language: str | None) -> DeviceReport:
        """Pick the known fields out of an OTA body, ignoring anything of the wrong type."""

        def text(value: Any, limit: int = 64) -> str | None:
            return value.strip()[:limit] or None if isinstance(value, str) else None

        board: dict[str, Any] = body["board"] if isinstance(body.get("board"), dict) else {}
        application: dict[str, Any] = body["application"] if isinstance(body.get("application"), dict) else {}
        return cls(
            board=text(board.get("type")) or text(board.get("name")),
            firmware=text(application.get("version")),
            chip=text(body.get("chip_model_name")),
            client_id=text(client_id, 64),
            language=text(language) or text(body.get("language")),
        )


@dataclass(slots=True)
class PendingDevice:
    """A device that asked to join and has not been paired yet."""

    mac: str
    code: str
    challenge: str
    created: float
    seen: float
    report: DeviceReport
    failures: int = 0
    locked_until: float = 0.0


class CheckResult(StrEnum):
    """Outcome of checking a code."""

    OK = "ok"
    WRONG = "invalid_code"
    LOCKED = "code_locked"
    UNKNOWN = "not_pending"


@dataclass
class PairingManager:
    """Pending devices by MAC, and by code."""

    clock: Callable[[], float] = time.monotonic
    max_pending: int = MAX_PENDING
    code_ttl: float = CODE_TTL
    on_drop: Callable[[str], None] | None = None
    """Told the MAC of each device dropped unpaired (expired, or making room)."""
    _pending: dict[str, PendingDevice] = field(default_factory=dict)
    _code_failures: int = 0
    _code_locked_until: float = 0.0

    def __len__(self) -> int:
        return len(self._pending)

    def get(self, mac: str) -> PendingDevice | None:
        """The pending device with this MAC, if its code is still valid."""
        self._expire()
        return self._pending.get(mac)

    def request(self, mac: str, report: DeviceReport) -> tuple[PendingDevice, bool]:
        """A device asks to join: its pending record (created when new). True when new."""
        now = self.clock()
        self._expire()
        if (pending := self._pending.get(mac)) is not None:
            pending.seen = now
            pending.report = report
            return pending, False
        while len(self._pending) >= self.max_pending:
            self._drop(min(self._pending.values(), key=lambda p: p.seen).mac)
        pending = PendingDevice(mac, self._new_code(), secrets.token_hex(16), now, now, report)
        self._pending[mac] = pending
        return pending, True

    def touch(self, mac: str) -> bool:
        """The device polls ``/activate``: keep it as recently seen. False when not pending."""
        if (pending := self.get(mac)) is None:
            return False
        pending.seen = self.clock()
        return True

    def check(self, mac: str, code: str) -> CheckResult:
        """Check the code typed for one device; counts wrong tries."""
        pending = self.get(mac)
        if pending is None:
            return CheckResult.UNKNOWN
        now = self.clock()
        if pending.locked_until > now:
            return CheckResult.LOCKED
        if secrets.compare_digest(pending.code, _digits(code)):
            return CheckResult.OK
        pending.failures += 1
        if pending.failures >= MAX_FAILURES:
            pending.failures = 0
            pending.locked_until = now + LOCKOUT
            return CheckResult.LOCKED
        return CheckResult.WRONG

    def claim(self, code: str) -> tuple[CheckResult, PendingDevice | None]:
        """Find whose code this is, when it was typed without a device ("Add device").

        Wrong tries here cannot be charged to a device, so they count for the hub as a whole:
        ``MAX_FAILURES`` in a row lock code entry for ``LOCKOUT`` seconds.
        """
        self._expire()
        now = self.clock()
        if self._code_locked_until > now:
            return CheckResult.LOCKED, None
        wanted = _digits(code)
        for pending in self._pending.values():
            if pending.locked_until <= now and secrets.compare_digest(pending.code, wanted):
                self._code_failures = 0
                return CheckResult.OK, pending
        self._code_failures += 1
        if self._code_failures >= MAX_FAILURES:
            self._code_failures = 0
            self._code_locked_until = now + LOCKOUT
            return CheckResult.LOCKED, None
        return CheckResult.WRONG, None

    def remove(self, mac: str) -> None:
        """The device was paired (or forgotten)."""
        self._pending.pop(mac, None)

    def _expire(self) -> None:
        deadline = self.clock() - self.code_ttl
        for mac in [mac for mac, p in self._pending.items() if p.created <= deadline]:
            self._drop(mac)

    def _drop(self, mac: str) -> None:
        del self._pending[mac]
        if self.on_drop is not None:
            self.on_drop(mac)

    def _new_code(self) -> str:
        in_use = {p.code for p in self._pending.values()}
        while (code := f"{secrets.randbelow(10**CODE_DIGITS):0{CODE_DIGITS}d}") in in_use:
            pass
        return code


def _digits(code: str) -> str:
    """``"123 456"``, ``"123-456"`` → ``"123456"``."""
    return "".join(ch for ch in code if ch.isdigit())
