"""Every platform's entities, as Home Assistant's own tests take them: ``snapshot_platform``.

One platform at a time, every entity enabled, for a device that offers every mapped tool (display,
battery, camera, IR codes, a lamp) and the hub's second device, paired but never connected.
What the entities do is tested beside their platform's behaviour (``test_entities.py`` …); this
file pins what they are: names, unique ids, classes, categories, units and first states.
"""

from collections.abc import Iterator
from unittest.mock import PropertyMock, patch

from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.helpers import entity_registry as er
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, snapshot_platform
from pytest_homeassistant_custom_component.syrupy import HomeAssistantSnapshotExtension
from syrupy.assertion import SnapshotAssertion

from .conftest import DeviceFactory, wait_settled
from .helpers import hub_device

PLATFORMS = [
    Platform.ASSIST_SATELLITE,
    Platform.BINARY_SENSOR,
    Platform.BUTTON,
    Platform.EVENT,
    Platform.LIGHT,
    Platform.MEDIA_PLAYER,
    Platform.NUMBER,
    Platform.SELECT,
    Platform.SENSOR,
]
"""All but ``image``, whose state carries a fresh access token each run (``test_vision.py`` tests it),
and ``update``, whose entity comes with a device's OTA check (``test_firmware_update.py``)."""


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """Registry entries and states as Home Assistant's own tests store them (ids and times left out)."""
    return snapshot.use_extension(HomeAssistantSnapshotExtension)


@pytest.fixture
def only(request: pytest.FixtureRequest) -> Iterator[Platform]:
    """The integration sets up this one platform, with every entity enabled (also those off by default)."""
    platform: Platform = request.param
    with (
        patch("custom_components.xiaozhi_local.PLATFORMS", [platform]),
        patch(
            "homeassistant.helpers.entity.Entity.entity_registry_enabled_default",
            new_callable=PropertyMock,
            return_value=True,
        ),
    ):
        yield platform


@pytest.mark.parametrize("only", PLATFORMS, indirect=True, ids=str)
async def test_entities_of(
    hass: HomeAssistant,
    only: Platform,
    entity_registry: er.EntityRegistry,
    snapshot: SnapshotAssertion,
    setup_integration: MockConfigEntry,
    make_device: DeviceFactory,
) -> None:
    await make_device(camera=True, board="esp32-s3-eye", ir=True, lamp=True)
    await wait_settled(hub_device(hass))
    await hass.async_block_till_done()
    await snapshot_platform(hass, entity_registry, snapshot, setup_integration.entry_id)
