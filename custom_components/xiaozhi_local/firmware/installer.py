"""Installing firmware on devices: the table of installs (one run: run.py; offers: catalog.py).

A device reports its board, chip and firmware at every OTA check (``BoardFacts``); the sources
(``files.py``, ``remote.py``) say what exists for it. Installing takes one of two paths, as the
stock firmware allows (docs/protocol.md §6):

- a connected device that lists the user-only tool ``self.upgrade_firmware`` is asked to fetch a
  one-time URL at once (it answers ``true`` before it starts; on success it reboots);
- any other device finds ``firmware {version, url}`` in its next OTA answer, and is restarted
  (``system`` ``reboot``) when it is online, so that it checks now.

Either way Home Assistant serves the checked binary itself (``XiaozhiFirmwareView``): a URL for
one fetch, expiring, bound to the device's address (the firmware sends no header that could
identify it), answered with a Content-Length, from one shared copy of the image. Progress is
what the device has read. The install has succeeded only when the device comes back reporting
the new version; anything else ends it with the reason, nothing is retried by itself, and a
device left in the firmware's "upgrading" state by a failed flash is restarted.

Jobs live in memory only: a Home Assistant restart forgets them, so no entity stays "in progress"
and no later OTA answer carries firmware.
"""

from collections.abc import Callable, Mapping
import logging
from typing import Any, Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util.hass_dict import HassKey

from ..const import DOMAIN
from ..device import XiaozhiDevice
from ..errors import translated_error
from ..protocol.firmware import BoardFacts, FirmwareError, is_newer
from ..tools.table import STATUS
from .catalog import FirmwareCatalog
from .downloads import Downloads
from .files import ImageFile, Offer, SourceUnavailable
from .jobs import InstallJob, Phase
from .run import InstallRun, disarm
from .unpack import async_fetch

_LOGGER = logging.getLogger(__name__)

DATA_FIRMWARE: HassKey[FirmwareUpdates] = HassKey(f"{DOMAIN}_firmware")
"""The loaded hub's installs, for the download view (set while the hub is set up)."""

MIN_BATTERY: Final = 30
"""Percent below which a device on battery (not charging) is not upgraded: a flash cut short by
an empty battery would leave it without a working image."""
PROGRESS_EVERY: Final = 1.0
"""Seconds between two progress updates of an install's entity."""


