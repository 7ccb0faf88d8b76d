from custom_components.xiaozhi_local.const import DOMAIN
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr

from .conftest import MAC


async def test_device_connects(hass: HomeAssistant, make_device) -> None:
    device = await make_device()
    assert device.server_hello is not None
    assert device.server_hello["transport"] == "websocket"
    entry = hass.config_entries.async_entries(DOMAIN)[0]
    hub = entry.runtime_data
    xdev = hub.devices[MAC]
    conn = await xdev.async_wait_ready(5)
    assert conn is xdev.connection
    assert "self.audio_speaker.set_volume" in xdev.tools
    assert xdev.tools["self.reboot"].user_only
    reg = dr.async_get(hass).async_get(xdev.device_id)
    assert reg.sw_version == "2.4.2"
