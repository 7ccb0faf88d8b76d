"""The URLs devices are given: built from Home Assistant's internal URL."""

from homeassistant.core import HomeAssistant
from homeassistant.helpers.network import NoURLAvailableError, get_url

from ..const import FIRMWARE_PATH, NOTIFY_PATH, OTA_PATH, VISION_PATH, WAKE_WORD_PATH, WS_PATH

FALLBACK_BASE = "http://homeassistant.local:8123"


def internal_base(hass: HomeAssistant) -> str | None:
    """Home Assistant's internal URL (configured or found), or None when it has none."""
    try:
        return get_url(hass, allow_external=False, allow_cloud=False, prefer_external=False)
    except NoURLAvailableError:
        return None


def _base(hass: HomeAssistant) -> str:
    return internal_base(hass) or FALLBACK_BASE


def websocket_url(hass: HomeAssistant) -> str:
    """The device WebSocket endpoint (ws:// or wss://)."""
    return "ws" + _base(hass).removeprefix("http") + WS_PATH


def ota_url(hass: HomeAssistant) -> str:
    """The "Custom OTA URL" to type into a device's Wi-Fi portal."""
    return _base(hass) + OTA_PATH


def _http_base(websocket: str) -> str:
    """``http(s)://host:port`` of the WebSocket URL devices reach: their other requests go there too."""
    return "http" + websocket.split("/api/", 1)[0].removeprefix("ws")


def vision_url(websocket: str) -> str:
    """The camera upload URL."""
    return _http_base(websocket) + VISION_PATH


def notify_url(websocket: str, token: str) -> str:
    """Where a device fetches one announcement."""
    return _http_base(websocket) + f"{NOTIFY_PATH}/{token}.ogg"


def assets_url(websocket: str, token: str) -> str:
    """Where a device fetches one assets pack (its new wake word)."""
    return _http_base(websocket) + f"{WAKE_WORD_PATH}/{token}.bin"


def firmware_url(websocket: str, token: str) -> str:
    """Where a device fetches one firmware image."""
    return _http_base(websocket) + f"{FIRMWARE_PATH}/{token}.bin"
