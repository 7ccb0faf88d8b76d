"""The hub: one per HA instance (the config entry). Owns the paired devices and finds them fast."""

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
import hashlib
import hmac
import logging
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from homeassistant.config_entries import SOURCE_INTEGRATION_DISCOVERY, ConfigEntry, ConfigSubentry
from homeassistant.const import CONF_CLIENT_ID, CONF_MAC, CONF_TOKEN
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import discovery_flow
from homeassistant.helpers.event import async_track_time_interval
from homeassistant.helpers.json import json_bytes
from homeassistant.helpers.storage import Store

from . import transport
from .auth import Refused
from .const import (
    CONF_ACCEPT_WITHOUT_CODE,
    CONF_MQTT,
    CONF_MQTT_PORT,
    CONF_NEW_PER_HOUR,
    CONF_OPEN,
    CONF_TRANSPORT,
    CONF_UDP_PORT,
    CONF_WEBSOCKET_URL,
    DEFAULT_MQTT_PORT,
    DEFAULT_NEW_PER_HOUR,
    DEFAULT_UDP_PORT,
    DOMAIN,
    MISSED_PINGS,
    PING_INTERVAL,
    REFRESH_EVERY_SWEEPS,
    REFRESH_SPREAD,
    SUBENTRY_DEVICE,
    TRANSPORT_MQTT,
    TRANSPORT_WEBSOCKET,
)
from .device import REPORT_SAVE_DELAY, XiaozhiDevice
from .firmware.installer import FirmwareUpdates
from .firmware.remote import CHECK_EVERY as FIRMWARE_CHECK_EVERY
from .identities import IdentityJournal, token_hash
from .idle_media import AnnouncementStore
from .limits import SlidingWindow
from .link import DeviceLink
from .mqtt import MqttEndpoint
from .pairing import DeviceReport, Identity, PairingManager, PendingDevice, new_token
from .protocol.logs import OnceLogger
from .protocol.messages import normalize_mac
from .repairs import async_mqtt_port, async_token_accepted, async_wrong_token
from .urls import firmware_url, notify_url, vision_url, websocket_url

_LOGGER = logging.getLogger(__name__)

STORAGE_VERSION = 1
_DUMMY_TOKEN = "x" * 43  # compared against when the device is unknown, so timing tells nothing


def hub_store(hass: HomeAssistant, entry_id: str) -> Store[dict[str, Any]]:
    """Where the hub ``entry_id`` keeps its devices' reports, settings and firmware facts."""
    return Store(hass, STORAGE_VERSION, f"{DOMAIN}.{entry_id}")


