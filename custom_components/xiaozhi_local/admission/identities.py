"""Who holds which token: the only place device tokens are kept, written before any leaves HA.

A paired device lives in a config subentry (MAC, identity), which Home Assistant saves about a
second after a change, in a file every user of the machine can read. Its token is kept here
instead, once, in a store as private as Home Assistant's auth store (0600). A flow that makes
a token hands it over in the subentry; the hub moves it here and takes it out of the subentry
once this journal is on disk (``HubStorage.async_save_identities``). A device is handed its
token in an OTA answer and keeps it in flash, so the OTA answer waits for this write
(``async_flush``). At the next start, the journal repairs the subentries: a device paired just
before a kill is restored, a device deleted just before it stays deleted.

The journal also remembers earlier tokens (as hashes): a device that presents its token from
before "Regenerate token", or from before the user deleted it, is refused without being taken
for someone guessing (no "Login attempt failed", no IP ban).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
import hashlib
import logging
import secrets
from typing import Any, Final

from homeassistant.const import CONF_CLIENT_ID
from homeassistant.helpers.storage import Store

from ..const import CONF_SERIAL

_LOGGER = logging.getLogger(__name__)

MAX_PREVIOUS: Final = 4
"""Earlier tokens remembered per MAC."""
MAX_FORGOTTEN: Final = 256
"""Deleted devices remembered (the oldest deletions are forgotten first)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What a device proves itself with besides its MAC (sent by the device alone; see the module)."""

    client_id: str | None = None
    serial: str | None = None

    def proves(self, recorded: Identity) -> bool:
        """Whether this request's identity is the one recorded when the device paired.

        Nothing recorded proves nothing: a device paired by MAC alone has to bind an identity
        first (with a code, or by connecting once with its token). Constant-time comparisons.
        """
        if not recorded.client_id or not self.client_id:
            return False
        if not secrets.compare_digest(recorded.client_id.encode(), self.client_id.encode()):
            return False
        if recorded.serial:
            return self.serial is not None and secrets.compare_digest(recorded.serial.encode(), self.serial.encode())
        return True

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Identity:
        """As kept in a device's subentry."""
        return cls(data.get(CONF_CLIENT_ID), data.get(CONF_SERIAL))

    def as_data(self) -> dict[str, str]:
        """As kept in the device's subentry (only what is known)."""
        return {key: value for key, value in ((CONF_CLIENT_ID, self.client_id), (CONF_SERIAL, self.serial)) if value}


def token_hash(token: str) -> str:
    """What is kept of a token that is no longer valid."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(slots=True)
class Record:
    """One MAC: its current token (None once deleted), identity, name and earlier tokens."""

    token: str | None
    client_id: str | None = None
    serial: str | None = None
    title: str = ""
    previous: list[str] = field(default_factory=list)

    @property
    def identity(self) -> Identity:
        """The identity recorded when the device paired (or first connected)."""
        return Identity(self.client_id, self.serial)

    def retire(self, token: str | None) -> None:
        """``token`` is no longer valid: remember its hash."""
        if token:
            digest = token_hash(token)
            if digest not in self.previous:
                self.previous = [*self.previous, digest][-MAX_PREVIOUS:]

    def as_dict(self) -> dict[str, Any]:
        """As stored."""
        return {
            "token": self.token,
            "client_id": self.client_id,
            "serial": self.serial,
            "title": self.title,
            "previous": self.previous,
        }

    @classmethod
    def from_dict(cls, raw: Any) -> Record | None:
        """From the store; None for anything malformed (never raises)."""
        if not isinstance(raw, dict):
            return None

        def text(key: str) -> str | None:
            value = raw.get(key)
            return value if isinstance(value, str) and value else None

        previous = raw.get("previous")
        return cls(
            token=text("token"),
            client_id=text("client_id"),
            serial=text("serial"),
            title=text("title") or "",
            previous=[p for p in previous if isinstance(p, str)][-MAX_PREVIOUS:] if isinstance(previous, list) else [],
        )


class IdentityJournal:
    """The records by MAC, saved at once (not on a delay) whenever one changes."""

    def __init__(self, store: Store[dict[str, Any]]) -> None:
        self._store = store  # store/storage.py: journal_store
        self.records: dict[str, Record] = {}
        self._changes = 0  # bumped by every change
        self._saved = 0  # the change count that is on disk

    async def async_load(self) -> None:
        """Read the journal (an unreadable record is skipped)."""
        raw = await self._store.async_load() or {}
        for mac, value in raw.get("devices", {}).items() if isinstance(raw.get("devices"), dict) else []:
            if (record := Record.from_dict(value)) is not None:
                self.records[mac] = record
        self._saved = self._changes

    def __iter__(self) -> Iterator[tuple[str, Record]]:
        return iter(list(self.records.items()))

    def get(self, mac: str) -> Record | None:
        """The record of ``mac``, current or deleted."""
        return self.records.get(mac)

    def note(self, mac: str, token: str, identity: Identity, title: str) -> None:
        """The device's subentry as it is now (paired, renamed, new token, new identity)."""
        record = self.records.get(mac)
        if record is None:
            record = self.records[mac] = Record(token=None)
        if record.token != token:
            record.retire(record.token)
        new = Record(token, identity.client_id, identity.serial, title, record.previous)
        if new != record:
            self.records[mac] = new
            self._changes += 1

    def forget(self, mac: str) -> None:
        """The user deleted the device: its token becomes an earlier one."""
        record = self.records.get(mac)
        if record is None or record.token is None:
            return
        record.retire(record.token)
        record.token = None
        self._changes += 1
        # Bounded: the oldest deletions go first (dicts keep insertion order; re-added ones move last).
        self.records[mac] = self.records.pop(mac)
        deleted = [m for m, r in self.records.items() if r.token is None]
        for old in deleted[: max(0, len(deleted) - MAX_FORGOTTEN)]:
            del self.records[old]

    def was_issued(self, mac: str, token: str) -> bool:
        """Whether ``token`` is an earlier token of ``mac`` (regenerated, or the device deleted)."""
        record = self.records.get(mac)
        return bool(token) and record is not None and token_hash(token) in record.previous

    @property
    def dirty(self) -> bool:
        """Whether a change has not reached disk yet."""
        return self._saved != self._changes

    async def async_flush(self) -> None:
        """Write the journal now if it changed; returns once it is on disk."""
        if not self.dirty:
            return
        changes = self._changes
        await self._store.async_save({"devices": {mac: r.as_dict() for mac, r in self.records.items()}})
        self._saved = max(self._saved, changes)
