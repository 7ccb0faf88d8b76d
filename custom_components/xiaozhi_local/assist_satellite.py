"""The device as an Assist voice satellite: its microphone and speaker in Home Assistant's pipeline.

The entity owns its helpers in ``satellite/``: the runner (one exchange at a time, pipeline events
to the device), the listening turn, typed text, and playback (announcements, questions, timers,
media). It answers Home Assistant's calls and the device's link by handing each to its helper.
"""

from collections.abc import AsyncIterator
from typing import Any, Final, override

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import Pipeline, PipelineEvent, PipelineStage, async_get_pipeline
from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteAnswer,
    AssistSatelliteConfiguration,
    AssistSatelliteEntity,
    AssistSatelliteEntityFeature,
    AssistSatelliteWakeWord,
)
from homeassistant.components.intent import async_register_timer_handler
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.entity import EntityDescription
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.translation import async_get_cached_translations

from .const import (
    DOMAIN,
)
from .device import XiaozhiDevice
from .entity import XiaozhiEntity, async_setup_device_entities
from .errors import translated_error
from .hub import XiaozhiConfigEntry
from .link import DeviceLink
from .protocol.messages import ControlMessage
from .satellite.listening import Listening
from .satellite.playback import Playback
from .satellite.runner import Runner
from .satellite.runs import PUSH_TO_TALK_SILENCE
from .satellite.text import TypedText
from .wake_words.change import WakeWords
from .wake_words.pack import AS_BUILT, ENGINE_WAKENET

PARALLEL_UPDATES = 0

ON_DEVICE_WAKE_WORD: Final = AssistSatelliteWakeWord(
    id="on_device", wake_word="你好小智 / Hi ESP", trained_languages=["zh", "en"]
)

AS_BUILT_STATE: Final = f"component.{DOMAIN}.entity.select.wake_word.state.{AS_BUILT}"
"""The select's translated "As built", shown beside the board's own word in the voice settings."""

SATELLITE = EntityDescription(key="assist_satellite", name=None)


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


