"""What Home Assistant asks the device to say or play: announcements, questions, timers, media.

On the open conversation channel as a run of its own; to an idle device by ``notify`` where its
firmware plays it (2.5), else as an alert. Media asked for during a turn follows its reply.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
import contextlib
from contextvars import ContextVar
import logging
from typing import Any

from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteAnswer,
)
from homeassistant.components.intent import TimerEventType, TimerInfo
from homeassistant.core import callback
from homeassistant.exceptions import HomeAssistantError

from ..device import XiaozhiDevice
from ..errors import translated_error
from ..link import DeviceLink
from ..protocol import voice
from ..sound import speaker
from ..sound.announcements import Announcement, PcmSource
from ..sound.media import MediaUnreadable
from .reply_speaker import PlayerFailed
from .runner import Runner
from .runs import (
    Run,
)

_LOGGER = logging.getLogger(__package__)


ON_DEVICE: ContextVar[bool] = ContextVar("xiaozhi_local_on_device", default=False)
"""Set while a timer rings: its announcement stays on the device, whatever its reply speaker."""

type Announce = Callable[..., Coroutine[Any, Any, None]]
"""The satellite's ``async_internal_announce`` (what ``assist_satellite.announce`` runs)."""


class Playback:
    """Announcements, questions, timers and media, on the runner's exchanges."""

    def __init__(self, runner: Runner, announce: Announce) -> None:
        self._runner = runner
        self._announce = announce
        self._idle_media: tuple[str, asyncio.Task[None]] | None = None  # media played by notify (2.5)
        self._told_away = False  # the log said once that announcements skip this per-conversation device

    @property
    def device(self) -> XiaozhiDevice:
        """The device it plays on."""
        return self._runner.device

    @callback
    def on_timer(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        """A timer of this device rang: it is spoken where the device can play it, else an ``alert``.

        Started, changed and cancelled timers need nothing: the spoken answer said so.
        """
        if event_type != TimerEventType.FINISHED:
            return
        link = self.device.link
        if link is None:
            _LOGGER.warning("Device %s is offline; its timer %s finished unheard", self.device.mac, timer.name or "")
            return
        ring = voice.timer_finished(timer.name, timer.created_seconds, timer.language)
        self._runner.background(self._async_ring(link, ring), "timer")

    async def _async_ring(self, link: DeviceLink, ring: dict[str, Any]) -> None:
        """Say it (in a conversation, or by ``notify`` on 2.5); the alert's sound where it cannot be said."""
        if link.audio_open or self.device.plays_notify:
            ON_DEVICE.set(True)  # this task's own context: the ring is the device's, not its reply speaker's
            try:
                await self._announce(message=ring["message"], preannounce=False)
            except HomeAssistantError as err:  # no text-to-speech, say
                _LOGGER.debug("Device %s: the timer could not be spoken (%s); showing it", self.device.mac, err)
            else:
                return
        await link.async_send_json(ring)

    def may_announce(self) -> bool:
        """Whether an announcement goes ahead: refused when the device is off; it replaces a turn.

        A device that connects only for its conversations (WebSocket) cannot be reached between
        them: the announcement is skipped with one log line (Home Assistant's broadcast reaches the
        other satellites, as it skips unavailable ones), not queued for a conversation that may
        come hours later.
        """
        if self.device.link is None and not self.device.off:
            if not self._told_away:
                self._told_away = True
                _LOGGER.info(
                    "%s connects only while you talk to it: announcements are skipped between conversations "
                    "(set its Connection to always connected to receive them)",
                    self.device.name,
                )
            return False
        self._runner.link_or_raise()
        self._runner.supersede()
        return True

    def before_question(self) -> None:
        """Refused before anything is said when the device cannot be made to listen.

        A device without a conversation channel cannot be (the firmware opens it only itself).
        Otherwise the question replaces what runs, and a question still waiting is dismissed by
        this one: its caller is told.
        """
        link = self._runner.link_or_raise()
        if not link.audio_open:
            raise translated_error("question_no_channel", device=self.device.name)
        self._runner.supersede()
        self._runner.no_answer()

    async def async_wait_answer(
        self, ask: Coroutine[Any, Any, AssistSatelliteAnswer | None]
    ) -> AssistSatelliteAnswer | None:
        """Ask on the open channel (``ask``: Home Assistant's own question); the answer is matched.

        Home Assistant waits for the answer's speech-to-text without a limit; here the action
        fails instead when the answer cannot come (nobody spoke, the question was dismissed, the
        device went away).
        """
        runner = self._runner
        unanswered: asyncio.Future[None] = runner.hass.loop.create_future()
        runner.unanswered.add(unanswered)
        asking = self.device.async_create_task(ask, f"xiaozhi_local question {self.device.mac}")
        try:
            waiting: set[asyncio.Future[Any]] = {asking, unanswered}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if asking.done() and not asking.cancelled() and asking.exception() is None:
                return asking.result()  # answered (even if the conversation ended right after)
            error = asking.exception() if asking.done() and not asking.cancelled() else None
            if isinstance(error, HomeAssistantError) and error.translation_key and not unanswered.done():
                raise error  # a reason of its own, already translated (no channel, unreadable media …)
            if not asking.done():
                asking.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asking  # Home Assistant's own words here may be empty: ours say why
            raise translated_error("question_unanswered", device=self.device.name)
        except asyncio.CancelledError:
            asking.cancel()
            raise
        finally:
            runner.unanswered.discard(unanswered)

    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Speak it now, blocking until it has been played. The device must be connected.

        A device online without a conversation channel (idle over MQTT: only its own hello opens
        one) fetches it from a short-lived URL if its firmware plays ``notify`` (2.5), and shows
        the text with the firmware's alert sound otherwise.
        """
        runner = self._runner
        link = runner.link_or_raise()
        try:
            sources = speaker.announcement_sources(runner.hass, announcement)
        except MediaUnreadable as err:  # refused before anything is said (never a local file)
            raise translated_error("media_unreadable", device=self.device.name, reason=str(err)) from None
        player = None if ON_DEVICE.get() or not announcement.media_id else runner.speaker.player()
        if not link.audio_open:
            if player is not None:
                try:  # the device shows nothing while idle: the player says it
                    await runner.speaker.async_announce(None, player, announcement, lambda: None)
                except PlayerFailed as err:  # said in a repair (reply_speaker.py): the device says it
                    sources = sources[1:] if err.chimed else sources
                else:
                    return
            if not announcement.message and not self.device.plays_notify:
                # Media only (a sound, or speech picked in the media browser): no text to show in
                # an alert, and a 2.4 device plays nothing while idle. Say why (not its URL).
                raise translated_error("media_no_channel", device=self.device.name)
            await speaker.async_speak_idle(
                runner.entry().runtime_data.announcements, link, sources, announcement.message or ""
            )
            return
        run = Run(link)
        runner.begin(run)
        run.tts_text = announcement.message or None
        runner.send_ai(run, "chunk", announcement.message)
        runner.send_ai(run, "final", announcement.message)
        # Its own task: a barge-in cancels the playback, never the caller (the action).
        task = runner.background(self._async_say(run, sources, player, announcement), "announce")
        run.tts_task = task
        try:
            await asyncio.wait({task})  # returns when it is played (or interrupted)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            runner.finished(run)

    async def _async_say(
        self, run: Run, sources: list[PcmSource], player: str | None, announcement: AssistSatelliteAnnouncement
    ) -> None:
        """An announcement on the device's reply speaker (chime, then message); on the device when it cannot."""
        if player is not None:
            try:
                await self._runner.speaker.async_announce(run.link, player, announcement, lambda: run.tts_text)
            except PlayerFailed as err:  # said in a repair (reply_speaker.py); nothing reached the device yet
                sources = sources[1:] if err.chimed else sources  # the chime played there already
            else:
                return
        await self._runner.async_play(run, speaker.chained(sources), respond=False)

    @property
    def media_title(self) -> str | None:
        """The title of the media playing now (through the channel, or by ``notify``); else None."""
        run = self._runner.run
        if run is not None and run.media is not None and not run.cancelled:
            return run.media
        return self._idle_media[0] if self._idle_media is not None else None

    async def async_play_media(self, url: str, title: str) -> None:
        """Start playing ``url``; returns once it plays.

        Through the open conversation channel on any firmware (framed like speech: a new turn or
        an ``abort`` stops it); to an idle device by ``notify`` where its firmware plays it (2.5).
        Otherwise, and for media ffmpeg cannot read, a translated error says why.
        """
        runner = self._runner
        link = runner.link_or_raise()
        if not link.audio_open and not self.device.plays_notify:
            raise translated_error("media_no_channel", device=self.device.name)
        self.async_stop_media()
        try:
            source = await speaker.async_open_media(runner.hass, url)
        except MediaUnreadable as err:
            raise translated_error("media_unreadable", device=self.device.name, reason=str(err)) from None
        if (run := runner.run) is not None and run.link is link and self._answering(run):
            # Asked for during a turn (most likely by its agent): it plays right after the reply.
            # Cancelling the turn here would cancel the very agent call that asked for it.
            self._play_after_reply(run, title, source)
            return
        if link.audio_open:
            runner.supersede()
            run = Run(link, media=title)
            runner.begin(run)
            run.tts_text = title
            run.tts_task = runner.background(self._async_play_media(run, source), "media")
            self.device.async_activity_changed()
            return
        waiting = await speaker.async_notify(runner.entry().runtime_data.announcements, link, [lambda: source], title)
        if waiting is None:
            await source.aclose()
            raise translated_error("media_not_fetched", device=self.device.name)
        task = runner.background(self._async_until_played(waiting), "media")
        self._idle_media = (title, task)
        self.device.async_activity_changed()

    @staticmethod
    def _answering(run: Run) -> bool:
        """Whether ``run`` is a turn whose reply is still to come or under way (not media, not ended)."""
        return (
            not run.cancelled
            and run.media is None
            and run.task is not None
            and not run.took_media
            and not run.cannot_serve
        )

    @callback
    def _play_after_reply(self, run: Run, title: str, source: AsyncGenerator[bytes]) -> None:
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
        self._runner.background(source.aclose(), "media close")

    async def _async_play_media(self, run: Run, source: AsyncIterator[bytes]) -> None:
        try:
            await self._runner.async_play(run, source, respond=False)
        finally:
            if self._runner.run is run:
                self._runner.idle()

    async def _async_until_played(self, waiting: Announcement) -> None:
        try:
            await speaker.async_until_played(waiting)
        finally:
            if self._idle_media is not None and self._idle_media[1] is asyncio.current_task():
                self._idle_media = None
                self.device.async_activity_changed()

    @callback
    def async_stop_media(self) -> None:
        """Stop the media that plays (the device goes back to what it did: listening, or idle)."""
        run = self._runner.run
        if run is not None and run.media is not None:
            run.cancel()
            self._runner.idle()
        self._stop_idle_media()

    def _stop_idle_media(self) -> None:
        if self._idle_media is not None:
            _title, task = self._idle_media
            self._idle_media = None
            task.cancel()
            self.device.async_activity_changed()

    def on_disconnect(self, link: DeviceLink) -> None:
        """The link ended: media by notify to a device that is gone stops now.

        Its stream (ffmpeg, the upstream) ends now, not when the socket of a device that stopped
        reading finally times out.
        """
        if self._idle_media is not None and link.gone and self.device.link in (link, None):
            self._stop_idle_media()

    @callback
    def release(self) -> None:
        """The entity is removed: nothing it played outlives it."""
        if self._idle_media is not None:
            self._idle_media[1].cancel()
            self._idle_media = None
