"""Typed text: a ``listen detect`` that is no wake phrase runs the pipeline from the intent stage.

Home Assistant 2026.10/11 has no public way for a satellite to run its pipeline from text, so
``_async_run_text`` does what ``AssistSatelliteEntity.async_accept_pipeline_from_satellite``
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
from homeassistant.core import Context, callback
from homeassistant.helpers import chat_session
from homeassistant.helpers.event import async_call_later

from ..link import DeviceLink
from ..protocol import voice
from .base import SatelliteBase
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


# One concern of the satellite entity per module (each under the size a reader takes in at once);
# the entity that platform setup creates, XiaozhiAssistSatellite, is in assist_satellite.py.
class TextMixin(SatelliteBase):  # pylint: disable=home-assistant-enforce-class-module
    """Typed text, and telling it from a custom wake word."""

    def _defer_detect(self, link: DeviceLink, text: str) -> None:
        """Decide what a ``listen detect`` text that is no known wake phrase means.

        A custom wake word if ``listen start`` follows at once (the firmware sends both back to
        back); otherwise a typed utterance.
        """
        self._cancel_deferred_detect()

        @callback
        def typed(_now: Any) -> None:
            self._deferred_detect = None
            self._start_text_run(link, text)

        self._deferred_detect = (text, async_call_later(self.hass, WAKE_WORD_FOLLOW_UP, typed), link)

    def _start_text_run(self, link: DeviceLink, text: str) -> None:
        """``listen detect`` with text that is not a wake phrase: a typed utterance."""
        run = Run(link)
        previous = self._begin(run)
        if (conversation := self.device.conversation_of(link)) is not None:
            conversation.heard()  # typing is taking part: silence is counted anew from the next turn
        run.task = self._config_entry().async_create_background_task(
            self.hass, self._async_run_text(run, text, previous), f"xiaozhi_local text {self.device.mac}"
        )

    async def _async_run_text(self, run: Run, text: str, previous: Run | None) -> None:
        """The pipeline from the intent stage, as ``async_accept_pipeline_from_satellite`` runs it.

        HA 2026.10/11 has no public way for a satellite to run the pipeline from text, so this
        runs ``PipelineInput`` itself, with the base class's event hook (which sets the entity's
        state), its pipeline choice and its extra system prompt (``start_conversation``). The run
        is this satellite's own task, so a disconnect, an abort or a new turn cancels it.
        """
        await self._async_after(previous)
        if run.cancelled:
            return
        run.link.touch()
        self._send_to(run, voice.stt(text))  # clients draw the user's line from it
        pipeline = self._pipeline()
        # Shown, not spoken, without text-to-speech, or where no audio can reach the device yet (an
        # MQTT device that typed before its microphone's first datagram proved its UDP address).
        run.text_only = not pipeline.tts_engine or not run.link.audio_open
        if pipeline.tts_engine and not run.link.audio_open:
            _LOGGER.debug("Device %s: no audio channel yet; its answer is shown as text", self.device.mac)
        context = Context()
        self.async_set_context(context)
        extra_system_prompt, self._extra_system_prompt = self._extra_system_prompt, None
        self._run_has_tts = False  # as HA's own run: its state follows this run's events
        self._pipeline_task = asyncio.current_task()  # as HA's own run: its announcements cancel it
        self._events_for = run
        try:
            with chat_session.async_get_chat_session(
                self.hass, self._conversation_id, **({"context": None} if _SESSION_TAKES_CONTEXT else {})
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
            if self._pipeline_task is asyncio.current_task():
                self._pipeline_task = None
            if self._events_for is run:
                self._events_for = None
            if run.tts_task is None and not run.cancelled:
                self._finished(run)
