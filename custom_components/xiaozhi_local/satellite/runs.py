"""What the satellite runs: listening turns and exchanges, and the numbers that bound them.

Every exchange (a listening turn, typed text, an announcement, media) is a ``Run`` that belongs
to the connection it started on: when that connection ends, or the device aborts, or a new
exchange starts, the run is cancelled as a whole, and nothing of it (its pipeline's events, its
speech, its timers) can reach another connection.
"""

import asyncio
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Final

from homeassistant.components.assist_pipeline import (
    Pipeline,
)
from homeassistant.core import CALLBACK_TYPE

from ..link import DeviceLink
from ..protocol.opus import ThreadedDecoder
from ..timings import Stages

EARLY_AUDIO_PACKETS: Final = 16
EARLY_AUDIO_WINDOW: Final = 1.0
"""Audio over UDP that arrived up to this many seconds before its ``listen start`` (sent over
MQTT, a different path) belongs to the turn that starts: the first word is not cut off."""
WAKE_AUDIO_PACKETS: Final = 48
"""Packets kept from outside a turn for the wake word's audio: 2.9 s at 60 ms (the firmware sends ~2 s)."""
MAX_WAKE_PACKET: Final = 1000
"""Bytes of the largest packet kept as wake audio (a 60 ms Opus packet of speech is ~100-300): with
``WAKE_AUDIO_PACKETS``, under 48 KB per device."""
WAKE_AUDIO_AGE: Final = 3.0
"""Seconds before ``listen detect`` whose audio can be the wake word's (the firmware sends it in a burst)."""
WAKE_WORD_FOLLOW_UP: Final = 0.5
"""Seconds within which a ``listen start`` makes an unknown ``listen detect`` text a wake word."""
PUSH_TO_TALK_SILENCE: Final = 4.0
"""HA's "finished speaking" silence for push-to-talk: longer than a pause in a sentence held on the
button, short enough for clients that never release it (load testers stream silence instead)."""
MAX_QUEUED_CHUNKS: Final = 100
"""Decoded uplink audio waiting for the pipeline (60 ms each: 6 s)."""
QUIET_ERRORS: Final = frozenset({"stt-no-text-recognized"})
"""Pipeline errors that mean "nobody said anything": no alert, the device just listens again."""
CANNOT_SERVE: Final = frozenset(
    {"validation-error", "stt-provider-missing", "stt-provider-unsupported-metadata", "tts-not-supported"}
)
"""Pipeline errors that mean "this assistant cannot serve the device": say so once and end the conversation."""


@dataclass(slots=True)
class Turn:
    """One listening turn: audio from ``listen start`` until the end of speech."""

    mode: str
    queue: asyncio.Queue[bytes | None]
    decoder: ThreadedDecoder | None = None  # set right after: it delivers to this turn
    ended: bool = False
    heard_speech: bool = False
    cancel_silence: CALLBACK_TYPE | None = None
    cancel_gap: CALLBACK_TYPE | None = None
    wake_audio: list[bytes] | None = None
    """While the nearest device is chosen: the wake word's audio, and over UDP the turn's first packets
    too (the wake audio may come after ``listen detect`` there), up to ``WAKE_AUDIO_PACKETS``."""

    def end_audio(self) -> None:
        """No more audio for the pipeline (VAD end, ``listen stop``, a new turn)."""
        if self.ended:
            return
        self.ended = True
        for cancel in (self.cancel_silence, self.cancel_gap):
            if cancel is not None:
                cancel()
        self.cancel_silence = self.cancel_gap = None
        while True:
            try:
                self.queue.put_nowait(None)
            except asyncio.QueueFull:
                self.queue.get_nowait()  # make room for the end marker
            else:
                return


@dataclass(slots=True, eq=False)
class Run:
    """One exchange on one connection: a listening turn, typed text, or an announcement."""

    link: DeviceLink
    turn: Turn | None = None
    task: asyncio.Task[None] | None = None  # the pipeline (a turn or typed text)
    tts_task: asyncio.Task[None] | None = None
    tts_token: str | None = None
    tts_url: str | None = None  # the same speech as a URL, for a reply speaker (satellite/reply_speaker.py)
    tts_started: bool = False
    tts_text: str | None = None
    continue_conversation: bool = False
    reply_role: str | None = None  # role of the chat log message being streamed
    reply_streamed: bool = False  # chunks of the reply went out as mcp/ai/message
    text_only: bool = False  # typed text, and the assistant has no text-to-speech: the reply is shown
    cannot_serve: bool = False  # the assistant lacks what this needs: said once, conversation ended
    cancelled: bool = False
    media: str | None = None  # the title, when the run plays media (a media player's)
    then_media: tuple[str, AsyncGenerator[bytes]] | None = None  # asked for during the turn: after the reply
    media_check: Callable[[Any], None] | None = None  # closes ``then_media`` once the run ended without it
    took_media: bool = False  # the reply's end has passed: media asked for now starts on its own
    replied: bool = False  # Home Assistant was told the reply is over
    stages: Stages | None = None  # a turn's (voice or typed) stages, on the loop's clock

    def cancel(self) -> None:
        """Stop everything of it: audio (and the turn's timers), pipeline, speech."""
        self.cancelled = True
        if self.turn is not None:
            self.turn.end_audio()
        for task in (self.task, self.tts_task):
            if task is not None and not task.done():
                task.cancel()


def missing_engines(pipeline: Pipeline) -> list[str]:
    """What the assistant lacks of speech-to-text (``stt``) and text-to-speech (``tts``)."""
    return [kind for kind, engine in (("stt", pipeline.stt_engine), ("tts", pipeline.tts_engine)) if not engine]


def speech_text(intent_output: Any) -> str:
    """The plain speech of a conversation result (``intent_output``), or ""."""
    try:
        speech = intent_output["response"]["speech"]["plain"]["speech"]
    except KeyError, TypeError:
        return ""
    return speech if isinstance(speech, str) else ""
