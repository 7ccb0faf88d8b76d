"""Downloads (firmware/fetch.py): one redirect rule, bodies read whole, lengths that lie refused."""

from collections.abc import AsyncIterator

from aiohttp import ClientTimeout, web
from aiohttp.test_utils import TestServer
from homeassistant.core import HomeAssistant
import pytest

from custom_components.xiaozhi_local.firmware.fetch import MAX_REDIRECTS, async_read_whole, redirect_allowed
from custom_components.xiaozhi_local.firmware.files import SourceUnavailable

BODY = bytes(range(256)) * 1200  # 300 KB, as an esp-sr model file
TIMEOUT = ClientTimeout(total=10)


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    """Files, redirects to them, redirect loops and redirects to other schemes."""

    async def file(_request: web.Request) -> web.Response:
        return web.Response(body=BODY)

    async def hop(request: web.Request) -> web.Response:
        left = int(request.match_info["left"])
        target = "/file" if left == 0 else f"/hop/{left - 1}"
        raise web.HTTPFound(target)

    async def elsewhere(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/file", file)
    app.router.add_get("/hop/{left}", hop)
    app.router.add_get("/elsewhere", elsewhere)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield test_server
    await test_server.close()


async def test_redirects_are_followed_up_to_the_limit(hass: HomeAssistant, server: TestServer) -> None:
    url = str(server.make_url(f"/hop/{MAX_REDIRECTS - 1}"))
    assert await async_read_whole(hass, url, limit=len(BODY), timeout=TIMEOUT, expected=len(BODY)) == BODY
    with pytest.raises(SourceUnavailable, match="redirects more than"):
        await async_read_whole(hass, str(server.make_url(f"/hop/{MAX_REDIRECTS}")), limit=len(BODY), timeout=TIMEOUT)


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/x", "data:,x"])
async def test_a_redirect_to_another_scheme_is_refused(hass: HomeAssistant, server: TestServer, target: str) -> None:
    url = str(server.make_url("/elsewhere").with_query(to=target))
    with pytest.raises(SourceUnavailable, match="redirects to a"):
        await async_read_whole(hass, url, limit=len(BODY), timeout=TIMEOUT)


async def test_a_body_above_the_limit_or_not_the_expected_size_is_refused(
    hass: HomeAssistant, server: TestServer
) -> None:
    url = str(server.make_url("/file"))
    with pytest.raises(SourceUnavailable, match="larger than"):
        await async_read_whole(hass, url, limit=len(BODY) - 1, timeout=TIMEOUT)
    with pytest.raises(SourceUnavailable, match=f"says {len(BODY)} bytes"):
        await async_read_whole(hass, url, limit=len(BODY), timeout=TIMEOUT, expected=len(BODY) - 1)


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("https://github.com/x/releases/a.zip", "https://objects.githubusercontent.com/a", True),  # another host
        ("http://192.168.1.5/a", "https://192.168.1.5/a", True),  # up to https
        ("https://github.com/a", "http://github.com/a", False),  # never down to http
        ("http://a/b", "file:///etc/passwd", False),
    ],
)
def test_the_redirect_rule(source: str, target: str, allowed: bool) -> None:
    assert redirect_allowed(source, target) is allowed
