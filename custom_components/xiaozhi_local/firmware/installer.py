"""Firmware updates: what each device could install, installing it, and serving the binary.

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

import asyncio
from collections.abc import Callable
import contextlib
from dataclasses import dataclass, field
from enum import StrEnum
import logging
from pathlib import Path
import secrets
from typing import TYPE_CHECKING, Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util.hass_dict import HassKey

from ..const import (
    CONF_FIRMWARE_RELEASES,
    CONF_FIRMWARE_RELEASES_URL,
    CONF_FIRMWARE_VENDOR,
    CONF_FIRMWARE_VENDOR_URL,
    DISCOVERY_TIMEOUT,
    DOMAIN,
)
from ..device import XiaozhiDevice, translated_error
from ..protocol.firmware import BoardFacts, FirmwareError, is_newer, parse_version
from ..protocol.mcp import McpConnectionError, McpError, McpRemoteError, McpTimeoutError
from ..tool_map import STATUS
from .files import (
    DEFAULT_RELEASES_URL,
    DEFAULT_VENDOR_URL,
    LOCAL_FOLDER,
    ImageFile,
    LocalFile,
    LocalFolder,
    Offer,
    Source,
    SourceUnavailable,
)
from .remote import ProjectReleases, VendorChannel, async_fetch

if TYPE_CHECKING:
    from ..hub import XiaozhiHub

_LOGGER = logging.getLogger(__name__)

DATA_FIRMWARE: HassKey[FirmwareUpdates] = HassKey(f"{DOMAIN}_firmware")
"""The loaded hub's installs, for the download view (set while the hub is set up)."""

UPGRADE_TOOL: Final = "self.upgrade_firmware"
MIN_BATTERY: Final = 30
"""Percent below which a device on battery (not charging) is not upgraded: a flash cut short by
an empty battery would leave it without a working image."""
BUSY_TIMEOUT: Final = 600.0
"""Seconds an install waits for a running conversation turn to end."""
FETCH_TIMEOUT: Final = 60.0
"""Seconds a device asked through its tool has to start the download (it waits about 4 s)."""
BOOT_FETCH_TIMEOUT: Final = 180.0
"""Seconds a restarted device has to boot, check OTA and start the download."""
OFFLINE_WAIT: Final = 24 * 3600.0
"""Seconds an install waits for a device that is away (per conversation) or off to appear."""
CONNECT_GRACE: Final = 2.0
"""Seconds given to a device that just connected to start the turn its wake word began."""
REFUSE_GRACE: Final = 30.0
"""Seconds after its download a device still on the same connection has refused the image
(a successful flash reboots it within a few seconds)."""
RETURN_TIMEOUT: Final = 240.0
"""Seconds after its download a device has to come back reporting a version."""
PROGRESS_EVERY: Final = 1.0
"""Seconds between two progress updates of an install's entity."""
LOCAL_SCAN_EVERY: Final = 30.0
"""Seconds the local folder's listing is reused (a refresh reads it again at once)."""


class Phase(StrEnum):
    """Where an install is."""

    WAITING = "waiting"
    """For the device: a conversation turn to end, or to come online."""
    STARTING = "starting"
    """Told; the device has not started its download yet."""
    DOWNLOADING = "downloading"
    REBOOTING = "rebooting"
    """Downloaded; until the device is back with a version."""


