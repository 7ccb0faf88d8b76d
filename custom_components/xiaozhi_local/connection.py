"""One device WebSocket on HA's HTTP server: the receive loop, hello deadline, MCP discovery."""

import asyncio
import contextlib
from dataclasses import dataclass
import logging
from typing import Any

from aiohttp import WSMsgType, web
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from .const import DISCOVERY_TIMEOUT, EVENT_NOTIFICATION, EVENT_TOOL_ERROR, FLOOD_LIMIT, FRAME_BURST, FRAME_RATE
from .device import XiaozhiDevice
from .protocol import session as proto_session
from .protocol.audio import pack_frame, unpack_frame
from .protocol.mcp import McpConnectionError, McpError, McpRemoteError
from .protocol.messages import ClientHello, ControlMessage, FrameError
from .protocol.register import Registration
from .protocol.session import DeviceSession

_LOGGER = logging.getLogger(__name__)

CLOSE_TIMEOUT = 2.0
"""Seconds a close may take (the firmware never answers a Close frame; a stuck peer never reads it)."""


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What a client said about itself when it connected (headers or query)."""

    client_id: str | None
    protocol_version: int


class DeviceConnection:
    """The runtime side of one connection: wires a DeviceSession to aiohttp and to HA."""

    def __init__(
        self,
        hass: HomeAssistant,
        device: XiaozhiDevice,
        ws: web.WebSocketResponse,
        client: ClientInfo,
        vision_url: str | None = None,
        *,
        transport: asyncio.Transport | None = None,
    ) -> None:
        self.hass = hass
        self.transport = transport  # aborted when a close cannot complete (a peer that stops reading)
        self.vision_url = vision_url
        self.device = device
        self.ws = ws
        self.client = client
        self.log = device.log
        self.session = DeviceSession(device.mac, ws.send_str, self, log=self.log)
        self.discovered = asyncio.Event()  # tools known: calls can go out
        self.settled = asyncio.Event()  # the connect-time round is over: settings applied, status read
        self.audio_frames = 0
        self.heard = True  # anything received since the last liveness sweep
        self.dropped_frames = 0
        self._tokens = FRAME_BURST
        self._refilled = 0.0
        self.missed_pings = 0
        self._discovery: asyncio.Task[None] | None = None
        self.listen_mode: str | None = None  # of its last listen start (continuous clients stream on)
        self._cancel_idle: CALLBACK_TYPE | None = None

    async def run(self) -> None:
        """Receive until the connection ends; always leaves the device detached."""
        loop = asyncio.get_running_loop()
        hello_deadline = loop.time() + proto_session.HELLO_TIMEOUT
        try:
            while True:
                # aiohttp reads a timeout of 0 as "none": keep it positive.
                timeout = None if self.session.hello else max(0.001, hello_deadline - loop.time())
                try:
                    msg = await self.ws.receive(timeout=timeout)
                except TimeoutError:
                    _LOGGER.warning(
                        "Device %s sent no hello within %s s; closing", self.device.mac, proto_session.HELLO_TIMEOUT
                    )
                    await self._async_close_ws(4000, "no hello")
                    return
                self.heard = True
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY) and not self._within_rate(loop.time()):
                    self.dropped_frames += 1
                    self.log.report("flood", f"sends faster than {FRAME_RATE:.0f} frames/s; dropping frames")
                    if self.dropped_frames >= FLOOD_LIMIT:
                        _LOGGER.warning("Device %s floods its connection; closing it", self.device.mac)
                        await self._async_close_ws(1008, "flood")
                        return
                    continue
                if msg.type is WSMsgType.TEXT:
                    await self.session.handle_text(msg.data)
                elif msg.type is WSMsgType.BINARY:
                    self.session.handle_binary(msg.data)
                elif msg.type is WSMsgType.PING:  # autoping is off: answer ourselves
                    await self.ws.pong(msg.data)
                elif msg.type is WSMsgType.PONG:
                    pass
                elif msg.type is WSMsgType.ERROR:
                    _LOGGER.warning("Device %s: connection error: %s", self.device.mac, self.ws.exception())
                    return
                else:  # CLOSE, CLOSING, CLOSED
                    return
        except (ConnectionError, RuntimeError) as err:  # sending on a socket the peer dropped
            _LOGGER.debug("Device %s: connection lost: %s", self.device.mac, err)
        finally:
            self._cleanup()
            if not self.ws.closed:  # also stops aiohttp's heartbeat timer
                await self._async_close_ws(1000, "")

    @callback
    def touch(self) -> None:
        """Voice activity: the conversation goes on (an armed idle close is called off)."""
        if self._cancel_idle is not None:
            self._cancel_idle()
            self._cancel_idle = None

    @callback
    def arm_idle(self, seconds: float) -> None:
        """The conversation is over: close the socket after ``seconds`` without voice activity."""
        self.touch()

        @callback
        def idle(_now: Any) -> None:
            self._cancel_idle = None
            _LOGGER.debug("Device %s idle for %s s; closing its connection", self.device.mac, seconds)
            self.hass.async_create_task(self.async_close("idle"))

        self._cancel_idle = async_call_later(self.hass, seconds, idle)

    @callback
    def _cleanup(self) -> None:
        self.touch()  # no idle timer outlives the connection
        self.session.close(f"device {self.device.mac} disconnected")
        if self._discovery is not None:
            self._discovery.cancel()  # also a settings/status round still running
        self.discovered.set()  # nobody waits forever on a gone connection
        self.settled.set()
        if (voice := self.device.voice) is not None:
            voice.on_disconnect(self)
        if self.device.connection is self:
            _LOGGER.info("Device %s disconnected", self.device.mac)
        self.device.async_detach(self)

    async def async_close(self, reason: str, code: int = 1000) -> None:
        """Close from our side (replaced, unloaded, token changed; 1001 when HA stops)."""
        _LOGGER.debug("Closing device %s: %s", self.device.mac, reason)
        self.session.close(reason)
        if not self.ws.closed:
            await self._async_close_ws(code, reason)

    async def _async_close_ws(self, code: int, reason: str) -> None:
        """Close within ``CLOSE_TIMEOUT`` whatever the peer does; past it, drop the TCP connection.

        The Close frame waits behind whatever is queued for the device: a peer that stopped
        reading would hold the close (and every call waiting on the device) forever.
        """
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.ws.close(code=code, message=reason.encode()[:120])
        except TimeoutError:
            _LOGGER.info("Device %s does not read what is sent to it; dropping its connection", self.device.mac)
            if self.transport is not None:
                self.transport.abort()
        except Exception as err:  # noqa: BLE001 - a socket already gone: nothing more to close
            _LOGGER.debug("Device %s: closing failed: %s", self.device.mac, err)

    def _within_rate(self, now: float) -> bool:
        """A token bucket: ``FRAME_RATE`` frames a second, bursts of ``FRAME_BURST``."""
        self._tokens = min(FRAME_BURST, self._tokens + (now - self._refilled) * FRAME_RATE)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    @callback
    def async_check_alive(self, missed_allowed: int) -> None:
        """One liveness sweep: ping, or close when the device has been silent too long."""
        if self.heard:
            self.heard, self.missed_pings = False, 0
        else:
            self.missed_pings += 1
        if self.missed_pings >= missed_allowed:
            _LOGGER.info("Device %s stopped answering; closing its connection", self.device.mac)
            self.hass.async_create_task(self.async_close("no answer to pings"), eager_start=True)
        elif not self.ws.closed:
            self.hass.async_create_task(self._async_ping(), eager_start=True)

    async def _async_ping(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.ping()

    # -- SessionHandler ---------------------------------------------------------------------

    def on_hello(self, hello: ClientHello) -> None:
        """The device is in: attach it and learn its tools."""
        _LOGGER.info(
            "Device %s connected (protocol %s, client %s)",
            self.device.mac,
            self.client.protocol_version,
            self.client.client_id,
        )
        self.device.async_attach(self)
        if hello.supports_mcp:
            self._discovery = self.hass.async_create_background_task(
                self._async_discover(), f"xiaozhi_local discovery {self.device.mac}"
            )
        else:
            self.device.async_set_discovery(self.device.server_info, [])
            self.discovered.set()
            self.settled.set()

    async def _async_discover(self) -> None:
        try:
            await self._async_discover_and_settle()
        finally:
            # Cancelled: a registration replaced it, or the connection ended (``_cleanup`` sets them).
            if not _cancelling():
                self.discovered.set()
                self.settled.set()

    async def _async_discover_and_settle(self) -> None:
        mcp = self.session.mcp
        try:
            try:
                info = await mcp.initialize(self._capabilities(), timeout=DISCOVERY_TIMEOUT)
            except McpRemoteError as err:  # some clients skip initialize; tools/list may still work
                self.log.report("initialize_failed", f"initialize failed: {err}")
                info = mcp.server_info
            tools = await mcp.list_tools(with_user_tools=True, timeout=DISCOVERY_TIMEOUT)
        except McpConnectionError:
            return  # gone while we asked
        except McpError as err:
            _LOGGER.warning("Device %s: could not list its tools: %s", self.device.mac, err)
            return
        _LOGGER.debug("Device %s offers %d tools", self.device.mac, len(tools))
        self.device.async_set_discovery(info, tools)
        self.discovered.set()
        await self.device.async_on_ready()

    def _capabilities(self) -> dict[str, Any]:
        """``vision``: where a camera board uploads photos, with a token just for that."""
        if self.vision_url is None:
            return {}
        return {"vision": {"url": self.vision_url, "token": self.device.async_new_vision_token()}}

    async def _async_relist(self) -> None:
        """The device says its tools changed."""
        try:
            tools = await self.session.mcp.list_tools(with_user_tools=True, timeout=DISCOVERY_TIMEOUT)
        except McpError as err:
            self.log.report("relist_failed", f"could not list its tools again: {err}")
            return
        self.device.async_set_discovery(self.session.mcp.server_info, tools)
        await self.device.async_refresh()

    def on_register(self, registration: Registration) -> None:
        """A registerTools client announced its tools: they are the device's tools from now on."""
        _LOGGER.debug(
            "Device %s registered %d tools (%d server-side ones it may call)",
            self.device.mac,
            len(registration.remote),
            len(registration.local),
        )
        if self._discovery is not None:
            # MCP discovery (a hello that announced MCP) or the round of an earlier registration.
            self._discovery.cancel()
        self.device.async_set_discovery(self.session.mcp.server_info, registration.remote)
        self.discovered.set()
        self.settled.clear()
        self._discovery = self.hass.async_create_background_task(
            self._async_settle(), f"xiaozhi_local settle {self.device.mac}"
        )

    async def _async_settle(self) -> None:
        """Settings made while the client was away, then its status (as after MCP discovery)."""
        try:
            await self.device.async_on_ready()
        finally:
            if not _cancelling():
                self.settled.set()

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
        if not self.device.async_allow_notification(method, params):
            return
        self.hass.bus.async_fire(
            EVENT_NOTIFICATION,
            {"device_id": self.device.device_id, "mac": self.device.mac, "method": method, "params": params},
        )
        self.device.async_notification(method, params)
        if method == "notifications/tools/list_changed" and self.discovered.is_set():
            self.hass.async_create_background_task(self._async_relist(), f"xiaozhi_local relist {self.device.mac}")

    def on_control(self, message: ControlMessage) -> None:
        """``listen``/``abort``/…: for the device's voice satellite."""
        if (voice := self.device.voice) is not None:
            voice.on_control(self, message)
        else:
            _LOGGER.debug("Device %s: %s message with no satellite: %s", self.device.mac, message.type, message.data)

    def on_audio(self, data: bytes) -> None:
        """A binary frame: the Opus packet in it goes to the voice satellite."""
        self.audio_frames += 1
        try:
            packet = unpack_frame(self.client.protocol_version, data)
        except FrameError as err:
            self.log.report(err.kind, f"dropped audio: {err.detail}")
            return
        if (voice := self.device.voice) is not None:
            voice.on_audio(self, packet)

    # -- what the voice satellite sends ------------------------------------------------------

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

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One Opus packet, framed as the device's protocol version wants; False when gone."""
        if self.ws.closed:
            return False
        try:
            await self.ws.send_bytes(pack_frame(self.client.protocol_version, packet, timestamp))
        except ConnectionError, RuntimeError:
            return False
        return True


def _cancelling() -> bool:
    """Whether the running task is being cancelled (its replacement sets the events)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
