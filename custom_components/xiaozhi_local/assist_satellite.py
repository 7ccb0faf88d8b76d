"""The device as an Assist voice satellite: its microphone and speaker in Home Assistant's pipeline.

Uplink: ``listen start`` starts a run at speech-to-text; each Opus packet is decoded to 16 kHz
PCM and streamed in; HA's VAD (auto mode) or ``listen stop`` (manual) ends the turn.
Downlink: ``stt`` → ``llm`` (emotion) → ``tts start`` → ``tts sentence_start`` → 60 ms Opus
packets paced at real time with a small lead → ``tts stop`` (always) → ``tts_response_finished``.

Every exchange (a listening turn, typed text, an announcement) is a ``_Run`` that belongs to the
connection it started on: when that connection ends, or the device aborts, or a new exchange
starts, the run is cancelled as a whole, and nothing of it (its pipeline's events, its speech,
its timers) can reach another connection.
"""

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
import contextlib
from dataclasses import dataclass
from functools import partial
import inspect
import logging
from typing import Any, Final

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import PipelineEvent, PipelineEventType
from homeassistant.components.assist_pipeline.models import PipelineStage
from homeassistant.components.assist_pipeline.pipeline import (
    Pipeline,
    PipelineInput,
    PipelineRun,
    async_get_pipeline,
)
from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteAnswer,
    AssistSatelliteConfiguration,
    AssistSatelliteEntity,
    AssistSatelliteEntityFeature,
    AssistSatelliteWakeWord,
)
from homeassistant.components.intent import TimerEventType, TimerInfo, async_register_timer_handler
from homeassistant.core import CALLBACK_TYPE, Context, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import chat_session, entity_registry as er
from homeassistant.helpers.entity import EntityDescription
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.event import async_call_later

from . import speaker
from .const import (
    AUDIO_GAP_TIMEOUT,
    CONF_IDLE_TIMEOUT,
    CONF_SILENCE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_SILENCE_TIMEOUT,
    DOMAIN,
)
from .device import XiaozhiDevice, translated_error
from .entity import XiaozhiEntity, async_setup_device_entities
from .hub import XiaozhiConfigEntry
from .link import DeviceLink
from .media import MediaUnreadable, audio_executor, tts_pcm
from .notify import Announcement
from .protocol import voice
from .protocol.messages import ControlMessage
from .protocol.opus import Decoded, ThreadedDecoder
from .protocol.pcm import AudioError
from .protocol.voice import VoiceError, is_wake_phrase, parse_listen
from .repairs import async_pipeline_incomplete, async_pipeline_served

_LOGGER = logging.getLogger(__name__)

_SESSION_TAKES_CONTEXT: Final = "context" in inspect.signature(chat_session.async_get_chat_session).parameters
"""Home Assistant 2026.11 wants the run's context (leaving it out warns, and breaks in 2027.5);
2026.10 has no such parameter."""
EARLY_AUDIO_PACKETS: Final = 16
EARLY_AUDIO_WINDOW: Final = 1.0
"""Audio over UDP that arrived up to this many seconds before its ``listen start`` (sent over
MQTT, a different path) belongs to the turn that starts: the first word is not cut off."""

PARALLEL_UPDATES = 0

WAKE_WORD_FOLLOW_UP: Final = 0.5
"""Seconds within which a ``listen start`` makes an unknown ``listen detect`` text a wake word."""
PUSH_TO_TALK_SILENCE: Final = 4.0
"""HA's "finished speaking" silence for push-to-talk: longer than a pause in a sentence held on the
button, short enough for clients that never release it (load testers stream silence instead)."""
MAX_QUEUED_CHUNKS: Final = 100
"""Decoded uplink audio waiting for the pipeline (60 ms each: 6 s)."""

ON_DEVICE_WAKE_WORD: Final = AssistSatelliteWakeWord(
    id="on_device", wake_word="你好小智 / Hi ESP", trained_languages=["zh", "en"]
)

SATELLITE = EntityDescription(key="assist_satellite", name=None)

QUIET_ERRORS: Final = frozenset({"stt-no-text-recognized"})
"""Pipeline errors that mean "nobody said anything": no alert, the device just listens again."""
CANNOT_SERVE: Final = frozenset(
    {"validation-error", "stt-provider-missing", "stt-provider-unsupported-metadata", "tts-not-supported"}
)
"""Pipeline errors that mean "this assistant cannot serve the device": say so once and end the conversation."""


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """One satellite per device."""
    async_setup_device_entities(
        hass,
        entry,
        async_add_entities,
        lambda device: [("assist_satellite", lambda: XiaozhiAssistSatellite(device, SATELLITE))],
    )


