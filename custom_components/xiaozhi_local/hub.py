"""The hub: one per HA instance (the config entry). Owns the paired devices and finds them fast."""

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
import logging
from pathlib import Path
from urllib.parse import urlsplit

from homeassistant.config_entries import ConfigEntry
from homeassistant.const import CONF_MAC, CONF_TOKEN
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_track_time_interval
from homeassistant.util.hass_dict import HassKey

from .admission.gate import Refused
from .admission.policy import Admission
from .admission.urls import assets_url, firmware_url, notify_url, vision_url, websocket_url
from .const import (
    CONF_MQTT_PORT,
    CONF_UDP_PORT,
    CONF_WEBSOCKET_URL,
    DEFAULT_MQTT_PORT,
    DEFAULT_UDP_PORT,
    DOMAIN,
    MISSED_PINGS,
    PING_INTERVAL,
    REFRESH_EVERY_SWEEPS,
    REFRESH_SPREAD,
    SUBENTRY_DEVICE,
)
from .device import XiaozhiDevice
from .firmware.files import LOCAL_FOLDER
from .firmware.installer import FirmwareUpdates
from .firmware.remote import CHECK_EVERY as FIRMWARE_CHECK_EVERY
from .link import DeviceLink
from .repairs import async_mqtt_port, async_token_accepted
from .sound.announcements import AnnouncementStore
from .store.storage import HubStorage
from .tasks import watched
from .transport import choice as transport
from .transport.mqtt import MqttEndpoint
from .wake_word.change import WakeWords
from .wake_word.files import FOLDER as WAKE_WORD_FOLDER, WakeWordFiles

_LOGGER = logging.getLogger(__name__)