class XiaozhiAssistSatellite(XiaozhiEntity, AssistSatelliteEntity):
    """A xiaozhi device in Assist: on-device wake word, Opus both ways.

    One exchange at a time, bound to the link it started on (``satellite/runner.py``).
    """

    _attr_supported_features = AssistSatelliteEntityFeature.ANNOUNCE | AssistSatelliteEntityFeature.START_CONVERSATION
    # WAV as the engine makes it: HA converts (with an ffmpeg process per reply) only engines that
    # return another format; media.tts_pcm resamples in-process.
    _attr_tts_options = {tts.ATTR_PREFERRED_FORMAT: "wav"}  # noqa: RUF012

    def __init__(self, device: XiaozhiDevice, description: EntityDescription) -> None:
        super().__init__(device, description)
        self._intercepting = 0  # HA's voice wizard waits for the next wake word
        self._runner = Runner(device, self._config_entry, self._pipeline, self.tts_response_finished)
        self._text = TypedText(self._runner, self)
        self._listening = Listening(self._runner, self._text, self._async_accept_audio)
        self._playback = Playback(self._runner, self.async_internal_announce)

    def _config_entry(self) -> XiaozhiConfigEntry:
        assert self.platform.config_entry is not None
        return self.platform.config_entry

    def _pipeline(self) -> Pipeline:
        """The assistant the device uses now (its select, else the preferred one)."""
        return async_get_pipeline(self.hass, self._resolve_pipeline())

    async def _async_accept_audio(self, pcm: AsyncIterator[bytes], wake_phrase: str | None) -> None:
        if wake_phrase is not None and not self._intercepting:  # the wizard is shown the phrase as said
            wake_phrase = self._config_entry().runtime_data.nearest.phrase_for(self.device, wake_phrase)
        await self.async_accept_pipeline_from_satellite(
            pcm, start_stage=PipelineStage.STT, wake_word_phrase=wake_phrase
        )

    @override
    async def async_intercept_wake_word(self) -> str | None:
        """Home Assistant's voice wizard waits for the next wake word (``nearest.phrase_for`` aside)."""
        self._intercepting += 1
        try:
            return await super().async_intercept_wake_word()
        finally:
            self._intercepting -= 1

    @property
    @override
    def available(self) -> bool:
        """Unavailable while an always-connected device is off (as ESPHome's satellites are).

        Home Assistant's broadcast then skips it. A device that connects per conversation stays
        available: it is away between conversations by design (announcements: satellite/playback.py).
        """
        return super().available and not self.device.off

    @override
    async def async_added_to_hass(self) -> None:
        """Take the device's voice; handle the timers set by talking to it."""
        await super().async_added_to_hass()
        self.device.async_set_voice(self)
        device_id = self.registry_entry.device_id if self.registry_entry is not None else None
        if device_id:
            # Without a handler for the device, HA answers "timers are not supported on this device".
            self.async_on_remove(async_register_timer_handler(self.hass, device_id, self._playback.on_timer))

        @callback
        def release() -> None:
            self.device.async_release_voice(self)
            self._text.cancel_deferred()
            self._runner.release()
            self._playback.release()

        self.async_on_remove(release)

    # -- the device's link (conversations.VoiceHandler) -------------------------------------------

    def on_control(self, link: DeviceLink, message: ControlMessage) -> None:
        """``listen start|stop|detect`` and ``abort``."""
        self._listening.on_control(link, message)

    def on_audio(self, link: DeviceLink, packet: bytes) -> None:
        """One uplink Opus packet."""
        self._listening.on_audio(link, packet)

    def on_disconnect(self, link: DeviceLink) -> None:
        """The link ended: its run ends at once, and nothing of it reaches another link."""
        self._text.on_disconnect(link)
        self._runner.on_disconnect(link)
        self._playback.on_disconnect(link)

    @property
    def busy(self) -> bool:
        """Whether an exchange is under way (a turn, a reply, an announcement)."""
        return self._runner.run is not None

    @property
    def media_title(self) -> str | None:
        """The title of the media playing now (through the channel, or by ``notify``); else None."""
        return self._playback.media_title

    async def async_play_media(self, url: str, title: str) -> None:
        """Start playing ``url`` (``satellite/playback.py``); returns once it plays."""
        await self._playback.async_play_media(url, title)

    @callback
    def async_stop_media(self) -> None:
        """Stop the media that plays."""
        self._playback.async_stop_media()

    async def async_announce_media(self, url: str) -> None:
        """A media player's announcement: the satellite's own (``assist_satellite.announce``)."""
        await self.async_internal_announce(media_id=url, preannounce=False)

    # -- Home Assistant's satellite ------------------------------------------------------------

    @override
    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Tell the device what the pipeline does (``satellite/runner.py``)."""
        self._runner.on_pipeline_event(event)

    @override
    def _resolve_vad_sensitivity(self) -> float:
        """Seconds of silence after which HA's VAD ends the utterance.

        Push-to-talk ends at the release (``listen stop``), not at a pause (``PUSH_TO_TALK_SILENCE``).
        Auto and realtime keep the device's "Finished speaking detection". (HA builds the
        pipeline's audio settings itself and asks only this.)
        """
        if self._listening.push_to_talk():
            return PUSH_TO_TALK_SILENCE
        return super()._resolve_vad_sensitivity()

    @override
    async def async_internal_announce(self, *args: Any, **kwargs: Any) -> None:
        """Skipped for a device away between conversations; refused when off; replaces a turn."""
        if self._playback.may_announce():
            await super().async_internal_announce(*args, **kwargs)

    @override
    async def async_internal_ask_question(self, *args: Any, **kwargs: Any) -> AssistSatelliteAnswer | None:
        """Ask on the open channel: the device listens after the question, the answer is matched."""
        self._playback.before_question()
        return await self._playback.async_wait_answer(super().async_internal_ask_question(*args, **kwargs))

    @override
    async def async_internal_start_conversation(self, *args: Any, **kwargs: Any) -> None:
        """Refuse before any speech is made when the device is away; it replaces a running turn."""
        self._runner.link_or_raise()
        self._runner.supersede()
        await super().async_internal_start_conversation(*args, **kwargs)

    @override
    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Speak it now, blocking until it has been played (``satellite/playback.py``)."""
        await self._playback.async_announce(announcement)

    @override
    async def async_start_conversation(self, start_announcement: AssistSatelliteAnnouncement) -> None:
        """Speak, then the device listens: in auto mode ``tts stop`` makes it open its microphone."""
        await self.async_announce(start_announcement)

    @property
    @override
    def pipeline_entity_id(self) -> str | None:
        """The device's pipeline select."""
        return er.async_get(self.hass).async_get_entity_id("select", DOMAIN, f"{self.device.mac}-pipeline")

    @property
    @override
    def vad_sensitivity_entity_id(self) -> str | None:
        """The device's VAD sensitivity select."""
        return er.async_get(self.hass).async_get_entity_id("select", DOMAIN, f"{self.device.mac}-vad_sensitivity")

    @callback
    @override
    def async_get_configuration(self) -> AssistSatelliteConfiguration:
        """The wake words Home Assistant's voice settings offer: those of the Wake word select.

        A device that can change its WakeNet model (wake_words/change.py) lists "as built" and every
        catalog model for its chip; choosing one there starts the same change as the select.
        Others list the one word their firmware wakes on.
        """
        words = self._config_entry().runtime_data.wake_words
        device = self.device
        if not WakeWords.supported(device) or words.files.engine(device) != ENGINE_WAKENET:
            fixed = ON_DEVICE_WAKE_WORD
            if device.expected_wake_word:
                fixed = AssistSatelliteWakeWord(id=fixed.id, wake_word=device.expected_wake_word, trained_languages=[])
            return AssistSatelliteConfiguration(
                available_wake_words=[fixed], active_wake_words=[fixed.id], max_active_wake_words=1
            )
        board = words.files.board_word(device)
        cached = async_get_cached_translations(self.hass, self.hass.config.language, "entity", DOMAIN)
        label = cached.get(AS_BUILT_STATE) or "As built"
        built = f"{board.word} ({label})" if board is not None and board.word else label
        available = [AssistSatelliteWakeWord(id=AS_BUILT, wake_word=built, trained_languages=[])]
        available += [
            AssistSatelliteWakeWord(id=model.name, wake_word=model.label, trained_languages=list(model.languages))
            for model in words.offers(device)
        ]
        option = words.current(device)
        active = AS_BUILT if option == AS_BUILT else words.model_of(device, option)
        if all(word.id != active for word in available):  # a model of the local folder
            available.append(AssistSatelliteWakeWord(id=active, wake_word=option, trained_languages=[]))
        return AssistSatelliteConfiguration(
            available_wake_words=available, active_wake_words=[active], max_active_wake_words=1
        )

    @override
    async def async_set_configuration(self, config: AssistSatelliteConfiguration) -> None:
        """A wake word chosen in Home Assistant's voice settings: the same change as the Wake word select."""
        current = self.async_get_configuration()
        if not config.active_wake_words or config.active_wake_words == current.active_wake_words:
            return  # the device always wakes on one word: none chosen changes nothing
        if current.available_wake_words[0].id == ON_DEVICE_WAKE_WORD.id:
            raise translated_error("wake_word_fixed")
        words = self._config_entry().runtime_data.wake_words
        wanted = config.active_wake_words[0]
        option = words.option_of(self.device, wanted)
        if option is None:  # a model of the local folder, listed under its own name
            option = next((w.wake_word for w in current.available_wake_words if w.id == wanted), wanted)
        await words.async_choose(self.device, option)
