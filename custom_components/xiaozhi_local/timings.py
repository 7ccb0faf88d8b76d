"""The wait people feel: each conversation turn's stages on Home Assistant's clock, and the last few.

A turn is marked as it goes: the wake word (or ``listen start``), the end of speech (HA's VAD,
``listen stop``, or the typed text's arrival), the transcript, the agent's answer, the first TTS
audio, the first and the last frame sent to the device. The figure people feel is end of speech
→ first frame; the device's Response time sensor shows it, and diagnostics keep the last turns.
"""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, callback
from homeassistant.util import dt as dt_util

STAGES: Final = ("wake", "speech_end", "transcript", "answer", "first_audio", "first_frame", "last_frame")
"""In the order a turn passes them (``Stages`` has one field each)."""
RECENT_TURNS: Final = 10
"""Turns whose stages a device keeps for diagnostics."""


@dataclass(slots=True)
class Stages:
    """One turn's stages, in seconds on the event loop's clock (``loop.time()``); None: not reached."""

    kind: str  # "voice" or "typed"
    wake: float | None = None
    speech_end: float | None = None
    transcript: float | None = None
    answer: float | None = None
    first_audio: float | None = None
    first_frame: float | None = None
    last_frame: float | None = None

    def mark(self, stage: str, at: float) -> None:
        """``stage`` reached at ``at`` (the first time counts)."""
        if getattr(self, stage) is None:
            setattr(self, stage, at)

    def first_pcm(self, at: float) -> None:
        """The TTS engine's first audio (``sound/speaker.py``)."""
        self.mark("first_audio", at)

    def frame_sent(self, at: float) -> None:
        """A frame went to the device (``sound/speaker.py``): the first, and the last so far."""
        self.mark("first_frame", at)
        self.last_frame = at

    @property
    def response_ms(self) -> float | None:
        """End of speech → first frame sent, in ms; None when the turn had no speech to play."""
        if self.speech_end is None or self.first_frame is None:
            return None
        return round((self.first_frame - self.speech_end) * 1000, 1)

    def offsets_ms(self) -> dict[str, float]:
        """Each stage reached, in ms after the end of speech (the wake word is before it)."""
        origin = self.speech_end
        if origin is None:
            return {}
        return {
            stage: round((at - origin) * 1000, 1)
            for stage in STAGES
            if stage != "speech_end" and (at := getattr(self, stage)) is not None
        }


@dataclass(slots=True)
class ResponseTimes:
    """A device's last turns' stages; the Response time sensor follows it."""

    last: Stages | None = None
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_TURNS))
    _listeners: list[Callable[[], None]] = field(default_factory=list)

    @callback
    def add(self, stages: Stages) -> None:
        """A turn was answered with speech: it is the last one now (a turn with nothing played is not)."""
        if stages.response_ms is None:
            return
        self.last = stages
        self.recent.append(
            {
                "at": dt_util.utcnow().isoformat(),
                "kind": stages.kind,
                "response_ms": stages.response_ms,
                "stages_ms": stages.offsets_ms(),
            }
        )
        for listener in list(self._listeners):
            listener()

    @callback
    def async_add_listener(self, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """``listener()`` after each turn; returns the call that stops it."""
        self._listeners.append(listener)

        @callback
        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove
