"""``xiaozhi_demo``: local text-to-speech (espeak-ng) for the development setup, never shipped.

``script/develop`` links it into its config and seeds its entry. The integration itself never
needs it: users bring their own pipeline. It speaks English and Chinese with the ``espeak-ng``
program, and makes itself the text-to-speech of the preferred assistant when that has none, with
Home Assistant's own conversation agent. There is no local speech-to-text good enough for the
demo (pocketsphinx recognised 12 of 40 espeak-ng sentences even with a closed grammar), so the
simulated device types its questions (``listen detect`` with text, as browser pages do); its
spoken ones (a wake word, the terminal's ``wake`` line) are heard as one question (``stt.py``).
Two silent speakers of a living room (``media_player.py``) show the reply speaker and the quieter room.
"""

from homeassistant.components.assist_pipeline import async_get_pipeline, async_update_pipeline
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.helpers import entity_registry as er

DOMAIN = "xiaozhi_demo"
PLATFORMS = [Platform.MEDIA_PLAYER, Platform.STT, Platform.TTS]


async def async_setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """The voice, the ears and the living room's speakers.

    The preferred assistant speaks and hears with them where it has no engine of its own.
    """
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    pipeline = async_get_pipeline(hass)
    registry = er.async_get(hass)
    engine = registry.async_get_entity_id("tts", DOMAIN, "xiaozhi_demo_tts")
    ears = registry.async_get_entity_id("stt", DOMAIN, "xiaozhi_demo_stt")
    changes: dict[str, str | None] = {}
    if engine and not pipeline.tts_engine:
        changes |= {"tts_engine": engine, "tts_language": "en-US", "tts_voice": None}
    if ears and not pipeline.stt_engine:
        changes |= {"stt_engine": ears, "stt_language": "en-US"}
    if changes:
        await async_update_pipeline(
            hass,
            pipeline,
            conversation_engine=pipeline.conversation_engine or "conversation.home_assistant",
            **changes,  # type: ignore[arg-type]
        )
    return True


async def async_unload_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """Remove the entities."""
    return await hass.config_entries.async_unload_platforms(entry, PLATFORMS)
