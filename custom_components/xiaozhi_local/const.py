"""Constants of Xiaozhi Local."""

from datetime import timedelta
from typing import Final

DOMAIN: Final = "xiaozhi_local"

WS_PATH: Final = "/api/xiaozhi_local/v1/"
OTA_PATH: Final = "/api/xiaozhi_local/ota/"
VISION_PATH: Final = "/api/xiaozhi_local/vision"
NOTIFY_PATH: Final = "/api/xiaozhi_local/notify"
WAKE_WORD_PATH: Final = "/api/xiaozhi_local/assets"
FIRMWARE_PATH: Final = "/api/xiaozhi_local/firmware"

CONF_ACCEPT_WITHOUT_CODE: Final = "accept_without_code"
CONF_NEW_PER_HOUR: Final = "new_devices_per_hour"
DEFAULT_NEW_PER_HOUR: Final = 10
"""New devices paired without a code in any hour, while that option is on."""
CONF_WEBSOCKET_URL: Final = "websocket_url"
CONF_AI_TASK_ENTITY: Final = "ai_task_entity"
CONF_SILENCE_TIMEOUT: Final = "silence_timeout"
DEFAULT_SILENCE_TIMEOUT: Final = 20
"""Seconds a listening device may stay silent before the conversation is ended (socket closed)."""
CONF_IDLE_TIMEOUT: Final = "idle_timeout"
DEFAULT_IDLE_TIMEOUT: Final = 300
"""Seconds a manual-mode device's socket stays open after its conversation (its tools stay callable).
The firmware keeps an idle socket while it hears from the server every 120 s: the status refresh
(every 60 s) does that."""
AUDIO_GAP_TIMEOUT: Final = 3.0
"""Seconds without any audio packet after speech began before an auto/realtime utterance ends."""

CONF_MQTT: Final = "mqtt"
CONF_NEAREST: Final = "nearest_answers"  # several devices hear one wake word: the nearest answers
CONF_NEAREST_BY_AREA: Final = "nearest_by_area"  # devices in different areas do not compete
"""Hub option: paired devices get MQTT+UDP at their OTA check (always connected)."""
CONF_MQTT_PORT: Final = "mqtt_port"
DEFAULT_MQTT_PORT: Final = 1885
"""TCP. Not 1883 (a broker may run there) and never 8883 (the firmware turns on TLS for that port)."""
TLS_MQTT_PORT: Final = 8883
"""The firmware speaks MQTT over TLS (public CAs only) to this port: never ours."""
CONF_UDP_PORT: Final = "udp_port"
DEFAULT_UDP_PORT: Final = 1885
"""UDP audio of conversations over MQTT: the same number, so one rule of the firewall names both."""
CONF_TRANSPORT: Final = "transport"
"""Per device (subentry data): ``mqtt`` or ``websocket`` overrides the hub's choice; absent: the hub's."""
TRANSPORT_MQTT: Final = "mqtt"
TRANSPORT_WEBSOCKET: Final = "websocket"
TRANSPORT_HUB: Final = "hub"
CONF_REPLY_PLAYER: Final = "reply_player"
"""Per device (subentry data): the ``media_player`` its replies play on; absent: the device itself."""
REPLY_ON_DEVICE: Final = "device"
"""The Reply speaker select's option for the device's own speaker."""
CONF_DUCK_ROOM: Final = "duck_room"
"""Per device (subentry data): True makes its area's playing media players quieter while it talks."""
MQTT_PUBLISH_TOPIC: Final = "xiaozhi_local/device"
"""Where devices publish (the endpoint takes any topic from an authenticated device)."""

CONF_FIRMWARE: Final = "firmware"
"""The options form's section of the firmware sources (its fields are stored flat)."""
CONF_FIRMWARE_VENDOR: Final = "firmware_vendor"
"""Hub option: ask the devices' vendor OTA service for firmware (off unless turned on)."""
CONF_FIRMWARE_VENDOR_URL: Final = "firmware_vendor_url"
CONF_FIRMWARE_RELEASES: Final = "firmware_releases"
"""Hub option: offer the firmware project's published releases (off unless turned on)."""
CONF_FIRMWARE_RELEASES_URL: Final = "firmware_releases_url"
CONF_WAKE_WORD_MODELS: Final = "wake_word_models"
"""Download the catalog's wake word models from esp-sr on GitHub when one is chosen (off by default)."""
CONF_WAKE_WORD_MODELS_URL: Final = "wake_word_models_url"
DEFAULT_WAKE_WORD_MODELS_URL: Final = "https://raw.githubusercontent.com/espressif/esp-sr/master/model/wakenet_model"

