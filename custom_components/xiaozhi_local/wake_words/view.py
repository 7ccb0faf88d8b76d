"""The one-time URL a device fetches its new wake word pack from."""

import asyncio

from aiohttp import web
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView

from ..const import WAKE_WORD_PATH
from ..firmware.server import DownloadInterrupted, Sending
from ..protocol.assets import HEADER
from .change import DATA_WAKE_WORDS


class XiaozhiWakeWordView(HomeAssistantView):
    """``GET /api/xiaozhi_local/assets/{token}.bin``: a device fetches its new pack, once."""

    url = WAKE_WORD_PATH + "/{token}.bin"
    name = "api:xiaozhi_local:assets"
    requires_auth = False  # the device has no Home Assistant login; the one-time token is the secret

    async def get(self, request: web.Request, token: str) -> web.StreamResponse:
        """200 with a Content-Length (the firmware refuses a body without one)."""
        words = request.app[KEY_HASS].data.get(DATA_WAKE_WORDS)
        job = words.take(token, request.remote) if words is not None else None
        if words is None or job is None:
            raise web.HTTPNotFound
        sending = Sending(request, job.pack, lambda sent: words.async_progress(job, sent))
        try:
            await sending.async_run()
        except DownloadInterrupted as err:
            job.broken = sending.written > HEADER.size
            words.async_fail(job, str(err))
            if request.transport is not None:
                request.transport.abort()
        except asyncio.CancelledError:
            if sending.written < len(job.pack):
                job.broken = sending.written > HEADER.size  # the firmware writes from its first sector on
                words.async_fail(job, f"the device closed the connection at {sending.written} of {len(job.pack)} bytes")
            raise
        finally:
            job.fetched.set()
        return sending.response
