"""Every platform's entities, as Home Assistant's own tests take them: ``snapshot_platform``.

One platform at a time, every entity enabled, for a device that offers every mapped tool (display,
battery, camera, IR codes, a lamp) and the hub's second device, paired but never connected; and
for a stock board booted through its OTA check (its firmware, the wake phrase of a MultiNet
build). What the entities do is tested beside their platform's behaviour (``test_entities.py`` …);
this file pins what they are: names, unique ids, classes, categories, units and first states. It
is the one snapshot style of the suite.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import PropertyMock, patch

from aiohttp.test_utils import TestClient
from homeassistant.components import image
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.helpers import entity_registry as er
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry, snapshot_platform
from pytest_homeassistant_custom_component.syrupy import HomeAssistantSnapshotExtension
from syrupy.assertion import SnapshotAssertion

from custom_components.xiaozhi_local.const import WS_PATH
from custom_components.xiaozhi_local.wake_words.files import FOLDER
from xiaozhi_sim.assets import default_pack

from .conftest import MAC, DeviceFactory, mqtt_online, served_hub, wait_settled
from .helpers import hub_device, until

PLATFORMS = [
    Platform.ASSIST_SATELLITE,
    Platform.BINARY_SENSOR,
    Platform.BUTTON,
    Platform.EVENT,
    Platform.IMAGE,
    Platform.LIGHT,
    Platform.MEDIA_PLAYER,
    Platform.NUMBER,
    Platform.SELECT,
    Platform.SENSOR,
    Platform.SWITCH,
]
"""The platforms of a device that connects without an OTA check (``STOCK_PLATFORMS``: with one)."""

STOCK_PLATFORMS = [Platform.TEXT, Platform.UPDATE]
"""Entities that come with a stock board's OTA check: its firmware (``update``), and the wake
phrase of a board built with MultiNet (``text``)."""


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """Registry entries and states as Home Assistant's own tests store them (ids and times left out)."""
    return snapshot.use_extension(HomeAssistantSnapshotExtension)


MINIMAL_PLATFORMS = [
    Platform.ASSIST_SATELLITE,
    Platform.BINARY_SENSOR,
    Platform.BUTTON,
    Platform.EVENT,
    Platform.MEDIA_PLAYER,
    Platform.SELECT,
    Platform.SENSOR,
    Platform.SWITCH,
]
"""The platforms with entities for a client that offers no tool (the others have none then)."""


@pytest.fixture(autouse=True)
def same_image_token() -> Iterator[None]:
    """The image entity's access token, random in Home Assistant, the same at every run."""
    with patch.object(image._RND, "getrandbits", return_value=0x5EED):
        yield


@pytest.fixture
def multinet_board(hass: HomeAssistant, tmp_path: Path) -> bytes:
    """The configuration folder holds the board's default pack, built with MultiNet: its pack."""
    hass.config.config_dir = str(tmp_path)
    (tmp_path / FOLDER).mkdir()
    pack = default_pack("你好小智", multinet=True)
    (tmp_path / FOLDER / "bread-compact-wifi.bin").write_bytes(pack)
    return pack


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


@pytest.mark.parametrize("only", STOCK_PLATFORMS, indirect=True, ids=str)
async def test_entities_of_a_stock_board(
    hass: HomeAssistant,
    only: Platform,
    multinet_board: bytes,
    entity_registry: er.EntityRegistry,
    snapshot: SnapshotAssertion,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    hub = await served_hub(hass, setup_integration, client)
    device = await mqtt_online(hub, client, assets_pack=multinet_board)
    expected = f"{only}.kitchen_{'firmware' if only is Platform.UPDATE else 'wake_phrase'}"
    try:
        # The wake phrase comes once the board's pack is read (in the background, after the OTA check).
        await until(lambda: entity_registry.async_get(expected) is not None)
        await hass.async_block_till_done(wait_background_tasks=True)
        await snapshot_platform(hass, entity_registry, snapshot, setup_integration.entry_id)
    finally:
        await device.drop()


@pytest.mark.parametrize("only", MINIMAL_PLATFORMS, indirect=True, ids=str)
async def test_entities_of_a_minimal_client(
    hass: HomeAssistant,
    only: Platform,
    entity_registry: er.EntityRegistry,
    snapshot: SnapshotAssertion,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """A client whose hello says nothing and that offers no tool: what every device has."""
    headers = {"Authorization": "Bearer device-token-" + "a" * 40, "Device-Id": MAC}
    async with client.ws_connect(WS_PATH, headers=headers) as ws:
        await ws.send_str('{"type":"hello"}')
        await ws.receive()
        await hub_device(hass).async_wait_ready(5)
        await hass.async_block_till_done()
        await snapshot_platform(hass, entity_registry, snapshot, setup_integration.entry_id)
