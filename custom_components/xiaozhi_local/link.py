"""What every device link shares, whatever carries it (WebSocket, or MQTT with UDP audio).

A link is one live session with one device. The device, its entities, its tools and the
voice satellite see only its narrow interface (listed in docs/architecture.md, held by
tests/test_layers.py): sending, calls, ending, and what the client does (whether audio can flow,
its listen mode, whether audio comes in order). The routing of what the device says lives
here, once; MCP discovery and the connect-time round are its ``discovery`` (``tools/discovery.py``).
A link holds the session (``protocol/session.py``) and the ``Channel`` that carries it
(``transport/channel.py``): the transports (``transport/websocket.py``, ``transport/mqtt_channel.py``) only move bytes.
"""

from collections.abc import Coroutine
import contextlib
from dataclasses import dataclass
import logging
from typing import Any

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from .const import EVENT_NOTIFICATION, EVENT_TOOL_ERROR
from .device import XiaozhiDevice
from .protocol.mcp import McpBusyError, McpError, McpRemoteError, ToolResult
from .protocol.messages import ClientHello, ControlMessage
from .protocol.register import Registration
from .protocol.session import DeviceSession
from .protocol.voice import VoiceError, parse_listen
from .tools.discovery import ToolDiscovery
from .transport.channel import Channel

_LOGGER = logging.getLogger(__name__)