class FirmwareUpdates:
    """Offers and installs of every device of the hub."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        devices: Callable[[], Mapping[str, XiaozhiDevice]],
        url_of: Callable[[str], str],
    ) -> None:
        """``devices``: the hub's, by MAC; ``url_of``: where devices fetch a download token's image."""
        self.hass = hass
        self._entry = entry
        self._devices = devices
        self.catalog = FirmwareCatalog(hass, entry.entry_id, devices, self._notify)
        self.downloads = Downloads(hass, url_of)
        self.jobs: dict[str, InstallJob] = {}
        self.last_error: dict[str, HomeAssistantError] = {}
        """By MAC: why the last install failed (shown on the entity until the next one, or until the
        device reports another version than it ran then)."""
        self._failed_on: dict[str, str | None] = {}
        """By MAC: the version the device ran when its last install failed."""
        self._listeners: dict[str, list[Callable[[], None]]] = {}

    # -- configuration and listeners ----------------------------------------------------------

    @callback
    def async_add_listener(self, mac: str, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when a device's offers or install change."""
        listeners = self._listeners.setdefault(mac, [])
        listeners.append(listener)

        @callback
        def remove() -> None:
            if listener in listeners:
                listeners.remove(listener)
            if not listeners and self._listeners.get(mac) is listeners:
                del self._listeners[mac]

        return remove

    @callback
    def _notify(self, mac: str) -> None:
        for listener in list(self._listeners.get(mac, ())):
            listener()

    # -- installing -------------------------------------------------------------------------

    def _check_battery(self, device: XiaozhiDevice) -> None:
        status = device.queries.get(STATUS)
        battery = status.get("battery") if isinstance(status, dict) else None
        if not isinstance(battery, dict):
            return  # mains powered, or not reported
        level, charging = battery.get("level"), battery.get("charging")
        if (
            isinstance(level, (int, float))
            and not isinstance(level, bool)
            and level < MIN_BATTERY
            and charging is not True
        ):
            raise translated_error(
                "update_battery_low", device=device.name, level=str(int(level)), minimum=str(MIN_BATTERY)
            )

    async def async_install(self, device: XiaozhiDevice, version: str | None) -> None:
        """Install ``version`` (None: the latest) and wait until the device runs it.

        Raises a translated HomeAssistantError with the reason when it cannot start or fails;
        the reason also stays on the entity.
        """
        if device.mac in self.jobs:
            raise translated_error("update_running", device=device.name)
        self.last_error.pop(device.mac, None)
        try:
            await self._async_install(device, version)
        except HomeAssistantError as err:
            if self._devices().get(device.mac) is device:  # not removed meanwhile (then it is no news)
                self.last_error[device.mac] = err
                self._failed_on[device.mac] = device.facts.version if device.facts is not None else None
                self._notify(device.mac)
            _LOGGER.warning("Firmware was not installed on %s: %s", device.name, err)
            raise

    async def _async_install(self, device: XiaozhiDevice, version: str | None) -> None:
        facts = device.facts
        if facts is None:
            raise translated_error("update_unknown_device", device=device.name)
        offer = self.catalog.choose(device, facts, version)
        self._check_battery(device)
        image = await self._async_image(device, offer, facts)
        if device.mac in self.jobs:  # another install started while this one fetched its image
            raise translated_error("update_running", device=device.name)
        job = InstallJob(device, offer, image, force=not is_newer(facts.version, offer.version))
        self.jobs[device.mac] = job
        self._notify(device.mac)
        _LOGGER.info("Installing firmware %s on %s (%s)", offer.version, device.name, offer.source)
        # Connected, disconnected, idle after a conversation: a waiting install looks again.
        unsubscribe = device.async_add_listener(job.changed.set, activity=True)
        try:
            await InstallRun(self.hass, self._entry, self.downloads, self._notify, job).async_run()
        finally:
            unsubscribe()
            self._end(job)
        _LOGGER.info("%s runs firmware %s now", device.name, offer.version)

    async def _async_image(self, device: XiaozhiDevice, offer: Offer, facts: BoardFacts) -> ImageFile:
        """The offer's checked image on disk (a remote one is fetched now)."""
        try:
            if offer.path is not None and offer.image is not None:
                # The file may have changed since it was offered (read again only then).
                image = await self.hass.async_add_executor_job(
                    self.catalog.local.current, offer.path, offer.image.sha256
                )
                facts.check(image, offer.version)
                return ImageFile(offer.path, image)
            return await async_fetch(self.hass, offer, facts, self.catalog.cache)
        except (FirmwareError, OSError) as err:
            raise translated_error("update_image_refused", device=device.name, reason=str(err)) from None
        except SourceUnavailable as err:
            raise translated_error("update_unavailable", device=device.name, reason=str(err)) from None

    @callback
    def _end(self, job: InstallJob) -> None:
        disarm(self.downloads, job)
        if job.tool_call is not None:
            job.tool_call.cancel()
        if self.jobs.get(job.device.mac) is job:
            del self.jobs[job.device.mac]
        if not job.returned.done():
            job.returned.cancel()
        self._notify(job.device.mac)

    @callback
    def async_forget(self, mac: str) -> None:
        """The device was removed: its install ends, and nothing of it is kept (offers, errors, listeners)."""
        if (job := self.jobs.get(mac)) is not None:
            job.cancelled = True
            job.changed.set()
        self.catalog.offers.pop(mac, None)
        self.last_error.pop(mac, None)
        self._failed_on.pop(mac, None)
        self._listeners.pop(mac, None)

    @callback
    def async_cancel_all(self) -> None:
        """Unloading: every waiting install ends (a download under way is cut by the server's stop)."""
        for job in list(self.jobs.values()):
            job.cancelled = True
            job.changed.set()

    # -- what the device does ----------------------------------------------------------------

    @callback
    def ota_firmware(self, device: XiaozhiDevice) -> dict[str, Any] | None:
        """``firmware`` for the device's OTA answer while an install waits for it; else None.

        ``force`` only for a version the firmware would not take by itself (an older local file
        the user chose): it reinstalls at every boot, so it goes as soon as the download starts.
        """
        job = self.jobs.get(device.mac)
        if job is None or not job.via_ota or job.url is None or job.started.is_set():
            return None
        firmware: dict[str, Any] = {"version": job.version, "url": job.url}
        if job.force:
            firmware["force"] = 1
        return firmware

    @callback
    def async_reported(self, device: XiaozhiDevice, version: str | None) -> None:
        """The device's OTA check: after its download, the version it came back with."""
        job = self.jobs.get(device.mac)
        if job is not None and job.phase is Phase.REBOOTING and version and not job.returned.done():
            job.returned.set_result(version)
        if job is not None:
            job.changed.set()
        elif version and device.mac in self.last_error and version != self._failed_on.get(device.mac):
            # Back on another version (the one that "did not come back" in time, say): no longer news.
            del self.last_error[device.mac]
            self._failed_on.pop(device.mac, None)
            self._notify(device.mac)

    def waiting_for(self, device: XiaozhiDevice) -> tuple[str, dict[str, str]] | None:
        """What the device's install waits for (a message key of strings.json and its placeholders)."""
        job = self.jobs.get(device.mac)
        if job is None or job.phase is not Phase.WAITING:
            return None
        key = "update_waiting_conversation" if device.connected else "update_waiting_start"
        return key, {"device": device.name, "version": job.version}

    @callback
    def async_downloading(self, job: InstallJob) -> None:
        """The device has started its download (the entity shows 0 %)."""
        job.phase = Phase.DOWNLOADING
        job.sent = 0
        job.shown = self.hass.loop.time()
        job.started.set()
        job.changed.set()
        self._notify(job.device.mac)

    @callback
    def async_progress(self, job: InstallJob, sent: int) -> None:
        """The device has read ``sent`` bytes: the entity shows a new percent at most every second.

        Each state change is written to the recorder and to every open frontend: a hundred
        devices on a fast network would otherwise make thousands a second.
        """
        before = job.percentage
        job.sent = sent
        now = self.hass.loop.time()
        if job.percentage != before and (job.percentage == 100 or now - job.shown >= PROGRESS_EVERY):
            job.shown = now
            self._notify(job.device.mac)

    def diagnostics(self, device: XiaozhiDevice) -> dict[str, Any]:
        """What the device could install and what is going on."""
        job = self.jobs.get(device.mac)
        return {
            "facts": device.facts.as_dict() if device.facts is not None else None,
            "offers": [
                {"version": offer.version, "source": offer.source, "summary": offer.summary}
                for offer in self.catalog.offers.get(device.mac, [])
            ],
            "install": None
            if job is None
            else {"version": job.version, "phase": job.phase, "percentage": job.percentage, "via_ota": job.via_ota},
            "last_error": str(error) if (error := self.last_error.get(device.mac)) is not None else None,
        }
