"""The device as an Assist voice satellite: its microphone and speaker in Home Assistant's pipeline.

The entity is put together from the parts in ``satellite/``: its core and pipeline events
(``base``), the listening turn (``listening``), typed text (``text``), and announcements,
questions, timers and media (``playback``).
"""

from typing import Final

from homeassistant.components import tts
from homeassistant.components.assist_satellite import (
    AssistSatelliteConfiguration,
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
from .entity import async_setup_device_entities
from .errors import translated_error
from .hub import XiaozhiConfigEntry
from .satellite.listening import ListeningMixin
from .satellite.playback import PlaybackMixin
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


class XiaozhiAssistSatellite(PlaybackMixin, ListeningMixin):
    """A xiaozhi device in Assist: on-device wake word, Opus both ways."""

    _attr_supported_features = AssistSatelliteEntityFeature.ANNOUNCE | AssistSatelliteEntityFeature.START_CONVERSATION
    # WAV as the engine makes it: HA converts (with an ffmpeg process per reply) only engines that
    # return another format; media.tts_pcm resamples in-process.
    _attr_tts_options = {tts.ATTR_PREFERRED_FORMAT: "wav"}  # noqa: RUF012

    @property
    def available(self) -> bool:
        """Unavailable while an always-connected device is off (as ESPHome's satellites are).

        Home Assistant's broadcast then skips it. A device that connects per conversation stays
        available: it is away between conversations by design (announcements: satellite/base.py).
        """
        return super().available and not self.device.off

    async def async_added_to_hass(self) -> None:
        """Take the device's voice; handle the timers set by talking to it."""
        await super().async_added_to_hass()
        self.device.async_set_voice(self)
        device_id = self.registry_entry.device_id if self.registry_entry is not None else None
        if device_id:
            # Without a handler for the device, HA answers "timers are not supported on this device".
            self.async_on_remove(async_register_timer_handler(self.hass, device_id, self._on_timer))

        @callback
        def release() -> None:
            self.device.async_release_voice(self)
            self._cancel_deferred_detect()
            if self._run is not None:
                self._run.cancel()
                self._run = None
            if self._idle_media is not None:
                self._idle_media[1].cancel()
                self._idle_media = None

        self.async_on_remove(release)

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
