"""The device as an Assist voice satellite: its microphone and speaker in Home Assistant's pipeline.

Uplink: ``listen start`` starts a run at speech-to-text; each Opus packet is decoded to 16 kHz
PCM and streamed in; HA's VAD (auto mode) or ``listen stop`` (manual) ends the turn.
Downlink: ``stt`` → ``llm`` (emotion) → ``tts start`` → ``tts sentence_start`` → 60 ms Opus
packets paced at real time with a small lead → ``tts stop`` (always) → ``tts_response_finished``.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
import contextlib
from dataclasses import dataclass
import logging
from typing import Any, Final

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import PipelineEvent, PipelineEventType
from homeassistant.components.assist_pipeline.models import PipelineStage
from homeassistant.components.assist_pipeline.pipeline import PipelineInput, PipelineRun, async_get_pipeline
from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteConfiguration,
    AssistSatelliteEntity,
    AssistSatelliteEntityFeature,
    AssistSatelliteWakeWord,
)
from homeassistant.components.ffmpeg import get_ffmpeg_manager
from homeassistant.core import CALLBACK_TYPE, Context, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import chat_session, entity_registry as er
from homeassistant.helpers.entity import EntityDescription
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.event import async_call_later
from homeassistant.helpers.network import NoURLAvailableError, get_url

from .connection import DeviceConnection
from .const import CONF_SILENCE_TIMEOUT, DEFAULT_SILENCE_TIMEOUT, DOMAIN
from .device import XiaozhiDevice, translated_error
from .entity import XiaozhiEntity, async_setup_device_entities
from .hub import XiaozhiConfigEntry
from .protocol import voice
from .protocol.audio import AudioError, OpusDecoder, OpusEncoder, Pacer, Resampler, WavStream, split_sentences
from .protocol.messages import DOWNLINK_SAMPLE_RATE, ControlMessage
from .protocol.voice import is_wake_phrase, speech_seconds

_LOGGER = logging.getLogger(__name__)

PARALLEL_UPDATES = 0

TTS_LEAD: Final = 0.3
"""Seconds of audio sent ahead of real time (the device queues 2.4 s and drops the rest)."""
FIRST_FRAME_GAP: Final = 0.08
"""Pause between ``tts start`` and the first packet: the device resets its queue on entering speaking."""
WAKE_WORD_FOLLOW_UP: Final = 0.5
"""Seconds within which a ``listen start`` makes an unknown ``listen detect`` text a wake word."""
MAX_QUEUED_CHUNKS: Final = 100
"""Decoded uplink audio waiting for the pipeline (60 ms each: 6 s)."""

ON_DEVICE_WAKE_WORD: Final = AssistSatelliteWakeWord(
    id="on_device", wake_word="你好小智 / Hi ESP", trained_languages=["zh", "en"]
)

SATELLITE = EntityDescription(key="assist_satellite", name=None)

QUIET_ERRORS: Final = frozenset({"stt-no-text-recognized"})
"""Pipeline errors that mean "nobody said anything": no alert, the device just listens again."""


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

    connection: DeviceConnection
    mode: str
    queue: asyncio.Queue[bytes | None]
    decoder: OpusDecoder
    ended: bool = False
    heard_speech: bool = False
    cancel_silence: CALLBACK_TYPE | None = None

    def end_audio(self) -> None:
        """No more audio for the pipeline (VAD end, ``listen stop``, a new turn)."""
        if self.ended:
            return
        self.ended = True
        if self.cancel_silence is not None:
            self.cancel_silence()
            self.cancel_silence = None
        while True:
            try:
                self.queue.put_nowait(None)
            except asyncio.QueueFull:
                self.queue.get_nowait()  # make room for the end marker
            else:
                return


class XiaozhiAssistSatellite(XiaozhiEntity, AssistSatelliteEntity):
    """A xiaozhi device in Assist: on-device wake word, Opus both ways."""

    _attr_supported_features = AssistSatelliteEntityFeature.ANNOUNCE | AssistSatelliteEntityFeature.START_CONVERSATION
    _attr_tts_options = {  # noqa: RUF012
        tts.ATTR_PREFERRED_FORMAT: "wav",
        tts.ATTR_PREFERRED_SAMPLE_RATE: DOWNLINK_SAMPLE_RATE,
        tts.ATTR_PREFERRED_SAMPLE_CHANNELS: 1,
        tts.ATTR_PREFERRED_SAMPLE_BYTES: 2,
    }

    def __init__(self, device: XiaozhiDevice, description: EntityDescription) -> None:
        super().__init__(device, description)
        self._turn: _Turn | None = None
        self._wake_phrase: str | None = None
        self._tts_token: str | None = None
        self._tts_started = False
        self._tts_text: str | None = None
        self._tts_task: asyncio.Task[None] | None = None
        self._continue = False
        self._run_connection: DeviceConnection | None = None
        self._deferred_detect: tuple[str, CALLBACK_TYPE, DeviceConnection] | None = None
        self._reply_role: str | None = None  # role of the chat log message being streamed
        self._reply_streamed = False  # chunks of this run's reply went out as mcp/ai/message

    async def async_added_to_hass(self) -> None:
        """Take the device's voice."""
        await super().async_added_to_hass()
        self.device.voice = self

        @callback
        def release() -> None:
            if self.device.voice is self:
                self.device.voice = None
            if self._turn is not None:
                self._turn.end_audio()
            if self._tts_task is not None:
                self._tts_task.cancel()

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

    # -- what the device sends (VoiceHandler) ---------------------------------------------------

    def on_control(self, connection: DeviceConnection, message: ControlMessage) -> None:
        """``listen start|stop|detect`` and ``abort``."""
        data = message.data
        if message.type == "abort":
            self._abort(connection, data.get("reason"))
            return
        if message.type != "listen":
            _LOGGER.debug("Device %s: ignored %s message", self.device.mac, message.type)
            return
        state = data.get("state")
        if state == "start":
            mode = data.get("mode")
            self._start_turn(connection, mode if mode in ("auto", "manual", "realtime") else "auto")
        elif state == "stop":
            if self._turn is None or self._turn.connection is not connection:
                connection.log.report("stop_without_start", "listen stop without a listen start")
                return
            self._turn.end_audio()
        elif state == "detect":
            text = data.get("text")
            if not isinstance(text, str) or not text.strip():
                connection.log.report("bad_detect", "listen detect without text")
            elif is_wake_phrase(text):
                self._wake_phrase = text.strip()
            else:
                self._defer_detect(connection, text.strip())
        else:
            connection.log.report("bad_listen", f"listen with unknown state {state!r}")

    def on_audio(self, connection: DeviceConnection, packet: bytes) -> None:
        """Uplink Opus → PCM for the running turn."""
        turn = self._turn
        if turn is None or turn.connection is not connection or turn.ended:
            connection.log.report("audio_outside_turn", "dropped audio outside a listening turn")
            return
        try:
            pcm = turn.decoder.decode(packet)
        except AudioError as err:
            connection.log.report("bad_opus", str(err))
            return
        if not pcm:
            return
        try:
            turn.queue.put_nowait(pcm)
        except asyncio.QueueFull:
            connection.log.report("audio_queue_full", "the pipeline is not keeping up; dropped audio")

    # -- turns ---------------------------------------------------------------------------------

    def _config_entry(self) -> XiaozhiConfigEntry:
        assert self.platform.config_entry is not None
        return self.platform.config_entry

    def _defer_detect(self, connection: DeviceConnection, text: str) -> None:
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

    def on_disconnect(self, connection: DeviceConnection) -> None:
        """The connection ended: typed text it sent is not answered on another one."""
        if self._deferred_detect is not None and self._deferred_detect[2] is connection:
            self._cancel_deferred_detect()

    def _start_turn(self, connection: DeviceConnection, mode: str) -> None:
        if (custom_wake_word := self._cancel_deferred_detect()) is not None:
            self._wake_phrase = custom_wake_word
        if self._turn is not None:
            self._turn.end_audio()  # a new listen start cancels the running turn
        self._cancel_tts()
        turn = _Turn(connection, mode, asyncio.Queue(MAX_QUEUED_CHUNKS), OpusDecoder())
        self._turn = turn
        wake_phrase, self._wake_phrase = self._wake_phrase, None
        if mode != "manual":
            timeout = self._config_entry().options.get(CONF_SILENCE_TIMEOUT, DEFAULT_SILENCE_TIMEOUT)

            @callback
            def silence(_now: Any) -> None:
                self._on_silence(turn)

            turn.cancel_silence = async_call_later(self.hass, timeout, silence)
        self._config_entry().async_create_background_task(
            self.hass, self._async_run_turn(turn, wake_phrase), f"xiaozhi_local turn {self.device.mac}"
        )

    async def _async_run_turn(self, turn: _Turn, wake_phrase: str | None) -> None:
        self._run_connection = turn.connection

        async def pcm() -> AsyncIterator[bytes]:
            while (chunk := await turn.queue.get()) is not None:
                yield chunk

        try:
            await self.async_accept_pipeline_from_satellite(
                pcm(), start_stage=PipelineStage.STT, wake_word_phrase=wake_phrase
            )
        except Exception:
            _LOGGER.exception("Device %s: the voice pipeline failed", self.device.mac)
        finally:
            turn.end_audio()

    @callback
    def _on_silence(self, turn: _Turn) -> None:
        """Nobody spoke: end the conversation the only way stock firmware understands."""
        turn.cancel_silence = None
        if self._turn is turn and not turn.heard_speech:
            _LOGGER.debug("Device %s: no speech; ending the conversation", self.device.mac)
            turn.end_audio()
            self.hass.async_create_task(turn.connection.async_close("no speech"))

    def _start_text_run(self, connection: DeviceConnection, text: str) -> None:
        """``listen detect`` with text that is not a wake phrase: a typed utterance."""
        if self._turn is not None:
            self._turn.end_audio()
        self._cancel_tts()
        self._config_entry().async_create_background_task(
            self.hass, self._async_run_text(connection, text), f"xiaozhi_local text {self.device.mac}"
        )

    async def _async_run_text(self, connection: DeviceConnection, text: str) -> None:
        """The pipeline from the intent stage, as ``async_accept_pipeline_from_satellite`` runs it."""
        self._run_connection = connection
        await self._cancel_running_pipeline()
        context = Context()
        self.async_set_context(context)
        with chat_session.async_get_chat_session(self.hass, self._conversation_id) as session:
            self._conversation_id = session.conversation_id
            pipeline_input = PipelineInput(
                run=PipelineRun(
                    self.hass,
                    context=context,
                    pipeline=async_get_pipeline(self.hass, self._resolve_pipeline()),
                    start_stage=PipelineStage.INTENT,
                    end_stage=PipelineStage.TTS,
                    event_callback=self._internal_on_pipeline_event,
                    tts_audio_output=self.tts_options,
                ),
                session=session,
                intent_input=text,
                device_id=self.registry_entry.device_id if self.registry_entry else None,
                satellite_id=self.entity_id,
            )
            try:
                await pipeline_input.validate()
                await pipeline_input.execute()
            except Exception:
                _LOGGER.exception("Device %s: the text pipeline failed", self.device.mac)

    def _abort(self, connection: DeviceConnection, reason: Any) -> None:
        """Barge-in: stop speaking at once (``tts stop`` follows); a wake word starts a new turn next."""
        _LOGGER.debug("Device %s: abort (%s)", self.device.mac, reason)
        self._cancel_tts()
        if self._turn is not None and self._turn.connection is connection:
            self._turn.end_audio()

    def _cancel_tts(self) -> None:
        if self._tts_task is not None and not self._tts_task.done():
            self._tts_task.cancel()

    # -- pipeline events → device messages -----------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        """In order: each send starts at once (eager), and the socket writes whole frames in order."""
        connection = self._run_connection
        if connection is not None:
            self.hass.async_create_task(connection.async_send_json(message), eager_start=True)

    def _send_ai(self, kind: str, content: str) -> None:
        """``mcp/ai/message`` for registerTools clients (the connection ignores it for others)."""
        connection = self._run_connection
        if connection is not None and connection.session.registered and content:
            self.hass.async_create_task(connection.async_send_ai_message(kind, content), eager_start=True)

    def _stream_reply(self, delta: Any) -> None:
        """A chat log delta: the assistant's text as ``chunk``, its reasoning as ``thought``."""
        if not isinstance(delta, dict):
            return
        if isinstance(role := delta.get("role"), str):
            self._reply_role = role
        if self._reply_role != "assistant":
            return  # tool calls and their results are not the reply
        if isinstance(thinking := delta.get("thinking_content"), str):
            self._send_ai("thought", thinking)
        if isinstance(content := delta.get("content"), str) and content:
            self._reply_streamed = True
            self._send_ai("chunk", content)

    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Tell the device what the pipeline does."""
        data = event.data or {}
        turn = self._turn
        match event.type:
            case PipelineEventType.RUN_START:
                self._tts_token = (data.get("tts_output") or {}).get("token")
                self._tts_started = False
                self._tts_text = None
                self._continue = False
                self._reply_role = None
                self._reply_streamed = False
            case PipelineEventType.STT_VAD_START:
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
                text = ((data.get("stt_output") or {}).get("text")) or ""
                self._send(voice.stt(text))
            case PipelineEventType.INTENT_START:
                self._send(voice.llm(voice.EMOTION_THINKING))
            case PipelineEventType.INTENT_PROGRESS:
                if data.get("tts_start_streaming") and self._tts_token and not self._tts_started:
                    self._start_tts(self._tts_token)
                self._stream_reply(data.get("chat_log_delta"))
            case PipelineEventType.INTENT_END:
                output = data.get("intent_output") or {}
                speech = _speech_text(output)
                if not self._reply_streamed:
                    self._send_ai("chunk", speech)  # an agent that does not stream: one chunk
                self._send_ai("final", speech)
                self._continue = bool(output.get("continue_conversation"))
                response_type = ((output.get("response") or {}).get("response_type")) or ""
                emotion = {"error": voice.EMOTION_CONFUSED, "action_done": voice.EMOTION_DONE}.get(
                    response_type, voice.EMOTION_ANSWER
                )
                self._send(voice.llm(emotion))
            case PipelineEventType.TTS_START:
                self._tts_text = data.get("tts_input") or None
            case PipelineEventType.TTS_END:
                token = (data.get("tts_output") or {}).get("token")
                if not self._tts_started and token:
                    self._start_tts(token)
            case PipelineEventType.ERROR:
                if turn is not None:
                    turn.end_audio()
                code = data.get("code")
                if code == "duplicate_wake_up_detected":
                    # Another box in the room heard the same wake word and answers: end quietly.
                    if self._run_connection is not None:
                        self.hass.async_create_task(self._run_connection.async_close("another device answers"))
                elif code not in QUIET_ERRORS:
                    message = str(data.get("message") or code or "error")
                    self._send(voice.alert(message))
            case PipelineEventType.RUN_END:
                if not self._tts_started:
                    # No speech to play: a tts start/stop pair brings the device back to
                    # listening (auto) or idle (manual), as after any answer.
                    self._start_tts(None)

    def _start_tts(self, token: str | None) -> None:
        self._tts_started = True
        connection = self._run_connection
        if connection is None:
            return
        source = self._tts_pcm(token) if token else None
        self._tts_task = self._config_entry().async_create_background_task(
            self.hass, self._async_play(connection, source, respond=True), f"xiaozhi_local tts {self.device.mac}"
        )

    async def _tts_pcm(self, token: str) -> AsyncIterator[bytes]:
        stream = tts.async_get_stream(self.hass, token)
        if stream is None:
            raise HomeAssistantError(f"TTS stream {token} not found")
        async for pcm in _wav_pcm(stream.async_stream_result()):
            yield pcm

    async def _async_play(
        self, connection: DeviceConnection, source: AsyncIterator[bytes] | None, *, respond: bool
    ) -> None:
        """``tts start``, paced Opus, sentences as they are heard, then always ``tts stop``."""
        loop = asyncio.get_running_loop()
        await connection.async_send_json(voice.tts_start())
        shown = 0
        try:
            if source is None:
                return

            async def send(packet: bytes, offset_ms: int) -> bool:
                nonlocal shown
                shown = await self._show_sentences(connection, shown, offset_ms / 1000)
                return await connection.async_send_audio(packet, offset_ms)

            pacer = Pacer(
                OpusEncoder(DOWNLINK_SAMPLE_RATE), send, lead=TTS_LEAD, not_before=loop.time() + FIRST_FRAME_GAP
            )
            async for pcm in source:
                await pacer.feed(pcm)
            await self._show_sentences(connection, shown, float("inf"))
            await pacer.finish()  # returns once the device has played it all
        except (ConnectionError, AudioError, HomeAssistantError) as err:
            _LOGGER.warning("Device %s: speech stopped: %s", self.device.mac, err)
        finally:
            await connection.async_send_json(voice.tts_stop())
            if respond:
                self.tts_response_finished()
                self._after_answer(connection)

    async def _show_sentences(self, connection: DeviceConnection, shown: int, heard: float) -> int:
        """``tts sentence_start`` for each sentence whose (estimated) time has come."""
        sentences = split_sentences(self._tts_text or "")
        offset = sum(speech_seconds(s) for s in sentences[:shown])
        while shown < len(sentences) and offset <= heard:
            await connection.async_send_json(voice.tts_sentence(sentences[shown]))
            offset += speech_seconds(sentences[shown])
            shown += 1
        return shown

    @callback
    def _after_answer(self, connection: DeviceConnection) -> None:
        """Manual mode without a follow-up: the conversation is over; close it now."""
        turn = self._turn
        if turn is not None and turn.connection is connection and turn.mode == "manual" and not self._continue:
            self.hass.async_create_task(connection.async_close("conversation ended"))

    # -- announcements -------------------------------------------------------------------------

    def _connection_or_raise(self) -> DeviceConnection:
        if (connection := self.device.connection) is None:
            raise translated_error("device_offline", device=self.device.name)
        return connection

    async def async_internal_announce(self, *args: Any, **kwargs: Any) -> None:
        """Refuse before any speech is made when the device is away."""
        self._connection_or_raise()
        await super().async_internal_announce(*args, **kwargs)

    async def async_internal_start_conversation(self, *args: Any, **kwargs: Any) -> None:
        """Refuse before any speech is made when the device is away."""
        self._connection_or_raise()
        await super().async_internal_start_conversation(*args, **kwargs)

    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Speak it now, blocking until it has been played. The device must be connected."""
        connection = self._connection_or_raise()
        self._cancel_tts()
        self._run_connection = connection
        sources: list[Callable[[], AsyncIterator[bytes]]] = []
        if announcement.preannounce_media_id:
            url = self._full_url(announcement.preannounce_media_id)
            sources.append(lambda: _ffmpeg_pcm(self.hass, url))
        if announcement.media_id_source == "tts" and announcement.tts_token:
            token = announcement.tts_token
            sources.append(lambda: self._tts_pcm(token))
        else:
            url = self._full_url(announcement.media_id)
            sources.append(lambda: _ffmpeg_pcm(self.hass, url))
        self._tts_text = announcement.message or None
        self._send_ai("chunk", announcement.message)
        self._send_ai("final", announcement.message)

        async def chained() -> AsyncIterator[bytes]:
            for make in sources:
                async for pcm in make():
                    yield pcm

        # Its own task: a barge-in cancels the playback, never the caller (the action).
        task = self._config_entry().async_create_background_task(
            self.hass,
            self._async_play(connection, chained(), respond=False),
            f"xiaozhi_local announce {self.device.mac}",
        )
        self._tts_task = task
        try:
            await asyncio.wait({task})  # returns when it is played (or interrupted)
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def async_start_conversation(self, start_announcement: AssistSatelliteAnnouncement) -> None:
        """Speak, then the device listens: in auto mode ``tts stop`` makes it open its microphone."""
        await self.async_announce(start_announcement)

    def _full_url(self, media: str) -> str:
        if not media.startswith("/"):
            return media
        try:
            return get_url(self.hass, prefer_external=False) + media
        except NoURLAvailableError:
            return f"http://127.0.0.1:{self.hass.http.server_port}{media}"


