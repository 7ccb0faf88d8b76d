"""``xiaozhi_demo``: local text-to-speech (espeak-ng) for the development setup, never shipped.

``script/develop`` links it into its config and seeds its entry. The integration itself never
needs it: users bring their own pipeline. It speaks English and Chinese with the ``espeak-ng``
program, and makes itself the text-to-speech of the preferred assistant when that has none, with
Home Assistant's own conversation agent. There is no local speech-to-text good enough for the
demo (pocketsphinx recognised 12 of 40 espeak-ng sentences even with a closed grammar), so the
simulated device types its questions (``listen detect`` with text, as browser pages do).
"""

from homeassistant.components.assist_pipeline import async_get_pipeline, async_update_pipeline
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.helpers import entity_registry as er

DOMAIN = "xiaozhi_demo"


async def async_setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """The TTS entity; the preferred assistant speaks with it if it has no voice yet."""
    await hass.config_entries.async_forward_entry_setups(entry, [Platform.TTS])
    pipeline = async_get_pipeline(hass)
    engine = er.async_get(hass).async_get_entity_id("tts", DOMAIN, "xiaozhi_demo_tts")
    if engine and not pipeline.tts_engine:
        await async_update_pipeline(
            hass,
            pipeline,
            tts_engine=engine,
            tts_language="en-US",
            tts_voice=None,
            conversation_engine=pipeline.conversation_engine or "conversation.home_assistant",
        )
    return True


async def async_unload_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """Remove the entity."""
    return await hass.config_entries.async_unload_platforms(entry, [Platform.TTS])
