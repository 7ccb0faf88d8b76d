"""The hub: one per HA instance (the config entry). Owns the paired devices and finds them fast."""

import asyncio
from collections.abc import Callable
from datetime import datetime
import hmac
import logging
from types import MappingProxyType
from typing import Any

from homeassistant.config_entries import SOURCE_INTEGRATION_DISCOVERY, ConfigEntry, ConfigSubentry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import discovery_flow
from homeassistant.helpers.event import async_track_time_interval
from homeassistant.helpers.storage import Store

from .connection import DeviceConnection
from .const import (
    CONF_ACCEPT_WITHOUT_CODE,
    CONF_CLIENT_ID,
    CONF_MAC,
    CONF_TOKEN,
    CONF_WEBSOCKET_URL,
    DOMAIN,
    MISSED_PINGS,
    PING_INTERVAL,
    REFRESH_EVERY_SWEEPS,
    SUBENTRY_DEVICE,
)
from .device import XiaozhiDevice
from .pairing import DeviceReport, PairingManager, PendingDevice, new_token
from .repairs import async_token_accepted, async_wrong_token
from .urls import websocket_url

_LOGGER = logging.getLogger(__name__)

STORAGE_VERSION = 1
SAVE_DELAY = 10.0
_DUMMY_TOKEN = "x" * 43  # compared against when the device is unknown, so timing tells nothing


