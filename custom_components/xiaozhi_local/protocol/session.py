"""One connection with one device: the hello exchange, the MCP envelope, routing of frames.

Transport-agnostic: the runtime feeds received frames in and gives a coroutine that sends a
text frame. Nothing a device sends can raise out of ``handle_text``/``handle_binary``.

Clients differ (the stock firmware, py-xiaozhi, browser pages, the registerTools dialect); the
session tells them apart by what they send: JSON-RPC with or without the ``mcp`` envelope (we
answer the way they speak), MCP sent before the hello (kept and handled after it), and
``mcp/registerTools`` instead of a hello.
"""

from collections import deque
from collections.abc import Awaitable, Callable
import logging
from typing import Any, Final, Protocol

from .logs import OnceLogger
from .mcp import McpError
from .mcp_client import McpClient
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
from .register import (
    INVALID_REQUEST,
    METHOD_AI_MESSAGE,
    METHOD_NOT_FOUND,
    METHOD_REGISTER,
    Registration,
    RegistrationError,
    ai_message,
    parse_registration,
    registered_answer,
)

MAX_TEXT_FRAME: Final = 64 * 1024
"""Largest text frame we look at. Stock firmware sends frames of at most 65 535 bytes."""

MAX_BINARY_FRAME: Final = 16 * 1024
"""Largest binary (audio) frame we look at; a 60 ms Opus packet is a few hundred bytes."""

HELLO_TIMEOUT: Final = 10.0
"""Seconds a client has to send its hello after connecting."""

MAX_EARLY_MCP: Final = 32
"""JSON-RPC messages kept from before the hello (clients that answer MCP before the server hello)."""

_LOGGER = logging.getLogger(__name__)


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

    def on_register(self, registration: Registration) -> None:
        """The client registered its tools (``mcp/registerTools``); replaces earlier ones."""

    def on_tool_error(self, tool: str, error: McpError) -> None:
        """A ``control`` tool, already reported done, failed on the client."""


type SendText = Callable[[str], Awaitable[None]]
type HelloReply = Callable[[ClientHello], dict[str, Any]]


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
        hello_reply: HelloReply | None = None,
    ) -> None:
        self.device_id = device_id
        self._send_text = send_text
        self._handler = handler
        self.log = log or OnceLogger(device_id)
        self.sample_rate = sample_rate
        self.hello_reply = hello_reply
        """Builds the server hello (the MQTT transport adds its UDP channel); None: the WebSocket one."""
        self.session_id = new_session_id()
        self.hello: ClientHello | None = None
        self.bare = False  # the client speaks JSON-RPC without the ``mcp`` envelope
        self._early: deque[McpEnvelope] = deque(maxlen=MAX_EARLY_MCP)
        self.mcp = McpClient(self._send_mcp, warn=self.log.report, on_late_error=handler.on_tool_error)

    @property
    def registered(self) -> bool:
        """Whether the client speaks the registerTools dialect (it registered its tools)."""
        return self.mcp.registered is not None

    async def send_json(self, message: dict[str, Any]) -> None:
        """Send one JSON text frame."""
        await self._send_text(dumps(message))

    async def _send_mcp(self, payload: dict[str, Any]) -> None:
        await self.send_json(payload if self.bare else mcp_envelope(payload, self.session_id))

    async def send_ai_message(self, kind: str, content: str) -> bool:
        """``mcp/ai/message`` (chunk, final, thought) to a registerTools client; False for others."""
        if not self.registered:
            return False
        await self.mcp.notify(METHOD_AI_MESSAGE, ai_message(kind, content))
        return True

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
        elif isinstance(message, McpEnvelope):
            if self.hello is not None:
                await self._handle_mcp(message)
            elif message.payload.get("method") == METHOD_REGISTER:
                # A client of the registerTools dialect may never say hello: its registration is one.
                await self._start(ClientHello(), send_hello=False)
                await self._handle_mcp(message)
            else:
                if len(self._early) == self._early.maxlen:
                    self.log.report("before_hello", "dropped an MCP message sent long before its hello")
                self._early.append(message)
        elif self.hello is None:
            self.log.report("before_hello", "dropped a frame sent before its hello")
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
        if hello.problems:
            self.log.report("odd_hello", f"hello accepted with defaults: {'; '.join(hello.problems)}")
        if self.hello is None:
            await self._start(hello, send_hello=True)
        else:
            self.hello = hello
            await self.send_json(self._server_hello(hello))

    def _server_hello(self, hello: ClientHello) -> dict[str, Any]:
        if self.hello_reply is not None:
            return self.hello_reply(hello)
        return server_hello(self.session_id, self.sample_rate)

    async def start_without_hello(self) -> None:
        """A transport that is the session from its first byte (MQTT): MCP works before any hello.

        The device's later hellos each open an audio channel (answered by ``hello_reply``).
        """
        await self._start(ClientHello(features={"mcp": True}), send_hello=False)

    async def _start(self, hello: ClientHello, *, send_hello: bool) -> None:
        """The session begins: answer the hello, tell the handler, then handle MCP sent early."""
        self.hello = hello
        if send_hello:
            await self.send_json(self._server_hello(hello))
        self._handler.on_hello(hello)
        while self._early:
            await self._handle_mcp(self._early.popleft())

    async def _handle_mcp(self, message: McpEnvelope) -> None:
        self.bare = message.bare  # answer the way the client speaks
        payload = message.payload
        method = payload.get("method")
        if method is None:
            if "id" not in payload:
                self.log.report("bad_jsonrpc", "dropped a JSON-RPC message with neither method nor id")
            elif not self.mcp.handle_response(payload):
                self.log.report("unknown_id", f"dropped a reply for unknown id {payload.get('id')!r}")
            return
        if not isinstance(method, str):
            self.log.report("bad_field", "dropped a JSON-RPC message whose method is not a string")
            if "id" in payload:
                await self._send_error(payload["id"], INVALID_REQUEST, "method must be a string")
            return
        if method == METHOD_REGISTER:
            await self._handle_register(payload)
        elif "id" not in payload:
            self._handler.on_notification(method, payload.get("params"))
        else:
            # A request for a method we do not serve (a ``local`` tool, say): never leave it unanswered.
            await self._send_error(payload["id"], METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _handle_register(self, payload: dict[str, Any]) -> None:
        try:
            registration = parse_registration(payload.get("params"), self.device_id)
        except RegistrationError as err:
            self.log.report("bad_registration", f"refused mcp/registerTools: {err}")
            if "id" in payload:
                await self._send_error(payload["id"], err.code, f"Invalid registration: {err}")
            return
        self.mcp.use_registered_tools(registration.remote)
        self._handler.on_register(registration)
        if "id" in payload:
            await self._send_mcp(
                {"jsonrpc": "2.0", "id": _echo_id(payload["id"]), "result": registered_answer(registration)}
            )

    async def _send_error(self, request_id: Any, code: int, message: str) -> None:
        if not _valid_id(request_id):
            code, message, request_id = INVALID_REQUEST, f"Invalid request id; {message}", None
        await self._send_mcp({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def close(self, reason: str = "connection closed") -> None:
        """The connection is gone: fail whatever waits on it."""
        self.mcp.close(reason)


def _valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings, numbers or null."""
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


def _echo_id(value: Any) -> Any:
    return value if _valid_id(value) else None
