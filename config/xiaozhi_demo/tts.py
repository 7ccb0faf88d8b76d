"""Text-to-speech with the ``espeak-ng`` program: WAV at 22.05 kHz, English and Chinese."""

import asyncio
import shutil
from typing import Any

from homeassistant.components import tts
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

VOICES = {"en-US": "en-us", "en-GB": "en-gb", "zh-CN": "cmn", "zh-Hans": "cmn"}


async def speak(text: str, language: str) -> bytes:
    """``text`` spoken by espeak-ng, as the WAV it writes (22.05 kHz, s16, mono)."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise HomeAssistantError("espeak-ng is not installed (script/bootstrap --dev installs it)")
    process = await asyncio.create_subprocess_exec(
        binary,
        "--stdout",
        "-v",
        VOICES.get(language, "en-us"),
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    wav, _ = await process.communicate()
    if process.returncode or not wav:
        raise HomeAssistantError(f"espeak-ng failed ({process.returncode})")
    return wav


class DemoTTS(tts.TextToSpeechEntity):
    """espeak-ng, for the demo."""

    _attr_name = "Demo voice (espeak-ng)"
    _attr_unique_id = "xiaozhi_demo_tts"
    _attr_default_language = "en-US"
    _attr_supported_languages = list(VOICES)  # noqa: RUF012

    async def async_get_tts_audio(self, message: str, language: str, options: dict[str, Any]) -> tts.TtsAudioType:
        """WAV, as espeak-ng writes it (the satellite resamples it in-process)."""
        return "wav", await speak(message, language)


async def async_setup_entry(
    hass: HomeAssistant, entry: ConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Add it."""
    async_add_entities([DemoTTS()])
