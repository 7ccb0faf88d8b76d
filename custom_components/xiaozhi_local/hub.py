"""The hub: one per HA instance (the config entry's runtime data), what every part reads.

The paired devices (found fast by MAC and by device-registry id), their open links, and the parts
that serve them (admission, storage, firmware, wake words, announcements, the MQTT endpoint while
it listens). It is data and lookups: what changes it from outside events (the subentries, the
timers, options, the shutdown) is the driver (``driver.py``), as ESPHome's manager drives its
runtime entry data.
"""

import asyncio
from collections.abc import Callable
import logging
from pathlib import Path
from urllib.parse import urlsplit

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import device_registry as dr
from homeassistant.util.hass_dict import HassKey

from .admission import transport_choice as transport
from .admission.gate import Refused
from .admission.policy import Admission
from .admission.urls import assets_url, firmware_url, notify_url, vision_url, websocket_url
from .const import (
    CONF_NEAREST,
    CONF_NEAREST_BY_AREA,
    CONF_WEBSOCKET_URL,
    DOMAIN,
    EVENT_NEAREST,
)
from .device import XiaozhiDevice
from .firmware.files import LOCAL_FOLDER
from .firmware.installer import FirmwareUpdates
from .home.nearest import Nearest
from .link import DeviceLink
from .sound.announcements import AnnouncementStore
from .sound.media import audio_executor
from .store.storage import HubStorage
from .transport.mqtt import MqttEndpoint
from .wake_words.change import WakeWords
from .wake_words.files import FOLDER as WAKE_WORD_FOLDER, WakeWordFiles

_LOGGER = logging.getLogger(__name__)


