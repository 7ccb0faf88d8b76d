"""A device's connection choice reaches the device by itself, at the first moment it can.

The stock firmware picks its transport from its OTA answer at boot (``mqtt`` wins over
``websocket``) and checks OTA only then: a changed choice (the device's Connection select, the
hub's "Keep devices connected") takes effect once the device restarts. So a device found on the
other transport than the one chosen is restarted:

- over MQTT, as soon as no conversation is open (after its ``goodbye``);
- over WebSocket, where the connection is the conversation, when Home Assistant ends that
  conversation (silence or idle timeout): the restart takes the place of the close.

Only a device whose transport follows our answer is restarted: stock firmware (its OTA check
carries its partition table) found on the transport its last OTA answer named (the answer is
stale). A client that picks its transport itself (py-xiaozhi, browser pages, xiaozhi-sdk, load
testers) is left alone, even when its transport happens to be the one we named. One restart per
OTA answer: a device that comes back on the same transport without a new OTA check (its check
failed, say) is not restarted again until it checks.
"""

from enum import StrEnum
import logging
from typing import TYPE_CHECKING, Any, Protocol

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback

from ..const import CONF_MQTT, CONF_TRANSPORT, TRANSPORT_MQTT, TRANSPORT_WEBSOCKET
from ..device import XiaozhiDevice
from ..restarts import Reason

if TYPE_CHECKING:
    from ..transport.mqtt import MqttEndpoint

_LOGGER = logging.getLogger(__name__)


class Hub(Protocol):
    """What the policy reads of the hub (``hub.py``), and nothing else of it."""

    @property
    def entry(self) -> ConfigEntry:
        """The hub's entry: its options and the devices' subentries (their choices)."""

    @property
    def mqtt(self) -> MqttEndpoint | None:
        """The MQTT endpoint, while it exists."""

    @property
    def stopping(self) -> bool:
        """Unloading, or Home Assistant stopping."""

    def device_host(self) -> str:
        """The host name devices reach Home Assistant by."""


class TransportState(StrEnum):
    """How a device is connected, and whether a change waits (the Transport sensor's states)."""

    MQTT = "mqtt"
    WEBSOCKET = "websocket"
    OFFLINE = "offline"
    TO_MQTT = "to_mqtt"
    """On WebSocket, or off: it moves to MQTT+UDP when it next connects (after that conversation)."""
    TO_WEBSOCKET = "to_websocket"
    """On MQTT, or off: it moves to WebSocket once its conversation is over, or when it connects."""


def wanted(hub: Hub, device: XiaozhiDevice) -> str:
    """The transport the device should use now (what its next OTA answer says)."""
    return TRANSPORT_MQTT if mqtt_answer(hub, device) is not None else TRANSPORT_WEBSOCKET


def _follows(device: XiaozhiDevice, current: str) -> bool:
    """Whether the device is on the transport its last OTA answer named (it follows our answers).

    Told by what the client is, not by coincidence: stock firmware posts its partition table and
    running OTA slot at every check; a client that does not (py-xiaozhi) picks its transport
    itself, even when it happens to be the one we named. An MQTT connection with no answer
    recorded (before this was kept) was handed out by OTA too.
    """
    if device.picks_transport:
        return False
    told = device.told_transport or (TRANSPORT_MQTT if current == TRANSPORT_MQTT else None)
    return told == current


def state(hub: Hub, device: XiaozhiDevice) -> TransportState:
    """What the device page shows: the real transport, or the change that waits."""
    want = wanted(hub, device)
    link = device.link
    current = link.transport_name if link is not None else device.told_transport
    if current is None or device.picks_transport or (link is not None and not _follows(device, current)):
        # Never told, or a client that picks its own transport (connected or not): no change waits for it.
        return TransportState(link.transport_name) if link is not None else TransportState.OFFLINE
    if current != want and not device.restarts.transport_sent:
        return TransportState.TO_MQTT if want == TRANSPORT_MQTT else TransportState.TO_WEBSOCKET
    return TransportState(current) if link is not None else TransportState.OFFLINE


@callback
def async_follow(hass: HomeAssistant, hub: Hub, device: XiaozhiDevice) -> None:
    """Restart the device now if it is on the wrong transport and no conversation is open.

    Called whenever the device changes (connected, conversation over, choice changed). Over
    WebSocket it only marks the device: the end of the conversation restarts it (``link.py``).
    """
    link = device.link
    device.restarts.settle(Reason.TRANSPORT)
    if link is None or device.restarts.transport_sent or hub.stopping:
        return
    current = link.transport_name
    want = wanted(hub, device)
    if current == want or not _follows(device, current):
        return
    if current == TRANSPORT_WEBSOCKET:
        device.restarts.owe(Reason.TRANSPORT)
        return
    if not device.idle:
        return  # in a conversation: once it is over (the channel's close tells again)
    device.restarts.sent_for_transport()
    _LOGGER.info("Restarting %s: it is on %s, its connection choice is %s", device.name, current, want)
    hub.entry.async_create_background_task(
        hass, device.async_restart_quietly(), f"xiaozhi_local transport {device.mac}"
    )


@callback
def mqtt_answer(hub: Hub, device: XiaozhiDevice) -> dict[str, Any] | None:
    """The ``mqtt`` object of the device's OTA answer, or None: the device stays on WebSocket.

    Only while the endpoint listens: the firmware prefers ``mqtt`` to ``websocket``, so a
    dead endpoint would leave the device with no server at all.
    """
    if hub.mqtt is None or not hub.mqtt.listening or device.open:
        return None
    if (subentry := hub.entry.subentries.get(device.subentry_id)) is None:
        return None  # being removed
    choice = subentry.data.get(CONF_TRANSPORT)
    on_mqtt = (
        hub.entry.options.get(CONF_MQTT, True)
        if choice not in (TRANSPORT_MQTT, TRANSPORT_WEBSOCKET)
        else (choice == TRANSPORT_MQTT)
    )
    return hub.mqtt.credentials(device, hub.device_host()) if on_mqtt else None


def mqtt_in_use(entry: ConfigEntry) -> bool:
    """Whether any device may be told MQTT+UDP: the hub option, or a device's own choice."""
    return bool(entry.options.get(CONF_MQTT, True)) or any(
        sub.data.get(CONF_TRANSPORT) == TRANSPORT_MQTT for sub in entry.subentries.values()
    )
