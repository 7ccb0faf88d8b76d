"""Xiaozhi Local: Home Assistant as the server of xiaozhi voice devices."""

from functools import partial
import shutil
from typing import Any

from homeassistant.const import EVENT_CORE_CONFIG_UPDATE, EVENT_HOMEASSISTANT_STOP, Platform
from homeassistant.core import Event, HomeAssistant, callback
from homeassistant.helpers import config_validation as cv, llm as llm_helper
from homeassistant.helpers.typing import ConfigType

from .admission.ota import XiaozhiActivateView, XiaozhiOtaView
from .const import DOMAIN
from .driver import HubDriver
from .firmware.installer import DATA_FIRMWARE
from .firmware.server import XiaozhiFirmwareView
from .home.volumes import async_forget_volumes, async_restore_volumes
from .hub import DATA_HUB, XiaozhiConfigEntry
from .llm import API_NAME, XiaozhiDevicesAPI
from .repairs import async_check_ffmpeg, async_check_url
from .services import async_setup_services
from .sound.announcements import DATA_ANNOUNCEMENTS, XiaozhiNotifyView
from .store.storage import async_track_final_write, hub_store, journal_store
from .tools.vision import XiaozhiVisionView
from .transport.endpoint import XiaozhiWebSocketView, register_open_view
from .wake_words.change import DATA_WAKE_WORDS
from .wake_words.view import XiaozhiWakeWordView

CONFIG_SCHEMA = cv.config_entry_only_config_schema(DOMAIN)
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
    Platform.TEXT,
    Platform.UPDATE,
]


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Register the device endpoint and the actions, once (routes cannot be removed)."""
    hass.http.register_view(XiaozhiWebSocketView())
    hass.http.register_view(XiaozhiNotifyView())
    hass.http.register_view(XiaozhiFirmwareView())
    hass.http.register_view(XiaozhiWakeWordView())
    for view in (XiaozhiOtaView(), XiaozhiActivateView(), XiaozhiVisionView()):
        register_open_view(hass, view)  # browser test pages make these requests too (CORS)
    llm_helper.async_register_api(hass, XiaozhiDevicesAPI(hass=hass, id=DOMAIN, name=API_NAME))
    async_setup_services(hass)
    async_track_final_write(hass)
    return True


async def async_migrate_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Version 2 keeps the device tokens in the hub's journal; they move there at setup.

    The move is done by the hub from what each subentry carries (``HubStorage.token_for``), so
    nothing is moved here; the version only stops an older release, which expects a token in
    every subentry, from setting the entry up.
    """
    if entry.version > 2:
        return False
    if entry.version < 2:
        hass.config_entries.async_update_entry(entry, version=2)
    return True


async def async_setup_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Start the hub: devices from the subentries; the endpoint accepts them from now on."""
    driver = HubDriver(hass, entry)
    hub = driver.hub
    # Before anything starts: a setup that fails later frees what it took (ports, tasks), as an unload does.
    entry.async_on_unload(driver.async_shutdown)
    entry.async_on_unload(hub.async_unfollow)  # the platforms' device listeners (hub.async_follow)
    # The views' data while this hub is set up (a request after it is unloaded gets a 404).
    hass.data[DATA_ANNOUNCEMENTS], hass.data[DATA_FIRMWARE] = hub.announcements, hub.firmware
    hass.data[DATA_WAKE_WORDS] = hub.wake_words

    @callback
    def views_closed() -> None:
        hass.data.pop(DATA_ANNOUNCEMENTS, None)
        hass.data.pop(DATA_FIRMWARE, None)
        hass.data.pop(DATA_WAKE_WORDS, None)

    entry.async_on_unload(views_closed)
    await hub.storage.async_load()
    hub.storage.async_restore_subentries()  # where Home Assistant was stopped before it saved a pairing
    driver.async_sync_devices()
    driver.async_start()
    entry.runtime_data = hub
    await driver.async_start_mqtt()
    await async_restore_volumes(hass)  # what a device had made quieter before a restart, back now
    entry.async_on_unload(entry.add_update_listener(partial(_async_entry_updated, driver)))
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)

    @callback
    def core_config_updated(_event: Event[Any]) -> None:
        async_check_url(hass, dict(entry.options))  # the internal URL may have changed

    entry.async_on_unload(hass.bus.async_listen(EVENT_CORE_CONFIG_UPDATE, core_config_updated))

    async def stopping(_event: Event[Any]) -> None:
        # Say goodbye (1001, going away) instead of leaving the sockets to HA's HTTP shutdown,
        # which waits for them for many seconds; the devices reconnect when HA is back.
        await driver.async_shutdown("Home Assistant is stopping", 1001)

    entry.async_on_unload(hass.bus.async_listen(EVENT_HOMEASSISTANT_STOP, stopping))
    async_check_url(hass, dict(entry.options))
    await async_check_ffmpeg(hass)
    hass.data[DATA_HUB] = hub  # the device views, actions and flows find it from now on
    return True


async def _async_entry_updated(driver: HubDriver, hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Devices added, changed or removed: applied without dropping the other connections.

    The driver is this setup's: an unload may begin while this waits for the MQTT endpoint.
    """
    hub = driver.hub
    if hub.stopping:
        return
    driver.async_sync_devices()
    hub.firmware.catalog.async_configure(dict(entry.options))  # the firmware sources may have changed
    hub.wake_words.files.async_configure(dict(entry.options))
    async_check_url(hass, dict(entry.options))
    await driver.async_start_mqtt()  # ports or the choice may have changed
    if not hub.stopping:
        hub.async_transport_changed()  # devices on the other transport restart when they can


async def async_unload_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Remove the entities; the hub's shutdown (registered at setup) then closes every connection.

    Once its platforms are unloaded no view, action or flow finds the hub (devices get a 404); an
    unload that fails leaves it where it was, as the entry stays loaded.
    """
    if unloaded := await hass.config_entries.async_unload_platforms(entry, PLATFORMS):
        hass.data.pop(DATA_HUB, None)
    return unloaded


async def async_remove_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """The hub is deleted: what it wrote goes with it.

    Its store, the token journal (the devices' secrets) and the downloaded firmware. The
    ``xiaozhi_firmware`` folder stays: the user put those files there.
    """
    await hub_store(hass, entry.entry_id).async_remove()
    await journal_store(hass, entry.entry_id).async_remove()
    await hass.async_add_executor_job(partial(shutil.rmtree, hass.config.cache_path(DOMAIN), ignore_errors=True))
    if not any(other.entry_id != entry.entry_id for other in hass.config_entries.async_entries(DOMAIN)):
        await async_forget_volumes(hass)  # the last hub: no player waits for its volume any more