class XiaozhiHub:
    """Paired devices by MAC and by device-registry id (O(1) both ways)."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        self.hass = hass
        self.entry = entry
        self.devices: dict[str, XiaozhiDevice] = {}
        self._by_device_id: dict[str, XiaozhiDevice] = {}
        self.connections: set[DeviceConnection] = set()  # every open socket, hello or not
        self.stopping = False  # unloading, or Home Assistant stopping: no new connections
        self.pairing = PairingManager(on_drop=self._async_schedule_abort)
        self._no_connections = asyncio.Event()
        self._no_connections.set()
        self._store: Store[dict[str, Any]] = Store(hass, STORAGE_VERSION, f"{DOMAIN}.{entry.entry_id}")
        self._cache: dict[str, Any] = {}
        self._device_listeners: list[Callable[[XiaozhiDevice], None]] = []
        self._sweeps = 0

    async def async_load(self) -> None:
        """What devices reported before the restart (tools, values, waiting settings)."""
        self._cache = await self._store.async_load() or {}

    @callback
    def _async_schedule_save(self) -> None:
        self._store.async_delay_save(self._data_to_save, SAVE_DELAY)

    @callback
    def _data_to_save(self) -> dict[str, Any]:
        return {mac: device.as_cache() for mac, device in self.devices.items()}

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
            device = self.devices.pop(mac)
            self._by_device_id.pop(device.device_id, None)
            _LOGGER.info("Device %s was removed", mac)
            if device.connection is not None:
                self.hass.async_create_task(device.connection.async_close("device removed"))
            self._async_schedule_save()
        for mac, subentry in wanted.items():
            if (existing := self.devices.get(mac)) is not None:
                existing.async_update_from(subentry)
                continue
            device = XiaozhiDevice(
                self.hass, self.entry.entry_id, subentry, self._cache.get(mac), self._async_schedule_save
            )
            self.devices[mac] = device
            self._by_device_id[device.device_id] = device
            for listener in list(self._device_listeners):
                listener(device)
            if (pending := self.pairing.get(mac)) is not None:  # paired just now, however it was done
                _LOGGER.info("Device %s paired as %s", mac, device.name)
                device.async_apply_report(pending.report)
                self.pairing.remove(mac)
                self._async_schedule_abort(mac)

    @property
    def accept_without_code(self) -> bool:
        """Hub option: pair unknown devices at first contact (trials only)."""
        return bool(self.entry.options.get(CONF_ACCEPT_WITHOUT_CODE, False))

    @callback
    def websocket_url(self) -> str:
        """The URL handed to devices: the hub option, else built from HA's internal URL."""
        return self.entry.options.get(CONF_WEBSOCKET_URL) or websocket_url(self.hass)

    @callback
    def async_request_pairing(self, mac: str, report: DeviceReport) -> PendingDevice:
        """An unknown device asks to join: its code, and a discovered-device card when it is new."""
        pending, new = self.pairing.request(mac, report)
        if new:
            _LOGGER.info("Device %s (%s) asks to join; its code is on its screen", mac, report.board)
            discovery_flow.async_create_flow(
                self.hass,
                DOMAIN,
                context={"source": SOURCE_INTEGRATION_DISCOVERY},
                data={CONF_MAC: mac, "board": report.board or ""},
            )
        return pending

    @callback
    def async_pair(self, mac: str, title: str | None, client_id: str | None = None) -> XiaozhiDevice:
        """Make ``mac`` a paired device: a new subentry with its own token."""
        data = {CONF_MAC: mac, CONF_TOKEN: new_token()}
        if client_id:
            data[CONF_CLIENT_ID] = client_id
        self.hass.config_entries.async_add_subentry(
            self.entry,
            ConfigSubentry(
                data=MappingProxyType(data),
                subentry_type=SUBENTRY_DEVICE,
                title=title or default_title(mac),
                unique_id=mac,
            ),
        )
        self.async_sync_devices()
        return self.devices[mac]

    @callback
    def _async_schedule_abort(self, mac: str) -> None:
        """Close the device's discovered-device cards once the running flow step has returned.

        The device was paired, or its code expired or made room for another; the step that is
        running now may belong to one of those cards.
        """
        self.hass.loop.call_soon(self._async_abort_pairing_flows, mac)

    @callback
    def _async_abort_pairing_flows(self, mac: str) -> None:
        """Abort the discovered-device cards of ``mac`` (paired, expired or evicted)."""
        for flow in self.hass.config_entries.flow.async_progress_by_handler(DOMAIN, match_context={"unique_id": mac}):
            self.hass.config_entries.flow.async_abort(flow["flow_id"])

    @callback
    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | None:
        """The device whose MAC and token these are; constant-time token comparison."""
        device = self.devices.get(mac)
        expected = device.token if device is not None else _DUMMY_TOKEN
        matches = hmac.compare_digest(expected.encode(), token.encode())
        if device is None:
            return None
        if not matches or not token:
            device.refused_tokens += 1
            async_wrong_token(self.hass, mac, device.name, device.refused_tokens)
            return None
        if device.refused_tokens:
            device.refused_tokens = 0
            async_token_accepted(self.hass, mac)
        return device

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
        self._sweeps += 1
        refresh = self._sweeps % REFRESH_EVERY_SWEEPS == 0
        for connection in list(self.connections):
            connection.async_check_alive(MISSED_PINGS)
            if refresh and connection.device.connection is connection and connection.discovered.is_set():
                self.entry.async_create_background_task(
                    self.hass, connection.device.async_refresh(), f"xiaozhi_local refresh {connection.device.mac}"
                )

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

    async def async_shutdown(self, reason: str = "integration unloaded", code: int = 1000) -> None:
        """Close every open connection, also those still waiting for their hello; save.

        From now on the endpoint refuses devices (they retry): on unload, and when Home
        Assistant stops, where an open WebSocket would hold its shutdown up for many seconds.
        """
        self.stopping = True
        await asyncio.gather(*(conn.async_close(reason, code) for conn in list(self.connections)))
        await self._store.async_save(self._data_to_save())


def default_title(mac: str) -> str:
    """A paired device's name when the user gave none."""
    return f"Xiaozhi {mac}"


type XiaozhiConfigEntry = ConfigEntry[XiaozhiHub]


@callback
def async_get_hub(hass: HomeAssistant) -> XiaozhiHub | None:
    """The loaded hub, if any."""
    entries: list[XiaozhiConfigEntry] = hass.config_entries.async_loaded_entries(DOMAIN)
    return entries[0].runtime_data if entries else None
