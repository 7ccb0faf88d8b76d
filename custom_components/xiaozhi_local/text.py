"""Text: the wake phrase of a board built with the MultiNet "custom wake word" (wake_words/change.py)."""

from typing import Any

from homeassistant.components.text import TextEntity, TextEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import XiaozhiDevice
from .entity import XiaozhiEntity, async_setup_device_entities
from .hub import XiaozhiConfigEntry
from .wake_words.change import WakeWords, describe
from .wake_words.pack import AS_BUILT, ENGINE_MULTINET

PARALLEL_UPDATES = 1

WAKE_PHRASE = TextEntityDescription(
    key="wake_phrase", translation_key="wake_phrase", entity_category=EntityCategory.CONFIG, native_max=140
)


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """The wake phrase of each MultiNet board whose firmware takes a new assets pack."""
    wake_words = entry.runtime_data.wake_words

    def candidates(device: XiaozhiDevice) -> list[tuple[str, Any]]:
        if WakeWords.supported(device) and wake_words.files.engine(device) == ENGINE_MULTINET:
            return [("wake_phrase", lambda: XiaozhiWakePhraseText(entry, device))]
        return []

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiWakePhraseText(XiaozhiEntity, TextEntity):
    """What a MultiNet board wakes on: ``ni hao xiao ming|你好小明`` (heard | shown); empty: as built.

    MultiNet listens for English words, or Chinese as pinyin separated by spaces; the text after
    ``|`` is what the device shows and reports when it hears it (the phrase itself when left out).
    """

    def __init__(self, entry: XiaozhiConfigEntry, device: XiaozhiDevice) -> None:
        super().__init__(device, WAKE_PHRASE)
        self.wake_words = entry.runtime_data.wake_words

    @property
    def native_value(self) -> str:
        """The phrase being installed, else the one the device has (empty: the board's own)."""
        option = self.wake_words.current(self.device)
        return "" if option == AS_BUILT else option

    @property
    def extra_state_attributes(self) -> dict[str, Any]:
        """Where a change is (``phase``, ``progress`` in %), and why it failed (``error``)."""
        return describe(self.wake_words.jobs.get(self.device.mac))

    async def async_set_value(self, value: str) -> None:
        """Build, check and hand the pack to the device; it changes at its next restart (when idle)."""
        await self.wake_words.async_choose(self.device, value.strip() or AS_BUILT)
        self.async_write_ha_state()
