"""Fixtures: a real test HA with the integration, and simulated devices over real WebSockets."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from aiohttp.test_utils import TestClient
from homeassistant.config_entries import ConfigSubentryData
from homeassistant.const import CONF_CLIENT_ID, CONF_MAC, CONF_TOKEN
from homeassistant.core import HomeAssistant
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

# Imported first, so HA mounts this repository's custom_components (before HA looks for custom integrations).
import custom_components.xiaozhi_local  # noqa: F401
from custom_components.xiaozhi_local.const import DOMAIN, OTA_PATH, SUBENTRY_DEVICE, WS_PATH
from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.hub import XiaozhiHub
from xiaozhi_sim import OtaTiming, SimulatedDevice, SimulatorOptions
from xiaozhi_sim.voice import MicEncoder

from .internals import hub_of, mcp_of

if TYPE_CHECKING:
    from .voice import Voice

MAC = "cc:ba:97:04:92:94"
TOKEN = "device-token-" + "a" * 40
MAC2 = "cc:ba:97:04:92:95"
TOKEN2 = "device-token-" + "b" * 40
CLIENT_ID = "9c3e5b2a-0000-4000-8000-000000000001"
"""The Client-Id the device MAC paired with (the firmware keeps it in flash)."""
CLIENT_ID2 = "9c3e5b2a-0000-4000-8000-000000000002"


SIMULATED_CLOCK_KEEPALIVE = 240


@pytest.fixture(autouse=True)
def mqtt_on_loopback(socket_enabled: None) -> Iterator[None]:
    """The hub's MQTT+UDP endpoint (on by default) binds free loopback ports in tests.

    Set up before ``hass`` (``auto_enable_custom_integrations`` asks for it first), so that it
    still holds while ``hass`` unloads the hub at its teardown: an endpoint started then binds no
    real port. The keepalive handed out is the firmware's own default (240 s): many tests move
    Home Assistant's clock by minutes while a simulated device's pings keep real time. The tests of
    the keepalive itself, and the firmware suite, set the real one (``transport/mqtt.py``).
    """
    with (
        patch("custom_components.xiaozhi_local.transport.mqtt.KEEPALIVE", SIMULATED_CLOCK_KEEPALIVE),
        patch.object(XiaozhiHub, "mqtt_bind_host", "127.0.0.1"),
        patch("custom_components.xiaozhi_local.driver.DEFAULT_MQTT_PORT", 0),
        patch("custom_components.xiaozhi_local.driver.DEFAULT_UDP_PORT", 0),
    ):
        yield


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations(mqtt_on_loopback: None, enable_custom_integrations: None) -> None:
    """Load custom integrations in every test (``hass`` comes after ``mqtt_on_loopback``)."""


@pytest.fixture(autouse=True)
async def core_components(hass: HomeAssistant, tmp_path: Path) -> AsyncIterator[None]:
    """What the voice dependencies need first (conversation needs ``homeassistant``); TTS cache in tmp."""
    with (
        patch("homeassistant.components.tts._init_tts_cache_dir", return_value=str(tmp_path)),
        patch("homeassistant.components.tts._get_cache_files", return_value={}),
    ):
        assert await async_setup_component(hass, "homeassistant", {})
        yield


def device_subentry(mac: str, token: str, title: str | None = None, client_id: str | None = None) -> ConfigSubentryData:
    """Subentry data of a paired device (paired with ``client_id``, or by MAC alone)."""
    data = {CONF_MAC: mac, CONF_TOKEN: token} | ({CONF_CLIENT_ID: client_id} if client_id else {})
    return ConfigSubentryData(
        data=data,
        subentry_type=SUBENTRY_DEVICE,
        title=title or f"Xiaozhi {mac}",
        unique_id=mac,
    )


@pytest.fixture
def config_entry() -> MockConfigEntry:
    """The hub with two paired devices."""
    return MockConfigEntry(
        domain=DOMAIN,
        title="Xiaozhi Local",
        data={},
        subentries_data=[
            device_subentry(MAC, TOKEN, "Kitchen", CLIENT_ID),
            device_subentry(MAC2, TOKEN2, "Desk", CLIENT_ID2),
        ],
    )


@pytest.fixture
async def setup_integration(hass: HomeAssistant, config_entry: MockConfigEntry) -> MockConfigEntry:
    """The integration, loaded."""
    config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(config_entry.entry_id)
    await hass.async_block_till_done()
    return config_entry


type DeviceFactory = Callable[..., Awaitable[SimulatedDevice]]


@pytest.fixture
async def client(
    hass: HomeAssistant, setup_integration: MockConfigEntry, hass_client_no_auth: ClientSessionGenerator
) -> AsyncIterator[TestClient[Any, Any]]:
    """An HTTP client of the test HA's server (loopback); at the end, every connection is over."""
    hub = hub_of(setup_integration)
    yield await hass_client_no_auth()
    async with asyncio.timeout(5):
        await hub.async_wait_no_connections()


def ws_url(client: TestClient[Any, Any]) -> str:
    """The device endpoint on the test server."""
    return str(client.make_url(WS_PATH)).replace("http://", "ws://", 1)


