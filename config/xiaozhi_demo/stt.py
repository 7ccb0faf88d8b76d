"""The demo's ears: they hear every question as "What time is it?" (development only).

No offline speech-to-text is good enough for the demo (see ``__init__.py``), yet a wake word
needs one: the assistant refuses a voice turn without it. So the simulated devices' spoken
questions (the terminal's ``wake`` line) all mean the same: what time it is. Silence is heard
as nothing, as a real engine hears it.
"""

from array import array
from collections.abc import AsyncIterable
import logging

from homeassistant.components import stt
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

_LOGGER = logging.getLogger(__name__)
HEARD = "What time is it?"
LOUD = 500
"""Mean amplitude of a chunk (10 ms) that counts as sound."""


class DemoEars(stt.SpeechToTextEntity):
    """Hears one question."""

    _attr_name = "Demo ears (hear: what time is it?)"
    _attr_unique_id = "xiaozhi_demo_stt"

    @property
    def supported_languages(self) -> list[str]:
        """English."""
        return ["en-US"]

    @property
    def supported_formats(self) -> list[stt.AudioFormats]:
        """What satellites send."""
        return [stt.AudioFormats.WAV]

    @property
    def supported_codecs(self) -> list[stt.AudioCodecs]:
        """PCM."""
        return [stt.AudioCodecs.PCM]

    @property
    def supported_bit_rates(self) -> list[stt.AudioBitRates]:
        """16-bit."""
        return [stt.AudioBitRates.BITRATE_16]

    @property
    def supported_sample_rates(self) -> list[stt.AudioSampleRates]:
        """16 kHz."""
        return [stt.AudioSampleRates.SAMPLERATE_16000]

    @property
    def supported_channels(self) -> list[stt.AudioChannels]:
        """Mono."""
        return [stt.AudioChannels.CHANNEL_MONO]

    async def async_process_audio_stream(
        self, metadata: stt.SpeechMetadata, stream: AsyncIterable[bytes]
    ) -> stt.SpeechResult:
        """The question, if anything was said."""
        sound = False
        total = 0
        async for chunk in stream:
            total += len(chunk)
            samples = array("h", chunk[: len(chunk) - len(chunk) % 2])  # HA hands over 10 ms at a time
            sound = sound or (bool(samples) and sum(abs(s) for s in samples) / len(samples) > LOUD)
        _LOGGER.debug("Heard %.1f s of audio%s", total / 32000, "" if sound else ", all of it silence")
        if not sound:
            return stt.SpeechResult(None, stt.SpeechResultState.ERROR)
        return stt.SpeechResult(HEARD, stt.SpeechResultState.SUCCESS)


async def async_setup_entry(
    hass: HomeAssistant, entry: ConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Add them."""
    async_add_entities([DemoEars()])
