"""Typed text: a ``listen detect`` that is no wake phrase runs the pipeline from the intent stage.

Home Assistant 2026.10/11 has no public way for a satellite to run its pipeline from text, so
``TypedText._async_run`` does what ``AssistSatelliteEntity.async_accept_pipeline_from_satellite``
does, with the members of the base class listed in ``HA_PRIVATE_MEMBERS``; a test pins each, so
a Home Assistant that renames one fails the suite with its name instead of breaking at runtime.
"""

import asyncio
import inspect
import logging
from typing import Any, Final

from homeassistant.components.assist_pipeline import (
    PipelineInput,
    PipelineRun,
    PipelineStage,
)
from homeassistant.components.assist_satellite import AssistSatelliteEntity
from homeassistant.core import CALLBACK_TYPE, Context, callback
from homeassistant.helpers import chat_session
from homeassistant.helpers.event import async_call_later

from ..link import DeviceLink
from ..protocol import voice
from ..timings import Stages
from .runner import Runner
from .runs import WAKE_WORD_FOLLOW_UP, Run

_LOGGER = logging.getLogger(__package__)

_SESSION_TAKES_CONTEXT: Final = "context" in inspect.signature(chat_session.async_get_chat_session).parameters
"""Home Assistant 2026.11 takes a context (leaving it out warns, and breaks in 2027.5); a satellite
passes None, acting for nobody (the pipeline checks the owner with the user's input); 2026.10 has
no such parameter."""

HA_PRIVATE_MEMBERS: Final = (
    "_conversation_id",
    "_extra_system_prompt",
    "_internal_on_pipeline_event",
    "_pipeline_task",
    "_resolve_pipeline",
    "_resolve_vad_sensitivity",
    "_run_has_tts",
)
"""``AssistSatelliteEntity`` members that are not public API and that the satellite uses."""


class TypedText:
    """Typed text, and telling it from a custom wake word.

    It runs the pipeline as the satellite entity's own would (``satellite``: its state follows
    the run's events) on the runner's exchanges.
    """

    def __init__(self, runner: Runner, satellite: AssistSatelliteEntity) -> None:
        self._runner = runner
        self._satellite = satellite
        self.deferred: tuple[str, CALLBACK_TYPE, DeviceLink] | None = None
        """A ``listen detect`` text waiting to be told apart: (text, cancel, link)."""
        self.deferred_at: float | None = None
        """When that text came (the user's input ended then, or the wake word was said)."""

    def defer(self, link: DeviceLink, text: str) -> None:
        """Decide what a ``listen detect`` text that is no known wake phrase means.

        A custom wake word if ``listen start`` follows at once (the firmware sends both back to
        back); otherwise a typed utterance.
        """
        self.cancel_deferred()
        came = self.deferred_at = self._runner.hass.loop.time()

        @callback
        def typed(_now: Any) -> None:
            self.deferred = None
            self._start(link, text, came)

        self.deferred = (text, async_call_later(self._runner.hass, WAKE_WORD_FOLLOW_UP, typed), link)

    def cancel_deferred(self) -> str | None:
        """Stop waiting for a ``listen start``; the text that waited (a custom wake word), if any."""
        if self.deferred is None:
            return None
        text, cancel, _link = self.deferred
        self.deferred = None
        cancel()
        return text

    def on_disconnect(self, link: DeviceLink) -> None:
        """A text that waited on ``link`` is dropped with it."""
        if self.deferred is not None and self.deferred[2] is link:
            self.cancel_deferred()

    def _start(self, link: DeviceLink, text: str, came: float) -> None:
        """``listen detect`` with text that is not a wake phrase: a typed utterance."""
        runner = self._runner
        run = Run(link, stages=Stages("typed", wake=came, speech_end=came))
        previous = runner.begin(run)
        if (conversation := runner.device.conversation_of(link)) is not None:
            conversation.heard()  # typing is taking part: silence is counted anew from the next turn
        run.task = runner.background(self._async_run(run, text, previous), "text")

    async def _async_run(self, run: Run, text: str, previous: Run | None) -> None:
        """The pipeline from the intent stage, as ``async_accept_pipeline_from_satellite`` runs it.

        HA 2026.10/11 has no public way for a satellite to run the pipeline from text, so this
        runs ``PipelineInput`` itself, with the base class's event hook (which sets the entity's
        state), its pipeline choice and its extra system prompt (``start_conversation``). The run
        is this satellite's own task, so a disconnect, an abort or a new turn cancels it.
        """
        runner, satellite = self._runner, self._satellite
        await runner.async_after(previous)
        if run.cancelled:
            return
        run.link.touch()
        runner.send_to(run, voice.stt(text))  # clients draw the user's line from it
        pipeline = runner.pipeline()
        # Shown, not spoken, without text-to-speech, or where no audio can reach the device yet (an
        # MQTT device that typed before its microphone's first datagram proved its UDP address).
        run.text_only = not pipeline.tts_engine or not run.link.audio_open
        if pipeline.tts_engine and not run.link.audio_open:
            _LOGGER.debug("Device %s: no audio channel yet; its answer is shown as text", runner.device.mac)
        context = Context()
        satellite.async_set_context(context)
        extra_system_prompt, satellite._extra_system_prompt = satellite._extra_system_prompt, None
        satellite._run_has_tts = False  # as HA's own run: its state follows this run's events
        satellite._pipeline_task = asyncio.current_task()  # as HA's own run: its announcements cancel it
        runner.events_for = run
        try:
            with chat_session.async_get_chat_session(
                runner.hass, satellite._conversation_id, **({"context": None} if _SESSION_TAKES_CONTEXT else {})
            ) as session:
                satellite._conversation_id = session.conversation_id
                pipeline_input = PipelineInput(
                    run=PipelineRun(
                        runner.hass,
                        context=context,
                        pipeline=pipeline,
                        start_stage=PipelineStage.INTENT,
                        end_stage=PipelineStage.INTENT if run.text_only else PipelineStage.TTS,
                        event_callback=satellite._internal_on_pipeline_event,
                        tts_audio_output=satellite.tts_options,
                    ),
                    session=session,
                    intent_input=text,
                    conversation_extra_system_prompt=extra_system_prompt,
                    device_id=satellite.registry_entry.device_id if satellite.registry_entry else None,
                    satellite_id=satellite.entity_id,
                )
                await pipeline_input.execute(validate=True)
        except Exception:
            _LOGGER.exception("Device %s: the text pipeline failed", runner.device.mac)
        finally:
            if satellite._pipeline_task is asyncio.current_task():
                satellite._pipeline_task = None
            if runner.events_for is run:
                runner.events_for = None
            if run.tts_task is None and not run.cancelled:
                runner.finished(run)
