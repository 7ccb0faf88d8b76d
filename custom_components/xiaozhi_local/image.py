"""The last photo of each camera device (``self.camera.take_photo``)."""

from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from homeassistant.components.image import ImageEntity, ImageEntityDescription
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import XiaozhiDevice
from .entity import XiaozhiEntity, async_setup_device_entities
from .hub import XiaozhiConfigEntry

PARALLEL_UPDATES = 0
CAMERA_TOOL = "self.camera.take_photo"
PHOTO = ImageEntityDescription(key="photo", translation_key="photo")
PLACEHOLDER = Path(__file__).parent / "brand" / "icon.png"


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """An image entity for each device with a camera."""

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        if CAMERA_TOOL not in device.tools:
            return []
        return [("photo", lambda: XiaozhiPhoto(hass, device))]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiPhoto(XiaozhiEntity, ImageEntity):
    """What the device's camera saw last."""

    def __init__(self, hass: HomeAssistant, device: XiaozhiDevice) -> None:
        XiaozhiEntity.__init__(self, device, PHOTO)
        ImageEntity.__init__(self, hass)

    async def async_added_to_hass(self) -> None:
        """Follow new photos."""
        await super().async_added_to_hass()
        self.async_on_remove(self.device.async_add_listener(self._on_device_change))

    @callback
    def _on_device_change(self) -> None:
        if self.device.photo_at is not None and self.device.photo_at != self._attr_image_last_updated:
            self._attr_image_last_updated = self.device.photo_at
            self._cached_image = None
        self.async_write_ha_state()

    @property
    def image_last_updated(self) -> datetime | None:
        """When the last photo arrived."""
        return self.device.photo_at

    @property
    def content_type(self) -> str:
        """JPEG once the camera took a photo; until then the integration's icon (PNG) stands in."""
        return "image/jpeg" if self.device.photo is not None else "image/png"

    async def async_image(self) -> bytes | None:
        """The JPEG; before the first photo, a placeholder (no image at all makes HA answer 500)."""
        if self.device.photo is not None:
            return self.device.photo
        return await self.hass.async_add_executor_job(PLACEHOLDER.read_bytes)
