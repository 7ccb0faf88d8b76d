"""The device WebSocket endpoint, a view on HA's own HTTP server; refusals; views open to browser pages."""

from collections.abc import Awaitable, Callable
import logging
from typing import Final

from aiohttp import web
from aiohttp.web_exceptions import HTTPNotFound, HTTPServiceUnavailable
from homeassistant.components.http.ban import process_wrong_login
from homeassistant.core import HomeAssistant
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView, request_handler_factory

from ..admission.gate import Refused
from ..admission.pairing_session import async_run_pairing_session
from ..admission.urls import vision_url
from ..const import MAX_CONNECTION_MESSAGE, WS_PATH
from ..device import XiaozhiDevice
from ..hub import async_get_hub
from ..link import ClientInfo, DeviceLink
from ..protocol.logs import OnceLogger
from ..protocol.messages import PROTOCOL_VERSIONS, normalize_mac
from .websocket import CLOSE_TIMEOUT, WebSocketChannel

_LOGGER = logging.getLogger(__name__)


def _param(request: web.Request, name: str) -> str | None:
    """A connection parameter from the headers, or (browser clients) the query string.

    Query names are matched case-insensitively, with ``_`` or ``-``: ``device-id``, ``Device_Id``.
    """
    if (value := request.headers.get(name)) is not None:
        return value
    wanted = name.lower()
    for key, value in request.query.items():
        if key.lower().replace("_", "-") == wanted:
            return value
    return None


def bearer_token(value: str | None) -> str:
    """The token of ``Bearer <token>`` (or the value itself when it has no scheme)."""
    if value is None:
        return ""
    value = value.strip()
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()  # "Bearer " with nothing after it (xiaozhi-sdk before it has a token): none
    return value


def _protocol_version(value: str | None) -> int:
    try:
        version = int(value) if value is not None else 1
    except ValueError:
        return 1
    return version if version in PROTOCOL_VERSIONS else 1


class XiaozhiWebSocketView(HomeAssistantView):
    """``GET /api/xiaozhi_local/v1/``: a device opens its conversation channel."""

    url = WS_PATH
    name = "api:xiaozhi_local:device"
    requires_auth = False

    async def get(self, request: web.Request) -> web.StreamResponse:
        """Authenticate the device, then run its connection."""
        hass = request.app[KEY_HASS]
        if (hub := async_get_hub(hass)) is None:
            raise HTTPNotFound  # integration not loaded: the endpoint is inert
        if hub.stopping:
            raise HTTPServiceUnavailable  # Home Assistant is stopping: the device retries later
        raw_mac = _param(request, "Device-Id")
        mac = normalize_mac(raw_mac) if raw_mac else None
        token = bearer_token(_param(request, "Authorization"))
        device: XiaozhiDevice | Refused | None = None
        if not token and raw_mac:  # a load tester, while the hub accepts devices without a code
            device = hub.admission.async_open_device(raw_mac, _param(request, "Client-Id"))
        if device is None:
            device = hub.async_authenticate(mac, token) if mac else Refused.GUESS if token else Refused.NO_TOKEN
        if device is Refused.PENDING and mac is not None and (pending := hub.admission.pairing.with_token(mac, token)):
            # The token handed out with a code not typed yet: the client is told its code (xiaozhi-sdk).
            version = _protocol_version(_param(request, "Protocol-Version"))
            return await async_run_pairing_session(hass, request, pending, version)
        if isinstance(device, Refused):
            return await async_refuse(request, device, mac)
        client = ClientInfo(
            client_id=_param(request, "Client-Id"),
            protocol_version=_protocol_version(_param(request, "Protocol-Version")),
            address=request.remote,
        )
        hub.admission.async_bind_identity(device, client.client_id)
        ws = web.WebSocketResponse(
            max_msg_size=MAX_CONNECTION_MESSAGE, autoping=False, compress=False, timeout=CLOSE_TIMEOUT
        )
        await ws.prepare(request)
        channel = WebSocketChannel(ws, client.protocol_version, transport=request.transport)
        link = DeviceLink(hass, device, client, channel, vision_url(hub.websocket_url()))
        await hub.async_run_connection(link)
        return ws


SECRET_QUERY_KEYS = ("auth", "token", "key", "secret", "password")
"""Query parameters whose values never reach the log (browser clients authenticate in the query)."""


