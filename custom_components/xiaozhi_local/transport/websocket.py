"""The WebSocket transport: one device socket on HA's HTTP server (receive loop, hello deadline, pings)."""

import asyncio
import contextlib
import logging

from aiohttp import WSMsgType, web
from homeassistant.core import callback

from ..const import FLOOD_LIMIT, FRAME_BURST, FRAME_RATE
from ..limits import TokenBucket
from ..protocol import session as proto_session
from ..protocol.framing import pack_frame, unpack_frame
from ..protocol.messages import FrameError
from .channel import Channel

_LOGGER = logging.getLogger(__name__)

CLOSE_TIMEOUT = 2.0
"""Seconds a close may take (the firmware never answers a Close frame; a stuck peer never reads it)."""

__all__ = ["CLOSE_TIMEOUT", "WebSocketChannel"]


class WebSocketChannel(Channel):
    """A device's WebSocket: the whole conversation (JSON and audio frames) on one socket."""

    name = "websocket"

    def __init__(
        self, ws: web.WebSocketResponse, protocol_version: int, *, transport: asyncio.Transport | None = None
    ) -> None:
        self.ws = ws
        self.protocol_version = protocol_version  # how audio frames are framed (v1/v2/v3)
        self.transport = transport  # aborted when a close cannot complete (a peer that stops reading)
        self.heard = True  # anything received since the last liveness sweep
        self._frames = TokenBucket(FRAME_RATE, FRAME_BURST)

    async def async_send_text(self, text: str) -> None:
        """One JSON message, as a text frame."""
        await self.ws.send_str(text)

    async def async_receive(self) -> None:
        """Receive until the connection ends; always leaves the device detached."""
        link = self.link
        loop = asyncio.get_running_loop()
        hello_deadline = loop.time() + proto_session.HELLO_TIMEOUT
        try:
            while True:
                # aiohttp reads a timeout of 0 as "none": keep it positive.
                timeout = None if link.hello_received else max(0.001, hello_deadline - loop.time())
                try:
                    msg = await self.ws.receive(timeout=timeout)
                except TimeoutError:
                    _LOGGER.warning(
                        "Device %s sent no hello within %s s; closing", self.mac, proto_session.HELLO_TIMEOUT
                    )
                    await self._async_close_ws(4000, "no hello")
                    return
                self.heard = True
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY) and not self._frames.allow(loop.time()):
                    self.dropped_frames += 1
                    self.link.log.report("flood", f"sends faster than {FRAME_RATE:.0f} frames/s; dropping frames")
                    if self.dropped_frames >= FLOOD_LIMIT:
                        _LOGGER.warning("Device %s floods its connection; closing it", self.mac)
                        await self._async_close_ws(1008, "flood")
                        return
                    continue
                if msg.type is WSMsgType.TEXT:
                    await link.async_receive_text(msg.data)
                elif msg.type is WSMsgType.BINARY:
                    link.receive_binary(msg.data)
                elif msg.type is WSMsgType.PING:  # autoping is off: answer ourselves
                    await self.ws.pong(msg.data)
                elif msg.type is WSMsgType.PONG:
                    pass
                elif msg.type is WSMsgType.ERROR:
                    _LOGGER.warning("Device %s: connection error: %s", self.mac, self.ws.exception())
                    return
                else:  # CLOSE, CLOSING, CLOSED
                    return
        except (ConnectionError, RuntimeError) as err:  # sending on a socket the peer dropped
            _LOGGER.debug("Device %s: connection lost: %s", self.mac, err)
        finally:
            link.ended()
            if not self.ws.closed:  # also stops aiohttp's heartbeat timer
                await self._async_close_ws(1000, "")

    async def async_close(self, reason: str, code: int = 1000) -> None:
        """Close from our side (replaced, unloaded, token changed; 1001 when HA stops)."""
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
            _LOGGER.info("Device %s does not read what is sent to it; dropping its connection", self.mac)
            if self.transport is not None:
                self.transport.abort()
        except Exception as err:  # noqa: BLE001 - a socket already gone: nothing more to close
            _LOGGER.debug("Device %s: closing failed: %s", self.mac, err)

    @callback
    def async_check_alive(self, missed_allowed: int) -> None:
        """One liveness sweep: ping, or close when the device has been silent too long."""
        if self.heard:
            self.heard, self.missed_pings = False, 0
        else:
            self.missed_pings += 1
        if self.missed_pings >= missed_allowed:
            _LOGGER.info("Device %s stopped answering; closing its connection", self.mac)
            self.link.create_task(self.link.async_close("no answer to pings"), "close")
        elif not self.ws.closed:
            self.link.create_task(self._async_ping(), "ping")

    async def _async_ping(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.ping()

    def on_binary(self, data: bytes) -> None:
        """A binary frame: the Opus packet in it goes to the voice satellite."""
        try:
            packet = unpack_frame(self.protocol_version, data)
        except FrameError as err:
            self.link.log.report(err.kind, f"dropped audio: {err.detail}")
            return
        self.link.deliver_audio(packet)

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        """One Opus packet, framed as the device's protocol version wants; False when gone."""
        if self.ws.closed:
            return False
        try:
            await self.ws.send_bytes(pack_frame(self.protocol_version, packet, timestamp))
        except ConnectionError, RuntimeError:
            return False
        return True
