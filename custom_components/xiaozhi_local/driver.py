"""What drives the hub: devices, saves, the MQTT endpoint, the sweep and the shutdown.

Its devices kept in step with the subentries, the token journal's saves, the MQTT endpoint's
life, the liveness sweep and the firmware checks, and the shutdown.

The hub (``hub.py``) is what every part reads; the driver is the one part that changes it from
outside events, as ESPHome's ``ESPHomeManager`` drives its ``RuntimeEntryData``. The config entry
keeps the hub as its runtime data; the driver lives in what the setup registered (the update
listener, the unload, the stop).
"""

import asyncio
from datetime import datetime, timedelta
import logging

from homeassistant.config_entries import ConfigEntry
from homeassistant.const import CONF_MAC, CONF_TOKEN
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.event import async_track_time_interval

from .admission import transport_choice as transport
from .const import (
    CONF_MQTT_PORT,
    CONF_UDP_PORT,
    DEFAULT_MQTT_PORT,
    DEFAULT_UDP_PORT,
    MISSED_PINGS,
    PING_INTERVAL,
    REFRESH_EVERY_SWEEPS,
    REFRESH_SPREAD,
    SUBENTRY_DEVICE,
)
from .device import XiaozhiDevice
from .firmware.remote import CHECK_EVERY as FIRMWARE_CHECK_EVERY
from .hub import XiaozhiHub
from .repairs import async_mqtt_port, async_reply_player_played, async_token_accepted
from .tasks import watched
from .transport.mqtt import MqttEndpoint

_LOGGER = logging.getLogger(__name__)


