"""The satellite's core: its state, the run that owns the device, and pipeline events to the device.

Downlink: ``stt`` → ``llm`` (emotion) → ``tts start`` → ``tts sentence_start`` → 60 ms Opus
packets paced at real time with a small lead → ``tts stop`` (always) → ``tts_response_finished``.
The listening turn (``listening.py``), typed text (``text.py``) and what Home Assistant asks the
device to say or play (``playback.py``) build on it.
"""

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
import contextlib
import logging
from typing import Any

from homeassistant.components.assist_pipeline import (
    Pipeline,
    PipelineEvent,
    PipelineEventType,
    async_get_pipeline,
)
from homeassistant.components.assist_satellite import (
    AssistSatelliteEntity,
)
from homeassistant.core import CALLBACK_TYPE, callback
from homeassistant.helpers.entity import EntityDescription

from ..const import (
    CONF_IDLE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
)
from ..device import XiaozhiDevice
from ..entity import XiaozhiEntity
from ..errors import translated_error
from ..hub import XiaozhiConfigEntry
from ..link import DeviceLink
from ..protocol import voice
from ..repairs import async_pipeline_incomplete, async_pipeline_served
from ..sound import speaker
from ..sound.media import tts_pcm
from .runs import (
    CANNOT_SERVE,
    EARLY_AUDIO_PACKETS,
    QUIET_ERRORS,
    Run,
    missing_engines,
    speech_text,
)

_LOGGER = logging.getLogger(__package__)


