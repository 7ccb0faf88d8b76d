"""The firmware's WebSocket transport (``main/protocols/websocket_protocol.cc``).

A socket per conversation, audio in binary frames, the hello on the socket itself.

The other clients of the protocol notes speak it too, each its own way (``profiles.py``): how they
authenticate (headers, or the query string a browser page must use) and what their hello says.
"""

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .errors import DeviceCrashed, HelloTimeout
from .profiles import websocket_hello
from .tools import dumps

if TYPE_CHECKING:
    from .device import SimulatedDevice

_LOGGER = logging.getLogger(__name__)


class WebSocketLink:
    """One device's WebSocket: opened for a conversation, gone at its end or the device's."""

    name = "websocket"

    def __init__(self, device: SimulatedDevice) -> None:
        self.device = device
        self.options = device.options
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._power_off_timer: asyncio.TimerHandle | None = None

    def headers(self) -> dict[str, str]:
        """The application headers of the firmware's WebSocket request (none for a browser)."""
        options = self.options
        auth = self.device.profile.auth
        if auth in ("query", "device-id query"):
            return {}
        headers: dict[str, str] = {}
        token = options.token
        if auth == "lower-case headers":  # py-xiaozhi's spelling: lower-case scheme, upper-case MAC
            if token:
                headers["authorization"] = f"bearer {token}"
            headers["protocol-version"] = str(options.protocol_version)
            headers["device-id"] = options.mac.upper()
            headers["client-id"] = options.client_id
            return headers
        if token:
            headers["Authorization"] = token if " " in token else f"Bearer {token}"
        headers["Protocol-Version"] = str(options.protocol_version)
        headers["Device-Id"] = options.mac
        headers["Client-Id"] = options.client_id
        return headers

    def connect_url(self) -> str:
        """The URL to open; a browser page puts what the headers would carry in the query."""
        options = self.options
        auth = self.device.profile.auth
        if auth == "device-id query":
            return f"{options.url}{'&' if '?' in options.url else '?'}{urlencode({'device-id': options.mac})}"
        if auth != "query":
            return options.url
        query = {"device-id": options.mac, "client-id": options.client_id}
        if options.token:
            query["authorization"] = f"Bearer {options.token}"
        return f"{options.url}{'&' if '?' in options.url else '?'}{urlencode(query)}"

    def hello(self) -> dict[str, Any]:
        """The client's hello: the firmware's, or its family's (``profiles.py``)."""
        return websocket_hello(self.device.profile, self.options)

    async def open(self) -> None:
        """Open the socket without saying hello (tests of what happens before a hello)."""
        self.device.closed.clear()
        self._ws = await connect(
            self.connect_url(),
            additional_headers=self.headers(),
            compression=None,
            ping_interval=None,  # the firmware never pings; it answers the server's pings
            max_size=2**20,
            open_timeout=self.options.handshake_timeout,
            close_timeout=1,
        )

    async def connect(self) -> None:
        """Connect, send the hello and wait for a valid server hello, as the firmware does."""
        await self.open()
        assert self._ws is not None
        await self._ws.send(dumps(self.hello()))
        try:
            async with asyncio.timeout(self.options.hello_timeout):
                while not self.hello_candidate(await self._ws.recv()):
                    pass
        except TimeoutError:
            await self.device.drop()
            raise HelloTimeout("no valid server hello") from None
        except DeviceCrashed:
            await self.device.drop()
            raise
        self._reader = asyncio.create_task(self._read_loop(), name=f"xiaozhi_sim {self.options.mac}")

    def hello_candidate(self, frame: str | bytes) -> bool:
        """Take a valid server hello (True); ignore anything else (False), as the firmware does."""
        if isinstance(frame, bytes):
            return False
        try:
            msg = json.loads(frame)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("type") != "hello":
            return False
        if "transport" not in msg or not isinstance(msg["transport"], str):
            # ParseServerHello logs transport->valuestring on a null pointer.
            raise DeviceCrashed(f"server hello without a string transport: {frame!r}")
        if msg["transport"] != "websocket":
            _LOGGER.warning("Unsupported transport: %s", msg["transport"])
            return False
        if isinstance(msg.get("session_id"), str) and self.device.profile.follows_session_id:
            self.device.session_id = msg["session_id"]  # py-xiaozhi keeps sending an empty one
        self.device.server_hello = msg
        return True

    async def _read_loop(self) -> None:
        assert self._ws is not None
        try:
            async for frame in self._ws:
                if isinstance(frame, bytes):
                    self.device.on_audio(frame)
                else:
                    await self.device.on_text(frame)
        except ConnectionClosed:
            pass
        finally:
            self.device.closed.set()

    @property
    def is_connected(self) -> bool:
        """Whether its socket is open (a conversation is running)."""
        return self._ws is not None and not self.device.closed.is_set()

    @property
    def connection(self) -> ClientConnection:
        """The open socket."""
        if self._ws is None:
            raise RuntimeError("not connected")
        return self._ws

    async def send_json(self, msg: dict[str, Any]) -> None:
        """One JSON text frame."""
        self.device.sent.append(msg)
        await self.connection.send(dumps(msg))

    async def send_raw(self, frame: str | bytes) -> None:
        """Any frame (tests of hostile input)."""
        await self.connection.send(frame)

    async def close_audio_channel(self) -> None:
        """``CloseAudioChannel`` before an upgrade: over WebSocket the socket itself goes."""
        if self._ws is not None and not self.device.closed.is_set():
            self._ws.transport.abort()
            self.device.closed.set()

    def power_off_soon(self) -> None:
        """A restart: the socket drops a moment later (the reply to ``reboot`` goes out first)."""
        if self._power_off_timer is not None:
            self._power_off_timer.cancel()
            self._power_off_timer = None
        if self._ws is not None or self._reader is not None:  # a connection to drop
            self._power_off_timer = asyncio.get_running_loop().call_later(0.1, self._power_off)

    def _power_off(self) -> None:
        """``esp_restart``: the socket drops, and every task stops where it is.

        The upgrade tool, which never returns on success, included.
        """
        self._power_off_timer = None
        if self._ws is not None:
            self._ws.transport.abort()
        if self._reader is not None:
            self._reader.cancel()
        self.device.closed.set()

    async def close(self) -> None:
        """Power off, or the session's end the firmware's way: TCP closed, no Close frame."""
        if self._power_off_timer is not None:  # (what it would do, done now)
            self._power_off_timer.cancel()
            self._power_off_timer = None
        if self._ws is not None:
            self._ws.transport.abort()
        if self._reader is not None:
            self._reader.cancel()  # it may be inside a tool that never returns
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
