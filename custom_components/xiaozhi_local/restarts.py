"""The restarts a device owes: one set of reasons, one rule for when they are used up.

Home Assistant reaches a WebSocket device only while its conversation is open, so a restart it
needs (to move it to the transport chosen, to hand it firmware or a wake word pack at its next
OTA check) takes the place of closing that conversation. Three parts of the integration may owe
one (``admission/transport_choice.py``, ``firmware/installer.py``, ``wake_words/change.py``); the link takes it as the
conversation ends. One restart serves every reason, so taking one settles them all. The
transport restart is sent once per OTA answer: a device back on the same transport without a new
check is not restarted again for it.
"""

from enum import StrEnum


class Reason(StrEnum):
    """Why a device is restarted, in the order the log names them."""

    TRANSPORT = "its connection choice changed"
    FIRMWARE = "firmware waits for it"
    WAKE_WORD = "a new wake word waits for it"


class OwedRestarts:
    """The reasons a device owes a restart at the end of its conversation."""

    def __init__(self) -> None:
        self._owed: set[Reason] = set()
        self.transport_sent = False
        """Restarted for its transport since its last OTA answer."""

    def owe(self, reason: Reason) -> None:
        """Restart it when its conversation ends, for ``reason``."""
        self._owed.add(reason)

    def settle(self, reason: Reason) -> None:
        """``reason`` no longer needs a restart (the change was cancelled, or happened another way)."""
        self._owed.discard(reason)

    def owes(self, reason: Reason) -> bool:
        """Whether a restart is owed for ``reason``."""
        return reason in self._owed

    def take(self) -> Reason | None:
        """The first reason owed, or None; every reason is settled by the one restart."""
        reason = next((r for r in Reason if r in self._owed), None)
        self._owed.clear()
        if reason is Reason.TRANSPORT:
            self.transport_sent = True
        return reason

    def sent_for_transport(self) -> None:
        """A restart for its transport was sent now (over MQTT, between conversations)."""
        self.transport_sent = True

    def answered(self) -> None:
        """A new OTA answer: a restart for its transport may be sent once more."""
        self.transport_sent = False