GUESSES: Final = OnceLogger("", _LOGGER, again_after=3600.0)
"""Refused guesses at the device endpoints (a token or Device-Id that is no paired device's)."""
UNPAIRED: Final = OnceLogger("", _LOGGER, again_after=3600.0, level=logging.INFO)
"""Requests of clients that are not paired yet (a code not entered, no token)."""


def _unauthorized() -> web.Response:
    """The same answer as HTTPUnauthorized's, for every refusal: it says nothing about the device."""
    return web.Response(status=401, text="401: Unauthorized")


async def async_refuse(request: web.Request, why: Refused, mac: str | None) -> web.Response:
    """Refuse a device request; only a guess counts towards Home Assistant's IP ban (no token is none).

    A device presenting a token it really had (before "Regenerate token", or before it was
    deleted) is the user's own device: it is refused, but raises no "Login attempt failed" and is
    never banned, so it can still fetch its new token at its next boot. A guess goes to HA's ban
    logic with its secrets masked, since HA logs the requested URL.
    """
    if why is Refused.CAPPED:
        return _unauthorized()  # said once in the log, with what to change (hub.py)
    # Anyone may ask OTA for a code and connect with its token, or connect with none: said once an
    # hour, the rest at debug (counted), so unauthenticated clients cannot fill the log.
    if why is Refused.PENDING:
        UNPAIRED.report("pending", f"refused device {mac} at {request.path[:100]}: its code has not been entered yet")
        return _unauthorized()
    if why is Refused.NO_TOKEN:
        UNPAIRED.report("no_token", f"refused device {mac} at {request.path[:100]}: it sent no token (pair it first)")
        return _unauthorized()
    if why is Refused.EARLIER:
        _LOGGER.info(
            "Refused device %s at %s: its token is no longer valid (regenerated, deleted or expired); "
            "restart the device to fetch its current settings",
            mac,
            request.path,
        )
        return _unauthorized()
    # Home Assistant warns of each failed login itself (and bans by its rules): ours is said once
    # an hour, the rest at debug, all counted (diagnostics: ``refused_guesses``).
    GUESSES.report(
        "guess",
        f"refused a device request to {request.path[:100]} from {request.remote}: "
        + ("no valid Device-Id" if mac is None else f"unknown device or wrong token for {mac}"),
    )
    query = {
        key: "***" if any(word in key.lower() for word in SECRET_QUERY_KEYS) else value
        for key, value in request.rel_url.query.items()
    }
    await process_wrong_login(request.clone(rel_url=request.rel_url.with_query(query)))
    return _unauthorized()


CORS_HEADERS = (
    "Content-Type",
    "Device-Id",
    "Client-Id",
    "Activation-Version",
    "Accept-Language",
    "Serial-Number",
    "Authorization",
    "Protocol-Version",
)
"""What the devices' headers are: a browser page (the xinnan server's test page) sends them too."""

type Handler = Callable[..., Awaitable[web.StreamResponse]]


def _open(handler: Handler) -> Handler:
    """The handler, its answers readable by a page of any origin."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = await handler(request)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    return handle


async def _preflight(request: web.Request) -> web.Response:
    """A browser asks whether a page may POST with the device headers: it may, from any origin.

    Nothing here needs a cookie or HA login (the endpoints authenticate the device themselves),
    so ``*`` opens nothing that a client on the network could not do anyway.
    """
    return web.Response(
        status=204,
        headers={
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": ", ".join(CORS_HEADERS),
            "Access-Control-Max-Age": "86400",
        },
    )


def register_open_view(hass: HomeAssistant, view: HomeAssistantView) -> None:
    """Register ``view`` as ``hass.http.register_view`` does, but open to browser pages (CORS).

    HA puts every view behind its configured CORS origins (only its cast page, by default), and
    those allow none of the device headers: a test page opened from a file or another host could
    not make its OTA request at all. So the routes are added here, with HA's own request wrapper
    (its login, ban and error handling stay), and a preflight answer of their own.
    """
    router = hass.http.app.router
    for url in (view.url, *view.extra_urls):
        assert url is not None
        for method in ("get", "post"):
            if (handler := getattr(view, method, None)) is not None:
                router.add_route(method.upper(), url, request_handler_factory(hass, view, _open(handler)))
        router.add_route("OPTIONS", url, _preflight)
