"""A pairing-only session: a client that waits for its code connects, and is told the code.

xiaozhi-sdk never shows the OTA answer's ``activation``: it connects over WebSocket with the
token of that answer and expects the server to say the code. Such a client proves nothing more
than anyone who asks OTA (who is given the same code), so it gets nothing more: the hello, the
activation message shown as a sentence and spoken where the preferred assistant has
text-to-speech, then the socket is closed. No tools, no pipeline, nothing it sends is read but
the hello.
"""

import asyncio
from collections.abc import AsyncGenerator
import contextlib
from dataclasses import dataclass, field
import json
import logging
import secrets
from typing import Any, Final

from aiohttp import WSMsgType, web
from homeassistant.components import tts
from homeassistant.components.assist_pipeline import async_get_pipeline
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util.hass_dict import HassKey

from ..const import DOMAIN
from ..protocol.framing import pack_frame
from ..protocol.messages import dumps, server_hello
from ..sound.media import tts_pcm
from ..sound.speaker import async_speak
from .pairing import PendingDevice, activation_message

_LOGGER = logging.getLogger(__name__)

HELLO_TIMEOUT: Final = 10.0
"""Seconds the client has to say hello."""
MAX_MESSAGE: Final = 4096
"""A hello is small; the session reads nothing else."""
MAX_SESSIONS: Final = 8
"""Pairing sessions at once, for all pending devices: anyone who asked OTA has a pending token."""
MAX_SPOKEN: Final = 16
"""Codes whose speech is kept (each is said again to the device that asks again)."""


@dataclass(slots=True)
class _Sessions:
    """What bounds the pairing sessions: one live per pending device, a few in all, speech made once."""

    live: dict[str, web.Request] = field(default_factory=dict)
    """Each pending device's one live session, by its request (its transport ends it)."""
    spoken: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    """The PCM of each code's speech, by (MAC, code, text)."""


DATA_SESSIONS: Final[HassKey[_Sessions]] = HassKey(f"{DOMAIN}_pairing_sessions")


@dataclass(slots=True)
class _Named:
    mac: str


class _PairingLink:
    """The socket, as speech sees a connection (``speaker.SpeakerLink``)."""

    def __init__(self, ws: web.WebSocketResponse, mac: str, protocol_version: int) -> None:
        self.ws = ws
        self.device = _Named(mac)
        self.protocol_version = protocol_version

    async def async_send_json(self, message: dict[str, Any]) -> bool:
        if self.ws.closed:
            return False
        try:
            await self.ws.send_str(dumps(message))
        except ConnectionError, RuntimeError:
            return False
        return True

    async def async_send_audio(self, packet: bytes, timestamp: int = 0) -> bool:
        if self.ws.closed:
            return False
        try:
            await self.ws.send_bytes(pack_frame(self.protocol_version, packet, timestamp))
        except ConnectionError, RuntimeError:
            return False
        return True

    def touch(self) -> None:
        """Nothing to keep alive: the session ends after the code."""


async def async_run_pairing_session(
    hass: HomeAssistant, request: web.Request, pending: PendingDevice, protocol_version: int
) -> web.StreamResponse:
    """Accept the socket, answer the hello, say the code, close.

    Bounded: one live session per pending device (a new one takes the place of the one before,
    which ends at once, without waiting for its peer's close), no more than ``MAX_SESSIONS`` run
    at once (503 past it), and the code's speech is made once per code.
    """
    sessions = hass.data.setdefault(DATA_SESSIONS, _Sessions())
    earlier = sessions.live.pop(pending.mac, None)
    if earlier is None and len(sessions.live) >= MAX_SESSIONS:
        _LOGGER.debug("Refused a pairing session for %s: %d run already", pending.mac, MAX_SESSIONS)
        raise web.HTTPServiceUnavailable
    sessions.live[pending.mac] = request  # before any await: sessions opened together replace each other in turn
    if earlier is not None and earlier.transport is not None:
        earlier.transport.abort()  # its reads end and its writes fail: it stops where it is
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, autoping=True, compress=False, timeout=5)
    try:
        return await _async_session(hass, sessions, ws, request, pending, protocol_version=protocol_version)
    finally:
        if sessions.live.get(pending.mac) is request:
            del sessions.live[pending.mac]


async def _async_session(
    hass: HomeAssistant,
    sessions: _Sessions,
    ws: web.WebSocketResponse,
    request: web.Request,
    pending: PendingDevice,
    *,
    protocol_version: int,
) -> web.StreamResponse:
    link = _PairingLink(ws, pending.mac, protocol_version)
    try:
        await ws.prepare(request)
        async with asyncio.timeout(HELLO_TIMEOUT):
            message = await ws.receive()
        if message.type != WSMsgType.TEXT or not _is_hello(message.data):
            return ws
        await link.async_send_json(server_hello(secrets.token_hex(8)))
        text = activation_message(pending.code, pending.report.language or hass.config.language)
        # Anyone who asked OTA opens such a session: at debug, so strangers cannot fill the log.
        _LOGGER.debug("Device %s waits for its code: telling it over its connection", pending.mac)
        await async_speak(hass, link, _spoken(hass, sessions, (pending.mac, pending.code, text)), lambda: text)
    except TimeoutError:
        _LOGGER.debug("Device %s opened a pairing session and said no hello", pending.mac)
    except ConnectionError:
        _LOGGER.debug("The pairing session of %s ended (a newer one took its place)", pending.mac)
        return ws
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close(code=1000, message=b"enter the code in Home Assistant")
    return ws


def _is_hello(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("type") == "hello"


def _spoken(hass: HomeAssistant, sessions: _Sessions, key: tuple[str, str, str]) -> AsyncGenerator[bytes] | None:
    """The code's speech: made (and kept) the first time, the same PCM every time after."""
    if (pcm := sessions.spoken.get(key)) is not None:
        return _replay(pcm)
    source = _speech(hass, key[2])
    return None if source is None else _keeping(sessions, key, source)


async def _replay(pcm: bytes) -> AsyncGenerator[bytes]:
    for offset in range(0, len(pcm), 16384):
        yield pcm[offset : offset + 16384]


async def _keeping(
    sessions: _Sessions, key: tuple[str, str, str], source: AsyncGenerator[bytes]
) -> AsyncGenerator[bytes]:
    """``source`` as it comes, kept whole once it has ended."""
    made = bytearray()
    async with contextlib.aclosing(source):
        async for pcm in source:
            made += pcm
            yield pcm
    for oldest in list(sessions.spoken)[: len(sessions.spoken) - MAX_SPOKEN + 1]:
        del sessions.spoken[oldest]
    sessions.spoken[key] = bytes(made)


def _speech(hass: HomeAssistant, text: str) -> AsyncGenerator[bytes] | None:
    """The preferred assistant's text-to-speech of ``text`` as PCM, or None when it has none."""
    pipeline = async_get_pipeline(hass)
    if not pipeline.tts_engine or (engine := tts.async_resolve_engine(hass, pipeline.tts_engine)) is None:
        return None
    options: dict[str, Any] = {tts.ATTR_PREFERRED_FORMAT: "wav"}
    if pipeline.tts_voice is not None:
        options[tts.ATTR_VOICE] = pipeline.tts_voice
    try:
        stream = tts.async_create_stream(hass, engine=engine, language=pipeline.tts_language, options=options)
    except HomeAssistantError as err:
        _LOGGER.debug("No speech for the pairing code: %s", err)
        return None
    stream.async_set_message(text)
    return tts_pcm(hass, stream.token)
