"""The satellite's runner: one exchange at a time, and what the pipeline's events make the device do.

Downlink: ``stt`` → ``llm`` (emotion) → ``tts start`` → ``tts sentence_start`` → 60 ms Opus
packets paced at real time with a small lead → ``tts stop`` (always) → ``tts_response_finished``.
The listening turn (``listening.py``), typed text (``text.py``) and what Home Assistant asks the
device to say or play (``playback.py``) start their runs here.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
import contextlib
import logging
from typing import Any, Final

from homeassistant.components.assist_pipeline import (
    Pipeline,
    PipelineEvent,
    PipelineEventType,
)
from homeassistant.core import callback

from ..const import (
    CONF_IDLE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
)
from ..device import XiaozhiDevice
from ..errors import translated_error
from ..hub import XiaozhiConfigEntry
from ..link import DeviceLink
from ..protocol import voice
from ..repairs import async_pipeline_incomplete, async_pipeline_served
from ..sound import speaker
from ..sound.media import tts_pcm, tts_seconds
from ..tasks import watched
from .quiet import QuietRoom
from .reply_speaker import PlayerFailed, ReplySpeaker
from .runs import (
    CANNOT_SERVE,
    QUIET_ERRORS,
    Run,
    missing_engines,
    speech_text,
)

_LOGGER = logging.getLogger(__package__)

STAGES_OF: Final = {
    PipelineEventType.STT_VAD_END: ("speech_end",),
    # The release or HA's VAD marked the end of speech before; else the transcript is the end.
    PipelineEventType.STT_END: ("speech_end", "transcript"),
    PipelineEventType.INTENT_END: ("answer",),
}
"""The stages of a turn (``timings.py``) each pipeline event marks."""


class Runner:
    """A device's exchanges in Assist: one at a time, bound to the link it started on.

    The entity owns it and gives it what it needs of Home Assistant's satellite: the config entry,
    the assistant the device uses now, and the call that says a reply is over.
    """

    def __init__(
        self,
        device: XiaozhiDevice,
        entry: Callable[[], XiaozhiConfigEntry],
        pipeline: Callable[[], Pipeline],
        reply_over: Callable[[], None],
    ) -> None:
        self.device = device
        self.hass = device.hass
        self.entry = entry
        self.pipeline = pipeline
        self._reply_over = reply_over  # HA's public way to say the response is over
        self.quiet = QuietRoom(device, entry, self.background)  # the room made quieter while it talks
        self.speaker = ReplySpeaker(device, entry, self.background, self.quiet)  # where replies play
        self.run: Run | None = None  # the current exchange
        self.events_for: Run | None = None  # the run whose pipeline is executing (its events are its own)
        self.unanswered: set[asyncio.Future[None]] = set()  # each set when its question's answer cannot come

    def background(self, coro: Any, name: str) -> asyncio.Task[Any]:
        """The entry's task (cancelled when it unloads) for this device; a failure is logged (``watched``)."""
        named, entry = f"xiaozhi_local {name} {self.device.mac}", self.entry()
        return watched(entry.async_create_background_task(self.hass, coro, named))

    @callback
    def begin(self, run: Run) -> Run | None:
        """``run`` is the current exchange from now on; returns the one it replaces (cancelled)."""
        previous, self.run = self.run, run
        if run.media is None:
            self.quiet.duck()  # the room goes quieter while the device listens and speaks (its switch)
        if previous is not None:
            previous.cancel()
            if previous.media is not None:
                self.device.async_activity_changed()  # the media stopped (a wake word, a question)
        return previous

    @callback
    def idle(self) -> None:
        """No exchange runs any more: whoever waits for that (a firmware install) is told."""
        self.run = None
        self.quiet.later()
        self.device.async_activity_changed()

    @callback
    def end_run(self, run: Run) -> None:
        """Cancel ``run`` (disconnect, abort, silence): the satellite is idle again."""
        self.no_answer()  # a question waiting for its answer gets none
        run.cancel()
        if self.run is run:
            self.idle()
            self._reply_over()  # back to idle

    @callback
    def finished(self, run: Run) -> None:
        """``run`` is over (answered, or there was nothing to answer).

        A manual-mode conversation is over too: the device went idle but keeps its socket, and
        its tools stay callable. The connection is closed only after the hub's idle timeout.
        """
        if self.run is run:
            self.idle()
        if run.turn is not None and run.turn.mode == "manual" and not run.continue_conversation:
            options = self.entry().options
            run.link.arm_idle(float(options.get(CONF_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT)))

    @staticmethod
    async def async_after(previous: Run | None) -> None:
        """Until the replaced run's pipeline has really stopped (its late events are not ours)."""
        if previous is not None and previous.task is not None:
            await asyncio.wait({previous.task})

    def on_disconnect(self, link: DeviceLink) -> None:
        """The link ended: its run ends at once, and nothing of it reaches another link."""
        run = self.run
        if run is not None and run.link is link:
            _LOGGER.debug("Device %s disconnected during a conversation; ending it", self.device.mac)
            self.end_run(run)
        self.no_answer()

    def abort(self, link: DeviceLink, reason: Any) -> None:
        """The device interrupts: whatever runs on this link stops, answered or not.

        While listening, the partial audio is dropped (not answered). While speaking, the speech
        stops (``tts stop`` follows). A ``listen start`` after it starts the next turn.
        """
        _LOGGER.debug("Device %s: abort (%s)", self.device.mac, reason)
        run = self.run
        if run is not None and run.link is link:
            self.end_run(run)

    def end_conversation(self, run: Run, why: str) -> None:
        """End ``run`` and close the device's conversation the way the firmware understands."""
        self.end_run(run)
        self.device.async_create_task(run.link.async_end_conversation(why), f"xiaozhi_local end {self.device.mac}")

    @callback
    def cannot_serve(self, run: Run, assistant: str, missing: list[str]) -> None:
        """The assistant lacks speech-to-text or text-to-speech: one alert, then the conversation ends.

        Not re-armed: no ``tts start``/``stop`` (that would make an auto-mode device listen again,
        and loop). One warning per assistant and lack, and a repair that points to its settings.
        """
        run.cannot_serve = True
        async_pipeline_incomplete(self.hass, assistant, missing)
        what = " and ".join({"stt": "speech-to-text", "tts": "text-to-speech"}.get(m, m) for m in missing)
        self.send_to(run, voice.alert(f"The assistant {assistant} has no {what}. Set it up in Home Assistant."))
        self.end_conversation(run, f"assistant {assistant} has no {what}")

    def send_to(self, run: Run, message: dict[str, Any]) -> None:
        """In order: each send starts at once (eager), and the socket writes whole frames in order."""
        self.device.async_create_task(run.link.async_send_json(message), f"xiaozhi_local send {self.device.mac}")

    def send_ai(self, run: Run, kind: str, content: str) -> None:
        """``mcp/ai/message`` for registerTools clients (the link ignores it for others)."""
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
            self.send_ai(run, "thought", thinking)
        if isinstance(content := delta.get("content"), str) and content:
            run.reply_streamed = True
            self.send_ai(run, "chunk", content)

    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Tell the device what the pipeline does (events of a cancelled run are dropped)."""
        run = self.events_for
        if run is None or run.cancelled or run.cannot_serve:
            return
        data = event.data or {}
        turn = run.turn
        if run.stages is not None:
            for stage in STAGES_OF.get(event.type, ()):
                run.stages.mark(stage, self.hass.loop.time())
        match event.type:
            case PipelineEventType.RUN_START:
                run.tts_token = (data.get("tts_output") or {}).get("token")
                run.tts_url = (data.get("tts_output") or {}).get("url")
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
                self.send_to(run, voice.stt(((data.get("stt_output") or {}).get("text")) or ""))
            case PipelineEventType.INTENT_START:
                self.send_to(run, voice.llm(voice.EMOTION_THINKING))
            case PipelineEventType.INTENT_PROGRESS:
                if data.get("tts_start_streaming") and run.tts_token and not run.tts_started:
                    self._start_tts(run, run.tts_token)
                self._stream_reply(run, data.get("chat_log_delta"))
            case PipelineEventType.INTENT_END:
                self._on_answer(run, data.get("intent_output") or {})
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

    def _on_answer(self, run: Run, output: dict[str, Any]) -> None:
        """The agent answered: its text to registerTools clients, its mood to the screen."""
        speech = speech_text(output)
        if not run.reply_streamed:
            self.send_ai(run, "chunk", speech)  # an agent that does not stream: one chunk
        self.send_ai(run, "final", speech)
        run.continue_conversation = bool(output.get("continue_conversation"))
        response_type = ((output.get("response") or {}).get("response_type")) or ""
        emotion = {"error": voice.EMOTION_CONFUSED, "action_done": voice.EMOTION_DONE}.get(
            response_type, voice.EMOTION_ANSWER
        )
        self.send_to(run, voice.llm(emotion))
        if run.text_only:  # no text-to-speech: the reply is shown, not spoken
            run.tts_text = speech or None
            self._start_tts(run, None)

    def _on_pipeline_error(self, run: Run, data: dict[str, Any]) -> None:
        if run.turn is not None:
            run.turn.end_audio()
        code = data.get("code")
        message = str(data.get("message") or code or "error")
        if code == "duplicate_wake_up_detected":
            # HA's rule (a phrase heard < 2 s ago): ended quietly, and said where people look.
            self.end_conversation(run, "Home Assistant ignored a repeated wake word")
            self.entry().runtime_data.nearest.ignored(self.device)
        elif code in CANNOT_SERVE:
            pipeline = self.pipeline()
            # An engine not chosen, or chosen but gone (its provider missing, or refusing our format).
            missing = missing_engines(pipeline) or (["tts"] if code == "tts-not-supported" else ["stt"])
            self.cannot_serve(run, pipeline.name, missing)
        elif code not in QUIET_ERRORS:
            self.send_to(run, voice.alert(message))

    def _start_tts(self, run: Run, token: str | None) -> None:
        run.tts_started = True
        async_pipeline_served(self.hass)
        if token and run.tts_url and (player := self.speaker.player()) is not None:
            run.tts_task = self.background(self._async_reply_on(run, player, token, run.tts_url), "tts")
        else:
            source = tts_pcm(self.hass, token) if token else None
            run.tts_task = self.background(self.async_play(run, source, respond=True), "tts")
        if run.media_check is not None:  # media waits for this reply
            run.tts_task.add_done_callback(run.media_check)

    async def _async_reply_on(self, run: Run, player: str, token: str, url: str) -> None:
        """The reply on the device's reply speaker; on the device when that player cannot play it.

        Media asked for during the turn still follows on the device.
        """
        try:
            stages = run.stages
            first = None if stages is None else lambda: stages.first_pcm(self.hass.loop.time())
            seconds = tts_seconds(self.hass, token, first)
            await self.speaker.async_speak(run.link, player, url, seconds, lambda: run.tts_text, run.stages)
        except PlayerFailed:  # said in a repair (reply_speaker.py); nothing reached the device yet
            await self.async_play(run, tts_pcm(self.hass, token), respond=True)
            return
        if run.then_media is not None and not run.cancelled:
            run.tts_text = None  # shown already: the media's title follows
            await self.async_play(run, None, respond=True)
            return
        if not run.cancelled:
            self._reply_done(run)

    async def async_play(self, run: Run, source: AsyncIterator[bytes] | None, *, respond: bool) -> None:
        """Play on the run's channel (``speaker.async_speak``); a reply then ends the run.

        Media asked for during the turn (an agent that starts music on the device it talks to)
        follows the reply in the same speech, without the ``tts stop`` that would make the
        device listen in between.
        """
        if respond:
            source = self._reply_then_media(run, source)
        watch = run.stages if respond else None
        try:
            await speaker.async_speak(self.hass, run.link, source, lambda: run.tts_text, watch)
        finally:
            if respond and not run.cancelled:
                self._reply_done(run)

    def _reply_done(self, run: Run) -> None:
        """The reply was heard: its stages are kept, and the run is over."""
        if run.stages is not None:
            self.device.response_times.add(run.stages)
        self._replied(run)
        self.finished(run)

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
            self._reply_over()

    def link_or_raise(self) -> DeviceLink:
        """The device's link; a translated error when it is away."""
        if (link := self.device.link) is None:
            raise translated_error("device_offline", device=self.device.name)
        return link

    @callback
    def no_answer(self) -> None:
        """The conversation a question waits in ended: its answer will not come."""
        for unanswered in self.unanswered:
            if not unanswered.done():
                unanswered.set_result(None)

    @callback
    def supersede(self) -> None:
        """The exchange that runs gives way to an announcement, silently.

        Home Assistant cancels its pipeline next; without this its end would send the empty
        ``tts start``/``stop`` pair that returns a device to listening, and the announcement
        would follow it (the device going speaking, listening, speaking for nothing).
        """
        if self.run is not None:
            self.run.cancel()

    @callback
    def release(self) -> None:
        """The entity is removed: what runs stops."""
        if self.run is not None:
            self.run.cancel()
            self.run = None
        self.quiet.release()