class XiaozhiHub:
    """Paired devices by MAC and by device-registry id (O(1) both ways)."""

    mqtt_bind_host: str | None = None
    """Where the MQTT+UDP endpoint listens; None: every interface."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry, request_sync: Callable[[], None]) -> None:
        """``request_sync``: the driver's, that matches the devices to the subentries (driver.py)."""
        self.hass = hass
        self.entry = entry
        self.devices: dict[str, XiaozhiDevice] = {}
        self._following: dict[str, list[CALLBACK_TYPE]] = {}  # by MAC: what platforms listen to (async_follow)
        self._by_device_id: dict[str, XiaozhiDevice] = {}
        self.links: set[DeviceLink] = set()  # every open link (sockets before their hello too)
        self.mqtt: MqttEndpoint | None = None  # the always-connected transport, while it listens
        self.announcements = AnnouncementStore(hass, self.notify_url)  # for idle devices that play them (firmware 2.5)
        self.nearest = Nearest(  # when several devices hear one wake word
            hass,
            devices=self.devices.values,
            settings=lambda: (
                bool(entry.options.get(CONF_NEAREST, True)),
                bool(entry.options.get(CONF_NEAREST_BY_AREA, False)),
            ),
            area_of=self._area_of,
            executor=lambda: audio_executor(hass),
            fire=lambda data: hass.bus.async_fire(EVENT_NEAREST, data),
        )
        self.firmware = FirmwareUpdates(hass, entry, lambda: self.devices, self.firmware_url)
        self.firmware.catalog.async_configure(dict(entry.options))
        files = WakeWordFiles(
            hass,
            Path(hass.config.path(WAKE_WORD_FOLDER)),
            Path(hass.config.path(LOCAL_FOLDER)),
            lambda: self.firmware.catalog.releases,  # the same opt-in as firmware from the releases
        )
        self.wake_words = WakeWords(hass, files, self.assets_url)
        self.wake_words.files.async_configure(dict(entry.options))
        self.stopping = False  # unloading, or Home Assistant stopping: no new connections
        self.started = False  # devices loaded and running: from now on a shutdown saves what they have
        self._no_connections = asyncio.Event()
        self._no_connections.set()
        self.storage = HubStorage(hass, entry, self.devices)
        self.identities = self.storage.identities
        self.request_sync = request_sync
        self.admission = Admission(hass, entry, self.devices, self.identities, request_sync)
        self._device_listeners: list[Callable[[XiaozhiDevice], None]] = []
        self._transport_listeners: list[Callable[[], None]] = []

    @callback
    def async_add_transport_listener(self, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when the connection choice may have changed (the hub option, a device's select)."""
        self._transport_listeners.append(listener)
        return lambda: self._transport_listeners.remove(listener)

    @callback
    def async_transport_changed(self) -> None:
        """The connection choice may have changed: every device follows it (admission/transport_choice.py)."""
        for device in list(self.devices.values()):
            transport.async_follow(self.hass, self, device)
        for listener in list(self._transport_listeners):
            listener()

    @callback
    def _area_of(self, device: XiaozhiDevice) -> str | None:
        """The device's area in Home Assistant (None: none)."""
        entry = dr.async_get(self.hass).async_get(device.device_id)
        return entry.area_id if entry is not None else None

    def async_add_device_listener(self, listener: Callable[[XiaozhiDevice], None]) -> CALLBACK_TYPE:
        """Be told of each device added from now on (platforms add its entities)."""
        self._device_listeners.append(listener)
        return lambda: self._device_listeners.remove(listener)

    @callback
    def async_follow(self, device: XiaozhiDevice, listener: Callable[[], None]) -> None:
        """``listener()`` on each change of ``device`` (``async_changed``), until it goes.

        Until the device is removed or the entry unloads: nothing of a removed device stays
        alive in the entry.
        """
        self._following.setdefault(device.mac, []).append(device.async_add_listener(listener))

    @callback
    def async_unfollow(self, mac: str | None = None) -> None:
        """Stop the listeners of ``mac`` (None: of every device; the entry unloads)."""
        for following in [self._following.pop(mac, [])] if mac is not None else list(self._following.values()):
            for remove in following:
                remove()
        if mac is None:
            self._following.clear()

    @callback
    def async_add_device(self, device: XiaozhiDevice) -> None:
        """A paired device from now on (the driver's sync); its entities are added."""
        self.devices[device.mac] = device
        self._by_device_id[device.device_id] = device
        for listener in list(self._device_listeners):
            listener(device)

    @callback
    def async_remove_device(self, mac: str) -> XiaozhiDevice:
        """No longer paired (the driver's sync): out of the tables."""
        gone = self.devices.pop(mac)
        self._by_device_id.pop(gone.device_id, None)
        self.async_unfollow(mac)
        return gone

    @callback
    def websocket_url(self) -> str:
        """The URL handed to devices: the hub option, else built from HA's internal URL."""
        return self.entry.options.get(CONF_WEBSOCKET_URL) or websocket_url(self.hass)

    @callback
    def device_host(self) -> str:
        """The host name devices reach Home Assistant by (that of the WebSocket URL)."""
        return urlsplit(self.websocket_url()).hostname or "homeassistant.local"

    @callback
    def vision_url(self) -> str:
        """Where camera boards upload photos."""
        return vision_url(self.websocket_url())

    @callback
    def notify_url(self, token: str) -> str:
        """Where a device fetches an announcement."""
        return notify_url(self.websocket_url(), token)

    @callback
    def assets_url(self, token: str) -> str:
        """Where a device fetches a new assets pack (its wake word)."""
        return assets_url(self.websocket_url(), token)

    @callback
    def firmware_url(self, token: str) -> str:
        """Where a device fetches a firmware image."""
        return firmware_url(self.websocket_url(), token)

    @callback
    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | Refused:
        """The device whose MAC and token these are, or why not (admission/policy.py)."""
        return self.admission.async_authenticate(mac, token)

    @callback
    def async_get_device(self, device_id: str) -> XiaozhiDevice | None:
        """A device by its device-registry id."""
        return self._by_device_id.get(device_id)

    async def async_run_connection(self, link: DeviceLink) -> None:
        """Run a connection to its end, keeping count of the open ones."""
        self.links.add(link)
        self._no_connections.clear()
        try:
            await link.run()
        finally:
            self.links.discard(link)
            if not self.links:
                self._no_connections.set()

    async def async_wait_no_connections(self) -> None:
        """Until every connection has ended (unload, tests)."""
        await self._no_connections.wait()


type XiaozhiConfigEntry = ConfigEntry[XiaozhiHub]


DATA_HUB: HassKey[XiaozhiHub] = HassKey(f"{DOMAIN}_hub")
"""The hub while it is set up and not unloading: what the device views, actions and flows find."""


@callback
def async_get_hub(hass: HomeAssistant) -> XiaozhiHub | None:
    """The set-up hub, if any (None from the moment its unload begins)."""
    return hass.data.get(DATA_HUB)
