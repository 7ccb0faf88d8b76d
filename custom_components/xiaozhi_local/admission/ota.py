"""The OTA/config endpoint: where a stock device learns its WebSocket URL and token, or pairs.

``POST /api/xiaozhi_local/ota/`` (the "Custom OTA URL" typed into the device's Wi-Fi portal)
and ``POST …/ota/activate``. See docs/protocol.md §1: the answer always carries ``url``,
``token`` and ``version`` (the device keeps stale keys otherwise); a paired device also gets
``mqtt`` while the always-connected transport listens (transport/mqtt.py).

A token is handed only to a request that proves it comes from the paired device: its MAC
(which anyone can see) *and* the identity recorded when it paired (``Client-Id``, and the
serial number of activation-v2 boards). Any other request, whatever MAC it names, is treated
as a device asking to join: it gets a code of its own, and the user decides.
"""

import logging
from typing import Any

from aiohttp import web
from homeassistant.core import HomeAssistant
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from homeassistant.util import dt as dt_util

from ..const import MAX_OTA_BODY, OTA_PATH, TRANSPORT_MQTT, TRANSPORT_WEBSOCKET
from ..hub import XiaozhiHub, async_get_hub
from ..protocol.messages import loads, normalize_mac
from . import transport_choice as transport
from .pairing import activation_message
from .reports import DeviceReport, async_apply_report

_LOGGER = logging.getLogger(__name__)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _read_body(request: web.Request) -> dict[str, Any] | web.Response:
    """The JSON object the device sent ({} when empty), or the error response to give."""
    if request.content_length is not None and request.content_length > MAX_OTA_BODY:
        return _error(413, f"body larger than {MAX_OTA_BODY} bytes")
    data = bytearray()
    while chunk := await request.content.read(16384):
        data += chunk
        if len(data) > MAX_OTA_BODY:
            return _error(413, f"body larger than {MAX_OTA_BODY} bytes")
    if not data.strip():
        return {}
    try:
        body = loads(data)
    except ValueError, RecursionError:
        return _error(400, "body is not valid JSON")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    return body


def _device_mac(request: web.Request, body: dict[str, Any]) -> str | None:
    """``Device-Id`` in any MAC spelling; the body's ``mac_address`` when the header is missing."""
    for raw in (request.headers.get("Device-Id"), body.get("mac_address")):
        if isinstance(raw, str) and (mac := normalize_mac(raw)):
            return mac
    return None


def server_time(hass: HomeAssistant) -> dict[str, int]:
    """``server_time``: the device clock then holds HA's local time."""
    now = dt_util.now()
    offset = now.utcoffset()
    return {
        "timestamp": int(now.timestamp() * 1000),
        "timezone_offset": int(offset.total_seconds() // 60) if offset else 0,
    }


async def _hub_and_mac(request: web.Request) -> tuple[XiaozhiHub, str, dict[str, Any]] | web.Response:
    if (hub := async_get_hub(request.app[KEY_HASS])) is None:
        return _error(404, "Xiaozhi Local is not set up")
    body = await _read_body(request)
    if isinstance(body, web.Response):
        return body
    if (mac := _device_mac(request, body)) is None:
        return _error(400, "Device-Id header missing or not a MAC address")
    return hub, mac, body


class XiaozhiOtaView(HomeAssistantView):
    """``POST /api/xiaozhi_local/ota/``: the device's boot-time configuration check."""

    url = OTA_PATH
    extra_urls = [OTA_PATH.rstrip("/")]  # noqa: RUF012 (HomeAssistantView declares it per instance)
    name = "api:xiaozhi_local:ota"
    requires_auth = False

    async def get(self, request: web.Request) -> web.Response:
        """A browser check that the URL is right."""
        return web.json_response({"status": "ok", "service": "Xiaozhi Local OTA"})

    async def post(self, request: web.Request) -> web.Response:
        """Configuration for a paired device; an activation code (and no token) for anyone else."""
        found = await _hub_and_mac(request)
        if isinstance(found, web.Response):
            return found
        hub, mac, body = found
        hass = request.app[KEY_HASS]
        report = DeviceReport.from_request(body, request.headers)
        if (device := hub.admission.async_proven(mac, report)) is not None:
            if async_apply_report(device, report, request.remote):
                hub.entry.async_create_background_task(
                    hass, hub.firmware.catalog.async_check(device), f"xiaozhi_local firmware check {mac}"
                )
            hub.firmware.async_reported(device, report.firmware)
            await hub.identities.async_flush()  # the token is on disk before it leaves (admission/identities.py)
            answer: dict[str, Any] = {
                "server_time": server_time(hass),
                "websocket": {"url": hub.websocket_url(), "token": device.token, "version": 1},
            }
            # With ``mqtt`` the device connects at boot and stays online (transport/mqtt.py); it is left out
            # to send the device back to WebSocket (NVS keeps it, but only ``mqtt`` in the answer counts).
            if (mqtt := transport.mqtt_answer(hub, device)) is not None:
                answer["mqtt"] = mqtt
            device.async_told(
                TRANSPORT_MQTT if mqtt is not None else TRANSPORT_WEBSOCKET, follows=report.follows_answer
            )
            # Only while an install waits for this device (firmware/installer.py): never by default.
            if (firmware := hub.firmware.ota_firmware(device)) is not None:
                answer["firmware"] = firmware
            return web.json_response(answer)
        pending = hub.admission.async_request_pairing(mac, report, request.remote or "")
        return web.json_response(
            {
                "server_time": server_time(hass),
                # Every answer has the URL, and the token the device will have once its code is typed
                # (admission/pairing.py): py-xiaozhi and xiaozhi-sdk do not ask again after pairing. Before
                # that it opens only a session that says the code (admission/pairing_session.py).
                "websocket": {"url": hub.websocket_url(), "token": pending.token, "version": 1},
                "activation": {
                    "code": pending.code,
                    "message": activation_message(pending.code, report.language),
                    "challenge": pending.challenge,
                    "timeout_ms": 30000,
                },
            }
        )


class XiaozhiActivateView(HomeAssistantView):
    """``POST …/ota/activate``: 202 while the user has not entered the code, 200 once paired."""

    url = OTA_PATH + "activate"
    extra_urls = [OTA_PATH + "activate/"]  # noqa: RUF012
    name = "api:xiaozhi_local:ota:activate"
    requires_auth = False

    async def post(self, request: web.Request) -> web.Response:
        """The device polls until it is paired.

        Only the paired device itself (MAC and identity) hears "activated"; a stranger naming a
        paired MAC gets the answer of an unknown one, so this tells nobody what is paired.
        """
        found = await _hub_and_mac(request)
        if isinstance(found, web.Response):
            return found
        hub, mac, body = found
        identity = DeviceReport.from_request(body, request.headers).identity
        if (device := hub.devices.get(mac)) is not None and identity.proves(device.identity):
            return web.json_response({"status": "activated"})
        if hub.admission.pairing.touch(mac, identity):
            return web.json_response({"status": "pending"}, status=202)
        return _error(404, "no pairing is pending for this device; it asks again at its next OTA check")