async def served_hub(
    hass: HomeAssistant, entry: MockConfigEntry, client: TestClient[Any, Any], **options: Any
) -> XiaozhiHub:
    """The hub with these options, its device URLs pointing at the test server."""
    hass.config_entries.async_update_entry(entry, options={"websocket_url": ws_url(client), **options})
    await hass.async_block_till_done()
    hub: XiaozhiHub = hub_of(entry)
    return hub


def ota_url(client: TestClient[Any, Any]) -> str:
    """The OTA URL on the test server (what a device's Wi-Fi portal is given)."""
    return str(client.make_url(OTA_PATH))


FAST = OtaTiming(check_retry_base=0.01, activate_pending_delay=0.01, activate_error_delay=0.01, no_challenge_wait=0.01)
"""The firmware's OTA retries and waits, in milliseconds instead of seconds."""


@pytest.fixture
async def make_device(client: TestClient[Any, Any]) -> AsyncIterator[DeviceFactory]:
    """Build simulated devices; ``connect=False`` leaves the socket unopened."""
    devices: list[SimulatedDevice] = []

    async def factory(*, connect: bool = True, **kwargs: Any) -> SimulatedDevice:
        options: dict[str, Any] = {
            "url": ws_url(client),
            "token": TOKEN,
            "mac": MAC,
            "client_id": CLIENT_ID,
            "hello_timeout": 5,
        }
        options.update(kwargs)
        device = SimulatedDevice(SimulatorOptions(**options))
        devices.append(device)
        if connect:
            await device.connect()
        return device

    yield factory
    for device in devices:
        await device.drop()
    # The client fixture's teardown then waits until the server side has ended every connection.


async def wait_for(device: XiaozhiDevice, predicate: Callable[[XiaozhiDevice], bool], timeout: float = 5) -> None:
    """Wait until ``predicate(device)`` holds, woken by the device's own change notifications."""
    changed = asyncio.Event()
    unsub = device.async_add_listener(changed.set, activity=True)
    try:
        async with asyncio.timeout(timeout):
            while not predicate(device):
                changed.clear()
                await changed.wait()
    finally:
        unsub()


async def wait_settled(device: XiaozhiDevice) -> None:
    """Until the connect-time round is over (settings applied, status read): no calls in flight."""
    link = await device.async_wait_ready(5)
    async with asyncio.timeout(5):
        await link.settled.wait()
    assert mcp_of(link).pending_count == 0


async def mqtt_online(hub: XiaozhiHub, client: TestClient[Any, Any], **options: Any) -> SimulatedDevice:
    """A stock device booted over MQTT (OTA check, broker session), idle: no conversation channel."""
    device = SimulatedDevice(
        SimulatorOptions(url="", mac=MAC, client_id=CLIENT_ID, hello_timeout=5, **options), speaks_mqtt=True
    )
    await device.boot_mqtt(ota_url(client), timing=FAST)
    await wait_for(hub.devices[MAC], lambda d: d.link is not None)
    await wait_settled(hub.devices[MAC])
    return device


@functools.cache
def first_packets(frame_ms: int) -> tuple[bytes, ...]:
    """Three frames of silence, encoded once: a PyAV encoder keeps native threads until Python's
    cyclic garbage collector frees it, so one per conversation would pile threads up in
    lifecycle tests (the simulator's, not the integration's)."""
    return tuple(MicEncoder(frame_ms).packets(bytes(16000 * 2 * frame_ms // 1000 * 3)))


async def mqtt_in_conversation(hub: XiaozhiHub, device: SimulatedDevice) -> None:
    """Its wake word over MQTT: hello, the UDP channel, and the microphone's first datagrams."""
    await device.connect()
    for packet in first_packets(device.frame_ms):
        device.mqtt.udp.send_datagram(packet)
    await wait_for(hub.devices[device.options.mac], lambda d: d.link is not None and d.link.audio_open)


@pytest.fixture
async def voice(hass: HomeAssistant) -> Voice:
    """Test speech-to-text, text-to-speech and conversation agent, registered like real ones."""
    from .voice import Voice

    providers = Voice()
    await providers.async_setup(hass)
    return providers


@pytest.fixture
async def ready(
    hass: HomeAssistant, voice: Voice, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> AsyncIterator[Voice]:
    """The integration loaded, with the test providers as the preferred pipeline's engines.

    At the end, work that a cancelled run left winding down (HA's TTS stops filling its cache a
    moment after the device stopped listening) finishes before the harness looks for leftovers;
    anything that never finishes still fails the test (by its timeout).
    """
    await voice.async_use(hass)
    yield voice
    await hass.async_block_till_done(wait_background_tasks=True)


@pytest.fixture(params=["websocket", "mqtt"])
async def talking(
    request: pytest.FixtureRequest,
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> AsyncIterator[SimulatedDevice]:
    """A device in a conversation (after a wake word), over WebSocket or MQTT+UDP, settled."""
    hub = await served_hub(hass, setup_integration, client)
    device: SimulatedDevice
    if request.param == "websocket":
        device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, client_id=CLIENT_ID))
        await device.connect()
    else:
        device = await mqtt_online(hub, client)
        await mqtt_in_conversation(hub, device)
    await wait_settled(hub.devices[MAC])
    yield device
    await device.drop()