RESTART_CLOSE = 3.0
"""Seconds after a restart was sent before the socket is closed from our side (the firmware closes
it itself after about one)."""


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What a client said about itself when it connected (headers, query, or MQTT CONNECT)."""

    client_id: str | None
    protocol_version: int
    address: str | None = None
    """Where it connects from (its firmware downloads are bound to it)."""


class DeviceLink:
    """The runtime side of one session: a DeviceSession and the Channel that carries it, wired to HA."""

    def __init__(
        self,
        hass: HomeAssistant,
        device: XiaozhiDevice,
        client: ClientInfo,
        channel: Channel,
        vision_url: str | None = None,
    ) -> None:
        self.hass = hass
        self.vision_url = vision_url
        self.device = device
        self.client = client
        self.log = device.log
        self.channel = channel
        channel.attach(self)
        self.session = DeviceSession(
            device.mac, channel.async_send_text, self, log=self.log, hello_reply=channel.hello_reply_builder()
        )
        self.audio_frames = 0  # uplink audio packets delivered
        self.discovery = ToolDiscovery(device, self.session.mcp, vision_url)
        self.discovered = self.discovery.discovered  # tools known: calls can go out
        self.settled = self.discovery.settled  # the connect-time round is over (tools/discovery.py)
        self._listen_mode: str | None = None  # of its last listen start
        self.gone = False
        """The link has ended (a conversation's end over MQTT is not that)."""
        self._cancel_idle: CALLBACK_TYPE | None = None

    # -- what the channel says about the transport --------------------------------------------

    @property
    def transport_name(self) -> str:
        """``websocket`` or ``mqtt`` (diagnostics, logs, the connection choice)."""
        return self.channel.name

    @property
    def audio_in_order(self) -> bool:
        """Whether audio comes in order with the messages (false over UDP: see ``Channel``)."""
        return self.channel.audio_in_order

    @property
    def conversation_is_connection(self) -> bool:
        """Whether the connection is one conversation (WebSocket), or outlives them (MQTT)."""
        return self.channel.conversation_is_connection

    @property
    def dropped_frames(self) -> int:
        """Frames dropped for coming too fast."""
        return self.channel.dropped_frames

    @property
    def missed_pings(self) -> int:
        """Liveness sweeps in a row without a sign of the device."""
        return self.channel.missed_pings

    @property
    def audio_open(self) -> bool:
        """Whether downlink audio reaches the device now (a conversation channel is open)."""
        return self.channel.audio_open

    # -- what goes out through the channel ----------------------------------------------------

    async def run(self) -> None:
        """Receive until the link ends; always leaves the device detached (``ended``)."""
        await self.channel.async_receive()

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One downlink Opus packet; False when it cannot reach the device."""
        return await self.channel.async_send_audio(packet, timestamp)

    async def async_close(self, reason: str, code: int = 1000) -> None:
        """End the link from our side (replaced, unloaded, token changed; 1001 when HA stops)."""
        _LOGGER.debug("Closing the %s link of %s: %s", self.transport_name, self.device.mac, reason)
        self.session.close(reason)
        await self.channel.async_close(reason, code)

    async def async_reads(self, timeout: float) -> bool:
        """Whether the device still reads what is sent to it: it answers a ``ping`` in time.

        What was sent before the ping is then read too (one ordered connection). A device that
        answers none has lost its power or network without closing its connection (its sockets
        look open for up to 1.5 keepalives): its link is closed now, so it shows unavailable.
        """
        try:
            if await self.session.mcp.ping(timeout):
                return True
        except McpBusyError:  # its requests are all waiting: not proof of anything; nothing closed
            return False
        if not self.gone:
            _LOGGER.info("Device %s did not answer within %.0f s; closing its link", self.device.mac, timeout)
            await self.async_close("answers nothing")
        return False

    @callback
    def async_check_alive(self, missed_allowed: int) -> None:
        """One liveness sweep of the hub."""
        self.channel.async_check_alive(missed_allowed)

    async def async_end_conversation(self, reason: str) -> None:
        """End the conversation the way the device understands (WebSocket: close the socket).

        A device that owes a restart (restarts.py: its transport, firmware or a wake word pack waits)
        is restarted instead: it closes the socket itself, checks OTA at boot and comes back on the
        transport chosen, or fetches what its OTA answer carries. Over MQTT the channel ends it with
        ``goodbye`` and the connection stays.
        """
        if await self.channel.async_end_conversation(reason):
            return
        device = self.device
        if device.link is self and (why := device.restarts.take()) is not None:
            _LOGGER.info("Restarting %s at the end of its conversation: %s", device.mac, why)
            if await self.async_send_json({"type": "system", "command": "reboot"}):

                @callback
                def close(_now: Any) -> None:
                    self._cancel_idle = None
                    # If it did not close itself meanwhile.
                    self.device.async_create_task(self.async_close(reason), f"xiaozhi_local close {self.device.mac}")

                self.touch()
                self._cancel_idle = async_call_later(self.hass, RESTART_CLOSE, close)  # ends with the link
                return
        await self.async_close(reason)

    # -- what comes in through the channel ----------------------------------------------------

    async def async_receive_text(self, text: str) -> None:
        """One JSON message from the device."""
        await self.session.handle_text(text)

    def receive_binary(self, data: bytes) -> None:
        """One binary frame from the device (the session checks its size)."""
        self.session.handle_binary(data)

    @property
    def hello_received(self) -> bool:
        """Whether the device's hello has come (a WebSocket channel waits for it a bounded time)."""
        return self.session.hello is not None

    @property
    def requests_unanswered(self) -> int:
        """Our requests in a row the device has not answered (a channel without pings watches it)."""
        return self.session.mcp.unanswered_in_a_row

    @callback
    def conversation_opened(self) -> None:
        """The transport opened a conversation on a connection that outlives them (an MQTT hello).

        What a ``listen start`` set belongs to its conversation: the next one starts with none, so
        the wake audio that opens it is wake audio, not a turn (the firmware's MQTT session outlives
        its conversations; its WebSocket connection is one).
        """
        self._listen_mode = None
        self.device.async_open_conversation(self)

    @callback
    def conversation_closed(self, *, by_device: bool = False) -> None:
        """The transport closed its conversation (its audio channel); ``by_device``: its ``goodbye``."""
        self._listen_mode = None
        self.device.async_end_conversation(self)
        self.device.async_activity_changed()
        if by_device and (voice := self.device.voice) is not None:
            voice.on_disconnect(self)

    @callback
    def channel_changed(self) -> None:
        """Its audio channel changed: only what follows activity looks again (not other entities)."""
        self.device.async_activity_changed()

    def create_task(self, target: Coroutine[Any, Any, Any], what: str) -> None:
        """A task of the channel's (a close, a ping), tied to the device's config entry."""
        self.device.async_create_task(target, f"xiaozhi_local {what} {self.device.mac}")

    # -- conversation timing ------------------------------------------------------------------

    @callback
    def touch(self) -> None:
        """Voice activity: the conversation goes on (an armed idle end is called off)."""
        if self._cancel_idle is not None:
            self._cancel_idle()
            self._cancel_idle = None

    @callback
    def arm_idle(self, seconds: float) -> None:
        """The conversation is over: end it after ``seconds`` without voice activity."""
        self.touch()

        @callback
        def idle(_now: Any) -> None:
            self._cancel_idle = None
            _LOGGER.debug("Device %s idle for %s s; ending its conversation", self.device.mac, seconds)
            self.device.async_create_task(self.async_end_conversation("idle"), f"xiaozhi_local idle {self.device.mac}")

        self._cancel_idle = async_call_later(self.hass, seconds, idle)

    @callback
    def ended(self) -> None:
        """The link is gone: nothing waits on it, no timer outlives it, the device is detached."""
        self.gone = True
        self.touch()
        self.session.close(f"device {self.device.mac} disconnected")
        self.discovery.end()  # a round still running stops; nobody waits forever on a gone link
        if (voice := self.device.voice) is not None:
            voice.on_disconnect(self)
        if self.device.link is self:
            _LOGGER.debug("Device %s disconnected", self.device.mac)  # every conversation, over WebSocket
        self.device.async_detach(self)

    def deliver_audio(self, packet: bytes) -> None:
        """One uplink Opus packet, unwrapped by the channel: to the voice satellite."""
        self.audio_frames += 1
        if (voice := self.device.voice) is not None:
            voice.on_audio(self, packet)

    # -- SessionHandler ---------------------------------------------------------------------

    def on_hello(self, hello: ClientHello) -> None:
        """The device is in: attach it and learn its tools."""
        _LOGGER.debug(
            "Device %s connected over %s (protocol %s, client %s)",
            self.device.mac,
            self.transport_name,
            self.client.protocol_version,
            self.client.client_id,
        )
        self.device.async_attach(self)
        if self.conversation_is_connection:
            self.device.async_open_conversation(self)
        self.discovery.start(mcp=hello.supports_mcp)

    def on_audio(self, data: bytes) -> None:
        """A binary frame: the channel unframes the audio in it, if its transport carries audio in-band."""
        self.channel.on_binary(data)

    def on_register(self, registration: Registration) -> None:
        """A registerTools client announced its tools (tools/discovery.py)."""
        self.discovery.on_register(registration)

    def on_tool_error(self, tool: str, error: McpError) -> None:
        """A ``control`` tool reported done at once failed on the client later: log it, fire an event."""
        message = error.message if isinstance(error, McpRemoteError) else str(error)
        code = error.code if isinstance(error, McpRemoteError) else None
        self.log.report("control_failed", f"tool {tool} failed after it was reported done: {message}")
        self.hass.bus.async_fire(
            EVENT_TOOL_ERROR,
            {
                "device_id": self.device.device_id,
                "mac": self.device.mac,
                "tool": tool,
                "message": message,
                "code": code,
            },
        )

    def on_notification(self, method: str, params: Any) -> None:
        """A device notification becomes an HA event (and the device's event entity fires)."""
        if not self.device.notifications.async_allow(method, params):
            return
        self.hass.bus.async_fire(
            EVENT_NOTIFICATION,
            {"device_id": self.device.device_id, "mac": self.device.mac, "method": method, "params": params},
        )
        self.device.notifications.async_dispatch(method, params)
        if method == "notifications/tools/list_changed":
            self.discovery.relist()

    @property
    def listen_mode(self) -> str | None:
        """The mode of the client's last ``listen start`` (``auto``, ``manual``, ``realtime``), if any."""
        return self._listen_mode

    @property
    def streams_microphone(self) -> bool:
        """Whether the client keeps streaming its microphone after an utterance (auto, realtime).

        The browser page, xiaozhi-sdk in realtime mode and load testers send ``listen start``
        once; what follows is segmented by Home Assistant's VAD, turn after turn.
        """
        return self._listen_mode in ("auto", "realtime")

    @property
    def takes_ai_messages(self) -> bool:
        """Whether the client reads the agent's reply as ``mcp/ai/message`` (``mcp/registerTools`` clients)."""
        return self.session.registered

    def on_control(self, message: ControlMessage) -> None:
        """``listen``/``abort``/…: for the device's voice satellite (a ``listen start`` sets the mode)."""
        if self.channel.on_control(message):
            return
        detect = message.type == "listen" and message.data.get("state") == "detect"
        if detect and isinstance(text := message.data.get("text"), str):
            self.device.async_heard_wake_word(text)
        if message.type == "listen" and message.data.get("state") == "start":
            with contextlib.suppress(VoiceError):
                self._listen_mode = parse_listen(message.data).mode
        if (voice := self.device.voice) is not None:
            voice.on_control(self, message)
        else:
            _LOGGER.debug("Device %s: %s message with no satellite: %s", self.device.mac, message.type, message.data)

    # -- what the voice satellite sends ------------------------------------------------------

    async def async_call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """``tools/call`` on the device (by the name it gave the tool). Raises McpError subclasses."""
        return await self.session.mcp.call_tool(name, arguments, timeout)

    async def async_send_ai_message(self, kind: str, content: str) -> None:
        """The agent's reply as ``mcp/ai/message`` (the session sends it to registerTools clients only)."""
        # Gone: the satellite notices through the connection's end.
        with contextlib.suppress(McpError, ConnectionError, RuntimeError):
            await self.session.send_ai_message(kind, content)

    async def async_send_json(self, message: dict[str, Any]) -> bool:
        """One JSON message to the device; False when the connection is gone."""
        try:
            await self.session.send_json(message)
        except ConnectionError, RuntimeError:
            return False
        return True