SUBENTRY_DEVICE: Final = "device"
CONF_SERIAL: Final = "serial"
CONF_OPEN: Final = "open"
"""A device paired at first contact without a token (load testers; only while the hub accepts them)."""

VISION_TOKEN_TTL: Final = 30 * 60.0
"""Seconds a per-connection camera upload token stays valid (it is not the device's main token)."""
MAX_PHOTO: Final = 2 * 1024 * 1024
"""A camera upload larger than this is refused with 413."""
VISION_ANSWER_TIMEOUT: Final = 25.0
"""The device waits 30 s for the upload's answer; answer within that."""

MAX_OTA_BODY: Final = 64 * 1024
"""An OTA body is a few kB of system info; more is refused with 413."""

EVENT_NOTIFICATION: Final = f"{DOMAIN}_notification"
EVENT_NEAREST: Final = f"{DOMAIN}_nearest"  # several heard one wake word: who answers, the others, scores
EVENT_WAKE_IGNORED: Final = f"{DOMAIN}_wake_ignored"  # Home Assistant refused a wake (its duplicate-wake rule)
EVENT_TOOL_ERROR: Final = f"{DOMAIN}_tool_error"
"""A ``control`` tool of a registerTools client failed after it was reported done."""

SERVICE_CALL_TOOL: Final = "call_tool"
ATTR_TOOL: Final = "tool"
ATTR_ARGUMENTS: Final = "arguments"
ATTR_TIMEOUT: Final = "timeout"
ATTR_RETURN_ERRORS: Final = "return_errors"

DEFAULT_CALL_TIMEOUT: Final = 10.0
DISCOVERY_TIMEOUT: Final = 10.0
"""Seconds for each ``initialize`` / ``tools/list`` request while a device connects."""

MAX_CONNECTION_MESSAGE: Final = 2 * 1024 * 1024
"""A WebSocket message larger than this is not from a device: the connection is closed.
Smaller oversized frames are dropped and logged by the protocol layer."""

PING_INTERVAL: Final = timedelta(seconds=30)
"""How often every connection is pinged (the firmware answers pings but never sends any)."""
MISSED_PINGS: Final = 2
"""Sweeps without any frame from a device before its connection counts as dead (no TCP close)."""

REFRESH_EVERY_SWEEPS: Final = 2
"""Connected devices are asked for their status every this many liveness sweeps (60 s)."""
REFRESH_SPREAD: Final = 0.8
"""Share of a sweep interval over which those status requests are spread, one device after another."""

FRAME_RATE: Final = 300.0
"""Frames per second a connection may send on average (a device sends ~17 audio frames a second)."""
FRAME_BURST: Final = 600.0
"""Frames a connection may send at once above the average."""
FLOOD_LIMIT: Final = 1000
"""Frames dropped for exceeding the rate before the connection is closed as a flood."""

NOTIFICATION_RATE: Final = 1.0
"""Notifications per second a device may turn into Home Assistant events on average."""
NOTIFICATION_BURST: Final = 10.0
"""Notifications a device may send at once above the average."""
MAX_NOTIFICATION_PARAMS: Final = 4096
"""Bytes of ``params`` (as JSON) a notification may carry into an event (the recorder keeps it)."""

MAX_TOOL_BUTTONS: Final = 32
"""Generic buttons one device gets for its argument-less tools (bounds its entity registry entries)."""

MAX_REMOVED_RECORDS: Final = 2 * MAX_TOOL_BUTTONS
"""Registry records of removed buttons kept per device and kind (tool, IR code), newest first.

Home Assistant keeps a record of every removed entity (its entity id, name and area, restored if
it comes back) for 30 days once orphaned, and for as long as the entry lives otherwise: a device
that changes its tool names at every connection would grow ``core.entity_registry`` without end.
"""

MANUFACTURER: Final = "Xiaozhi"


def mqtt_topic(mac: str) -> str:
    """The topic messages to one device are published on (py-xiaozhi subscribes to it)."""
    return f"xiaozhi_local/{mac.replace(':', '')}"
