"""Each stock device's firmware as an update entity: installed, latest, install with progress.

The entity only reads and commands: what the device runs is what it reported at its OTA check,
what it could run comes from the hub's firmware sources, and installs are the hub's
(``firmware/installer.py``). It exists once a device has reported an ESP chip and a firmware version.
"""

from typing import Any

from homeassistant.components.update import (
    UpdateDeviceClass,
    UpdateEntity,
    UpdateEntityDescription,
    UpdateEntityFeature,
)
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import XiaozhiDevice
from .entity import XiaozhiEntity, async_setup_device_entities
from .errors import async_error_text, async_load_translations, async_translate
from .firmware.files import Offer, Source
from .firmware.installer import FirmwareUpdates
from .firmware.jobs import Phase
from .hub import XiaozhiConfigEntry

PARALLEL_UPDATES = 0  # installs are per device and long: one must not wait for another

FIRMWARE = UpdateEntityDescription(key="firmware", device_class=UpdateDeviceClass.FIRMWARE)


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """A firmware entity for each device that reported its firmware at an OTA check."""
    updates = entry.runtime_data.firmware
    await async_load_translations(hass)  # what an install waits for, in Home Assistant's language
    async_setup_device_entities(
        hass,
        entry,
        async_add_entities,
        lambda device: [("firmware", lambda: XiaozhiFirmwareUpdate(device, updates))] if device.facts else [],
    )


class XiaozhiFirmwareUpdate(XiaozhiEntity, UpdateEntity):
    """The device's firmware."""

    _attr_supported_features = (
        UpdateEntityFeature.INSTALL
        | UpdateEntityFeature.PROGRESS
        | UpdateEntityFeature.SPECIFIC_VERSION
        | UpdateEntityFeature.RELEASE_NOTES
    )

    def __init__(self, device: XiaozhiDevice, updates: FirmwareUpdates) -> None:
        super().__init__(device, FIRMWARE)
        self.updates = updates

    async def async_added_to_hass(self) -> None:
        """Follow the device and its offers; look for firmware now."""
        await super().async_added_to_hass()
        self.async_on_remove(self.updates.async_add_listener(self.device.mac, self.async_write_ha_state))
        self.device.async_create_task(
            self.updates.catalog.async_check(self.device),
            f"xiaozhi_local firmware check {self.device.mac}",
            background=True,
        )

    @property
    def _offer(self) -> Offer | None:
        return self.updates.catalog.latest(self.device)

    @property
    def installed_version(self) -> str | None:
        """What the device reported at its last OTA check."""
        return self.device.facts.version if self.device.facts is not None else None

    @property
    def latest_version(self) -> str | None:
        """The newest version a source offers; what it runs when nothing newer is known."""
        offer = self._offer
        return offer.version if offer is not None else self.installed_version

    @property
    def title(self) -> str | None:
        """The firmware's project name (``xiaozhi``)."""
        return self.device.facts.project if self.device.facts is not None else None

    @property
    def release_summary(self) -> str | None:
        """What an install waits for; why the last one failed, while that is news; else the release."""
        if (waiting := self.updates.waiting_for(self.device)) is not None:
            key, placeholders = waiting
            return async_translate(self.hass, key, **placeholders)
        if (error := self.updates.last_error.get(self.device.mac)) is not None:
            return async_error_text(self.hass, error)
        offer = self._offer
        return offer.summary if offer is not None else None

    @property
    def release_url(self) -> str | None:
        """The release's page, for a published release."""
        offer = self._offer
        return offer.release_url if offer is not None else None

    @property
    def available(self) -> bool:
        """Unavailable while the device restarts into the firmware it downloaded.

        Home Assistant's voice assistant setup wizard installs a pending update and moves on when
        it sees the entity come back (unavailable, then available), as ESPHome's entities do across
        the device's reboot; an entity that stayed available would keep it waiting for good.
        """
        job = self.updates.jobs.get(self.device.mac)
        return super().available and (job is None or job.phase is not Phase.REBOOTING)

    @property
    def in_progress(self) -> bool:
        """An install runs (waiting for the device, downloading, or rebooting)."""
        return self.device.mac in self.updates.jobs

    @property
    def update_percentage(self) -> int | None:
        """How much of the image the device has read; None while it is not downloading."""
        job = self.updates.jobs.get(self.device.mac)
        return job.percentage if job is not None else None

    async def async_release_notes(self) -> str | None:
        """The release's notes, or where the firmware comes from; first why the last install failed.

        The update dialog shows these notes (not the summary) for an entity that has them: the
        reason of a failed install is seen there, at the top, until the next install.
        """
        offer = self._offer
        failed = self.updates.last_error.get(self.device.mac)
        error = async_error_text(self.hass, failed) if failed is not None else None
        if offer is None:
            return f"**{error}**" if error else None
        notes = offer.notes or async_translate(
            self.hass,
            {
                Source.LOCAL: "update_notes_local",
                Source.VENDOR: "update_notes_vendor",
                Source.RELEASES: "update_notes_releases",
            }[offer.source],
            file=offer.summary or "",
        )
        return f"**{error}**\n\n{notes}" if error else notes

    async def async_install(self, version: str | None, backup: bool, **kwargs: Any) -> None:
        """Install it and wait until the device runs it (or raise why not)."""
        await self.updates.async_install(self.device, version)

    async def async_update(self) -> None:
        """Asked to check now (``homeassistant.update_entity``): every source, not the kept answers."""
        await self.updates.catalog.async_check(self.device, refresh=True)
