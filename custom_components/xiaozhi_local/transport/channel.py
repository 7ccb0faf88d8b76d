"""What carries a link: the seam between a session (``link.py``) and a transport.

A ``DeviceLink`` holds the device's session and one ``Channel``. The channel moves bytes (JSON
text, Opus packets), says whether the device is still there, and closes; it knows nothing of MCP,
entities or the satellite. What it receives it hands to the link through the link's inbound side:
``async_receive_text``, ``receive_binary`` (the session's binary frames come back as ``on_binary``),
``deliver_audio`` and, once, ``ended``.

Two channels exist: ``transport/websocket.py`` (one socket, audio in binary frames) and ``transport/mqtt_channel.py``
(MQTT packets, audio over the endpoint's UDP socket while a conversation is open). The MQTT
channel also keeps that transport's conversation rules: a device hello opens a UDP channel, and
``goodbye`` ends the conversation without ending the connection.
"""

from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any, ClassVar, Protocol

from ..protocol.logs import OnceLogger
from ..protocol.messages import ControlMessage
from ..protocol.session import DeviceSession, HelloReply


class _Named(Protocol):
    @property
    def mac(self) -> str:
        """The device's MAC."""

    @property
    def name(self) -> str:
        """Its name in Home Assistant."""


class LinkSide(Protocol):
    """What a channel may use of the link that carries it (``link.py``'s ``DeviceLink``).

    Its inbound side, the conversation's opening and closing (MQTT), its session's id and rate.
    """

    session: DeviceSession
    log: OnceLogger

    @property
    def device(self) -> _Named:
        """Whose link it is (for the log and the repairs)."""

    @property
    def hello_received(self) -> bool:
        """Whether the device's hello has come."""

    @property
    def requests_unanswered(self) -> int:
        """Our requests in a row the device has not answered."""

    async def async_receive_text(self, text: str) -> None:
        """One JSON message from the device."""

    def receive_binary(self, data: bytes) -> None:
        """One binary frame from the device."""

    def deliver_audio(self, packet: bytes) -> None:
        """One uplink Opus packet."""

    def ended(self) -> None:
        """The connection is gone (called once)."""

    def conversation_opened(self) -> None:
        """A conversation opened on a connection that outlives them (an MQTT hello)."""

    def conversation_closed(self, *, by_device: bool = False) -> None:
        """That conversation closed."""

    def channel_changed(self) -> None:
        """Its audio channel changed (opened by a first datagram, or sent from elsewhere)."""

    def create_task(self, target: Coroutine[Any, Any, Any], what: str) -> None:
        """A task of the channel's, tied to the device's config entry."""

    async def async_close(self, reason: str, code: int = 1000) -> None:
        """End the link."""

    async def async_send_json(self, message: dict[str, Any]) -> bool:
        """One JSON message to the device."""


class Channel(ABC):
    """One device connection's bytes; a link gets one at its start (``attach``) and keeps it."""

    name: ClassVar[str]
    """``websocket`` or ``mqtt`` (diagnostics, logs, the connection choice)."""
    audio_in_order: ClassVar[bool] = True
    """Whether audio comes in order with the messages (WebSocket). Over MQTT+UDP a datagram may
    overtake the ``listen start`` sent over MQTT: audio that arrives first may still be the turn's."""
    conversation_is_connection: ClassVar[bool] = True
    """Whether the connection is one conversation (WebSocket: its hello opens it, its close ends it).
    Over MQTT the connection outlives them: each device hello opens one (conversations.py)."""

    link: LinkSide
    dropped_frames = 0
    """Frames dropped for coming too fast (diagnostics)."""
    missed_pings = 0
    """Liveness sweeps in a row without a sign of the device (diagnostics)."""

    def attach(self, link: LinkSide) -> None:
        """The link this channel carries (called once, before anything is received)."""
        self.link = link

    @property
    def mac(self) -> str:
        """The device's MAC (for the log)."""
        return self.link.device.mac

    def hello_reply_builder(self) -> HelloReply | None:
        """What builds this transport's server hello; None: the WebSocket one (``protocol/session.py``)."""
        return None

    @abstractmethod
    async def async_receive(self) -> None:
        """Receive until the connection ends; calls the link's ``ended`` exactly once on the way out."""

    @abstractmethod
    async def async_send_text(self, text: str) -> None:
        """Send one JSON message; raises ConnectionError when the connection is gone."""

    @abstractmethod
    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One downlink Opus packet; False when it cannot reach the device."""

    @abstractmethod
    async def async_close(self, reason: str, code: int = 1000) -> None:
        """End the connection from our side (replaced, unloaded, token changed; 1001 when HA stops)."""

    @abstractmethod
    def async_check_alive(self, missed_allowed: int) -> None:
        """One liveness sweep of the hub."""

    @property
    def audio_open(self) -> bool:
        """Whether downlink audio reaches the device now."""
        return True

    def on_binary(self, data: bytes) -> None:
        """A binary frame from the session: only a transport with audio in-band carries them."""
        self.link.log.report("unexpected_binary", "dropped a binary frame this transport does not carry")

    def on_control(self, message: ControlMessage) -> bool:
        """A control message before the satellite sees it; True when the transport consumed it."""
        return False

    async def async_end_conversation(self, reason: str) -> bool:
        """End the conversation the transport's own way; False: by ending the connection (the link's way)."""
        return False