class XiaozhiHub:
    """Paired devices by MAC and by device-registry id (O(1) both ways)."""

    mqtt_bind_host: str | None = None
    """Where the MQTT+UDP endpoint listens; None: every interface."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        self.hass = hass
        self.entry = entry
        self.devices: dict[str, XiaozhiDevice] = {}
        self._by_device_id: dict[str, XiaozhiDevice] = {}
        self.connections: set[DeviceLink] = set()  # every open link (sockets before their hello too)
        self.mqtt: MqttEndpoint | None = None  # the always-connected transport, while it listens
        self.announcements = AnnouncementStore(hass)  # for idle devices that play them (firmware 2.5)
        self.firmware = FirmwareUpdates(hass, self)
        self.firmware.async_configure(dict(entry.options))
        self.stopping = False  # unloading, or Home Assistant stopping: no new connections
        self.started = False  # devices loaded and running: from now on a shutdown saves what they have
        self.pairing = PairingManager(on_drop=self._async_schedule_abort)
        self._no_connections = asyncio.Event()
        self._no_connections.set()
        self._store = hub_store(hass, entry.entry_id)
        self._cache: dict[str, Any] = {}  # by MAC: what was loaded, then the last cache that could be saved
        self._save_due: float | None = None
        self.identities = IdentityJournal(hass, entry.entry_id)
        self._auto_pairing = SlidingWindow(int(entry.options.get(CONF_NEW_PER_HOUR, DEFAULT_NEW_PER_HOUR)), 3600.0)
        self._device_listeners: list[Callable[[XiaozhiDevice], None]] = []
        self._transport_listeners: list[Callable[[], None]] = []
        self._log = OnceLogger("", _LOGGER, again_after=3600.0, clock=hass.loop.time)  # hub-wide warnings
        self._sweeps = 0

    async def async_load(self) -> None:
        """What devices reported before the restart (tools, values, waiting settings); the tokens."""
        self._cache = await self._store.async_load() or {}
        await self.identities.async_load()

    @callback
    def _async_schedule_save(self, delay: float = REPORT_SAVE_DELAY) -> None:
        """Save the devices' caches in ``delay`` seconds, or sooner if a save is already due sooner."""
        due = self.hass.loop.time() + delay
        if self._save_due is not None and self._save_due <= due:
            return
        self._save_due = due
        self._store.async_delay_save(self._data_to_save, delay)

    @callback
    def _data_to_save(self) -> dict[str, Any]:
        """Every device's cache; one that cannot be stored keeps its last good one (the others are saved)."""
        self._save_due = None
        data: dict[str, Any] = {}
        for mac, device in self.devices.items():
            cache = device.as_cache()
            try:
                json_bytes(cache)
            except (TypeError, ValueError) as err:
                device.log.report("unsaveable", f"what it reported cannot be stored ({err}); keeping the last good")
                cache = self._cache.get(mac) or {}
            self._cache[mac] = data[mac] = cache
        return data

    @callback
    def async_restore_devices(self) -> None:
        """Make the subentries match the journal where Home Assistant stopped before saving them.

        The journal is always ahead of the subentries (it is written at once, they a second
        later): a device it has and the subentries lack was paired just before the stop; a
        subentry whose device the journal has deleted was deleted just before it. A subentry
        that still carries a token (one written by a flow, or by a version before the tokens
        moved to the journal) the journal knows as an earlier one was regenerated or deleted.
        """
        subentries = {
            sub.data[CONF_MAC]: sub for sub in self.entry.subentries.values() if sub.subentry_type == SUBENTRY_DEVICE
        }
        for mac, record in self.identities:
            sub = subentries.get(mac)
            carried = sub.data.get(CONF_TOKEN) if sub is not None else None
            stale = isinstance(carried, str) and token_hash(carried) in record.previous
            if record.token is None:
                if sub is not None and (stale or carried is None):
                    _LOGGER.warning("Device %s was deleted just before Home Assistant stopped; deleting it again", mac)
                    self.hass.config_entries.async_remove_subentry(self.entry, sub.subentry_id)
                continue
            data = {CONF_MAC: mac, **record.identity.as_data()}
            if sub is None:
                _LOGGER.warning("Device %s was paired just before Home Assistant stopped; restoring it", mac)
                self.hass.config_entries.async_add_subentry(
                    self.entry,
                    ConfigSubentry(
                        data=MappingProxyType(data),
                        subentry_type=SUBENTRY_DEVICE,
                        title=record.title or default_title(mac),
                        unique_id=mac,
                    ),
                )
            elif stale:
                _LOGGER.warning("Device %s got a new token just before Home Assistant stopped; keeping it", mac)
                kept = {k: v for k, v in sub.data.items() if k != CONF_TOKEN}
                self.hass.config_entries.async_update_subentry(self.entry, sub, data={**kept, **data})

    @callback
    def _token_for(self, mac: str, subentry: ConfigSubentry) -> str:
        """The device's token: one its subentry carries (newer), else the journal's, else a new one.

        A flow hands a new or regenerated token over in the subentry; it moves to the journal and
        leaves the subentry once the journal is on disk (``_async_save_identities``).
        """
        carried = subentry.data.get(CONF_TOKEN)
        if isinstance(carried, str) and carried:
            return carried
        if (record := self.identities.get(mac)) is not None and record.token:
            return record.token
        _LOGGER.warning("Device %s had no token on record; it gets a new one with its next OTA answer", mac)
        return new_token()

    async def _async_save_identities(self) -> None:
        """Write the journal; then the tokens it holds leave the subentries (each secret kept once).

        Home Assistant keeps config entries readable by every user of the machine; the journal
        is kept as its auth store is (0600). The subentry loses its token only once the journal
        holding it is on disk, so a stop in between loses nothing.
        """
        await self.identities.async_flush()
        if self.identities.dirty or self.stopping:
            return  # a newer change: its own save comes next
        for sub in list(self.entry.subentries.values()):
            carried = sub.data.get(CONF_TOKEN)
            if sub.subentry_type != SUBENTRY_DEVICE or carried is None:
                continue
            record = self.identities.get(sub.data[CONF_MAC])
            if record is not None and record.token == carried:
                self.hass.config_entries.async_update_subentry(
                    self.entry, sub, data={k: v for k, v in sub.data.items() if k != CONF_TOKEN}
                )

    @callback
    def async_add_transport_listener(self, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when the connection choice may have changed (the hub option, a device's select)."""
        self._transport_listeners.append(listener)
        return lambda: self._transport_listeners.remove(listener)

    @callback
    def async_transport_changed(self) -> None:
        """The connection choice may have changed: every device follows it (transport.py)."""
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
            self.identities.forget(mac)
            self._cache.pop(mac, None)
            _LOGGER.info("Device %s was removed", mac)
            if gone.connection is not None:
                self.entry.async_create_task(self.hass, gone.connection.async_close("device removed"))
            self._async_schedule_save()
        for mac, subentry in wanted.items():
            token = self._token_for(mac, subentry)
            if (device := self.devices.get(mac)) is not None:
                fresh = device.async_update_from(subentry, token)
            else:
                fresh = True
                device = XiaozhiDevice(
                    self.hass,
                    self.entry.entry_id,
                    subentry,
                    token,
                    cache=self._cache.get(mac),
                    persist=self._async_schedule_save,
                )
                self.devices[mac] = device
                self._by_device_id[device.device_id] = device
                # Connected, a conversation over, a new OTA answer: it may have to change transport.
                device.async_add_listener(lambda d=device: transport.async_follow(self.hass, self, d))  # type: ignore[misc]
                for listener in list(self._device_listeners):
                    listener(device)
            self.identities.note(mac, device.token, device.identity, device.name)
            # The identity that heard the code is paired now, however it was done (card, "Add device").
            for pending in self.pairing.for_mac(mac) if fresh else ():
                if (pending.report.client_id or None) == device.identity.client_id:
                    _LOGGER.info("Device %s paired as %s", mac, device.name)
                    device.async_apply_report(pending.report)
                    self.pairing.remove(mac)
                    self._async_schedule_abort(mac)
                    break
        carried = any(CONF_TOKEN in sub.data for sub in wanted.values())
        if self.identities.dirty or carried:  # at once, not on a delay: see identities.py
            self.entry.async_create_background_task(
                self.hass, self._async_save_identities(), "xiaozhi_local save identities"
            )

    @property
    def accept_without_code(self) -> bool:
        """Hub option: pair unknown devices at first contact (trials only)."""
        return bool(self.entry.options.get(CONF_ACCEPT_WITHOUT_CODE, False))

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
    def firmware_url(self, token: str) -> str:
        """Where a device fetches a firmware image."""
        return firmware_url(self.websocket_url(), token)

    @callback
    def mqtt_for(self, device: XiaozhiDevice) -> dict[str, Any] | None:
        """The ``mqtt`` object of the device's OTA answer, or None: the device stays on WebSocket.

        Only while the endpoint listens: the firmware prefers ``mqtt`` to ``websocket``, so a
        dead endpoint would leave the device with no server at all.
        """
        if self.mqtt is None or not self.mqtt.listening or device.open:
            return None
        if (subentry := self.entry.subentries.get(device.subentry_id)) is None:
            return None  # being removed
        choice = subentry.data.get(CONF_TRANSPORT)
        wanted = (
            self.entry.options.get(CONF_MQTT, True)
            if choice not in (TRANSPORT_MQTT, TRANSPORT_WEBSOCKET)
            else (choice == TRANSPORT_MQTT)
        )
        return self.mqtt.credentials(device, self.device_host()) if wanted else None

    async def async_start_mqtt(self) -> None:
        """Listen for devices on MQTT+UDP as the options say (again after they changed)."""
        options = self.entry.options
        port = int(options.get(CONF_MQTT_PORT, DEFAULT_MQTT_PORT))
        udp_port = int(options.get(CONF_UDP_PORT, DEFAULT_UDP_PORT))
        uses_mqtt = options.get(CONF_MQTT, True) or any(
            sub.data.get(CONF_TRANSPORT) == TRANSPORT_MQTT for sub in self.entry.subentries.values()
        )
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
    def async_proven(self, mac: str, report: DeviceReport) -> XiaozhiDevice | None:
        """The paired device whose MAC and identity this OTA request presents, if it proves both.

        With "Accept new devices without a code", an unknown MAC is paired here, at most
        as many an hour as its option says; a paired MAC with another identity never is.
        """
        device = self.devices.get(mac)
        if device is None and self.accept_without_code:
            if self._allow_new_device():
                _LOGGER.warning("Pairing %s without a code (the hub accepts new devices without one)", mac)
                return self.async_pair(mac, None, report.identity)
            self._log_pairing_cap(mac)
        if device is not None and report.identity.proves(device.identity):
            return device
        return None

    def _allow_new_device(self) -> bool:
        """One more new device without a code this hour (the hub option's number, as it is now)."""
        self._auto_pairing.limit = int(self.entry.options.get(CONF_NEW_PER_HOUR, DEFAULT_NEW_PER_HOUR))
        return self._auto_pairing.allow()

    def _log_pairing_cap(self, who: str) -> None:
        self.log_once(
            "auto_pair_limit",
            "Refused %s: the hub accepts new devices without a code, but %d joined within the last hour "
            "(raise 'New devices without a code per hour' in the hub options, or pair it with its code)",
            who,
            self._auto_pairing.limit,
        )

    @callback
    def async_open_device(self, device_id: str, client_id: str | None) -> XiaozhiDevice | Refused | None:
        """A client with a device id and no token, while the hub accepts devices without a code.

        Load testers written for other xiaozhi servers connect with ``?device-id=<any string>``
        only. Such a client is paired at first contact (within the hourly cap) and let in without
        a token from then on, but only while the option is on, and never as a device that was
        paired the usual way. ``Refused.CAPPED`` when the hour's new devices are used up.
        """
        if not self.accept_without_code:
            return None
        mac = normalize_mac(device_id) or pseudo_mac(device_id)
        if (device := self.devices.get(mac)) is not None:
            return device if device.open else None
        if not self._allow_new_device():
            self._log_pairing_cap(device_id[:64])
            return Refused.CAPPED
        _LOGGER.warning(
            "Pairing %s (%s) without a code or token (the hub accepts new devices without one)", device_id[:64], mac
        )
        return self.async_pair(mac, device_id[:64], Identity(client_id), open_=True)

    @callback
    def async_request_pairing(self, mac: str, report: DeviceReport, source: str = "") -> PendingDevice:
        """A device asks to join (or a paired MAC with another identity): its code, and a card when new."""
        pending, new = self.pairing.request(mac, report, source)
        if new:
            if (device := self.devices.get(mac)) is not None:
                # Anyone can name a paired MAC with a new Client-Id: warned once, counted (diagnostics).
                device.log.report(
                    "asks_to_pair_again",
                    f"a device with its address ({device.name}) asks to pair again with a new identity; "
                    "it was given a code and no token",
                )
            else:
                _LOGGER.info("Device %s (%s) asks to join; its code is on its screen", mac, report.board)
            discovery_flow.async_create_flow(
                self.hass,
                DOMAIN,
                context={"source": SOURCE_INTEGRATION_DISCOVERY},
                data={CONF_MAC: mac, "board": report.board or ""},
            )
        return pending

    @callback
    def async_pair(
        self,
        mac: str,
        title: str | None,
        identity: Identity,
        *,
        open_: bool = False,
        token: str | None = None,
    ) -> XiaozhiDevice:
        """Make ``mac`` with ``identity`` a paired device: a new subentry with its own token.

        ``token``: the one its waiting record was handed with the code (it may hold it already).
        A paired MAC takes the new identity instead. If it had one before, this is another
        device (or a reset one): it gets a new token, and whoever holds the old one is out.
        """
        data: dict[str, Any] = {CONF_MAC: mac, CONF_TOKEN: token or new_token(), **identity.as_data()}
        if open_:
            data[CONF_OPEN] = True
        if (device := self.devices.get(mac)) is not None:
            subentry = self.entry.subentries[device.subentry_id]
            if not device.identity.client_id and token is None:
                data[CONF_TOKEN] = device.token  # its first identity: the token the user configured stays
            _LOGGER.info("Device %s (%s) now has a new identity", device.name, mac)
            self.hass.config_entries.async_update_subentry(
                self.entry, subentry, data=data, title=title or subentry.title
            )
        else:
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
    def async_bind_identity(self, device: XiaozhiDevice, client_id: str | None) -> None:
        """A device paired by MAC alone connected with its token: its ``Client-Id`` is its identity now.

        From then on its OTA requests prove themselves (py-xiaozhi fetches its token there).
        """
        if device.identity.client_id or not client_id or len(client_id) > 64:
            return
        subentry = self.entry.subentries[device.subentry_id]
        _LOGGER.info("Device %s (%s) is known by its client id from now on", device.name, device.mac)
        self.hass.config_entries.async_update_subentry(
            self.entry, subentry, data={**subentry.data, CONF_CLIENT_ID: client_id}
        )
        self.async_sync_devices()

    @callback
    def log_once(self, kind: str, message: str, *args: Any) -> None:
        """A hub-wide warning, logged once an hour at most per kind (the repeats at debug)."""
        self._log.report(kind, message % args if args else message)

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
    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | Refused:
        """The device whose MAC and token these are, or why not; constant-time token comparison."""
        device = self.devices.get(mac)
        expected = device.token if device is not None else _DUMMY_TOKEN
        matches = hmac.compare_digest(expected.encode(), token.encode())
        if not token:
            refusal = Refused.NO_TOKEN
        elif self.identities.was_issued(mac, token):
            refusal = Refused.EARLIER
        elif self.pairing.with_token(mac, token) is not None:
            refusal = Refused.PENDING
        else:
            refusal = Refused.GUESS
        if device is None or (refusal is Refused.PENDING and not matches):
            return refusal  # an identity still waiting for its code (a paired MAC's new one too)
        if not matches or not token:
            device.refused_tokens += 1
            # The bookkeeping after the answer: refusing a paired MAC's wrong token costs what
            # refusing an unknown MAC does, so its timing tells nobody what is paired.
            self.hass.loop.call_soon(self._async_token_refused, device, refusal, device.refused_tokens)
            return refusal
        if device.refused_tokens:
            device.refused_tokens = 0
            async_token_accepted(self.hass, mac)
        return device

    @callback
    def _async_token_refused(self, device: XiaozhiDevice, refusal: Refused, in_a_row: int) -> None:
        """Logged once per kind (diagnostics count them all), and the repair told."""
        why = {Refused.EARLIER: "a token it had before", Refused.NO_TOKEN: "no token"}.get(refusal, "a wrong token")
        device.log.report(f"token_{refusal}", f"refused a connection with {why}")
        async_wrong_token(self.hass, device.mac, device.name, in_a_row)

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
                self.hass, self.firmware.async_check_all(), "xiaozhi_local firmware check"
            )

        self.entry.async_on_unload(
            async_track_time_interval(self.hass, check_firmware, timedelta(seconds=FIRMWARE_CHECK_EVERY))
        )

    @callback
    def _async_sweep(self, _now: datetime) -> None:
        self._sweeps += 1
        for connection in list(self.connections):
            connection.async_check_alive(MISSED_PINGS)
        if self._sweeps % REFRESH_EVERY_SWEEPS == 0:
            self.entry.async_create_background_task(self.hass, self._async_refresh_all(), "xiaozhi_local refresh")

    async def _async_refresh_all(self) -> None:
        """Every connected device's status, one after another over most of a sweep interval.

        Not all at once: a thousand devices asked in the same moment would answer in the same
        moment, and every entity they update would be written in one burst on the event loop.
        """
        devices = sorted(
            (c.device for c in self.connections if c.device.connection is c and c.discovered.is_set()),
            key=lambda device: device.mac,
        )
        spacing = PING_INTERVAL.total_seconds() * REFRESH_SPREAD / max(1, len(devices))
        for index, device in enumerate(devices):
            if index:
                await asyncio.sleep(spacing)
            if device.connection is not None:  # still connected
                self.entry.async_create_background_task(
                    self.hass, device.async_read_queries(), f"xiaozhi_local refresh {device.mac}"
                )

    async def async_run_connection(self, connection: DeviceLink) -> None:
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
        self.firmware.async_cancel_all()
        if self.mqtt is not None:
            endpoint, self.mqtt = self.mqtt, None
            await endpoint.async_stop()
        await asyncio.gather(*(conn.async_close(reason, code) for conn in list(self.connections)))
        if self.started:  # a setup that failed before its devices ran leaves the store as it was
            await self._store.async_save(self._data_to_save())
        await self.identities.async_flush()


def pseudo_mac(device_id: str) -> str:
    """A stable, locally administered MAC for a device id that is no MAC (``load-tester-001``)."""
    digest = hashlib.sha256(device_id.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def default_title(mac: str) -> str:
    """A paired device's name when the user gave none."""
    return f"Xiaozhi {mac}"


type XiaozhiConfigEntry = ConfigEntry[XiaozhiHub]


@callback
def async_get_hub(hass: HomeAssistant) -> XiaozhiHub | None:
    """The loaded hub, if any."""
    entries: list[XiaozhiConfigEntry] = hass.config_entries.async_loaded_entries(DOMAIN)
    return entries[0].runtime_data if entries else None
