"""The hub: one per HA instance (the config entry). Owns the paired devices and finds them fast."""

import asyncio
from datetime import datetime
import hmac
import logging

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.event import async_track_time_interval

from .connection import DeviceConnection
from .const import CONF_MAC, DOMAIN, MISSED_PINGS, PING_INTERVAL, SUBENTRY_DEVICE
from .device import XiaozhiDevice

_LOGGER = logging.getLogger(__name__)

_DUMMY_TOKEN = "x" * 43  # compared against when the device is unknown, so timing tells nothing


class XiaozhiHub:
    """Paired devices by MAC and by device-registry id (O(1) both ways)."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        self.hass = hass
        self.entry = entry
        self.devices: dict[str, XiaozhiDevice] = {}
        self._by_device_id: dict[str, XiaozhiDevice] = {}
        self.connections: set[DeviceConnection] = set()  # every open socket, hello or not
        self._no_connections = asyncio.Event()
        self._no_connections.set()

    @callback
    def async_sync_devices(self) -> None:
        """Match the devices to the entry's subentries (added, changed, removed)."""
        wanted = {
            sub.data[CONF_MAC]: sub for sub in self.entry.subentries.values() if sub.subentry_type == SUBENTRY_DEVICE
        }
        for mac in [mac for mac in self.devices if mac not in wanted]:
            device = self.devices.pop(mac)
            self._by_device_id.pop(device.device_id, None)
            _LOGGER.info("Device %s was removed", mac)
            if device.connection is not None:
                self.hass.async_create_task(device.connection.async_close("device removed"))
        for mac, subentry in wanted.items():
            if (existing := self.devices.get(mac)) is not None:
                existing.async_update_from(subentry)
                continue
            device = XiaozhiDevice(self.hass, self.entry.entry_id, subentry)
            self.devices[mac] = device
            self._by_device_id[device.device_id] = device

    @callback
    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | None:
        """The device whose MAC and token these are; constant-time token comparison."""
        device = self.devices.get(mac)
        expected = device.token if device is not None else _DUMMY_TOKEN
        matches = hmac.compare_digest(expected.encode(), token.encode())
        return device if device is not None and matches and token else None

    @callback
    def async_get_device(self, device_id: str) -> XiaozhiDevice | None:
        """A device by its device-registry id."""
        return self._by_device_id.get(device_id)

    @callback
    def async_start(self) -> None:
        """Start the liveness sweep (one timer for every connection)."""
        self.entry.async_on_unload(async_track_time_interval(self.hass, self._async_sweep, PING_INTERVAL))

    @callback
    def _async_sweep(self, _now: datetime) -> None:
        for connection in list(self.connections):
            connection.async_check_alive(MISSED_PINGS)

    async def async_run_connection(self, connection: DeviceConnection) -> None:
        """Run a connection to its end, keeping count of the open ones."""
        self.connections.add(connection)
        self._no_connections.clear()
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            if not self.connections:
                self._no_connections.set()

    async def async_wait_no_connections(self) -> None:
        """Until every connection has ended (unload, tests)."""
        await self._no_connections.wait()

    async def async_shutdown(self) -> None:
        """Close every open connection, also those still waiting for their hello."""
        await asyncio.gather(*(conn.async_close("integration unloaded") for conn in list(self.connections)))


type XiaozhiConfigEntry = ConfigEntry[XiaozhiHub]


@callback
def async_get_hub(hass: HomeAssistant) -> XiaozhiHub | None:
    """The loaded hub, if any."""
    entries: list[XiaozhiConfigEntry] = hass.config_entries.async_loaded_entries(DOMAIN)
    return entries[0].runtime_data if entries else None