@dataclass(slots=True)
class _Turn:
    """One listening turn: audio from ``listen start`` until the end of speech."""

    mode: str
    queue: asyncio.Queue[bytes | None]
    decoder: ThreadedDecoder | None = None  # set right after: it delivers to this turn
    ended: bool = False
    heard_speech: bool = False
    cancel_silence: CALLBACK_TYPE | None = None
    cancel_gap: CALLBACK_TYPE | None = None

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
class _Run:
    """One exchange on one connection: a listening turn, typed text, or an announcement."""

    connection: DeviceLink
    turn: _Turn | None = None
    task: asyncio.Task[None] | None = None  # the pipeline (a turn or typed text)
    tts_task: asyncio.Task[None] | None = None
    tts_token: str | None = None
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

    def cancel(self) -> None:
        """Stop everything of it: audio (and the turn's timers), pipeline, speech."""
        self.cancelled = True
        if self.turn is not None:
            self.turn.end_audio()
        for task in (self.task, self.tts_task):
            if task is not None and not task.done():
                task.cancel()


class XiaozhiAssistSatellite(XiaozhiEntity, AssistSatelliteEntity):
    """A xiaozhi device in Assist: on-device wake word, Opus both ways."""

    _attr_supported_features = AssistSatelliteEntityFeature.ANNOUNCE | AssistSatelliteEntityFeature.START_CONVERSATION
    # WAV as the engine makes it: HA converts (with an ffmpeg process per reply) only engines that
    # return another format; media.tts_pcm resamples in-process.
    _attr_tts_options = {tts.ATTR_PREFERRED_FORMAT: "wav"}  # noqa: RUF012

    def __init__(self, device: XiaozhiDevice, description: EntityDescription) -> None:
        super().__init__(device, description)
        self._run: _Run | None = None  # the current exchange
        self._events_for: _Run | None = None  # the run whose pipeline is executing (its events are its own)
        self._wake_phrase: str | None = None
        self._deferred_detect: tuple[str, CALLBACK_TYPE, DeviceLink] | None = None
        self._early_audio: deque[tuple[DeviceLink, float, bytes]] = deque(maxlen=EARLY_AUDIO_PACKETS)
        self._idle_media: tuple[str, asyncio.Task[None]] | None = None  # media played by notify (2.5)
        self._unanswered: asyncio.Future[None] | None = None  # set when a question's answer cannot come
        self._quiet_since: tuple[DeviceLink, float] | None = None  # listening, nobody spoke since then

    async def async_added_to_hass(self) -> None:
        """Take the device's voice; handle the timers set by talking to it."""
        await super().async_added_to_hass()
        self.device.voice = self
        device_id = self.registry_entry.device_id if self.registry_entry is not None else None
        if device_id:
            # Without a handler for the device, HA answers "timers are not supported on this device".
            self.async_on_remove(async_register_timer_handler(self.hass, device_id, self._on_timer))

        @callback
        def release() -> None:
            if self.device.voice is self:
                self.device.voice = None
            self._cancel_deferred_detect()
            if self._run is not None:
                self._run.cancel()
                self._run = None
            if self._idle_media is not None:
                self._idle_media[1].cancel()
                self._idle_media = None

        self.async_on_remove(release)

    # -- configuration (the device does its own wake word) ------------------------------------

    @property
    def pipeline_entity_id(self) -> str | None:
        """The device's pipeline select."""
        return er.async_get(self.hass).async_get_entity_id("select", DOMAIN, f"{self.device.mac}-pipeline")

    @property
    def vad_sensitivity_entity_id(self) -> str | None:
        """The device's VAD sensitivity select."""
        return er.async_get(self.hass).async_get_entity_id("select", DOMAIN, f"{self.device.mac}-vad_sensitivity")

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

    @callback
    def async_get_configuration(self) -> AssistSatelliteConfiguration:
        """One fixed on-device wake word."""
        return AssistSatelliteConfiguration(
            available_wake_words=[ON_DEVICE_WAKE_WORD],
            active_wake_words=[ON_DEVICE_WAKE_WORD.id],
            max_active_wake_words=1,
        )

    async def async_set_configuration(self, config: AssistSatelliteConfiguration) -> None:
        """The wake word lives in the firmware; nothing to change here."""
        if config.active_wake_words not in ([], [ON_DEVICE_WAKE_WORD.id]):
            raise translated_error("wake_word_fixed")

    @callback
    def _on_timer(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        """A timer of this device rang: it is spoken where the device can play it, else an ``alert``.

        Started, changed and cancelled timers need nothing: the spoken answer said so.
        """
        if event_type != TimerEventType.FINISHED:
            return
        connection = self.device.connection
        if connection is None:
            _LOGGER.warning("Device %s is offline; its timer %s finished unheard", self.device.mac, timer.name or "")
            return
        ring = voice.timer_finished(timer.name, timer.created_seconds, timer.language)
        self._config_entry().async_create_background_task(
            self.hass, self._async_ring(connection, ring), f"xiaozhi_local timer {self.device.mac}"
        )

    async def _async_ring(self, connection: DeviceLink, ring: dict[str, Any]) -> None:
        """Say it (in a conversation, or by ``notify`` on 2.5); the alert's sound where it cannot be said."""
        if connection.audio_open or self.device.plays_notify:
            try:
                await self.async_internal_announce(message=ring["message"], preannounce=False)
            except HomeAssistantError as err:  # no text-to-speech, say
                _LOGGER.debug("Device %s: the timer could not be spoken (%s); showing it", self.device.mac, err)
            else:
                return
        await connection.async_send_json(ring)

    # -- what the device sends (VoiceHandler) ---------------------------------------------------

    def on_control(self, connection: DeviceLink, message: ControlMessage) -> None:
        """``listen start|stop|detect`` and ``abort``."""
        connection.touch()
        if message.type == "abort":
            self._abort(connection, message.data.get("reason"))
            return
        if message.type != "listen":
            _LOGGER.debug("Device %s: ignored %s message", self.device.mac, message.type)
            return
        try:
            listen = parse_listen(message.data)
        except VoiceError as err:
            connection.log.report(err.kind, str(err))
            return
        run = self._run
        if listen.state == "start":
            self._start_turn(connection, listen.mode)
        elif listen.state == "stop":
            if run is None or run.connection is not connection or run.turn is None:
                connection.log.report("stop_without_start", "listen stop without a listen start")
                return
            turn = run.turn
            assert turn.decoder is not None
            turn.decoder.when_drained(turn.end_audio)  # the audio sent before the stop still counts
        elif is_wake_phrase(listen.text):
            self._wake_phrase = listen.text
        else:
            self._defer_detect(connection, listen.text)

    def on_audio(self, connection: DeviceLink, packet: bytes) -> None:
        """Uplink Opus → PCM for the running turn; a streaming client's next utterance starts the next."""
        connection.touch()
        run = self._run
        if run is None and connection.listen_mode in ("auto", "realtime") and self.device.connection is connection:
            # Clients that stream their microphone without pause (the browser page, xiaozhi-sdk in
            # realtime mode, load testers) send listen start once: HA's VAD segments what follows.
            self._start_turn(connection, connection.listen_mode)
            run = self._run
        turn = run.turn if run is not None and run.connection is connection else None
        if turn is None or turn.ended:
            if connection.transport_name == "websocket":  # in order with listen start: really outside
                connection.log.report("audio_outside_turn", "dropped audio outside a listening turn")
            else:  # UDP may overtake the listen start sent over MQTT: kept a moment for the turn
                self._early_audio.append((connection, self.hass.loop.time(), packet))
            return
        self._feed(connection, turn, packet)

    def _feed(self, connection: DeviceLink, turn: _Turn, packet: bytes) -> None:
        """Hand ``packet`` to the turn's decoder (a worker thread); ``_decoded`` gets its PCM."""
        assert turn.decoder is not None
        if not turn.decoder.feed(packet):
            connection.log.report("audio_queue_full", "the decoder is not keeping up; dropped audio")

    @callback
    def _decoded(self, connection: DeviceLink, turn: _Turn, results: list[Decoded]) -> None:
        """Decoded uplink, in order: into the pipeline's queue unless the turn has ended meanwhile."""
        good = False
        for result in results:
            if isinstance(result, AudioError):
                connection.log.report("bad_opus", str(result))
                continue
            good = True
            if not result or turn.ended:
                continue
            try:
                turn.queue.put_nowait(result)
            except asyncio.QueueFull:
                connection.log.report("audio_queue_full", "the pipeline is not keeping up; dropped audio")
        if good:
            self._watch_gap(turn)

    def on_disconnect(self, connection: DeviceLink) -> None:
        """The connection ended: its run ends at once, and nothing of it reaches another connection."""
        if self._deferred_detect is not None and self._deferred_detect[2] is connection:
            self._cancel_deferred_detect()
        run = self._run
        if run is not None and run.connection is connection:
            _LOGGER.debug("Device %s disconnected during a conversation; ending it", self.device.mac)
            self._end_run(run)
        self._no_answer()

    # -- runs ----------------------------------------------------------------------------------

    def _config_entry(self) -> XiaozhiConfigEntry:
        assert self.platform.config_entry is not None
        return self.platform.config_entry

    @callback
    def _begin(self, run: _Run) -> _Run | None:
        """``run`` is the current exchange from now on; returns the one it replaces (cancelled)."""
        previous, self._run = self._run, run
        if previous is not None:
            previous.cancel()
            if previous.media is not None:
                self.device.async_link_changed()  # the media stopped (a wake word, a question)
        return previous

    @property
    def busy(self) -> bool:
        """Whether an exchange is under way (a turn, a reply, an announcement)."""
        return self._run is not None

    @callback
    def _idle(self) -> None:
        """No exchange runs any more: whoever waits for that (a firmware install) is told."""
        self._run = None
        self.device.async_link_changed()

    @callback
    def _end_run(self, run: _Run) -> None:
        """Cancel ``run`` (disconnect, abort, silence): the satellite is idle again."""
        self._no_answer()  # a question waiting for its answer gets none
        run.cancel()
        if self._run is run:
            self._idle()
            self.tts_response_finished()  # back to idle (HA's public way to say the response is over)

    @callback
    def _finished(self, run: _Run) -> None:
        """``run`` is over (answered, or there was nothing to answer).

        A manual-mode conversation is over too: the device went idle but keeps its socket, and
        its tools stay callable. The connection is closed only after the hub's idle timeout.
        """
        if self._run is run:
            self._idle()
        if run.turn is not None and run.turn.mode == "manual" and not run.continue_conversation:
            options = self._config_entry().options
            run.connection.arm_idle(float(options.get(CONF_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)))

    def _defer_detect(self, connection: DeviceLink, text: str) -> None:
        """Decide what a ``listen detect`` text that is no known wake phrase means.

        A custom wake word if ``listen start`` follows at once (the firmware sends both back to
        back); otherwise a typed utterance.
        """
        self._cancel_deferred_detect()

        @callback
        def typed(_now: Any) -> None:
            self._deferred_detect = None
            self._start_text_run(connection, text)

        self._deferred_detect = (text, async_call_later(self.hass, WAKE_WORD_FOLLOW_UP, typed), connection)

    def _cancel_deferred_detect(self) -> str | None:
        if self._deferred_detect is None:
            return None
        text, cancel, _connection = self._deferred_detect
        self._deferred_detect = None
        cancel()
        return text

    def _start_turn(self, connection: DeviceLink, mode: str) -> None:
        if (custom_wake_word := self._cancel_deferred_detect()) is not None:
            self._wake_phrase = custom_wake_word
        connection.listen_mode = mode
        turn = _Turn(mode, asyncio.Queue(MAX_QUEUED_CHUNKS))
        turn.decoder = ThreadedDecoder(partial(self._decoded, connection, turn), audio_executor(self.hass))
        run = _Run(connection, turn)
        previous = self._begin(run)  # a new listen start ends what runs (barge-in, a new question)
        wake_phrase, self._wake_phrase = self._wake_phrase, None
        if mode != "manual":
            # Counted from when the device started listening with nobody speaking since: turns that
            # end without speech (HA's command limit, a no-text result) do not restart it.
            timeout = self._config_entry().options.get(CONF_SILENCE_TIMEOUT, DEFAULT_SILENCE_TIMEOUT)
            now = self.hass.loop.time()
            if self._quiet_since is None or self._quiet_since[0] is not connection:
                self._quiet_since = (connection, now)
            remaining = max(0.0, float(timeout) - (now - self._quiet_since[1]))

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
            if source is connection and at >= recent:
                self._feed(connection, turn, packet)

    async def _async_after(self, previous: _Run | None) -> None:
        """Until the replaced run's pipeline has really stopped (its late events are not ours)."""
        if previous is not None and previous.task is not None:
            await asyncio.wait({previous.task})

    def _pipeline(self) -> Pipeline:
        """The assistant the device uses now (its select, else the preferred one)."""
        return async_get_pipeline(self.hass, self._resolve_pipeline())

    async def _async_run_turn(self, run: _Run, wake_phrase: str | None, previous: _Run | None) -> None:
        assert run.turn is not None
        turn = run.turn
        await self._async_after(previous)
        if run.cancelled:
            return
        pipeline = self._pipeline()
        if missing := _missing_engines(pipeline):
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
    def _on_silence(self, run: _Run) -> None:
        """Nobody spoke: end the conversation the only way stock firmware understands."""
        turn = run.turn
        if turn is None:
            return
        turn.cancel_silence = None
        if self._run is run and not turn.heard_speech:
            _LOGGER.debug("Device %s: no speech; ending the conversation", self.device.mac)
            self._end_run(run)
            self.hass.async_create_task(run.connection.async_end_conversation("no speech"))

    @callback
    def _watch_gap(self, turn: _Turn) -> None:
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

    def _start_text_run(self, connection: DeviceLink, text: str) -> None:
        """``listen detect`` with text that is not a wake phrase: a typed utterance."""
        run = _Run(connection)
        previous = self._begin(run)
        run.task = self._config_entry().async_create_background_task(
            self.hass, self._async_run_text(run, text, previous), f"xiaozhi_local text {self.device.mac}"
        )

    async def _async_run_text(self, run: _Run, text: str, previous: _Run | None) -> None:
        """The pipeline from the intent stage, as ``async_accept_pipeline_from_satellite`` runs it.

        HA 2026.10/11 has no public way for a satellite to run the pipeline from text, so this
        runs ``PipelineInput`` itself, with the base class's event hook (which sets the entity's
        state), its pipeline choice and its extra system prompt (``start_conversation``). The run
        is this satellite's own task, so a disconnect, an abort or a new turn cancels it.
        """
        await self._async_after(previous)
        if run.cancelled:
            return
        run.connection.touch()
        self._send_to(run, voice.stt(text))  # clients draw the user's line from it
        pipeline = self._pipeline()
        # Shown, not spoken, without text-to-speech, or where no audio can reach the device yet (an
        # MQTT device that typed before its microphone's first datagram proved its UDP address).
        run.text_only = not pipeline.tts_engine or not run.connection.audio_open
        if pipeline.tts_engine and not run.connection.audio_open:
            _LOGGER.info("Device %s: no audio channel yet; its answer is shown as text", self.device.mac)
        context = Context()
        self.async_set_context(context)
        extra_system_prompt, self._extra_system_prompt = self._extra_system_prompt, None
        self._events_for = run
        try:
            with chat_session.async_get_chat_session(
                self.hass, self._conversation_id, **({"context": context} if _SESSION_TAKES_CONTEXT else {})
            ) as session:
                self._conversation_id = session.conversation_id
                pipeline_input = PipelineInput(
                    run=PipelineRun(
                        self.hass,
                        context=context,
                        pipeline=pipeline,
                        start_stage=PipelineStage.INTENT,
                        end_stage=PipelineStage.INTENT if run.text_only else PipelineStage.TTS,
                        event_callback=self._internal_on_pipeline_event,
                        tts_audio_output=self.tts_options,
                    ),
                    session=session,
                    intent_input=text,
                    conversation_extra_system_prompt=extra_system_prompt,
                    device_id=self.registry_entry.device_id if self.registry_entry else None,
                    satellite_id=self.entity_id,
                )
                await pipeline_input.execute(validate=True)
        except Exception:
            _LOGGER.exception("Device %s: the text pipeline failed", self.device.mac)
        finally:
            if self._events_for is run:
                self._events_for = None
            if run.tts_task is None and not run.cancelled:
                self._finished(run)

    def _abort(self, connection: DeviceLink, reason: Any) -> None:
        """The device interrupts: whatever runs on this connection stops, answered or not.

        While listening, the partial audio is dropped (not answered). While speaking, the speech
        stops (``tts stop`` follows). A ``listen start`` after it starts the next turn.
        """
        _LOGGER.debug("Device %s: abort (%s)", self.device.mac, reason)
        run = self._run
        if run is not None and run.connection is connection:
            self._end_run(run)

    @callback
    def _cannot_serve(self, run: _Run, assistant: str, missing: list[str]) -> None:
        """The assistant lacks speech-to-text or text-to-speech: one alert, then the conversation ends.

        Not re-armed: no ``tts start``/``stop`` (that would make an auto-mode device listen again,
        and loop). One warning per assistant and lack, and a repair that points to its settings.
        """
        run.cannot_serve = True
        async_pipeline_incomplete(self.hass, assistant, missing)
        what = " and ".join({"stt": "speech-to-text", "tts": "text-to-speech"}.get(m, m) for m in missing)
        self._send_to(run, voice.alert(f"The assistant {assistant} has no {what}. Set it up in Home Assistant."))
        self._end_run(run)
        self.hass.async_create_task(run.connection.async_end_conversation(f"assistant {assistant} has no {what}"))

    # -- pipeline events → device messages -----------------------------------------------------

    def _send_to(self, run: _Run, message: dict[str, Any]) -> None:
        """In order: each send starts at once (eager), and the socket writes whole frames in order."""
        self.hass.async_create_task(run.connection.async_send_json(message), eager_start=True)

    def _send_ai(self, run: _Run, kind: str, content: str) -> None:
        """``mcp/ai/message`` for registerTools clients (the connection ignores it for others)."""
        connection = run.connection
        if connection.session.registered and content:
            self.hass.async_create_task(connection.async_send_ai_message(kind, content), eager_start=True)

    def _stream_reply(self, run: _Run, delta: Any) -> None:
        """A chat log delta: the assistant's text as ``chunk``, its reasoning as ``thought``."""
        if not isinstance(delta, dict):
            return
        if isinstance(role := delta.get("role"), str):
            run.reply_role = role
        if run.reply_role != "assistant":
            return  # tool calls and their results are not the reply
        if isinstance(thinking := delta.get("thinking_content"), str):
            self._send_ai(run, "thought", thinking)
        if isinstance(content := delta.get("content"), str) and content:
            run.reply_streamed = True
            self._send_ai(run, "chunk", content)

    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Tell the device what the pipeline does (events of a cancelled run are dropped)."""
        run = self._events_for
        if run is None or run.cancelled or run.cannot_serve:
            return
        data = event.data or {}
        turn = run.turn
        match event.type:
            case PipelineEventType.RUN_START:
                run.tts_token = (data.get("tts_output") or {}).get("token")
            case PipelineEventType.STT_VAD_START:
                self._quiet_since = None  # someone speaks: the next listening counts anew
                if turn is not None:
                    turn.heard_speech = True
                    if turn.cancel_silence is not None:
                        turn.cancel_silence()
                        turn.cancel_silence = None
            case PipelineEventType.STT_VAD_END:
                if turn is not None:
                    turn.end_audio()  # auto mode: HA decides where the utterance ends
            case PipelineEventType.STT_END:
                if turn is not None:
                    turn.end_audio()
                self._send_to(run, voice.stt(((data.get("stt_output") or {}).get("text")) or ""))
            case PipelineEventType.INTENT_START:
                self._send_to(run, voice.llm(voice.EMOTION_THINKING))
            case PipelineEventType.INTENT_PROGRESS:
                if data.get("tts_start_streaming") and run.tts_token and not run.tts_started:
                    self._start_tts(run, run.tts_token)
                self._stream_reply(run, data.get("chat_log_delta"))
            case PipelineEventType.INTENT_END:
                output = data.get("intent_output") or {}
                speech = _speech_text(output)
                if not run.reply_streamed:
                    self._send_ai(run, "chunk", speech)  # an agent that does not stream: one chunk
                self._send_ai(run, "final", speech)
                run.continue_conversation = bool(output.get("continue_conversation"))
                response_type = ((output.get("response") or {}).get("response_type")) or ""
                emotion = {"error": voice.EMOTION_CONFUSED, "action_done": voice.EMOTION_DONE}.get(
                    response_type, voice.EMOTION_ANSWER
                )
                self._send_to(run, voice.llm(emotion))
                if run.text_only:  # no text-to-speech: the reply is shown, not spoken
                    run.tts_text = speech or None
                    self._start_tts(run, None)
            case PipelineEventType.TTS_START:
                run.tts_text = data.get("tts_input") or None
            case PipelineEventType.TTS_END:
                token = (data.get("tts_output") or {}).get("token")
                if not run.tts_started and token:
                    self._start_tts(run, token)
            case PipelineEventType.ERROR:
                self._on_pipeline_error(run, data)
            case PipelineEventType.RUN_END:
                if not run.tts_started and not run.cannot_serve:
                    # No speech to play: a tts start/stop pair brings the device back to
                    # listening (auto) or idle (manual), as after any answer.
                    self._start_tts(run, None)

    def _on_pipeline_error(self, run: _Run, data: dict[str, Any]) -> None:
        if run.turn is not None:
            run.turn.end_audio()
        code = data.get("code")
        message = str(data.get("message") or code or "error")
        if code == "duplicate_wake_up_detected":
            # Another box in the room heard the same wake word and answers: end quietly.
            self._end_run(run)
            self.hass.async_create_task(run.connection.async_end_conversation("another device answers"))
        elif code in CANNOT_SERVE:
            pipeline = self._pipeline()
            # An engine not chosen, or chosen but gone (its provider missing, or refusing our format).
            missing = _missing_engines(pipeline) or (["tts"] if code == "tts-not-supported" else ["stt"])
            self._cannot_serve(run, pipeline.name, missing)
        elif code not in QUIET_ERRORS:
            self._send_to(run, voice.alert(message))

    def _start_tts(self, run: _Run, token: str | None) -> None:
        run.tts_started = True
        async_pipeline_served(self.hass)
        source = tts_pcm(self.hass, token) if token else None
        run.tts_task = self._config_entry().async_create_background_task(
            self.hass, self._async_play(run, source, respond=True), f"xiaozhi_local tts {self.device.mac}"
        )
        if run.media_check is not None:  # media waits for this reply
            run.tts_task.add_done_callback(run.media_check)

    async def _async_play(self, run: _Run, source: AsyncIterator[bytes] | None, *, respond: bool) -> None:
        """Play on the run's channel (``speaker.async_speak``); a reply then ends the run.

        Media asked for during the turn (an agent that starts music on the device it talks to)
        follows the reply in the same speech, without the ``tts stop`` that would make the
        device listen in between.
        """
        if respond:
            source = self._reply_then_media(run, source)
        try:
            await speaker.async_speak(self.hass, run.connection, source, lambda: run.tts_text)
        finally:
            if respond and not run.cancelled:
                self._replied(run)
                self._finished(run)

    async def _reply_then_media(self, run: _Run, reply: AsyncIterator[bytes] | None) -> AsyncGenerator[bytes]:
        """The reply's PCM, then the media asked for meanwhile (if any), as one stream."""
        if reply is not None:
            async for pcm in reply:
                yield pcm
        run.took_media = True
        if run.then_media is None or run.cancelled:
            return
        title, media = run.then_media
        run.then_media = None
        self._replied(run)
        run.media = title
        self.device.async_link_changed()  # the speaker plays
        async with contextlib.aclosing(media):
            await run.connection.async_send_json(voice.tts_sentence(title))
            async for pcm in media:
                yield pcm

    @callback
    def _replied(self, run: _Run) -> None:
        """The reply has been heard: Home Assistant's satellite state leaves responding (once)."""
        if not run.replied:
            run.replied = True
            self.tts_response_finished()

    # -- announcements -------------------------------------------------------------------------

    def _connection_or_raise(self) -> DeviceLink:
        if (connection := self.device.connection) is None:
            raise translated_error("device_offline", device=self.device.name)
        return connection

    async def async_internal_announce(self, *args: Any, **kwargs: Any) -> None:
        """Refuse before any speech is made when the device is away; the announcement replaces a turn."""
        self._connection_or_raise()
        self._supersede()
        await super().async_internal_announce(*args, **kwargs)

    async def async_internal_ask_question(self, *args: Any, **kwargs: Any) -> AssistSatelliteAnswer | None:
        """Ask on the open channel: the device listens after the question, the answer is matched.

        Home Assistant waits for the answer's speech-to-text without a limit; here the action
        fails instead when the answer cannot come (nobody spoke, the question was dismissed, the
        device went away). A device without a conversation channel cannot be made to listen
        (the firmware opens it only itself): refused before anything is said.
        """
        connection = self._connection_or_raise()
        if not connection.audio_open:
            raise translated_error("question_no_channel", device=self.device.name)
        self._supersede()
        unanswered: asyncio.Future[None] = self.hass.loop.create_future()
        self._unanswered = unanswered
        asking = self.hass.async_create_task(
            super().async_internal_ask_question(*args, **kwargs), f"xiaozhi_local question {self.device.mac}"
        )
        try:
            waiting: set[asyncio.Future[Any]] = {asking, unanswered}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not asking.done():
                asking.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asking
                raise translated_error("question_unanswered", device=self.device.name)
            return asking.result()
        except asyncio.CancelledError:
            asking.cancel()
            raise
        finally:
            if self._unanswered is unanswered:
                self._unanswered = None

    @callback
    def _no_answer(self) -> None:
        """The conversation a question waits in ended: its answer will not come."""
        if self._unanswered is not None and not self._unanswered.done():
            self._unanswered.set_result(None)

    async def async_internal_start_conversation(self, *args: Any, **kwargs: Any) -> None:
        """Refuse before any speech is made when the device is away; it replaces a running turn."""
        self._connection_or_raise()
        self._supersede()
        await super().async_internal_start_conversation(*args, **kwargs)

    @callback
    def _supersede(self) -> None:
        """The exchange that runs gives way to an announcement, silently.

        Home Assistant cancels its pipeline next; without this its end would send the empty
        ``tts start``/``stop`` pair that returns a device to listening, and the announcement
        would follow it (the device going speaking, listening, speaking for nothing).
        """
        if self._run is not None:
            self._run.cancel()

    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Speak it now, blocking until it has been played. The device must be connected.

        A device online without a conversation channel (idle over MQTT: only its own hello opens
        one) fetches it from a short-lived URL if its firmware plays ``notify`` (2.5), and shows
        the text with the firmware's alert sound otherwise.
        """
        connection = self._connection_or_raise()
        sources = speaker.announcement_sources(self.hass, announcement)
        if not connection.audio_open:
            await speaker.async_speak_idle(
                self._config_entry().runtime_data,
                connection,
                sources,
                announcement.message or "",
                alert=announcement.message or announcement.original_media_id,
            )
            return
        run = _Run(connection)
        self._begin(run)
        run.tts_text = announcement.message or None
        self._send_ai(run, "chunk", announcement.message)
        self._send_ai(run, "final", announcement.message)
        # Its own task: a barge-in cancels the playback, never the caller (the action).
        task = self._config_entry().async_create_background_task(
            self.hass,
            self._async_play(run, speaker.chained(sources), respond=False),
            f"xiaozhi_local announce {self.device.mac}",
        )
        run.tts_task = task
        try:
            await asyncio.wait({task})  # returns when it is played (or interrupted)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self._finished(run)

    # -- media (the device's media player) -----------------------------------------------------

    @property
    def media_title(self) -> str | None:
        """The title of the media playing now (through the channel, or by ``notify``); else None."""
        run = self._run
        if run is not None and run.media is not None and not run.cancelled:
            return run.media
        return self._idle_media[0] if self._idle_media is not None else None

    async def async_play_media(self, url: str, title: str) -> None:
        """Start playing ``url``; returns once it plays.

        Through the open conversation channel on any firmware (framed like speech: a new turn or
        an ``abort`` stops it); to an idle device by ``notify`` where its firmware plays it (2.5).
        Otherwise, and for media ffmpeg cannot read, a translated error says why.
        """
        connection = self._connection_or_raise()
        if not connection.audio_open and not self.device.plays_notify:
            raise translated_error("media_no_channel", device=self.device.name)
        self.async_stop_media()
        try:
            source = await speaker.async_open_media(self.hass, url)
        except MediaUnreadable as err:
            raise translated_error("media_unreadable", device=self.device.name, reason=str(err)) from None
        if (run := self._run) is not None and run.connection is connection and self._answering(run):
            # Asked for during a turn (most likely by its agent): it plays right after the reply.
            # Cancelling the turn here would cancel the very agent call that asked for it.
            self._play_after_reply(run, title, source)
            return
        if connection.audio_open:
            self._supersede()
            run = _Run(connection, media=title)
            self._begin(run)
            run.tts_text = title
            run.tts_task = self._config_entry().async_create_background_task(
                self.hass, self._async_play_media(run, source), f"xiaozhi_local media {self.device.mac}"
            )
            self.device.async_link_changed()
            return
        waiting = await speaker.async_notify(self._config_entry().runtime_data, connection, [lambda: source], title)
        if waiting is None:
            await source.aclose()
            raise translated_error("media_not_fetched", device=self.device.name)
        task = self._config_entry().async_create_background_task(
            self.hass, self._async_until_played(waiting), f"xiaozhi_local media {self.device.mac}"
        )
        self._idle_media = (title, task)
        self.device.async_link_changed()

    @staticmethod
    def _answering(run: _Run) -> bool:
        """Whether ``run`` is a turn whose reply is still to come or under way (not media, not ended)."""
        return (
            not run.cancelled
            and run.media is None
            and run.task is not None
            and not run.took_media
            and not run.cannot_serve
        )

    @callback
    def _play_after_reply(self, run: _Run, title: str, source: AsyncGenerator[bytes]) -> None:
        """Queue ``source`` after ``run``'s reply (replacing media queued before).

        Closed (its ffmpeg ended) if the run ends without playing it: cancelled, or failed.
        """
        if run.then_media is not None:
            self._close_later(run.then_media[1])
        entry = (title, source)
        run.then_media = entry

        @callback
        def check(_task: Any = None) -> None:
            if run.then_media is not entry:
                return  # played, or replaced
            if all(task.done() for task in (run.task, run.tts_task) if task is not None):
                run.then_media = None
                self._close_later(source)

        run.media_check = check
        for task in (run.task, run.tts_task):
            if task is not None:
                task.add_done_callback(check)

    def _close_later(self, source: AsyncGenerator[bytes]) -> None:
        self._config_entry().async_create_background_task(
            self.hass, source.aclose(), f"xiaozhi_local media close {self.device.mac}"
        )

    async def _async_play_media(self, run: _Run, source: AsyncIterator[bytes]) -> None:
        try:
            await self._async_play(run, source, respond=False)
        finally:
            if self._run is run:
                self._idle()

    async def _async_until_played(self, waiting: Announcement) -> None:
        try:
            await speaker.async_until_played(waiting)
        finally:
            if self._idle_media is not None and self._idle_media[1] is asyncio.current_task():
                self._idle_media = None
                self.device.async_link_changed()

    async def async_announce_media(self, url: str) -> None:
        """A media player's announcement: the satellite's own (``assist_satellite.announce``)."""
        await self.async_internal_announce(media_id=url, preannounce=False)

    @callback
    def async_stop_media(self) -> None:
        """Stop the media that plays (the device goes back to what it did: listening, or idle)."""
        run = self._run
        if run is not None and run.media is not None:
            run.cancel()
            self._idle()
        if self._idle_media is not None:
            _title, task = self._idle_media
            self._idle_media = None
            task.cancel()
            self.device.async_link_changed()

    async def async_start_conversation(self, start_announcement: AssistSatelliteAnnouncement) -> None:
        """Speak, then the device listens: in auto mode ``tts stop`` makes it open its microphone."""
        await self.async_announce(start_announcement)


def _missing_engines(pipeline: Pipeline) -> list[str]:
    """What the assistant lacks of speech-to-text (``stt``) and text-to-speech (``tts``)."""
    return [kind for kind, engine in (("stt", pipeline.stt_engine), ("tts", pipeline.tts_engine)) if not engine]


def _speech_text(intent_output: Any) -> str:
    """The plain speech of a conversation result (``intent_output``), or ""."""
    try:
        speech = intent_output["response"]["speech"]["plain"]["speech"]
    except KeyError, TypeError:
        return ""
    return speech if isinstance(speech, str) else ""
