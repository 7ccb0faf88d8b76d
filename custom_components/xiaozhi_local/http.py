"""The device WebSocket endpoint, a view on HA's own HTTP server."""

import logging

from aiohttp import web
from aiohttp.web_exceptions import HTTPNotFound, HTTPServiceUnavailable, HTTPUnauthorized
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView

from .connection import ClientInfo, DeviceConnection
from .const import MAX_CONNECTION_MESSAGE, WS_PATH
from .hub import async_get_hub
from .protocol.messages import PROTOCOL_VERSIONS, normalize_mac
from .urls import vision_url

_LOGGER = logging.getLogger(__name__)

CLOSE_TIMEOUT = 2.0
"""The firmware never answers a Close frame; do not wait long for it."""


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
    return token.strip() if scheme.lower() == "bearer" and token else value


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
        device = hub.async_authenticate(mac, token) if mac else None
        if device is None:
            _LOGGER.warning(
                "Refused a device connection from %s: %s",
                request.remote,
                "no valid Device-Id" if mac is None else f"unknown device or wrong token for {mac}",
            )
            raise HTTPUnauthorized  # raised, so HA's ip-ban counts it
        client = ClientInfo(
            client_id=_param(request, "Client-Id"),
            protocol_version=_protocol_version(_param(request, "Protocol-Version")),
        )
        ws = web.WebSocketResponse(
            max_msg_size=MAX_CONNECTION_MESSAGE, autoping=False, compress=False, timeout=CLOSE_TIMEOUT
        )
        await ws.prepare(request)
        connection = DeviceConnection(hass, device, ws, client, vision_url(hub.websocket_url()))
        await hub.async_run_connection(connection)
        return ws