class HubDriver:
    """Drives one hub (one config entry)."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        self.hass = hass
        self.entry = entry
        self.hub = XiaozhiHub(hass, entry, self.async_sync_devices)
        self._saving: asyncio.Task[None] | None = None  # the journal's save (async_request_save)
        self._save_again = False
        self._sweeps = 0
        self._mqtt_lock = asyncio.Lock()  # one start or stop of the MQTT endpoint at a time

    @callback
    def async_sync_devices(self) -> None:
        """Match the devices to the entry's subentries (added, changed, removed)."""
        hub = self.hub
        wanted = {
            sub.data[CONF_MAC]: sub for sub in self.entry.subentries.values() if sub.subentry_type == SUBENTRY_DEVICE
        }
        for mac in [mac for mac in self.hub.devices if mac not in wanted]:
            gone = hub.async_remove_device(mac)
            self.hub.storage.async_forget(mac)
            self.hub.firmware.async_forget(mac)
            self.hub.wake_words.async_cancel(gone)
            async_token_accepted(self.hass, mac)  # nothing of it to repair any more
            async_reply_player_played(self.hass, mac)
            _LOGGER.info("Device %s was removed", mac)
            if gone.link is not None:
                self.entry.async_create_task(self.hass, gone.link.async_close("device removed"))
        for mac, subentry in wanted.items():
            token = self.hub.storage.token_for(mac, subentry)
            if (device := self.hub.devices.get(mac)) is not None:
                fresh = device.async_update_from(subentry, token)
            else:
                fresh = True
                device = XiaozhiDevice(
                    self.hass,
                    self.entry.entry_id,
                    subentry,
                    token,
                    cache=self.hub.storage.cached(mac),
                    persist=self.hub.storage.async_schedule_save,
                )
                # Connected, a conversation over, a new OTA answer: it may have to change transport.
                device.async_add_listener(
                    lambda d=device: transport.async_follow(self.hass, hub, d),  # type: ignore[misc]
                    activity=True,
                )
                hub.async_add_device(device)
            self.hub.identities.note(mac, device.token, device.identity, device.name)
            if fresh:
                self.hub.admission.async_joined(device)
        carried = any(CONF_TOKEN in sub.data for sub in wanted.values())
        if self.hub.identities.dirty or carried:  # at once, not on a delay: see admission/identities.py
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
        while self._save_again and not self.hub.stopping:
            self._save_again = False
            await self.hub.storage.async_save_identities(lambda: self.hub.stopping)

    async def async_start_mqtt(self) -> None:
        """Listen for devices on MQTT+UDP as the options say (again after they changed): the endpoint's life.

        One at a time: the entry's updates come in bursts (a pairing, the tokens leaving their
        subentries), each calls this, and two starts at once bound the same ports twice (the second
        failed with "address in use" and raised a repair). A start that ends once the hub has shut
        down closes what it opened.
        """
        async with self._mqtt_lock:
            await self._async_start_mqtt()

    def _shut_down(self) -> bool:
        """Whether the hub has shut down: read again after an await, as it may have meanwhile."""
        return self.hub.stopping

    async def _async_start_mqtt(self) -> None:
        options = self.entry.options
        port = int(options.get(CONF_MQTT_PORT, DEFAULT_MQTT_PORT))
        udp_port = int(options.get(CONF_UDP_PORT, DEFAULT_UDP_PORT))
        uses_mqtt = transport.mqtt_in_use(self.entry)
        current = self.hub.mqtt
        if current is not None and uses_mqtt and current.listening and (current.wanted == (port, udp_port)):
            return
        if current is not None:
            self.hub.mqtt = None
            if not uses_mqtt and not self.hub.stopping:
                # Turned off: a device only checks OTA at boot, and without the endpoint it would
                # retry MQTT until someone power-cycles it. Restarted now, it comes back on WebSocket.
                await asyncio.gather(*(link.device.async_restart_quietly() for link in list(current.links)))
            await current.async_stop()
        if not uses_mqtt or self.hub.stopping:
            async_mqtt_port(self.hass, None, port, udp_port)
            return
        endpoint = MqttEndpoint(self.hass, self.hub, port, udp_port, self.hub.mqtt_bind_host)
        error = await endpoint.async_start()
        if self._shut_down():  # meanwhile: nothing of this hub may listen any more
            await endpoint.async_stop()
            return
        async_mqtt_port(self.hass, error, port, udp_port)
        if error is not None:
            _LOGGER.warning(
                "Cannot listen on MQTT port %s / UDP port %s (%s); devices stay on WebSocket", port, udp_port, error
            )
            return
        self.hub.mqtt = endpoint

    @callback
    def async_start(self) -> None:
        """Start the liveness sweep (one timer for every connection) and the firmware checks."""
        self.hub.started = True
        self.entry.async_on_unload(async_track_time_interval(self.hass, self._async_sweep, PING_INTERVAL))

        @callback
        def check_firmware(_now: datetime) -> None:
            self.entry.async_create_background_task(
                self.hass, self.hub.firmware.catalog.async_check_all(), "xiaozhi_local firmware check"
            )

        self.entry.async_on_unload(
            async_track_time_interval(self.hass, check_firmware, timedelta(seconds=FIRMWARE_CHECK_EVERY))
        )

    @callback
    def _async_sweep(self, _now: datetime) -> None:
        self._sweeps += 1
        for link in list(self.hub.links):
            link.async_check_alive(MISSED_PINGS)
        if self._sweeps % REFRESH_EVERY_SWEEPS == 0:
            self.entry.async_create_background_task(self.hass, self._async_refresh_all(), "xiaozhi_local refresh")

    async def _async_refresh_all(self) -> None:
        """Every connected device's status, one after another over most of a sweep interval.

        Not all at once: a thousand devices asked in the same moment would answer in the same
        moment, and every entity they update would be written in one burst on the event loop.
        """
        devices = sorted(
            (c.device for c in self.hub.links if c.device.link is c and c.discovered.is_set()),
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

    async def async_shutdown(self, reason: str = "integration unloaded", code: int = 1000) -> None:
        """Close every open connection, also those still waiting for their hello; save.

        From now on the endpoint refuses devices (they retry): on unload, and when Home
        Assistant stops, where an open WebSocket would hold its shutdown up for many seconds.
        """
        self.hub.stopping = True
        self.hub.firmware.async_cancel_all()
        self.hub.nearest.shutdown()
        for device in list(self.hub.devices.values()):
            self.hub.wake_words.async_cancel(device)
        async with self._mqtt_lock:  # a start under way ends first (and closes what it opened)
            if self.hub.mqtt is not None:
                endpoint, self.hub.mqtt = self.hub.mqtt, None
                await endpoint.async_stop()
        await asyncio.gather(*(conn.async_close(reason, code) for conn in list(self.hub.links)))
        if self.hub.started:  # a setup that failed before its devices ran leaves the store as it was
            await self.hub.storage.async_save_now()
        else:
            await self.hub.identities.async_flush()
