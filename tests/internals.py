"""The one back door from the tests into the integration's internals.

Tests assert through Home Assistant's surfaces (states, services, events) where they can; what
only the integration can tell (its hub, a link's MCP client) is reached here and nowhere else, so
a change of the internals changes this module, not every test.
"""

import asyncio
from collections.abc import Callable
from typing import Any

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.link import DeviceLink
from custom_components.xiaozhi_local.protocol.mcp_client import McpClient
from custom_components.xiaozhi_local.protocol.messages import ClientHello


def hub_of(source: HomeAssistant | ConfigEntry[Any]) -> XiaozhiHub:
    """The hub of ``source`` (a config entry, or the first of the integration's)."""
    entry = source if isinstance(source, ConfigEntry) else source.config_entries.async_entries(DOMAIN)[0]
    hub: XiaozhiHub = entry.runtime_data
    return hub


def mcp_of(link: DeviceLink) -> McpClient:
    """The MCP client of a device's link."""
    return link.session.mcp


def hello_of(link: DeviceLink) -> ClientHello | None:
    """The hello the device sent on ``link``."""
    return link.session.hello


def session_id_of(link: DeviceLink) -> str:
    """The session id of ``link``'s conversation."""
    return str(link.session.session_id)


async def uplink_decoded(device: XiaozhiDevice) -> None:
    """Until every packet fed to the device's current listening turn is decoded and queued."""
    satellite: Any = device.voice
    run = satellite._runner.run if satellite is not None else None
    if run is None or run.turn is None or run.turn.decoder is None:
        return
    drained = asyncio.Event()
    run.turn.decoder.when_drained(drained.set)
    await drained.wait()


def listening_turn(device: XiaozhiDevice) -> bool:
    """Whether the device's satellite runs a listening turn that still takes audio."""
    satellite: Any = device.voice
    run = satellite._runner.run if satellite is not None else None
    return run is not None and run.turn is not None and not run.turn.ended


def wake_phrase_of(device: XiaozhiDevice) -> str | None:
    """The wake phrase the device's satellite holds for its next turn."""
    satellite: Any = device.voice
    phrase: str | None = satellite._listening.wake_phrase
    return phrase


def text_waiting(device: XiaozhiDevice) -> bool:
    """Whether a ``listen detect`` text waits to be told apart (wake word or typed text)."""
    satellite: Any = device.voice
    return satellite._text.deferred is not None


def wake_audio_kept(device: XiaozhiDevice) -> int:
    """Bytes of audio the device's satellite keeps from outside a turn (its wake word's, maybe)."""
    satellite: Any = device.voice
    return sum(len(packet) for _link, _at, packet in satellite._listening._before_turn)


def wake_audio_taken(device: XiaozhiDevice) -> int:
    """Packets the satellite took as wake audio at the device's last ``listen detect``."""
    satellite: Any = device.voice
    return len(satellite._listening._wake_audio)


def udp_reader_paused(hub: XiaozhiHub) -> Callable[[], None]:
    """Stop the MQTT endpoint's UDP socket being read when it is readable; the undo.

    Only an explicit drain reads it meanwhile (what the MQTT side does before a ``listen detect``).
    """
    assert hub.mqtt is not None
    udp: Any = hub.mqtt._udp
    fileno = udp._sock.fileno()
    loop = hub.hass.loop
    loop.remove_reader(fileno)
    return lambda: loop.add_reader(fileno, udp.drain)


def runner_of(device: XiaozhiDevice) -> Any:
    """The device's satellite's runner (satellite/runner.py), for its background tasks."""
    satellite: Any = device.voice
    return satellite._runner