@dataclass(eq=False)
class InstallJob:
    """One install on one device."""

    device: XiaozhiDevice
    offer: Offer
    image: ImageFile
    force: bool
    phase: Phase = Phase.WAITING
    via_ota: bool = False
    """The device is told by its OTA answer (not its tool): the answer carries ``firmware`` now."""
    url: str | None = None
    sent: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    """The download ended, completely or not (``interrupted`` says)."""
    interrupted: str | None = None
    returned: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    """The version the device reports once it is back after its download."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Something the waiting install may care about (connected, idle, cancelled)."""
    cancelled: bool = False
    shown: float = 0.0
    """When the entity last showed a new percentage (loop time)."""
    tool_call: asyncio.Task[None] | None = None
    """``self.upgrade_firmware`` under way (cancelled with the install: no call outlives it)."""

    @property
    def version(self) -> str:
        """The version being installed."""
        return self.offer.version

    @property
    def percentage(self) -> int | None:
        """Bytes the device has read so far, in percent; None before and after the download."""
        if self.phase is not Phase.DOWNLOADING:
            return None
        return min(100, self.sent * 100 // max(1, self.image.image.size))


@dataclass(eq=False)
class Download:
    """A one-time URL for one device's binary (only the address the device last came from may fetch it)."""

    job: InstallJob
    expires: float


class FirmwareUpdates:
    """Offers and installs of every device of the hub."""

    def __init__(self, hass: HomeAssistant, hub: XiaozhiHub) -> None:
        self.hass = hass
        self.hub = hub
        self.local = LocalFolder(Path(hass.config.path(LOCAL_FOLDER)))
        self.cache = Path(hass.config.cache_path(DOMAIN, "firmware"))
        self.vendor: VendorChannel | None = None
        self.releases: ProjectReleases | None = None
        self.offers: dict[str, list[Offer]] = {}
        """By MAC: what the sources offered at the last check (newest first)."""
        self.jobs: dict[str, InstallJob] = {}
        self.last_error: dict[str, str] = {}
        """By MAC: why the last install failed (shown on the entity until the next one, or until the
        device reports another version than it ran then)."""
        self._failed_on: dict[str, str | None] = {}
        """By MAC: the version the device ran when its last install failed."""
        self._downloads: dict[str, Download] = {}
        self._data: dict[str, tuple[bytes, int]] = {}  # one copy of each image being served, by SHA-256
        self.images_read = 0  # times an image was read from disk to be served (diagnostics, tests)
        self._reading: dict[str, asyncio.Lock] = {}
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self._files: list[LocalFile] = []
        self._scanned = -LOCAL_SCAN_EVERY
        self._scan_lock = asyncio.Lock()

    # -- configuration and listeners ----------------------------------------------------------

    @callback
    def async_configure(self, options: dict[str, Any]) -> None:
        """The sources the hub options turn on (off unless the user turned them on)."""
        vendor_url = (options.get(CONF_FIRMWARE_VENDOR_URL) or "").strip() or DEFAULT_VENDOR_URL
        if not options.get(CONF_FIRMWARE_VENDOR, False):
            self.vendor = None
        elif self.vendor is None or self.vendor.url != vendor_url:
            self.vendor = VendorChannel(self.hass, vendor_url, self.hub.entry.entry_id)
        releases_url = (options.get(CONF_FIRMWARE_RELEASES_URL) or "").strip() or DEFAULT_RELEASES_URL
        if not options.get(CONF_FIRMWARE_RELEASES, False):
            self.releases = None
        elif self.releases is None or self.releases.url != releases_url:
            self.releases = ProjectReleases(self.hass, releases_url)

    @callback
    def async_add_listener(self, mac: str, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when a device's offers or install change."""
        self._listeners.setdefault(mac, []).append(listener)
        return lambda: self._listeners[mac].remove(listener)

    @callback
    def _notify(self, mac: str) -> None:
        for listener in list(self._listeners.get(mac, ())):
            listener()

    # -- offers -------------------------------------------------------------------------------

    def latest(self, device: XiaozhiDevice) -> Offer | None:
        """The newest offer newer than what the device runs; None when it is up to date."""
        facts = device.facts
        offers = self.offers.get(device.mac, [])
        if facts is None or not offers or not is_newer(facts.version, offers[0].version):
            return None
        return offers[0]

    async def async_check(self, device: XiaozhiDevice, *, refresh: bool = False) -> None:
        """Ask every source what exists for the device (remote answers are kept for hours).

        A source that cannot answer leaves its earlier offers as they were (logged once by the
        source); the others still count.
        """
        facts = device.facts
        if facts is None:
            return
        previous = self.offers.get(device.mac, [])
        offers = self.local.offers(await self._async_local_files(refresh=refresh), facts)
        for source, kind in ((self.vendor, Source.VENDOR), (self.releases, Source.RELEASES)):
            if source is None:
                continue
            try:
                offers += await source.async_offers(facts, refresh=refresh)
            except SourceUnavailable:
                offers += [offer for offer in previous if offer.source is kind]
        if device.facts != facts:
            return  # the device reported again meanwhile: that check counts
        offers.sort(key=lambda offer: parse_version(offer.version) or (), reverse=True)
        self.offers[device.mac] = offers
        self._notify(device.mac)

    async def async_check_all(self) -> None:
        """Every device with known firmware, one after another (the sources keep their answers)."""
        for device in list(self.hub.devices.values()):
            if device.facts is not None:
                await self.async_check(device)

    async def _async_local_files(self, *, refresh: bool) -> list[LocalFile]:
        async with self._scan_lock:
            now = self.hass.loop.time()
            if refresh or now - self._scanned >= LOCAL_SCAN_EVERY:
                self._files = await self.hass.async_add_executor_job(self.local.scan)
                self._scanned = now
            return self._files

    # -- installing -------------------------------------------------------------------------

    def _choose(self, device: XiaozhiDevice, facts: BoardFacts, version: str | None) -> Offer:
        """The offer to install: the latest, or the version asked for (older only from a local file)."""
        if version is None:
            if (offer := self.latest(device)) is None:
                raise translated_error("update_none", device=device.name)
            return offer
        offer = next((o for o in self.offers.get(device.mac, []) if o.version == version), None)
        if offer is None:
            raise translated_error("update_unknown_version", device=device.name, version=version)
        if not is_newer(facts.version, offer.version) and offer.source is not Source.LOCAL:
            raise translated_error("update_no_downgrade", device=device.name, version=version)
        return offer

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
            self.last_error[device.mac] = str(err)
            self._failed_on[device.mac] = device.facts.version if device.facts is not None else None
            self._notify(device.mac)
            _LOGGER.warning("Firmware was not installed on %s: %s", device.name, err)
            raise

    async def _async_install(self, device: XiaozhiDevice, version: str | None) -> None:
        facts = device.facts
        if facts is None:
            raise translated_error("update_unknown_device", device=device.name)
        offer = self._choose(device, facts, version)
        self._check_battery(device)
        image = await self._async_image(device, offer, facts)
        if device.mac in self.jobs:  # another install started while this one fetched its image
            raise translated_error("update_running", device=device.name)
        job = InstallJob(device, offer, image, force=not is_newer(facts.version, offer.version))
        self.jobs[device.mac] = job
        self._notify(device.mac)
        _LOGGER.info("Installing firmware %s on %s (%s)", offer.version, device.name, offer.source)
        # Connected, disconnected, idle after a conversation: a waiting install looks again.
        unsubscribe = device.async_add_listener(job.changed.set)
        try:
            await self._async_run(job)
        finally:
            unsubscribe()
            self._end(job)
        _LOGGER.info("%s runs firmware %s now", device.name, offer.version)

    async def _async_image(self, device: XiaozhiDevice, offer: Offer, facts: BoardFacts) -> ImageFile:
        """The offer's checked image on disk (a remote one is fetched now)."""
        try:
            if offer.path is not None and offer.image is not None:
                # The file may have changed since it was offered (read again only then).
                image = await self.hass.async_add_executor_job(self.local.current, offer.path, offer.image.sha256)
                facts.check(image, offer.version)
                return ImageFile(offer.path, image)
            return await async_fetch(self.hass, offer, facts, self.cache)
        except (FirmwareError, OSError) as err:
            raise translated_error("update_image_refused", device=device.name, reason=str(err)) from None
        except SourceUnavailable as err:
            raise translated_error("update_unavailable", device=device.name, reason=str(err)) from None

    async def _async_run(self, job: InstallJob) -> None:
        device = job.device
        await self._async_tell(job)
        await self._async_wait(job, job.finished, None, lambda: self._not_fetched(job))
        if job.interrupted is not None:
            await self._async_recover(job)
            raise translated_error(
                "update_interrupted", device=device.name, version=job.version, reason=job.interrupted
            )
        job.phase = Phase.REBOOTING
        self._disarm(job)
        self._notify(device.mac)
        link = device.connection
        try:
            async with asyncio.timeout(REFUSE_GRACE):
                version = await asyncio.shield(job.returned)
        except TimeoutError:
            if link is not None and device.connection is link:  # it never rebooted: the flash failed
                await self._async_recover(job)
                raise translated_error("update_refused", device=device.name, version=job.version) from None
            try:
                async with asyncio.timeout(RETURN_TIMEOUT - REFUSE_GRACE):
                    version = await job.returned
            except TimeoutError:
                raise translated_error("update_no_return", device=device.name, version=job.version) from None
        if version != job.version:
            raise translated_error("update_kept_version", device=device.name, version=job.version, running=version)

    async def _async_tell(self, job: InstallJob) -> None:
        """Wait for a moment the device can take it, tell it, and wait until its download starts."""
        device = job.device
        deadline = self.hass.loop.time() + OFFLINE_WAIT
        while not job.started.is_set():
            await self._async_until_idle(job)
            url = self._url_for(job, deadline)
            if device.connected and UPGRADE_TOOL in device.tools and not job.via_ota:
                job.phase = Phase.STARTING
                self._notify(device.mac)
                self._call_tool(job, url)
                await self._async_wait(job, job.started, FETCH_TIMEOUT, lambda: self._not_fetched(job))
                return
            job.via_ota = True  # the next OTA answer carries it
            if device.connected:
                job.phase = Phase.STARTING
                self._notify(device.mac)
                await device.async_restart_quietly()
                await self._async_wait(job, job.started, BOOT_FETCH_TIMEOUT, lambda: self._not_fetched(job))
                return
            # Away (per conversation), or off (always connected): until it boots (its OTA answer
            # carries the firmware) or connects (then it is told).
            job.phase = Phase.WAITING
            self._notify(device.mac)
            remaining = deadline - self.hass.loop.time()
            await self._async_wait(
                job, job.started, remaining, lambda: self._not_fetched(job), until=lambda: device.connected
            )
            if job.started.is_set():
                return
            # It connected before it was restarted: a conversation. Its tools first; a moment for
            # the turn its wake word starts (it follows the hello at once); its tool once it is idle.
            with contextlib.suppress(McpError):
                await device.async_wait_ready(DISCOVERY_TIMEOUT)
            with contextlib.suppress(HomeAssistantError):
                await self._async_wait(job, None, CONNECT_GRACE, HomeAssistantError, until=lambda: _busy(device))
            link = device.connection
            if link is not None and link.conversation_is_connection and _busy(device):
                # Over WebSocket Home Assistant ends a conversation by closing the socket, before a
                # tool could be called: the end restarts the device instead, and the OTA answer of
                # its boot carries the firmware (as a transport switch does, link.py).
                device.install_at_end = True
                try:
                    await self._async_wait(
                        job,
                        job.started,
                        deadline - self.hass.loop.time(),
                        lambda: self._not_fetched(job),
                        until=lambda: not device.connected,
                    )
                finally:
                    device.install_at_end = False
                continue  # restarted (its boot fetches it), or gone by itself (its next boot or talk)
            job.via_ota = False

    async def _async_until_idle(self, job: InstallJob) -> None:
        """Until no conversation turn, reply or announcement runs on the device."""
        device = job.device
        if not _busy(device):
            return
        job.phase = Phase.WAITING
        self._notify(device.mac)
        await self._async_wait(
            job,
            None,
            BUSY_TIMEOUT,
            lambda: translated_error("update_busy", device=device.name),
            until=lambda: not _busy(device),
        )

    @staticmethod
    def _not_fetched(job: InstallJob) -> HomeAssistantError:
        return translated_error("update_not_fetched", device=job.device.name, version=job.version)

    def _call_tool(self, job: InstallJob, url: str) -> None:
        """Ask the device to upgrade now; it answers before it starts (and not at all on success)."""
        device = job.device

        async def call() -> None:
            try:
                result = await device.async_call_tool(UPGRADE_TOOL, {"url": url}, 10.0)
            except McpRemoteError as err:
                job.interrupted = err.message
            except McpConnectionError, McpTimeoutError:
                return  # it went away to upgrade, or its answer is late: the download tells
            except McpError as err:
                job.interrupted = str(err)
            else:
                if result.is_error or result.text.strip() == "false":
                    job.interrupted = result.text[:200] or "the device refused"
                else:
                    return
            job.changed.set()

        job.tool_call = self.hub.entry.async_create_background_task(
            self.hass, call(), f"xiaozhi_local upgrade {device.mac}"
        )

    async def _async_wait(
        self,
        job: InstallJob,
        event: asyncio.Event | None,
        timeout: float | None,
        expired: Callable[[], HomeAssistantError],
        *,
        until: Callable[[], bool] | None = None,
    ) -> None:
        """Until ``event`` is set or ``until()`` holds; raises ``expired()`` on timeout."""
        loop = self.hass.loop
        deadline = None if timeout is None else loop.time() + timeout
        while not (event is not None and event.is_set()) and not (until is not None and until()):
            if job.cancelled:
                raise translated_error("update_cancelled", device=job.device.name)
            if job.interrupted is not None and event is not job.finished:
                raise translated_error(
                    "update_device_refused", device=job.device.name, version=job.version, reason=job.interrupted
                )
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise expired()
            job.changed.clear()
            waiters = {asyncio.ensure_future(job.changed.wait())}
            if event is not None:
                waiters.add(asyncio.ensure_future(event.wait()))
            try:
                await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def _async_recover(self, job: InstallJob) -> None:
        """A failed flash can leave the firmware in its "upgrading" state: restart it if it is here."""
        if job.device.connected:
            _LOGGER.info("Restarting %s after its failed upgrade", job.device.name)
            await job.device.async_restart_quietly()

    @callback
    def _url_for(self, job: InstallJob, deadline: float) -> str:
        """The job's one-time URL (made once; valid until the download starts or ``deadline``)."""
        if job.url is None:
            token = secrets.token_urlsafe(24)
            self._downloads[token] = Download(job, deadline)
            job.url = self.hub.firmware_url(token)
        return job.url

    @callback
    def _disarm(self, job: InstallJob) -> None:
        """No URL of the job's is valid any more, no OTA answer carries it."""
        job.via_ota = False
        for token in [t for t, d in self._downloads.items() if d.job is job]:
            del self._downloads[token]

    @callback
    def _end(self, job: InstallJob) -> None:
        self._disarm(job)
        if job.tool_call is not None:
            job.tool_call.cancel()
        if self.jobs.get(job.device.mac) is job:
            del self.jobs[job.device.mac]
        if not job.returned.done():
            job.returned.cancel()
        self._notify(job.device.mac)

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

    def waiting_for(self, device: XiaozhiDevice) -> str | None:
        """What the device's install waits for, said on its entity; None when it does not wait."""
        job = self.jobs.get(device.mac)
        if job is None or job.phase is not Phase.WAITING:
            return None
        if device.connected:
            return f"Waiting for the conversation on {device.name} to end, then firmware {job.version} is installed."
        return f"Waiting for {device.name}: it gets firmware {job.version} at its next start or conversation."

    def take(self, token: str, address: str | None) -> InstallJob | None:
        """The job whose one-time URL this is, for the device it was made for; None otherwise."""
        download = self._downloads.get(token)
        if download is None:
            return None
        if download.expires <= self.hass.loop.time():
            del self._downloads[token]
            return None
        # Where the device last reached us from: its connection, or the OTA check of the boot that
        # fetches now (read at the fetch: an install that waited for a reboot sees the new address).
        expected = download.job.device.address
        if expected is not None and address != expected:
            _LOGGER.warning(
                "Refused a firmware download of %s from %s: the URL was made for the device at %s",
                download.job.device.name,
                address,
                expected,
            )
            return None
        del self._downloads[token]
        return download.job

    async def async_data(self, job: InstallJob) -> bytes:
        """The image's bytes: one copy however many devices fetch it (released after the last)."""
        key = job.image.image.sha256
        async with self._reading.setdefault(key, asyncio.Lock()):  # downloads starting together read it once
            if key not in self._data:
                self._data[key] = (await self.hass.async_add_executor_job(_read_image, job.image), 0)
                self.images_read += 1
            data, users = self._data[key]
            self._data[key] = (data, users + 1)
        return data

    @callback
    def release_data(self, job: InstallJob) -> None:
        """A download of the image ended."""
        key = job.image.image.sha256
        data, users = self._data[key]
        if users <= 1:
            del self._data[key]
            if (lock := self._reading.get(key)) is not None and not lock.locked():
                del self._reading[key]
        else:
            self._data[key] = (data, users - 1)

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
                for offer in self.offers.get(device.mac, [])
            ],
            "install": None
            if job is None
            else {"version": job.version, "phase": job.phase, "percentage": job.percentage, "via_ota": job.via_ota},
            "last_error": self.last_error.get(device.mac),
        }


def _busy(device: XiaozhiDevice) -> bool:
    """Whether a conversation turn, a reply or an announcement runs on the device now."""
    return device.voice is not None and device.voice.busy


def _read_image(image: ImageFile) -> bytes:
    """Blocking: the app image's bytes (a flash image's app partition, or the whole file)."""
    with image.path.open("rb") as stream:
        stream.seek(image.image.offset)
        data = stream.read(image.image.size)
    if len(data) != image.image.size:
        raise OSError(f"{image.path} is shorter than when it was checked")
    return data