def _speech_text(intent_output: Any) -> str:
    """The plain speech of a conversation result (``intent_output``), or ""."""
    try:
        speech = intent_output["response"]["speech"]["plain"]["speech"]
    except KeyError, TypeError:
        return ""
    return speech if isinstance(speech, str) else ""


async def _wav_pcm(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A WAV byte stream → s16 mono PCM at the downlink rate (resampled only when needed)."""
    wav = WavStream()
    resampler: Resampler | None = None
    async for chunk in chunks:
        pcm = wav.feed(chunk)
        if not pcm:
            continue
        fmt = wav.format
        assert fmt is not None
        if fmt.sample_rate != DOWNLINK_SAMPLE_RATE or fmt.channels != 1:
            if resampler is None:
                resampler = Resampler(fmt.sample_rate, fmt.channels, DOWNLINK_SAMPLE_RATE)
            pcm = resampler.convert(pcm)
        yield pcm


async def _ffmpeg_pcm(hass: HomeAssistant, url: str) -> AsyncIterator[bytes]:
    """Any media URL → s16 mono PCM at the downlink rate, by HA's ffmpeg (as Wyoming does)."""
    process = await asyncio.create_subprocess_exec(
        get_ffmpeg_manager(hass).binary,
        "-nostdin",
        "-loglevel",
        "error",
        "-i",
        url,
        "-f",
        "s16le",
        "-ac",
        "1",
        "-ar",
        str(DOWNLINK_SAMPLE_RATE),
        "pipe:",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    try:
        while chunk := await process.stdout.read(8192):
            yield chunk
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()