class XiaozhiHub:
    """Paired devices by MAC and by device-registry id (O(1) both ways)."""

    mqtt_bind_host: str | None = None
    """Where the MQTT+UDP endpoint listens; None: every interface."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        self.hass = hass
        self.entry = entry
        self.devices: dict[str, XiaozhiDevice] = {}
        self._by_device_id: dict[str, XiaozhiDevice] = {}
        self.links: set[DeviceLink] = set()  # every open link (sockets before their hello too)
        self.mqtt: MqttEndpoint | None = None  # the always-connected transport, while it listens
        self.announcements = AnnouncementStore(hass, self.notify_url)  # for idle devices that play them (firmware 2.5)
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
        self._saving: asyncio.Task[None] | None = None  # the journal's save (async_request_save)
        self._save_again = False
        self.started = False  # devices loaded and running: from now on a shutdown saves what they have
        self._no_connections = asyncio.Event()
        self._no_connections.set()
        self.storage = HubStorage(hass, entry, self.devices)
        self.identities = self.storage.identities
        self.admission = Admission(hass, entry, self.devices, self.identities, self.async_sync_devices)
        self._device_listeners: list[Callable[[XiaozhiDevice], None]] = []
        self._transport_listeners: list[Callable[[], None]] = []
        self._sweeps = 0

    @callback
    def async_add_transport_listener(self, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when the connection choice may have changed (the hub option, a device's select)."""
        self._transport_listeners.append(listener)
        return lambda: self._transport_listeners.remove(listener)

    @callback
    def async_transport_changed(self) -> None:
        """The connection choice may have changed: every device follows it (transport/choice.py)."""
        for device in list(self.devices.values()):
            transport.async_follow(self.hass, self, device)
        for listener in list(self._transport_listeners):
            listener()

    @callback
    def async_add_device_listener(self, listener: Callable[[XiaozhiDevice], None]) -> CALLBACK_TYPE:
        """Be told of each device added from now on (platforms add its entities)."""
        self._device_listeners.append(listener)
        return lambda: self._device_listeners.remove(listener)

    @callback
    def async_sync_devices(self) -> None:
        """Match the devices to the entry's subentries (added, changed, removed)."""
        wanted = {
            sub.data[CONF_MAC]: sub for sub in self.entry.subentries.values() if sub.subentry_type == SUBENTRY_DEVICE
        }
        for mac in [mac for mac in self.devices if mac not in wanted]:
            gone = self.devices.pop(mac)
            self._by_device_id.pop(gone.device_id, None)
            self.storage.async_forget(mac)
            self.firmware.async_forget(mac)
            self.wake_words.async_cancel(gone)
            async_token_accepted(self.hass, mac)  # nothing of it to repair any more
            _LOGGER.info("Device %s was removed", mac)
            if gone.link is not None:
                self.entry.async_create_task(self.hass, gone.link.async_close("device removed"))
        for mac, subentry in wanted.items():
            token = self.storage.token_for(mac, subentry)
            if (device := self.devices.get(mac)) is not None:
                fresh = device.async_update_from(subentry, token)
            else:
                fresh = True
                device = XiaozhiDevice(
                    self.hass,
                    self.entry.entry_id,
                    subentry,
                    token,
                    cache=self.storage.cached(mac),
                    persist=self.storage.async_schedule_save,
                )
                self.devices[mac] = device
                self._by_device_id[device.device_id] = device
                # Connected, a conversation over, a new OTA answer: it may have to change transport.
                device.async_add_listener(
                    lambda d=device: transport.async_follow(self.hass, self, d),  # type: ignore[misc]
                    activity=True,
                )
                for listener in list(self._device_listeners):
                    listener(device)
            self.identities.note(mac, device.token, device.identity, device.name)
            if fresh:
                self.admission.async_joined(device)
        carried = any(CONF_TOKEN in sub.data for sub in wanted.values())
        if self.identities.dirty or carried:  # at once, not on a delay: see admission/identities.py
            self.async_request_save()

    @callback
    def async_request_save(self) -> None:
        """Save the journal, then move the tokens out of the subentries: queued, one save at a time.

        A save updates subentries; each update calls the entry's update listener at once, which
        syncs the devices and asks for a save again. Started from there, a save would update the
        next subentry before it ever yielded, one stack level per device (RecursionError past a
        hundred or so). Asked while one runs, the request is remembered and that save runs once
        more; the task starts on the loop's next turn, never inside the listener.
        """
        self._save_again = True
        if self._saving is None or self._saving.done():
            self._saving = watched(
                self.entry.async_create_background_task(
                    self.hass, self._async_save_queue(), "xiaozhi_local save identities", eager_start=False
                )
            )

    async def _async_save_queue(self) -> None:
        while self._save_again and not self.stopping:
            self._save_again = False
            await self.storage.async_save_identities(lambda: self.stopping)

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

    async def async_start_mqtt(self) -> None:
        """Listen for devices on MQTT+UDP as the options say (again after they changed): the endpoint's life."""
        options = self.entry.options
        port = int(options.get(CONF_MQTT_PORT, DEFAULT_MQTT_PORT))
        udp_port = int(options.get(CONF_UDP_PORT, DEFAULT_UDP_PORT))
        uses_mqtt = transport.mqtt_in_use(self.entry)
        current = self.mqtt
        if current is not None and uses_mqtt and current.listening and (current.wanted == (port, udp_port)):
            return
        if current is not None:
            self.mqtt = None
            if not uses_mqtt and not self.stopping:
                # Turned off: a device only checks OTA at boot, and without the endpoint it would
                # retry MQTT until someone power-cycles it. Restarted now, it comes back on WebSocket.
                await asyncio.gather(*(link.device.async_restart_quietly() for link in list(current.links)))
            await current.async_stop()
        if not uses_mqtt or self.stopping:
            async_mqtt_port(self.hass, None, port, udp_port)
            return
        endpoint = MqttEndpoint(self.hass, self, port, udp_port, self.mqtt_bind_host)
        error = await endpoint.async_start()
        async_mqtt_port(self.hass, error, port, udp_port)
        if error is not None:
            _LOGGER.warning(
                "Cannot listen on MQTT port %s / UDP port %s (%s); devices stay on WebSocket", port, udp_port, error
            )
            return
        self.mqtt = endpoint

    @callback
    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | Refused:
        """The device whose MAC and token these are, or why not (admission/policy.py)."""
        return self.admission.async_authenticate(mac, token)

    @callback
    def async_get_device(self, device_id: str) -> XiaozhiDevice | None:
        """A device by its device-registry id."""
        return self._by_device_id.get(device_id)

    @callback
    def async_start(self) -> None:
        """Start the liveness sweep (one timer for every connection) and the firmware checks."""
        self.started = True
        self.entry.async_on_unload(async_track_time_interval(self.hass, self._async_sweep, PING_INTERVAL))

        @callback
        def check_firmware(_now: datetime) -> None:
            self.entry.async_create_background_task(
                self.hass, self.firmware.catalog.async_check_all(), "xiaozhi_local firmware check"
            )

        self.entry.async_on_unload(
            async_track_time_interval(self.hass, check_firmware, timedelta(seconds=FIRMWARE_CHECK_EVERY))
        )

    @callback
    def _async_sweep(self, _now: datetime) -> None:
        self._sweeps += 1
        for link in list(self.links):
            link.async_check_alive(MISSED_PINGS)
        if self._sweeps % REFRESH_EVERY_SWEEPS == 0:
            self.entry.async_create_background_task(self.hass, self._async_refresh_all(), "xiaozhi_local refresh")

    async def _async_refresh_all(self) -> None:
        """Every connected device's status, one after another over most of a sweep interval.

        Not all at once: a thousand devices asked in the same moment would answer in the same
        moment, and every entity they update would be written in one burst on the event loop.
        """
        devices = sorted(
            (c.device for c in self.links if c.device.link is c and c.discovered.is_set()),
            key=lambda device: device.mac,
        )
        spacing = PING_INTERVAL.total_seconds() * REFRESH_SPREAD / max(1, len(devices))
        for index, device in enumerate(devices):
            if index:
                await asyncio.sleep(spacing)
            if device.link is not None:  # still connected
                self.entry.async_create_background_task(
                    self.hass, device.values.async_read(), f"xiaozhi_local refresh {device.mac}"
                )

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

    async def async_shutdown(self, reason: str = "integration unloaded", code: int = 1000) -> None:
        """Close every open connection, also those still waiting for their hello; save.

        From now on the endpoint refuses devices (they retry): on unload, and when Home
        Assistant stops, where an open WebSocket would hold its shutdown up for many seconds.
        """
        self.stopping = True
        self.firmware.async_cancel_all()
        for device in list(self.devices.values()):
            self.wake_words.async_cancel(device)
        if self.mqtt is not None:
            endpoint, self.mqtt = self.mqtt, None
            await endpoint.async_stop()
        await asyncio.gather(*(conn.async_close(reason, code) for conn in list(self.links)))
        if self.started:  # a setup that failed before its devices ran leaves the store as it was
            await self.storage.async_save_now()
        else:
            await self.identities.async_flush()


type XiaozhiConfigEntry = ConfigEntry[XiaozhiHub]


DATA_HUB: HassKey[XiaozhiHub] = HassKey(f"{DOMAIN}_hub")
"""The hub while it is set up and not unloading: what the device views, actions and flows find."""


@callback
def async_get_hub(hass: HomeAssistant) -> XiaozhiHub | None:
    """The set-up hub, if any (None from the moment its unload begins)."""
    return hass.data.get(DATA_HUB)
