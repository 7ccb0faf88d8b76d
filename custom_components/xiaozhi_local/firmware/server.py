"""The firmware download: a one-time URL per install, served as the stock firmware needs it.

``XiaozhiFirmwareView`` answers the device's GET with a Content-Length (the firmware refuses a
body without one), from the install's shared copy of the image, in chunks; progress is what the
device has read (the socket's unacknowledged bytes, on Linux), a device that stops reading is a
stall, and the download is complete only when the device closes it after the last byte.
"""

import asyncio
from collections.abc import Callable
import contextlib
import logging
import socket
import struct
from typing import Final

from aiohttp import web
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView

from ..const import FIRMWARE_PATH

try:  # the socket's unacknowledged bytes (Linux); elsewhere progress is what was written
    import fcntl
    import termios
except ImportError:  # pragma: no cover - Home Assistant runs on Linux
    fcntl = termios = None  # type: ignore[assignment]


from .installer import DATA_FIRMWARE

_LOGGER = logging.getLogger(__name__)

STALL_TIMEOUT: Final = 30.0
"""Seconds a download may make no progress before it counts as interrupted."""
CHUNK: Final = 64 * 1024
SEND_BUFFER: Final = 64 * 1024
"""The kernel's send buffer of a download (what may wait for the device beyond what it read)."""
ACK_POLL: Final = 0.1
"""Seconds between looks at what the device has acknowledged, once everything is written."""


def _unread(transport: asyncio.BaseTransport | None) -> int | None:
    """Bytes written that the device has not acknowledged yet (ours and the kernel's queue).

    Linux tells the socket's unacknowledged bytes (``SIOCOUTQ``): what the device's TCP stack
    has not received. Elsewhere only our own buffer is known (None: nothing to wait for).
    """
    if not isinstance(transport, asyncio.WriteTransport):
        return None
    queued = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is None or termios is None:
        return queued or None
    try:
        (kernel,) = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))
    except OSError, ValueError:
        return queued or None
    return queued + int(kernel)


def _small_send_buffer(transport: asyncio.BaseTransport | None) -> None:
    """Keep what waits in the kernel for the device short, so progress is what it has read."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


class XiaozhiFirmwareView(HomeAssistantView):
    """``GET /api/xiaozhi_local/firmware/{token}.bin``: a device fetches its checked image, once."""

    url = FIRMWARE_PATH + "/{token}.bin"
    name = "api:xiaozhi_local:firmware"
    requires_auth = False  # the device has no Home Assistant login; the one-time token is the secret

    async def get(self, request: web.Request, token: str) -> web.StreamResponse:
        """200 with a Content-Length (the firmware refuses a body without one), in chunks."""
        updates = request.app[KEY_HASS].data.get(DATA_FIRMWARE)
        job = updates.downloads.take(token, request.remote) if updates is not None else None
        if updates is None or job is None:
            raise web.HTTPNotFound
        try:
            data = await updates.downloads.async_data(job)
        except OSError as err:
            job.interrupted = f"the image could not be read: {err}"
            job.finished.set()
            job.changed.set()
            raise web.HTTPNotFound from None
        updates.async_downloading(job)
        sending = Sending(request, data, lambda read: updates.async_progress(job, read))
        try:
            await sending.async_run()
        except DownloadInterrupted as err:
            job.interrupted = str(err)
            if request.transport is not None:
                request.transport.abort()
        except asyncio.CancelledError:
            # The device closed the connection. The firmware does once it has read the last byte
            # (a device that closes early is caught by the version it comes back with).
            if sending.written < len(data):
                job.interrupted = f"the device closed the connection at {sending.written} of {len(data)} bytes"
            else:
                sending.progress(len(data))
            raise
        finally:
            updates.downloads.release_data(job)
            job.finished.set()
            job.changed.set()
        return sending.response


class DownloadInterrupted(Exception):
    """The device stopped reading, or went away, before it had the whole image."""


class Sending:
    """One download: all of the image, then until the device has acknowledged all of it."""

    def __init__(self, request: web.Request, data: bytes, progress: Callable[[int], None]) -> None:
        self.request = request
        self.data = data
        self.progress = progress
        self.written = 0
        self.response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        self.response.content_length = len(data)

    async def async_run(self) -> None:
        """Send it; DownloadInterrupted when the device stops reading or the connection breaks."""
        transport = self.request.transport
        _small_send_buffer(transport)
        view, size = memoryview(self.data), len(self.data)
        try:
            await self.response.prepare(self.request)
            while self.written < size:
                chunk = view[self.written : self.written + CHUNK]
                async with asyncio.timeout(STALL_TIMEOUT):
                    await self.response.write(chunk)
                self.written += len(chunk)
                self.progress(self.written - (_unread(transport) or 0))
            await self.response.write_eof()
        except TimeoutError:
            raise DownloadInterrupted(f"the download stalled at {self.written} of {size} bytes") from None
        except ConnectionError as err:
            reason = str(err) or type(err).__name__
            raise DownloadInterrupted(f"the connection ended at {self.written} of {size} bytes: {reason}") from None
        await self._async_until_read(transport)

    async def _async_until_read(self, transport: asyncio.BaseTransport | None) -> None:
        """Everything is written: until the device has read the last byte and closed the connection.

        What its TCP stack acknowledged may still wait in its receive buffer (a device that stopped
        reading); the firmware closes the connection once it has read the whole image. So a
        download is complete only at that close (the handler is cancelled then), and a device
        that neither takes more nor closes for ``STALL_TIMEOUT`` seconds has stalled.
        """
        loop, size = asyncio.get_running_loop(), len(self.data)
        read, since = -1, loop.time()
        while transport is None or not transport.is_closing():
            unread = _unread(transport)
            if unread is None and transport is None:
                break  # nothing to watch (not a socket): what was written is what it got
            if size - (unread or 0) != read:
                read, since = size - (unread or 0), loop.time()
                self.progress(read)
            elif loop.time() - since > STALL_TIMEOUT:
                raise DownloadInterrupted(
                    f"the download stalled: the device stopped reading, {size - read} of {size} bytes short"
                    if read < size
                    else f"the download stalled: the device took all {size} bytes but did not finish reading"
                )
            await asyncio.sleep(ACK_POLL)
        self.progress(size)
