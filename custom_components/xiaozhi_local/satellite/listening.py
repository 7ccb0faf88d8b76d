"""The listening turn: ``listen start`` starts a run at speech-to-text; Opus in, PCM to the pipeline.

Each Opus packet is decoded to 16 kHz PCM on the codec thread and streamed in; HA's VAD (auto and
realtime) or ``listen stop`` (manual) ends the turn. Silence ends the conversation; a microphone
that stops sending ends the utterance.
"""

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from functools import partial
import logging
from typing import Any

from homeassistant.components.assist_pipeline import PipelineStage
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
from .runs import (
    EARLY_AUDIO_PACKETS,
    EARLY_AUDIO_WINDOW,
    MAX_QUEUED_CHUNKS,
    PUSH_TO_TALK_SILENCE,
    Run,
    Turn,
    missing_engines,
)
from .text import TextMixin

_LOGGER = logging.getLogger(__package__)


# One concern of the satellite entity per module (each under the size a reader takes in at once);
# the entity that platform setup creates, XiaozhiAssistSatellite, is in assist_satellite.py.
class ListeningMixin(TextMixin):  # pylint: disable=home-assistant-enforce-class-module
    """What the device's microphone and its listen messages do."""

    def _resolve_vad_sensitivity(self) -> float:
        """Seconds of silence after which HA's VAD ends the utterance.

        Push-to-talk ends at the release (``listen stop``), not at a pause: HA's VAD gets a
        silence of seconds (``PUSH_TO_TALK_SILENCE``), which a client that never releases the
        button but streams silence still reaches. Auto and realtime keep the device's "Finished
        speaking detection". (HA builds the pipeline's audio settings itself and asks only this.)
        """
        run = self._events_for
        if run is not None and run.turn is not None and run.turn.mode == "manual":
            return PUSH_TO_TALK_SILENCE
        return super()._resolve_vad_sensitivity()

    def on_control(self, link: DeviceLink, message: ControlMessage) -> None:
        """``listen start|stop|detect`` and ``abort``."""
        link.touch()
        if message.type == "abort":
            self._abort(link, message.data.get("reason"))
            return
        if message.type != "listen":
            _LOGGER.debug("Device %s: ignored %s message", self.device.mac, message.type)
            return
        try:
            listen = parse_listen(message.data)
        except VoiceError as err:
            link.log.report(err.kind, str(err))
            return
        run = self._run
        if listen.state == "start":
            self._start_turn(link, listen.mode)
        elif listen.state == "stop":
            if run is None or run.link is not link or run.turn is None:
                link.log.report("stop_without_start", "listen stop without a listen start")
                return
            turn = run.turn
            assert turn.decoder is not None
            turn.decoder.when_drained(turn.end_audio)  # the audio sent before the stop still counts
        elif is_wake_phrase(listen.text) or listen.text == self.device.expected_wake_word:
            self._wake_phrase = listen.text
        else:
            self._defer_detect(link, listen.text)

    def on_audio(self, link: DeviceLink, packet: bytes) -> None:
        """Uplink Opus → PCM for the running turn; a streaming client's next utterance starts the next."""
        link.touch()
        run = self._run
        if run is None and link.streams_microphone and self.device.link is link:
            # Clients that stream their microphone without pause (the browser page, xiaozhi-sdk in
            # realtime mode, load testers) send listen start once: HA's VAD segments what follows.
            self._start_turn(link, link.listen_mode or "auto")
            run = self._run
        turn = run.turn if run is not None and run.link is link else None
        if turn is None or turn.ended:
            if link.audio_in_order:  # in order with listen start: really outside
                # py-xiaozhi, the browser page and load testers send on after HA's VAD ended the turn.
                link.log.note("audio_outside_turn", "dropped audio outside a listening turn")
            else:  # UDP may overtake the listen start sent over MQTT: kept a moment for the turn
                self._early_audio.append((link, self.hass.loop.time(), packet))
            return
        self._feed(link, turn, packet)

    def _feed(self, link: DeviceLink, turn: Turn, packet: bytes) -> None:
        """Hand ``packet`` to the turn's decoder (a worker thread); ``_decoded`` gets its PCM."""
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
        if (custom_wake_word := self._cancel_deferred_detect()) is not None:
            self._wake_phrase = custom_wake_word
        turn = Turn(mode, asyncio.Queue(MAX_QUEUED_CHUNKS))
        turn.decoder = ThreadedDecoder(partial(self._decoded, link, turn), audio_executor(self.hass))
        run = Run(link, turn)
        previous = self._begin(run)  # a new listen start ends what runs (barge-in, a new question)
        wake_phrase, self._wake_phrase = self._wake_phrase, None
        if mode != "manual":
            # Counted from when the device started listening with nobody speaking since, on the
            # conversation's clock (a client that listens without opening one: the turn's own).
            timeout = float(self._config_entry().options.get(CONF_SILENCE_TIMEOUT, DEFAULT_SILENCE_TIMEOUT))
            conversation = self.device.conversation_of(link)
            remaining = conversation.listening(self.hass.loop.time(), timeout) if conversation else timeout

            @callback
            def silence(_now: Any) -> None:
                self._on_silence(run)

            turn.cancel_silence = async_call_later(self.hass, remaining, silence)
        run.task = self._config_entry().async_create_background_task(
            self.hass, self._async_run_turn(run, wake_phrase, previous), f"xiaozhi_local turn {self.device.mac}"
        )
        early, self._early_audio = self._early_audio, deque(maxlen=EARLY_AUDIO_PACKETS)
        recent = self.hass.loop.time() - EARLY_AUDIO_WINDOW
        for source, at, packet in early:
            if source is link and at >= recent:
                self._feed(link, turn, packet)

    async def _async_run_turn(self, run: Run, wake_phrase: str | None, previous: Run | None) -> None:
        assert run.turn is not None
        turn = run.turn
        await self._async_after(previous)
        if run.cancelled:
            return
        pipeline = self._pipeline()
        if missing := missing_engines(pipeline):
            # Say so once a microphone streams (a page that only sent listen start may type instead).
            if await turn.queue.get() is not None and not run.cancelled:
                self._cannot_serve(run, pipeline.name, missing)
            return

        async def pcm() -> AsyncIterator[bytes]:
            while (chunk := await turn.queue.get()) is not None:
                yield chunk

        self._events_for = run
        try:
            await self.async_accept_pipeline_from_satellite(
                pcm(), start_stage=PipelineStage.STT, wake_word_phrase=wake_phrase
            )
        except Exception:
            _LOGGER.exception("Device %s: the voice pipeline failed", self.device.mac)
        finally:
            turn.end_audio()
            if self._events_for is run:
                self._events_for = None
            if run.tts_task is None and not run.cancelled:
                self._finished(run)  # ended before any answer (nothing to say, or an error)

    @callback
    def _on_silence(self, run: Run) -> None:
        """Nobody spoke: end the conversation the only way stock firmware understands."""
        turn = run.turn
        if turn is None:
            return
        turn.cancel_silence = None
        if self._run is run and not turn.heard_speech:
            _LOGGER.debug("Device %s: no speech; ending the conversation", self.device.mac)
            self._end_run(run)
            self.device.async_create_task(
                run.link.async_end_conversation("no speech"), f"xiaozhi_local end {self.device.mac}"
            )

    @callback
    def _watch_gap(self, turn: Turn) -> None:
        """Auto and realtime: a microphone that stops sending ends the utterance after a while."""
        if turn.mode == "manual" or turn.ended:
            return
        if turn.cancel_gap is not None:
            turn.cancel_gap()

        @callback
        def gap(_now: Any) -> None:
            turn.cancel_gap = None
            if turn.heard_speech:
                _LOGGER.debug("Device %s: its microphone stopped sending; ending the utterance", self.device.mac)
                turn.end_audio()

        turn.cancel_gap = async_call_later(self.hass, AUDIO_GAP_TIMEOUT, gap)
