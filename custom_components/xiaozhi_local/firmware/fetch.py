"""Downloads from the network, whole or not at all, under one redirect rule.

Every download of ours (a release zip, an esp-sr model file) goes through here:

- **Read to the end.** The body is read chunk by chunk until it ends; one ``read(n)`` returns only
  what happens to be buffered (64 KiB over loopback), which once cut every esp-sr model short.
- **Bounded.** At most ``limit`` bytes; a Content-Length above it is refused before anything is read.
- **Whole.** A body shorter or longer than its Content-Length, or than the size the caller expects,
  is refused: a connection closed early never passes for a file.
- **Redirects**: followed up to ``MAX_REDIRECTS`` times, to any host, but never from ``https`` to
  ``http`` (GitHub's release assets live on another host; a downgrade could be read by anyone on
  the way). What a file must be is checked by the caller (pinned digests, image headers), not by
  where it came from.
"""

from collections.abc import AsyncIterator
import contextlib
from typing import Final
from urllib.parse import urljoin, urlsplit

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from .files import SourceUnavailable

MAX_REDIRECTS: Final = 5
REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
CHUNK: Final = 64 * 1024


def _size(limit: int) -> str:
    """A limit as people read it: ``64 MB``, ``289638 bytes``."""
    return f"{limit // 1048576} MB" if limit >= 1048576 and limit % 1048576 == 0 else f"{limit} bytes"


def _short(url: str) -> str:
    """A URL for a message: without its query (which may hold a token), at most 200 characters."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"[:200]


def why(err: BaseException) -> str:
    """What went wrong, never empty (a timeout of the whole download has no message of its own)."""
    if text := str(err).strip():
        return text
    return "timed out" if isinstance(err, TimeoutError) else type(err).__name__


def redirect_allowed(source: str, target: str) -> bool:
    """The one redirect rule: to ``http(s)`` on any host, never from ``https`` down to ``http``."""
    scheme = urlsplit(target).scheme
    return scheme in ("http", "https") and not (urlsplit(source).scheme == "https" and scheme != "https")


@contextlib.asynccontextmanager
async def async_open(
    hass: HomeAssistant, url: str, *, limit: int, timeout: aiohttp.ClientTimeout
) -> AsyncIterator[aiohttp.ClientResponse]:
    """A 200 response for ``url`` after the redirects allowed; SourceUnavailable otherwise."""
    session = async_get_clientsession(hass)
    try:
        for _ in range(MAX_REDIRECTS + 1):
            async with session.get(url, timeout=timeout, allow_redirects=False) as response:
                if response.status in REDIRECTS and (location := response.headers.get("Location")):
                    target = urljoin(url, location)
                    if not redirect_allowed(url, target):
                        scheme = urlsplit(target).scheme
                        raise SourceUnavailable(f"{_short(url)} redirects to a {scheme or 'relative'} address")
                    url = target
                    continue
                if response.status != 200:
                    raise SourceUnavailable(f"HTTP {response.status} for {_short(url)}")
                if (response.content_length or 0) > limit:
                    raise SourceUnavailable(f"{_short(url)} is larger than {_size(limit)}")
                yield response
                return
        raise SourceUnavailable(f"{_short(url)} redirects more than {MAX_REDIRECTS} times")
    except (aiohttp.ClientError, TimeoutError) as err:
        raise SourceUnavailable(f"could not download {_short(url)}: {why(err)}") from None


async def async_chunks(
    response: aiohttp.ClientResponse, *, limit: int, expected: int | None = None
) -> AsyncIterator[bytes]:
    """The body of ``response`` to its end, checked against ``limit``, its Content-Length and ``expected``."""
    announced = response.content_length
    if expected is not None and announced is not None and announced != expected:
        raise SourceUnavailable(f"{_short(str(response.url))} says {announced} bytes, {expected} were expected")
    size = 0
    try:
        async for chunk in response.content.iter_chunked(CHUNK):
            size += len(chunk)
            if size > limit or (expected is not None and size > expected):
                raise SourceUnavailable(f"{_short(str(response.url))} is larger than {_size(expected or limit)}")
            yield chunk
    except (aiohttp.ClientError, TimeoutError) as err:
        raise SourceUnavailable(
            f"the download of {_short(str(response.url))} broke off after {size} bytes: {why(err)}"
        ) from None
    whole = expected if expected is not None else announced
    if whole is not None and size != whole:
        raise SourceUnavailable(f"{_short(str(response.url))} ended after {size} of {whole} bytes")


async def async_read_whole(
    hass: HomeAssistant, url: str, *, limit: int, timeout: aiohttp.ClientTimeout, expected: int | None = None
) -> bytes:
    """``url``'s whole body in memory (for small files: at most ``limit`` bytes)."""
    async with async_open(hass, url, limit=limit, timeout=timeout) as response:
        data = bytearray()
        async for chunk in async_chunks(response, limit=limit, expected=expected):
            data += chunk
        return bytes(data)
