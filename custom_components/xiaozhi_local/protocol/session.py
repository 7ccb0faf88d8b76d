"""One connection with one device: the hello exchange, the MCP envelope, routing of frames.

Transport-agnostic: the runtime feeds received frames in and gives a coroutine that sends a
text frame. Nothing a device sends can raise out of ``handle_text``/``handle_binary``.
"""

from collections import Counter
from collections.abc import Awaitable, Callable
import logging
from typing import Any, Final, Protocol

from .mcp import McpClient
from .messages import (
    DOWNLINK_SAMPLE_RATE,
    ClientHello,
    ControlMessage,
    FrameError,
    McpEnvelope,
    dumps,
    mcp_envelope,
    new_session_id,
    parse_client_frame,
    server_hello,
)

MAX_TEXT_FRAME: Final = 64 * 1024
"""Largest text frame we look at. Stock firmware sends frames of at most 65 535 bytes."""

MAX_BINARY_FRAME: Final = 16 * 1024
"""Largest binary (audio) frame we look at; a 60 ms Opus packet is a few hundred bytes."""

HELLO_TIMEOUT: Final = 10.0
"""Seconds a client has to send its hello after connecting."""

_LOGGER = logging.getLogger(__name__)


class OnceLogger:
    """Warn about each kind of problem once per device; later ones go to debug. Counts them all."""

    def __init__(self, device_id: str, logger: logging.Logger = _LOGGER) -> None:
        self.device_id = device_id
        self.logger = logger
        self.counts: Counter[str] = Counter()

    def report(self, kind: str, message: str) -> None:
        """Log a problem of ``kind`` for this device."""
        self.counts[kind] += 1
        level = logging.WARNING if self.counts[kind] == 1 else logging.DEBUG
        self.logger.log(level, "Device %s: %s (%s)", self.device_id, message, kind)


class SessionHandler(Protocol):
    """What the layer above does with what a session receives."""

    def on_hello(self, hello: ClientHello) -> None:
        """The first valid hello arrived and the server hello went out."""

    def on_notification(self, method: str, params: Any) -> None:
        """A JSON-RPC notification from the device."""

    def on_control(self, message: ControlMessage) -> None:
        """``listen``, ``abort`` and other typed messages."""

    def on_audio(self, data: bytes) -> None:
        """A binary frame after the hello."""


type SendText = Callable[[str], Awaitable[None]]


class DeviceSession:
    """The protocol state of one connection."""

    def __init__(
        self,
        device_id: str,
        send_text: SendText,
        handler: SessionHandler,
        *,
        log: OnceLogger | None = None,
        sample_rate: int = DOWNLINK_SAMPLE_RATE,
    ) -> None:
        self.device_id = device_id
        self._send_text = send_text
        self._handler = handler
        self.log = log or OnceLogger(device_id)
        self.sample_rate = sample_rate
        self.session_id = new_session_id()
        self.hello: ClientHello | None = None
        self.mcp = McpClient(self._send_mcp, warn=self.log.report)

    async def send_json(self, message: dict[str, Any]) -> None:
        """Send one JSON text frame."""
        await self._send_text(dumps(message))

    async def _send_mcp(self, payload: dict[str, Any]) -> None:
        await self.send_json(mcp_envelope(payload, self.session_id))

    async def handle_text(self, text: str) -> None:
        """Handle one received text frame."""
        if len(text) > MAX_TEXT_FRAME:
            self.log.report("too_large", f"dropped a text frame of {len(text)} characters")
            return
        try:
            message = parse_client_frame(text)
        except FrameError as err:
            self.log.report(err.kind, f"dropped a frame: {err.detail}")
            return
        if isinstance(message, ClientHello):
            await self._handle_hello(message)
        elif self.hello is None:
            self.log.report("before_hello", "dropped a frame sent before its hello")
        elif isinstance(message, McpEnvelope):
            await self._handle_mcp(message.payload)
        else:
            self._handler.on_control(message)

    def handle_binary(self, data: bytes) -> None:
        """Handle one received binary frame."""
        if self.hello is None:
            self.log.report("binary_before_hello", "dropped a binary frame sent before its hello")
        elif len(data) > MAX_BINARY_FRAME:
            self.log.report("too_large", f"dropped a binary frame of {len(data)} bytes")
        elif data:
            self._handler.on_audio(data)

    async def _handle_hello(self, hello: ClientHello) -> None:
        first = self.hello is None
        self.hello = hello
        await self.send_json(server_hello(self.session_id, self.sample_rate))
        if first:
            self._handler.on_hello(hello)

    async def _handle_mcp(self, payload: dict[str, Any]) -> None:
        method = payload.get("method")
        if method is None:
            if "id" not in payload:
                self.log.report("bad_jsonrpc", "dropped a JSON-RPC message with neither method nor id")
            elif not self.mcp.handle_response(payload):
                self.log.report("unknown_id", f"dropped a reply for unknown id {payload.get('id')!r}")
            return
        if not isinstance(method, str):
            self.log.report("bad_field", "dropped a JSON-RPC message whose method is not a string")
            return
        if "id" not in payload:
            self._handler.on_notification(method, payload.get("params"))
            return
        # A request from the device: we serve no methods yet, but never leave it unanswered.
        await self._send_mcp(
            {
                "jsonrpc": "2.0",
                "id": payload["id"],
                "error": {"code": -32601, "message": f"Method not found: {method}"},
            }
        )

    def close(self, reason: str = "connection closed") -> None:
        """The connection is gone: fail whatever waits on it."""
        self.mcp.close(reason)
