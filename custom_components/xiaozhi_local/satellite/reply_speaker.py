"""The reply speaker: a device's replies, announcements and questions on a media player chosen for it.

A device's "Reply speaker" select names a ``media_player`` (default: the device itself). Replies,
announcements and questions then play there, with ``announce`` where the player supports it,
while the device shows the text in its speaking state; its ``tts stop`` (which reopens the
microphone in a continued conversation) waits until the player has finished. A player says so by
leaving ``playing``; one that does not (an announcement over music keeps ``playing``) is taken as
finished when the reply's length (counted from the same audio) has passed. A player Home Assistant
polls (MPD, many network speakers) says it only at its next poll, up to 10 s late: it is taken as
finished at its reply's length from when it began to play, or when it says so, whichever first. An announcement's
chime plays there before its message, as a satellite plays it. A player that is
missing, unavailable or refuses the call: the reply plays on the device, and a repair says why (it
goes when the player plays again). A player without ``announce`` that is playing something has it
put back after the reply (its media again, at the position it had); when what it plays cannot be
named, the reply plays on the device and the player is left alone. Timers ring on the device
(``playback.py``).
"""

import asyncio
from collections.abc import Callable, Coroutine
import contextlib
import logging
import math
from typing import Any, Final

from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.components.media_player import (
    ATTR_MEDIA_ANNOUNCE,
    ATTR_MEDIA_CONTENT_ID,
    ATTR_MEDIA_CONTENT_TYPE,
    DOMAIN as MEDIA_PLAYER_DOMAIN,
    SERVICE_PLAY_MEDIA,
    MediaPlayerEntityFeature,
    MediaType,
    async_process_play_media_url,
)
from homeassistant.const import (
    ATTR_ENTITY_ID,
    ATTR_SUPPORTED_FEATURES,
    SERVICE_MEDIA_STOP,
    STATE_UNAVAILABLE,
)
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import device_registry as dr
import probatio as vol

from ..const import CONF_REPLY_PLAYER
from ..device import XiaozhiDevice
from ..home.volumes import VOLUME_TIMEOUT
from ..hub import XiaozhiConfigEntry
from ..protocol import voice
from ..repairs import async_reply_player_failed, async_reply_player_played
from ..sound.media import ffmpeg_pcm, full_url, pcm_seconds
from ..sound.speaker import SpeakerLink, SpeechWatch, TextSource, announcement_seconds, show_sentences
from .player_watch import (
    PLAY_TIMEOUT,
    PlayerBusy,
    PlayerFailed as PlayerFailed,  # noqa: PLC0414 - re-exported: the satellite catches it
    Playing,
    Watch,
    async_resume,
    async_show,
    playing_before,
    polled,
)
from .quiet import PLAYING, QuietRoom, chosen

_LOGGER = logging.getLogger(__package__)

LATE_WATCH: Final = 120.0
"""Seconds a player that did not take the reply in time is watched for starting it late."""
END_GRACE: Final = 1.5
"""Seconds after the reply's length when a player that does not say it finished is taken as finished."""
END_LIMIT: Final = 30.0
"""Seconds after the reply's length after which the device stops waiting for any player."""
POLLED_GRACE: Final = 0.3
"""Seconds after a polled player's reply length (from when it began) when it is taken as finished."""


