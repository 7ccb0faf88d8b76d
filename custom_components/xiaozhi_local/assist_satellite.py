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

from .const import (
    DOMAIN,
)
from .entity import async_setup_device_entities
from .errors import translated_error
from .hub import XiaozhiConfigEntry
from .satellite.listening import ListeningMixin
from .satellite.playback import PlaybackMixin

PARALLEL_UPDATES = 0

ON_DEVICE_WAKE_WORD: Final = AssistSatelliteWakeWord(
    id="on_device", wake_word="你好小智 / Hi ESP", trained_languages=["zh", "en"]
)

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
