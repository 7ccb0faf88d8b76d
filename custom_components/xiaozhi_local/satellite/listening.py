"""The listening turn: ``listen start`` starts a run at speech-to-text; Opus in, PCM to the pipeline.

Each Opus packet is decoded to 16 kHz PCM on the codec thread and streamed in; HA's VAD (auto and
realtime) or ``listen stop`` (manual) ends the turn. Silence ends the conversation; a microphone
that stops sending ends the utterance.
"""

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
import logging
from typing import Any

from homeassistant.core import callback
from homeassistant.helpers.event import async_call_later

from ..const import (
    AUDIO_GAP_TIMEOUT,
    CONF_SILENCE_TIMEOUT,
    DEFAULT_SILENCE_TIMEOUT,
)
from ..link import DeviceLink
from ..protocol.messages import ControlMessage
from ..protocol.opus import Decoded, ThreadedDecoder
from ..protocol.pcm import AudioError
from ..protocol.voice import VoiceError, is_wake_phrase, parse_listen
from ..sound.media import audio_executor
from ..timings import Stages
from .runner import Runner
from .runs import (
    EARLY_AUDIO_PACKETS,
    EARLY_AUDIO_WINDOW,
    MAX_QUEUED_CHUNKS,
    MAX_WAKE_PACKET,
    WAKE_AUDIO_AGE,
    WAKE_AUDIO_PACKETS,
    Run,
    Turn,
    missing_engines,
)
from .text import TypedText

_LOGGER = logging.getLogger(__package__)


type AcceptAudio = Callable[[AsyncIterator[bytes], str | None], Awaitable[None]]
"""The satellite's ``async_accept_pipeline_from_satellite``: PCM and the wake phrase, from speech-to-text."""


