"""The nearest device answers: when several hear the wake word, the one nearest the speaker goes on.

Every stock device with esp-sr wake words sends about 2 s of the wake word's own audio before
``listen detect``. A wake opens a round: the others that heard the same word join it within a
short window (longer while a device that opened its conversation meanwhile has not reported yet);
each is scored from its own recording (``protocol/loudness.py``: speech over its own noise, so a
microphone's gain does not decide); the best goes on, the others are ended quietly. A device
without wake audio wins only when no device with wake audio competes. Typed text, buttons,
barge-in and conversations Home Assistant starts never come here.

A paired device in hostile hands cannot take the home's wake words: a score is bounded to what a
voice near a microphone gives (``protocol/loudness.py``), a device that wakes far more often than
people speak stops competing for a while (``wake_rate.py``), and a device that
reports after the choice loses only to a winner that scored at least as well.
"""

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
import logging
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from ..const import EVENT_WAKE_IGNORED
from ..device import XiaozhiDevice
from ..protocol.loudness import wake_score
from ..tasks import watched
from .wake_rate import WakeRate

_LOGGER = logging.getLogger(__package__)

WINDOW: Final = 0.3
"""Seconds after a round's first wake in which the others join it (see the README for why)."""
AWAIT_OPENING: Final = 1.5
"""Seconds after the first wake that a device which opened its conversation meanwhile, and has not
reported its wake yet, is waited for (a WebSocket device connects first)."""
OPENED_BEFORE: Final = 0.5
"""A conversation opened this long before the first wake may be of the same word (a device that
heard it too and is on its way to report); one opened earlier is of something else."""
LATE: Final = 1.0
"""Seconds after a round's first wake in which a wake that comes after the decision is of the same
word (a slow device): it loses. Later wakes open a round of their own."""
RECENT_DECISIONS: Final = 10
"""Decisions kept for diagnostics."""
CHECK_EVERY: Final = 0.05
"""How often a round that waits for an opening device looks again."""
SCORE_UDP_AFTER: Final = 0.1
"""Seconds after its ``listen start`` that a device over UDP is scored (at the choice, if sooner).
Its burst was taken at its ``listen detect`` (the socket is drained there) and what it sent between
detect and start is in by then, on a loop blocked 15 ms of every 20 too (``tests/firmware``).
Scored then, the scores (about 7 ms each) are in before the window ends, not added to the wait."""


@dataclass(slots=True, eq=False)
class Contender:
    """One device's claim: its wake audio's score (being computed), and the answer it waits for."""

    device: XiaozhiDevice
    arrived: float
    audio: Callable[[], list[bytes]]  # its wake audio so far (read when it is scored)
    won: asyncio.Future[bool]
    score: asyncio.Future[float | None] | None = None  # scored at once when its audio is complete
    benched: bool = False  # it woke too often: it does not compete
    settle: CALLBACK_TYPE | None = None  # over UDP: scored when its audio is in


@dataclass(slots=True, eq=False)
class Round:
    """The devices that heard one wake word."""

    group: str
    opened: float
    contenders: dict[str, Contender] = field(default_factory=dict)  # by MAC
    timer: CALLBACK_TYPE | None = None
    deciding: bool = False


@dataclass(slots=True)
class Decided:
    """A round's answer: who went on, when; late wakes of the same word lose to it."""

    opened: float  # the round's first wake
    winner: XiaozhiDevice
    record: dict[str, Any]
    score: float | None  # the winner's (None: it won without a score, or does not compete)


def _unsettle(contender: Contender) -> None:
    if contender.settle is not None:
        contender.settle()
        contender.settle = None


def _retrieved(future: asyncio.Future[float | None]) -> None:
    if not future.cancelled():
        future.exception()  # read: an error here is handled where the score is awaited, if at all


