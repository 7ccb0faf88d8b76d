"""Test integrations registered like real ones: a config entry whose platforms add the given entities."""

from homeassistant.config_entries import ConfigEntry, ConfigFlow
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddEntitiesCallback
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    MockModule,
    MockPlatform,
    mock_config_flow,
    mock_integration,
    mock_platform,
)


async def async_setup_test_integration(
    hass: HomeAssistant, domain: str, entities: dict[str, list[Entity]]
) -> MockConfigEntry:
    """Integration ``domain`` set up from a config entry: each platform (``"tts"``…) adds its entities."""
    platforms = list(entities)

    async def setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
        await hass.config_entries.async_forward_entry_setups(entry, platforms)
        return True

    async def unload_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
        return await hass.config_entries.async_unload_platforms(entry, platforms)

    def adder(items: list[Entity]) -> MockPlatform:
        async def add(hass: HomeAssistant, entry: ConfigEntry, add_entities: AddEntitiesCallback) -> None:
            add_entities(items)

        return MockPlatform(async_setup_entry=add)

    mock_integration(hass, MockModule(domain, async_setup_entry=setup_entry, async_unload_entry=unload_entry))
    for platform, items in entities.items():
        mock_platform(hass, f"{domain}.{platform}", adder(items))
    mock_platform(hass, f"{domain}.config_flow")
    with mock_config_flow(domain, ConfigFlow):
        entry = MockConfigEntry(domain=domain)
        entry.add_to_hass(hass)
        assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    return entry
