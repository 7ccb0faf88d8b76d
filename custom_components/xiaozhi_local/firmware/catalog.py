"""What each device could install: the offers of every source turned on, newest first.

The local folder is always read (``files.py``); the vendor's channel and the project's releases
(``remote.py``) only when the hub options turn them on. A source that cannot answer keeps its
earlier offers; remote answers are kept for hours.
"""

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from homeassistant.core import HomeAssistant, callback

from ..const import (
    CONF_FIRMWARE_RELEASES,
    CONF_FIRMWARE_RELEASES_URL,
    CONF_FIRMWARE_VENDOR,
    CONF_FIRMWARE_VENDOR_URL,
    DOMAIN,
)
from ..device import XiaozhiDevice
from ..errors import translated_error
from ..protocol.firmware import BoardFacts, is_newer, parse_version
from .files import (
    DEFAULT_RELEASES_URL,
    DEFAULT_VENDOR_URL,
    LOCAL_FOLDER,
    LocalFile,
    LocalFolder,
    Offer,
    Source,
    SourceUnavailable,
)
from .remote import ProjectReleases, VendorChannel

LOCAL_SCAN_EVERY: Final = 30.0
"""Seconds the local folder's listing is reused (a refresh reads it again at once)."""


class FirmwareCatalog:
    """Offers for every device of one hub."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry_id: str,
        devices: Callable[[], Mapping[str, XiaozhiDevice]],
        notify: Callable[[str], None],
    ) -> None:
        """``devices``: the hub's, by MAC; ``notify``: a device's offers changed (by MAC)."""
        self.hass = hass
        self._entry_id = entry_id
        self._devices = devices
        self._notify = notify
        self.local = LocalFolder(Path(hass.config.path(LOCAL_FOLDER)))
        self.cache = Path(hass.config.cache_path(DOMAIN, "firmware"))
        self.vendor: VendorChannel | None = None
        self.releases: ProjectReleases | None = None
        self.offers: dict[str, list[Offer]] = {}
        """By MAC: what the sources offered at the last check (newest first)."""
        self._files: list[LocalFile] = []
        self._scanned = -LOCAL_SCAN_EVERY
        self._scan_lock = asyncio.Lock()

    @callback
    def async_configure(self, options: dict[str, Any]) -> None:
        """The sources the hub options turn on (off unless the user turned them on)."""
        vendor_url = (options.get(CONF_FIRMWARE_VENDOR_URL) or "").strip() or DEFAULT_VENDOR_URL
        if not options.get(CONF_FIRMWARE_VENDOR, False):
            self.vendor = None
        elif self.vendor is None or self.vendor.url != vendor_url:
            self.vendor = VendorChannel(self.hass, vendor_url, self._entry_id)
        releases_url = (options.get(CONF_FIRMWARE_RELEASES_URL) or "").strip() or DEFAULT_RELEASES_URL
        if not options.get(CONF_FIRMWARE_RELEASES, False):
            self.releases = None
        elif self.releases is None or self.releases.url != releases_url:
            self.releases = ProjectReleases(self.hass, releases_url)

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
        for device in list(self._devices().values()):
            if device.facts is not None:
                await self.async_check(device)

    async def _async_local_files(self, *, refresh: bool) -> list[LocalFile]:
        async with self._scan_lock:
            now = self.hass.loop.time()
            if refresh or now - self._scanned >= LOCAL_SCAN_EVERY:
                self._files = await self.hass.async_add_executor_job(self.local.scan)
                self._scanned = now
            return self._files

    def choose(self, device: XiaozhiDevice, facts: BoardFacts, version: str | None) -> Offer:
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