class Nearest:
    """The hub's arbiter of wakes (one per config entry)."""

    def __init__(
        self,
        hass: HomeAssistant,
        *,
        devices: Callable[[], Iterable[XiaozhiDevice]],
        settings: Callable[[], tuple[bool, bool]],
        area_of: Callable[[XiaozhiDevice], str | None],
        executor: Callable[[], Executor],
        fire: Callable[[dict[str, Any]], None],
    ) -> None:
        self._hass = hass
        self._devices = devices
        self._settings = settings  # (on, apart by area)
        self._area_of = area_of
        self._executor = executor
        self._fire = fire
        self._rounds: dict[str, Round] = {}
        self._decided: dict[str, Decided] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)
        self.rounds = 0  # rounds decided (one device alone in a round waited for nobody in the end)
        self._rate = WakeRate(devices, hass.loop.time)

    def _group(self, device: XiaozhiDevice, apart: bool) -> str:
        return (self._area_of(device) or "") if apart else ""

    def _competitors(self, group: str, apart: bool) -> list[XiaozhiDevice]:
        """The devices that could have heard the same word: with a voice, not switched off."""
        return [
            device
            for device in self._devices()
            if device.voice is not None and not device.off and self._group(device, apart) == group
        ]

    @callback
    def contend(
        self, device: XiaozhiDevice, wake_audio: Callable[[], list[bytes]], *, complete: bool
    ) -> asyncio.Future[bool] | None:
        """``device`` woke by its wake word; None: it goes on at once (no other device competes).

        Otherwise the future says whether it goes on (True) or another device answers (False).
        ``complete``: its wake audio is all there (it came in order before the wake): scored now,
        while the round waits, not when it decides.
        """
        on, apart = self._settings()
        if not on:
            return None
        group = self._group(device, apart)
        if len(self._competitors(group, apart)) < 2:
            return None
        loop = self._hass.loop
        now = loop.time()
        won: asyncio.Future[bool] = loop.create_future()
        benched = self._rate.count(device)
        decided = self._decided.get(group)
        late = decided is not None and now - decided.opened <= LATE and decided.winner is not device
        if late and group not in self._rounds:  # a round open now is the word's: it joins that one
            assert decided is not None
            packets = wake_audio() if complete and not benched else []
            watched(
                self._hass.async_create_background_task(
                    self._async_late(decided, device, now, packets, won), "xiaozhi_local nearest late"
                )
            )
            return won
        if (current := self._rounds.get(group)) is None:
            current = self._rounds[group] = Round(group, now)
        if (before := current.contenders.pop(device.mac, None)) is not None:
            _unsettle(before)
            if not before.won.done():
                before.won.set_result(False)  # woke again within the round: its newer wake counts
        contender = current.contenders[device.mac] = Contender(device, now, wake_audio, won, benched=benched)
        if complete and not benched:
            self._start_score(contender)
        elif not benched:

            @callback
            def settled(_now: Any) -> None:
                contender.settle = None
                if not current.deciding:
                    self._start_score(contender)

            contender.settle = async_call_later(self._hass, SCORE_UDP_AFTER, settled)
        self._check(current)
        return won

    def _start_score(self, contender: Contender) -> None:
        """Score ``contender``'s wake audio on the codec thread now; the choice reads it when done."""
        if contender.score is None and (packets := contender.audio()):
            contender.score = self._hass.loop.run_in_executor(self._executor(), wake_score, packets)
            contender.score.add_done_callback(_retrieved)  # a replaced claim's score is read by nobody

    @callback
    def phrase_for(self, device: XiaozhiDevice, phrase: str) -> str:
        """The wake phrase as Home Assistant's pipeline is told it for ``device``.

        Home Assistant refuses a phrase it heard from any satellite in the last 2 s
        (``WAKE_WORD_COOLDOWN``). While the nearest device answers, the rounds choose among these
        devices; areas kept apart must each answer, and a device that woke a moment before (or
        one that wakes again and again) must not silence the next. So each device's phrase
        reaches it as its own. Off, it is the plain phrase and Home Assistant's rule applies.
        """
        on, _apart = self._settings()
        return f"{phrase} · {device.name}" if on else phrase

    @callback
    def ignored(self, device: XiaozhiDevice) -> None:
        """Home Assistant's own rule refused ``device``'s wake: the event and the logbook say so."""
        self._hass.bus.async_fire(EVENT_WAKE_IGNORED, {"device_id": device.device_id, "reason": "duplicate_wake_up"})

    def benched(self, device: XiaozhiDevice) -> bool:
        """Whether ``device`` does not compete now (it woke too often)."""
        return self._rate.benched(device)

    async def _async_score(
        self, device: XiaozhiDevice, packets: list[bytes], scoring: asyncio.Future[float | None] | None = None
    ) -> float | None:
        """``device``'s wake audio scored (``scoring``: being scored already); None when it has none."""
        try:
            if scoring is not None:
                return await scoring
            return await self._hass.loop.run_in_executor(self._executor(), wake_score, packets) if packets else None
        except Exception:  # a recording that cannot be scored competes without audio
            _LOGGER.debug("%s: its wake audio could not be scored", device.name, exc_info=True)
            return None

    async def _async_late(
        self, decided: Decided, device: XiaozhiDevice, now: float, packets: list[bytes], won: asyncio.Future[bool]
    ) -> None:
        """``device`` reported the word after the choice: it loses to a winner that scored as well.

        Said like a choice. Otherwise it goes on too: arriving first is no way to silence a device
        that heard the word better.
        """
        score = await self._async_score(device, packets)
        if score is not None and (decided.score is None or score > decided.score):
            _LOGGER.debug("%s woke after %s's choice but heard it better (%s dB): it answers too",
                          device.name, decided.winner.name, score)  # fmt: skip
            if not won.done():
                won.set_result(True)
            return
        _LOGGER.debug("%s woke %.0f ms after %s's wake, after the choice: it does not answer", device.name,
                      (now - decided.opened) * 1000, decided.winner.name)  # fmt: skip
        if not won.done():
            won.set_result(False)
        record = decided.record
        if device.name not in record["late"]:
            record["late"].append(device.name)
        if not any(kept is record for kept in self.recent):  # the winner was alone in its round
            self.recent.append(record)
        self._fire(
            {
                "device_id": device.device_id,  # the logbook shows it on this device's page
                "winner": decided.winner.device_id,
                "others": [device.device_id],
                "scores": {},
                "late": True,
            }
        )

    def _pending(self, current: Round, apart: bool) -> list[XiaozhiDevice]:
        """Devices that opened a conversation around this wake but have not said they woke."""
        return [
            device
            for device in self._competitors(current.group, apart)
            if device.mac not in current.contenders
            and (conversation := device.conversation) is not None
            and conversation.opened_at >= current.opened - OPENED_BEFORE
            and not device.exchanging
        ]

    @callback
    def _check(self, current: Round) -> None:
        """Decide now if nobody else can join; else look again when the window (or a wait) ends."""
        if current.deciding:
            return
        if current.timer is not None:
            current.timer()
            current.timer = None
        _on, apart = self._settings()
        now = self._hass.loop.time()
        waited = now - current.opened
        everyone = len(current.contenders) >= len(self._competitors(current.group, apart))
        pending = self._pending(current, apart)
        if everyone or waited >= AWAIT_OPENING or (waited >= WINDOW and not pending):
            current.deciding = True
            watched(self._hass.async_create_background_task(self._async_decide(current), "xiaozhi_local nearest"))
            return
        delay = WINDOW - waited if waited < WINDOW else CHECK_EVERY

        @callback
        def again(_now: Any) -> None:
            current.timer = None
            self._check(current)

        current.timer = async_call_later(self._hass, max(0.0, delay), again)

    async def _async_decide(self, current: Round) -> None:
        self.rounds += 1
        if self._rounds.get(current.group) is current:
            del self._rounds[current.group]
        contenders = list(current.contenders.values())
        for contender in contenders:
            _unsettle(contender)
        scores: dict[str, float | None] = {}
        for contender in contenders:  # about 3 ms each, on the codec thread
            skip = len(contenders) < 2 or contender.score is not None or contender.benched
            packets = [] if skip else contender.audio()
            scores[contender.device.mac] = await self._async_score(contender.device, packets, contender.score)
        competing = [c for c in contenders if not c.benched] or contenders
        scored = [c for c in competing if scores[c.device.mac] is not None]
        if scored:
            winner = max(scored, key=lambda c: (scores[c.device.mac] or 0.0, -c.arrived))
        else:
            winner = min(competing, key=lambda c: c.arrived)
        record = {
            "winner": winner.device.name,
            "others": [c.device.name for c in contenders if c is not winner],
            "scores": {c.device.name: scores[c.device.mac] for c in contenders},
            "waited_ms": round((self._hass.loop.time() - current.opened) * 1000, 1),
            "late": [],
        }
        self._decided[current.group] = Decided(current.opened, winner.device, record, scores[winner.device.mac])
        if len(contenders) > 1:
            self.recent.append(record)
        for contender in contenders:
            if not contender.won.done():
                contender.won.set_result(contender is winner)
        if len(contenders) > 1:
            _LOGGER.debug("Nearest of %s: %s", ", ".join(c.device.name for c in contenders), winner.device.name)
            self._fire(
                {
                    "device_id": winner.device.device_id,  # the logbook shows it on the winner's page
                    "winner": winner.device.device_id,
                    "others": [c.device.device_id for c in contenders if c is not winner],
                    "scores": {c.device.device_id: scores[c.device.mac] for c in contenders},
                    "late": False,
                }
            )

    @callback
    def shutdown(self) -> None:
        """The entry unloads: every waiting device goes on (its turn is cancelled anyway)."""
        for current in self._rounds.values():
            if current.timer is not None:
                current.timer()
            for contender in current.contenders.values():
                _unsettle(contender)
                if not contender.won.done():
                    contender.won.set_result(True)
        self._rounds.clear()