# One concern of the satellite entity per module (each under the size a reader takes in at once);
# the entity that platform setup creates, XiaozhiAssistSatellite, is in assist_satellite.py.
class SatelliteBase(XiaozhiEntity, AssistSatelliteEntity):  # pylint: disable=home-assistant-enforce-class-module
    """A device's voice in Assist: one exchange at a time, bound to the connection it started on."""

    def __init__(self, device: XiaozhiDevice, description: EntityDescription) -> None:
        super().__init__(device, description)
        self._run: Run | None = None  # the current exchange
        self._events_for: Run | None = None  # the run whose pipeline is executing (its events are its own)
        self._wake_phrase: str | None = None
        self._deferred_detect: tuple[str, CALLBACK_TYPE, DeviceLink] | None = None
        self._early_audio: deque[tuple[DeviceLink, float, bytes]] = deque(maxlen=EARLY_AUDIO_PACKETS)
        self._idle_media: tuple[str, asyncio.Task[None]] | None = None  # media played by notify (2.5)
        self._unanswered: set[asyncio.Future[None]] = set()  # each set when its question's answer cannot come
        self._told_away = False  # the log said once that announcements skip this per-conversation device

    def _config_entry(self) -> XiaozhiConfigEntry:
        assert self.platform.config_entry is not None
        return self.platform.config_entry

    @callback
    def _begin(self, run: Run) -> Run | None:
        """``run`` is the current exchange from now on; returns the one it replaces (cancelled)."""
        previous, self._run = self._run, run
        if previous is not None:
            previous.cancel()
            if previous.media is not None:
                self.device.async_activity_changed()  # the media stopped (a wake word, a question)
        return previous

    @property
    def busy(self) -> bool:
        """Whether an exchange is under way (a turn, a reply, an announcement)."""
        return self._run is not None

    @callback
    def _idle(self) -> None:
        """No exchange runs any more: whoever waits for that (a firmware install) is told."""
        self._run = None
        self.device.async_activity_changed()

    @callback
    def _end_run(self, run: Run) -> None:
        """Cancel ``run`` (disconnect, abort, silence): the satellite is idle again."""
        self._no_answer()  # a question waiting for its answer gets none
        run.cancel()
        if self._run is run:
            self._idle()
            self.tts_response_finished()  # back to idle (HA's public way to say the response is over)

    @callback
    def _finished(self, run: Run) -> None:
        """``run`` is over (answered, or there was nothing to answer).

        A manual-mode conversation is over too: the device went idle but keeps its socket, and
        its tools stay callable. The connection is closed only after the hub's idle timeout.
        """
        if self._run is run:
            self._idle()
        if run.turn is not None and run.turn.mode == "manual" and not run.continue_conversation:
            options = self._config_entry().options
            run.link.arm_idle(float(options.get(CONF_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)))

    async def _async_after(self, previous: Run | None) -> None:
        """Until the replaced run's pipeline has really stopped (its late events are not ours)."""
        if previous is not None and previous.task is not None:
            await asyncio.wait({previous.task})

    def _pipeline(self) -> Pipeline:
        """The assistant the device uses now (its select, else the preferred one)."""
        return async_get_pipeline(self.hass, self._resolve_pipeline())

    def on_disconnect(self, link: DeviceLink) -> None:
        """The connection ended: its run ends at once, and nothing of it reaches another connection."""
        if self._deferred_detect is not None and self._deferred_detect[2] is link:
            self._cancel_deferred_detect()
        run = self._run
        if run is not None and run.link is link:
            _LOGGER.debug("Device %s disconnected during a conversation; ending it", self.device.mac)
            self._end_run(run)
        self._no_answer()
        if self._idle_media is not None and link.gone and self.device.link in (link, None):
            # Media by notify to a device that is gone: its stream (ffmpeg, the upstream) ends now,
            # not when the socket of a device that stopped reading finally times out.
            _title, task = self._idle_media
            self._idle_media = None
            task.cancel()
            self.device.async_activity_changed()

    def _cancel_deferred_detect(self) -> str | None:
        if self._deferred_detect is None:
            return None
        text, cancel, _connection = self._deferred_detect
        self._deferred_detect = None
        cancel()
        return text

    def _abort(self, link: DeviceLink, reason: Any) -> None:
        """The device interrupts: whatever runs on this connection stops, answered or not.

        While listening, the partial audio is dropped (not answered). While speaking, the speech
        stops (``tts stop`` follows). A ``listen start`` after it starts the next turn.
        """
        _LOGGER.debug("Device %s: abort (%s)", self.device.mac, reason)
        run = self._run
        if run is not None and run.link is link:
            self._end_run(run)

    @callback
    def _cannot_serve(self, run: Run, assistant: str, missing: list[str]) -> None:
        """The assistant lacks speech-to-text or text-to-speech: one alert, then the conversation ends.

        Not re-armed: no ``tts start``/``stop`` (that would make an auto-mode device listen again,
        and loop). One warning per assistant and lack, and a repair that points to its settings.
        """
        run.cannot_serve = True
        async_pipeline_incomplete(self.hass, assistant, missing)
        what = " and ".join({"stt": "speech-to-text", "tts": "text-to-speech"}.get(m, m) for m in missing)
        self._send_to(run, voice.alert(f"The assistant {assistant} has no {what}. Set it up in Home Assistant."))
        self._end_run(run)
        self.device.async_create_task(
            run.link.async_end_conversation(f"assistant {assistant} has no {what}"),
            f"xiaozhi_local end {self.device.mac}",
        )

    def _send_to(self, run: Run, message: dict[str, Any]) -> None:
        """In order: each send starts at once (eager), and the socket writes whole frames in order."""
        self.device.async_create_task(run.link.async_send_json(message), f"xiaozhi_local send {self.device.mac}")

    def _send_ai(self, run: Run, kind: str, content: str) -> None:
        """``mcp/ai/message`` for registerTools clients (the connection ignores it for others)."""
        link = run.link
        if link.takes_ai_messages and content:
            self.device.async_create_task(
                link.async_send_ai_message(kind, content), f"xiaozhi_local send {self.device.mac}"
            )

    def _stream_reply(self, run: Run, delta: Any) -> None:
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
                if (conversation := self.device.conversation_of(run.link)) is not None:
                    conversation.heard()  # someone speaks: the next listening counts anew
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
                speech = speech_text(output)
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

    def _on_pipeline_error(self, run: Run, data: dict[str, Any]) -> None:
        if run.turn is not None:
            run.turn.end_audio()
        code = data.get("code")
        message = str(data.get("message") or code or "error")
        if code == "duplicate_wake_up_detected":
            # Another box in the room heard the same wake word and answers: end quietly.
            self._end_run(run)
            self.device.async_create_task(
                run.link.async_end_conversation("another device answers"), f"xiaozhi_local end {self.device.mac}"
            )
        elif code in CANNOT_SERVE:
            pipeline = self._pipeline()
            # An engine not chosen, or chosen but gone (its provider missing, or refusing our format).
            missing = missing_engines(pipeline) or (["tts"] if code == "tts-not-supported" else ["stt"])
            self._cannot_serve(run, pipeline.name, missing)
        elif code not in QUIET_ERRORS:
            self._send_to(run, voice.alert(message))

    def _start_tts(self, run: Run, token: str | None) -> None:
        run.tts_started = True
        async_pipeline_served(self.hass)
        source = tts_pcm(self.hass, token) if token else None
        run.tts_task = self._config_entry().async_create_background_task(
            self.hass, self._async_play(run, source, respond=True), f"xiaozhi_local tts {self.device.mac}"
        )
        if run.media_check is not None:  # media waits for this reply
            run.tts_task.add_done_callback(run.media_check)

    async def _async_play(self, run: Run, source: AsyncIterator[bytes] | None, *, respond: bool) -> None:
        """Play on the run's channel (``speaker.async_speak``); a reply then ends the run.

        Media asked for during the turn (an agent that starts music on the device it talks to)
        follows the reply in the same speech, without the ``tts stop`` that would make the
        device listen in between.
        """
        if respond:
            source = self._reply_then_media(run, source)
        try:
            await speaker.async_speak(self.hass, run.link, source, lambda: run.tts_text)
        finally:
            if respond and not run.cancelled:
                self._replied(run)
                self._finished(run)

    async def _reply_then_media(self, run: Run, reply: AsyncIterator[bytes] | None) -> AsyncGenerator[bytes]:
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
        self.device.async_activity_changed()  # the speaker plays
        async with contextlib.aclosing(media):
            await run.link.async_send_json(voice.tts_sentence(title))
            async for pcm in media:
                yield pcm

    @callback
    def _replied(self, run: Run) -> None:
        """The reply has been heard: Home Assistant's satellite state leaves responding (once)."""
        if not run.replied:
            run.replied = True
            self.tts_response_finished()

    def _connection_or_raise(self) -> DeviceLink:
        if (link := self.device.link) is None:
            raise translated_error("device_offline", device=self.device.name)
        return link

    @callback
    def _no_answer(self) -> None:
        """The conversation a question waits in ended: its answer will not come."""
        for unanswered in self._unanswered:
            if not unanswered.done():
                unanswered.set_result(None)

    @callback
    def _supersede(self) -> None:
        """The exchange that runs gives way to an announcement, silently.

        Home Assistant cancels its pipeline next; without this its end would send the empty
        ``tts start``/``stop`` pair that returns a device to listening, and the announcement
        would follow it (the device going speaking, listening, speaking for nothing).
        """
        if self._run is not None:
            self._run.cancel()