class ReplySpeaker:
    """Where a device's replies play when a media player is chosen for them."""

    def __init__(
        self,
        device: XiaozhiDevice,
        entry: Callable[[], XiaozhiConfigEntry],
        background: Callable[[Any, str], asyncio.Task[Any]],
        quiet: QuietRoom,
    ) -> None:
        self.device = device
        self.hass: HomeAssistant = device.hass
        self._entry = entry
        self._background = background
        self._quiet = quiet
        self._resume_after: tuple[str, Playing] | None = None

    def player(self) -> str | None:
        """The media player chosen for the device's replies; None: the device itself."""
        value = chosen(self._entry(), self.device, CONF_REPLY_PLAYER)
        return value if isinstance(value, str) and value.startswith(f"{MEDIA_PLAYER_DOMAIN}.") else None

    async def async_announce(
        self, link: SpeakerLink | None, player: str, announcement: AssistSatelliteAnnouncement, text: TextSource
    ) -> None:
        """An announcement on ``player``: Home Assistant's chime first when it has one, then the message.

        The chime plays as an announcement of its own, and the message once it has finished (the
        device shows the message's text only). Raises ``PlayerFailed`` as ``async_speak`` does.
        """
        chimed = False
        try:
            if chime := announcement.preannounce_media_id:
                length = pcm_seconds(ffmpeg_pcm(self.hass, full_url(self.hass, chime)))
                await self.async_speak(None, player, chime, length, lambda: None, None, chime=True)
                chimed = True
            seconds = announcement_seconds(self.hass, announcement)
            await self.async_speak(link, player, announcement.media_id, seconds, text, None)
        except PlayerFailed as err:
            err.chimed = chimed
            self._resume()  # the chime played, the message did not: what played comes back
            raise

    async def async_speak(  # noqa: PLR0917 - one reply's parts
        self,
        link: SpeakerLink | None,
        player: str,
        url: str,
        seconds: Coroutine[Any, Any, float],
        text: Callable[[], str | None],
        watch: SpeechWatch | None,
        *,
        chime: bool = False,
    ) -> None:
        """Play ``url`` on ``player``; the device (``link``) shows ``text`` until it has finished.

        ``chime``: an announcement's chime, its message to follow (what the player played comes back
        after the message).

        ``seconds`` times the same audio (``media.tts_seconds``). Raises ``PlayerFailed`` (and
        says why in a repair) before anything reaches the device when the player cannot play it.
        Cancelled (a wake word, a new exchange): the player stops what it plays of it.
        """
        loop = asyncio.get_running_loop()
        length = self.device.async_create_task(seconds, f"xiaozhi_local reply length {self.device.mac}")
        try:
            async with Watch(self.hass, player) as seen:
                absolute, before = await self._async_play(player, url)
                if before is not None and self._resume_after is None:  # back after the reply, whatever ends it
                    self._resume_after = (player, before)
                async_reply_player_played(self.hass, self.device.mac)
                if watch is not None:
                    watch.frame_sent(loop.time())  # the player took it: its first sound is now
                begun = loop.time()
                if link is None:
                    await self._async_until_finished(player, seen, absolute, begun, length)
                    return
                shown = [0]
                await link.async_send_json(voice.tts_start())
                try:
                    shows = self.device.async_create_task(
                        async_show(link, text, begun, shown), f"xiaozhi_local reply text {self.device.mac}"
                    )
                    try:
                        await self._async_until_finished(player, seen, absolute, begun, length)
                    finally:
                        shows.cancel()
                    await show_sentences(link, text, shown[0], math.inf)
                except asyncio.CancelledError:
                    self._background(self._async_stop(player, absolute), "reply stop")
                    raise
                finally:
                    with contextlib.suppress(ConnectionError):
                        await link.async_send_json(voice.tts_stop())
                    if watch is not None:
                        watch.frame_sent(loop.time())
        except PlayerBusy as err:
            _LOGGER.debug("%s: the reply is said by the device: %s %s", self.device.name, player, err)
            raise
        except PlayerFailed as err:
            async_reply_player_failed(
                self.hass, self.device.mac, self._named(), self._player_named(player), kind=err.kind, said=str(err)
            )
            raise
        finally:
            length.cancel()
            if not chime:
                self._resume()

    def _named(self) -> str:
        """The device's name as the user set it (its page's)."""
        entry = dr.async_get(self.hass).async_get(self.device.device_id) if self.device.device_id else None
        return (entry.name_by_user or entry.name or self.device.name) if entry is not None else self.device.name

    def _player_named(self, player: str) -> str:
        """The player's name as Home Assistant shows it (its entity id when it is gone)."""
        state = self.hass.states.get(player)
        return state.name if state is not None else player

    @callback
    def _resume(self) -> None:
        """What the player played before the reply (or announcement), back now."""
        if (resume := self._resume_after) is not None:
            self._resume_after = None
            self._background(async_resume(self.hass, self.device.name, *resume), "reply resume")

    async def _async_play(self, player: str, url: str) -> tuple[str, Playing | None]:
        """The ``play_media`` call (``announce`` where supported).

        The URL as the player got it, and what it played before that is to be put back.
        """
        state = self.hass.states.get(player)
        if state is None:
            raise PlayerFailed("missing", "it does not exist")
        if state.state == STATE_UNAVAILABLE:
            raise PlayerFailed("unavailable", "it is unavailable")
        features = MediaPlayerEntityFeature(state.attributes.get(ATTR_SUPPORTED_FEATURES, 0))
        if MediaPlayerEntityFeature.PLAY_MEDIA not in features:
            raise PlayerFailed("cannot_play", "it cannot play media")
        try:
            absolute = async_process_play_media_url(self.hass, url)
        except HomeAssistantError as err:  # no URL of Home Assistant's that a player can reach
            raise PlayerFailed("no_url", str(err)) from None
        data: dict[str, Any] = {
            ATTR_ENTITY_ID: player,
            ATTR_MEDIA_CONTENT_ID: absolute,
            ATTR_MEDIA_CONTENT_TYPE: MediaType.MUSIC,
        }
        if MediaPlayerEntityFeature.MEDIA_ANNOUNCE in features:
            data[ATTR_MEDIA_ANNOUNCE] = True
        before = playing_before(state, features)
        await self._quiet.async_give_back(player)  # a player of the room plays the reply at its own volume
        try:
            async with asyncio.timeout(PLAY_TIMEOUT):
                await self.hass.services.async_call(MEDIA_PLAYER_DOMAIN, SERVICE_PLAY_MEDIA, data, blocking=True)
        except TimeoutError:
            # A slow player may still start it (the request was on its way): not over the device's.
            self._background(self._async_stop_late(player, absolute), "reply late stop")
            raise PlayerFailed("timeout", f"it did not take the reply within {PLAY_TIMEOUT:.0f} s") from None
        except (HomeAssistantError, vol.Invalid) as err:
            raise PlayerFailed("error", str(err) or type(err).__name__) from None
        return absolute, before

    async def _async_until_finished(
        self, player: str, seen: Watch, url: str, begun: float, length: asyncio.Task[float]
    ) -> None:
        """Until the player has played it.

        It left ``playing`` (or its content changed) after playing it; or, when it never says, the
        reply's length and ``END_GRACE`` have passed.
        """
        loop = asyncio.get_running_loop()
        seconds: float | None = None
        started: float | None = None  # when it was seen playing ours
        late_news = polled(self.hass, player)
        while True:
            if seconds is None and length.done():
                seconds = length.result() if not length.cancelled() and length.exception() is None else 0.0
            for state in seen.states:
                ours = state.attributes.get(ATTR_MEDIA_CONTENT_ID) in (url, None)
                if state.state in PLAYING and ours:
                    started = started or loop.time()
                elif started is not None:
                    return  # it played ours, and left it
            seen.states.clear()
            now = loop.time()
            current = self.hass.states.get(player)
            if current is None or current.state == STATE_UNAVAILABLE:
                return  # gone: nothing plays any more
            playing_ours = current.state in PLAYING and current.attributes.get(ATTR_MEDIA_CONTENT_ID) == url
            if playing_ours and started is None:
                started = now
            if seconds is not None:
                if now >= begun + seconds + END_LIMIT or (now >= begun + seconds + END_GRACE and not playing_ours):
                    return
                wake = begun + seconds + (END_LIMIT if playing_ours else END_GRACE)
                if late_news and started is not None:  # its state says the end only at its next poll
                    ends = max(begun, started) + seconds + POLLED_GRACE
                    if now >= ends:
                        return
                    wake = min(wake, ends)
            else:
                wake = now + 0.5  # its length is still being counted
            seen.changed.clear()
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(seen.changed.wait())}
            if seconds is None:
                waits.add(length)
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wake - now)):
                        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    if waiting is not length:
                        waiting.cancel()

    async def _async_stop_late(self, player: str, url: str) -> None:
        """Stop the reply if the player starts it after all, within ``LATE_WATCH`` s (the device said it)."""
        async with Watch(self.hass, player) as seen:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LATE_WATCH):
                    while (state := self.hass.states.get(player)) is None or (
                        state.attributes.get(ATTR_MEDIA_CONTENT_ID) != url
                    ):
                        seen.changed.clear()
                        await seen.changed.wait()
                    _LOGGER.info("%s started the reply it had not taken in time: stopped", player)
                    await self._async_stop(player, url)

    async def _async_stop(self, player: str, url: str) -> None:
        """Stop the player if it still plays the reply (never music it plays of its own)."""
        state = self.hass.states.get(player)
        if state is None or state.attributes.get(ATTR_MEDIA_CONTENT_ID) != url:
            return
        with contextlib.suppress(HomeAssistantError, TimeoutError, vol.Invalid):
            async with asyncio.timeout(VOLUME_TIMEOUT):
                await self.hass.services.async_call(
                    MEDIA_PLAYER_DOMAIN, SERVICE_MEDIA_STOP, {ATTR_ENTITY_ID: player}, blocking=True
                )
