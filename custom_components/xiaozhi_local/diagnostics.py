"""Diagnostics for the hub and each device: what a bug report needs, with secrets redacted.

Tokens, pairing codes, challenges and a device's identity (its ``Client-Id`` and serial
number, which prove it is the paired device) never appear: they are left out, and whatever a
device reported is passed through ``async_redact_data`` as well.
"""

from dataclasses import asdict
from typing import Any

from homeassistant.components.diagnostics import async_redact_data
from homeassistant.const import CONF_CLIENT_ID, CONF_TOKEN
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr

from .admission.urls import ota_url
from .const import CONF_SERIAL, DOMAIN
from .device import XiaozhiDevice
from .firmware.installer import FirmwareUpdates
from .hub import XiaozhiConfigEntry
from .transport.endpoint import GUESSES, UNPAIRED

TO_REDACT = {
    CONF_TOKEN,
    CONF_CLIENT_ID,
    CONF_SERIAL,
    "code",
    "challenge",
    "access_token",
    "authorization",
    "password",
    "ssid",
    "uuid",
    "serial_number",
    "hmac",
}


def _device(device: XiaozhiDevice, firmware: FirmwareUpdates) -> dict[str, Any]:
    link = device.link
    session = link.session if link is not None else None
    hello = session.hello if session is not None else None
    data: dict[str, Any] = {
        "mac": device.mac,
        "name": device.name,
        "connected": link is not None,
        "last_seen": device.last_seen.isoformat() if device.last_seen else None,
        "server_info": {"name": device.server_info.name, "version": device.server_info.version},
        "identity": {
            "has_client_id": device.identity.client_id is not None,
            "has_serial": device.identity.serial is not None,
        },
        "problems": dict(device.log.counts),
        "dropped_notifications": device.notifications.dropped,
        "tools": [tool.as_dict() for tool in device.tools.values()],
        "last_values": device.queries,
        "pending_settings": {key: setting.value for key, setting in device.values.pending.items()},
        "photo": {"bytes": len(device.photo), "at": device.photo_at.isoformat() if device.photo_at else None}
        if device.photo is not None
        else None,
        "voice": device.voice is not None,
        "response_times": list(device.response_times.recent),  # the last turns' stages (timings.py)
        "firmware": firmware.diagnostics(device),
    }
    if link is not None and session is not None:
        data["connection"] = {
            "transport": link.transport_name,
            "audio_open": link.audio_open,
            "client_id": link.client.client_id,
            "protocol_version": link.client.protocol_version,
            "dialect": "registerTools" if session.registered else "mcp",
            "bare_json_rpc": session.bare,
            "hello": None
            if hello is None
            else {
                "version": hello.version,
                "transport": hello.transport,
                "features": hello.features,
                "audio_params": asdict(hello.audio_params),
                "problems": list(hello.problems),
            },
            "discovered": link.discovered.is_set(),
            "settled": link.settled.is_set(),
            "pending_requests": session.mcp.pending_count,
            "audio_frames": link.audio_frames,
            "dropped_frames": link.dropped_frames,
            "missed_pings": link.missed_pings,
        }
    redacted: dict[str, Any] = async_redact_data(data, TO_REDACT)
    return redacted


async def async_get_config_entry_diagnostics(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> dict[str, Any]:
    """The hub: options, the URLs devices get, pairing and connection counts, every device."""
    hub = entry.runtime_data
    return {
        "options": async_redact_data(dict(entry.options), TO_REDACT),
        "websocket_url": hub.websocket_url(),
        "ota_url": ota_url(hass),
        "pending_pairings": len(hub.admission.pairing),
        "pending_pairings_of_paired_macs": sum(bool(hub.admission.pairing.for_mac(mac)) for mac in hub.devices),
        "open_connections": len(hub.links),
        "refused_guesses": GUESSES.counts["guess"],
        "refused_unpaired": dict(UNPAIRED.counts),
        "mqtt": None
        if hub.mqtt is None
        else {
            "listening": hub.mqtt.listening,
            "port": hub.mqtt.port,
            "udp_port": hub.mqtt.udp_port,
            "links": len(hub.mqtt.links),
            "open_audio_channels": len(hub.mqtt.channels),
            "refused": hub.mqtt.refused,
        },
        "firmware_sources": {
            "vendor": hub.firmware.catalog.vendor.url if hub.firmware.catalog.vendor is not None else None,
            "releases": hub.firmware.catalog.releases.url if hub.firmware.catalog.releases is not None else None,
            "local_folder": str(hub.firmware.catalog.local.folder),
            "refused_files": dict(hub.firmware.catalog.local.refused),
        },
        "devices": [_device(device, hub.firmware) for device in hub.devices.values()],
        "nearest": list(hub.nearest.recent),  # the last wakes several devices heard, and who answered
    }


async def async_get_device_diagnostics(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, device_entry: dr.AnyDeviceEntry
) -> dict[str, Any]:
    """One device."""
    mac = next((ident for domain, ident in device_entry.identifiers if domain == DOMAIN), None)
    device = entry.runtime_data.devices.get(mac) if mac else None
    if device is None:
        return {"error": "not a paired device"}
    return _device(device, entry.runtime_data.firmware)