class Listening:
    """What the device's microphone and its listen messages do."""

    def __init__(self, runner: Runner, text: TypedText, accept: AcceptAudio) -> None:
        self._runner = runner
        self._text = text
        self._accept = accept
        self.wake_phrase: str | None = None
        self._woke_at: float | None = None  # when the wake phrase came (a turn's first stage)
        self._before_turn: deque[tuple[DeviceLink, float, bytes]] = deque(maxlen=WAKE_AUDIO_PACKETS)
        """Audio outside a turn, the last few packets: the wake word's own, when a detect follows."""
        self._wake_audio: list[bytes] = []  # what came just before the last listen detect
        self._early_audio: deque[tuple[DeviceLink, float, bytes]] = deque(maxlen=EARLY_AUDIO_PACKETS)

    def push_to_talk(self) -> bool:
        """Whether the pipeline that runs serves a push-to-talk turn (its end is the release).

        Push-to-talk ends at the release (``listen stop``), not at a pause: HA's VAD gets a
        silence of seconds (``PUSH_TO_TALK_SILENCE``), which a client that never releases the
        button but streams silence still reaches.
        """
        run = self._runner.events_for
        return run is not None and run.turn is not None and run.turn.mode == "manual"

    def on_control(self, link: DeviceLink, message: ControlMessage) -> None:
        """``listen start|stop|detect`` and ``abort``."""
        link.touch()
        runner = self._runner
        if message.type == "abort":
            runner.abort(link, message.data.get("reason"))
            return
        if message.type != "listen":
            _LOGGER.debug("Device %s: ignored %s message", runner.device.mac, message.type)
            return
        try:
            listen = parse_listen(message.data)
        except VoiceError as err:
            link.log.report(err.kind, str(err))
            return
        run = runner.run
        if listen.state == "start":
            self._start_turn(link, listen.mode)
            return
        if listen.state == "stop":
            if run is None or run.link is not link or run.turn is None:
                link.log.report("stop_without_start", "listen stop without a listen start")
                return
            turn = run.turn
            if run.stages is not None:
                run.stages.mark("speech_end", runner.hass.loop.time())  # released: the user stopped
            assert turn.decoder is not None
            turn.decoder.when_drained(turn.end_audio)  # the audio sent before the stop still counts
            return
        self._wake_audio = self._take_wake_audio(link)  # detect: what came before it was the wake word
        if is_wake_phrase(listen.text) or listen.text == runner.device.expected_wake_word:
            self.wake_phrase = listen.text
            self._woke_at = runner.hass.loop.time()
        else:
            self._text.defer(link, listen.text)

    def on_audio(self, link: DeviceLink, packet: bytes) -> None:
        """Uplink Opus → PCM for the running turn; a streaming client's next utterance starts the next."""
        link.touch()
        runner = self._runner
        run = runner.run
        if run is None and link.streams_microphone and runner.device.link is link:
            # Clients that stream their microphone without pause (the browser page, xiaozhi-sdk in
            # realtime mode, load testers) send listen start once: HA's VAD segments what follows.
            self._start_turn(link, link.listen_mode or "auto")
            run = runner.run
        turn = run.turn if run is not None and run.link is link else None
        if turn is None or turn.ended:
            if len(packet) <= MAX_WAKE_PACKET:
                self._before_turn.append((link, runner.hass.loop.time(), packet))
            if link.audio_in_order:  # in order with listen start: really outside
                # py-xiaozhi, the browser page and load testers send on after HA's VAD ended the turn.
                link.log.note("audio_outside_turn", "dropped audio outside a listening turn")
            else:  # UDP may overtake the listen start sent over MQTT: kept a moment for the turn
                self._early_audio.append((link, runner.hass.loop.time(), packet))
            return
        self._feed(link, turn, packet)

    def _take_wake_audio(self, link: DeviceLink) -> list[bytes]:
        """The packets ``link`` sent just before its ``listen detect`` (the firmware's wake audio)."""
        recent = self._runner.hass.loop.time() - WAKE_AUDIO_AGE
        kept = [packet for source, at, packet in self._before_turn if source is link and at >= recent]
        self._before_turn.clear()
        return kept

    @staticmethod
    def _feed(link: DeviceLink, turn: Turn, packet: bytes) -> None:
        """Hand ``packet`` to the turn's decoder (a worker thread); ``_decoded`` gets its PCM."""
        if (
            turn.wake_audio is not None
            and not link.audio_in_order  # UDP: the wake audio may still be coming
            and len(turn.wake_audio) < WAKE_AUDIO_PACKETS
            and len(packet) <= MAX_WAKE_PACKET
        ):
            turn.wake_audio.append(packet)  # heard while the nearest device is chosen
        assert turn.decoder is not None
        if not turn.decoder.feed(packet):
            link.log.report("audio_queue_full", "the decoder is not keeping up; dropped audio")

    @callback
    def _decoded(self, link: DeviceLink, turn: Turn, results: list[Decoded]) -> None:
        """Decoded uplink, in order: into the pipeline's queue unless the turn has ended meanwhile."""
        good = False
        for result in results:
            if isinstance(result, AudioError):
                link.log.report("bad_opus", str(result))
                continue
            good = True
            if not result or turn.ended:
                continue
            try:
                turn.queue.put_nowait(result)
            except asyncio.QueueFull:
                link.log.report("audio_queue_full", "the pipeline is not keeping up; dropped audio")
        if good:
            self._watch_gap(turn)

    def _start_turn(self, link: DeviceLink, mode: str) -> None:
        runner = self._runner
        hass = runner.hass
        now = hass.loop.time()
        if (custom_wake_word := self._text.cancel_deferred()) is not None:
            self.wake_phrase, self._woke_at = custom_wake_word, self._text.deferred_at
        turn = Turn(mode, asyncio.Queue(MAX_QUEUED_CHUNKS))
        turn.decoder = ThreadedDecoder(partial(self._decoded, link, turn), audio_executor(hass))
        run = Run(link, turn, stages=Stages("voice"))
        previous = runner.begin(run)  # a new listen start ends what runs (barge-in, a new question)
        wake_phrase, self.wake_phrase = self.wake_phrase, None
        woke_at, self._woke_at = self._woke_at, None
        wake_audio, self._wake_audio = self._wake_audio, []
        self._before_turn.clear()
        # Woken by its wake word: when other devices heard it too, the nearest goes on (nearest.py).
        contest = None
        if wake_phrase is not None and woke_at is not None and now - woke_at <= WAKE_AUDIO_AGE:
            # (A wake phrase left from long ago, a detect no listen start followed, is no wake now.)
            # Over WebSocket the wake audio came before the detect, in order: a device that sent none
            # competes without. Over UDP it may come after: the turn's first packets count too.
            turn.wake_audio = wake_audio if wake_audio or not link.audio_in_order else None
            contest = runner.entry().runtime_data.nearest.contend(
                runner.device, lambda: list(turn.wake_audio or ()), complete=link.audio_in_order
            )
            if contest is None:
                turn.wake_audio = None
        assert run.stages is not None
        run.stages.mark("wake", woke_at if wake_phrase is not None and woke_at is not None else now)
        if mode != "manual":
            # Counted from when the device started listening with nobody speaking since, on the
            # conversation's clock (a client that listens without opening one: the turn's own).
            timeout = float(runner.entry().options.get(CONF_SILENCE_TIMEOUT, DEFAULT_SILENCE_TIMEOUT))
            conversation = runner.device.conversation_of(link)
            remaining = conversation.listening(hass.loop.time(), timeout) if conversation else timeout

            @callback
            def silence(_now: Any) -> None:
                self._on_silence(run)

            turn.cancel_silence = async_call_later(hass, remaining, silence)
        run.task = runner.background(self._async_run_turn(run, wake_phrase, previous, contest), "turn")
        early, self._early_audio = self._early_audio, deque(maxlen=EARLY_AUDIO_PACKETS)
        recent = hass.loop.time() - EARLY_AUDIO_WINDOW
        for source, at, packet in early:
            if source is link and at >= recent:
                self._feed(link, turn, packet)

    async def _async_run_turn(
        self, run: Run, wake_phrase: str | None, previous: Run | None, contest: asyncio.Future[bool] | None
    ) -> None:
        assert run.turn is not None
        runner = self._runner
        turn = run.turn
        await runner.async_after(previous)
        if contest is not None:
            goes_on = await contest
            turn.wake_audio = None
            if not goes_on and not run.cancelled:
                _LOGGER.debug("Device %s: another device is nearer; it answers", runner.device.mac)
                runner.end_conversation(run, "another device answers")
        if run.cancelled:
            return
        pipeline = runner.pipeline()
        if missing := missing_engines(pipeline):
            # Say so once a microphone streams (a page that only sent listen start may type instead).
            if await turn.queue.get() is not None and not run.cancelled:
                runner.cannot_serve(run, pipeline.name, missing)
            return

        async def pcm() -> AsyncIterator[bytes]:
            while (chunk := await turn.queue.get()) is not None:
                yield chunk

        runner.events_for = run
        try:
            await self._accept(pcm(), wake_phrase)  # qualified by the entity (nearest.phrase_for)
        except Exception:
            _LOGGER.exception("Device %s: the voice pipeline failed", runner.device.mac)
        finally:
            turn.end_audio()
            if runner.events_for is run:
                runner.events_for = None
            if run.tts_task is None and not run.cancelled:
                runner.finished(run)  # ended before any answer (nothing to say, or an error)

    @callback
    def _on_silence(self, run: Run) -> None:
        """Nobody spoke: end the conversation the only way stock firmware understands."""
        turn = run.turn
        if turn is None:
            return
        turn.cancel_silence = None
        if self._runner.run is run and not turn.heard_speech:
            _LOGGER.debug("Device %s: no speech; ending the conversation", self._runner.device.mac)
            self._runner.end_conversation(run, "no speech")

    @callback
    def _watch_gap(self, turn: Turn) -> None:
        """Auto and realtime: a microphone that stops sending ends the utterance after a while."""
        if turn.mode == "manual" or turn.ended:
            return
        if turn.cancel_gap is not None:
            turn.cancel_gap()
        mac = self._runner.device.mac

        @callback
        def gap(_now: Any) -> None:
            turn.cancel_gap = None
            if turn.heard_speech:
                _LOGGER.debug("Device %s: its microphone stopped sending; ending the utterance", mac)
                if (run := self._runner.run) is not None and run.turn is turn and run.stages is not None:
                    run.stages.mark("speech_end", self._runner.hass.loop.time())
                turn.end_audio()

        turn.cancel_gap = async_call_later(self._runner.hass, AUDIO_GAP_TIMEOUT, gap)
