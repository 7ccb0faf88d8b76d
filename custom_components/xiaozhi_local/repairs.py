"""Repair issues, where the user must act.

- ``unreachable_url``: the URLs devices are given point at this machine only (Home Assistant's
  internal URL is unset or ``localhost``), so a device on the LAN cannot reach them.
- ``ffmpeg_missing``: the ``ffmpeg`` program is not installed: the voice satellite cannot speak.
- ``wrong_token``: a paired device keeps presenting a token Home Assistant gave it before (its
  token was regenerated without it rebooting). Only the device or its owner's client has that one:
  a stranger's guesses for a paired MAC raise nothing (they are counted in the diagnostics).
- ``mqtt_port_unavailable``: the MQTT or UDP port of the always-connected transport cannot be
  bound (another program has it). Devices keep the WebSocket; OTA hands out no ``mqtt``.
- ``udp_blocked``: a device on MQTT talks (``listen start``) but none of its audio datagrams
  reaches Home Assistant: a firewall, or Docker without host networking, blocks the UDP port.
- ``reply_player_failed``: the media player chosen for a device's replies could not play one
  (missing, unavailable, refused): the reply played on the device instead.
- ``pipeline_incomplete``: a device's assistant has no speech-to-text or text-to-speech, so it
  cannot answer the device (a fresh Home Assistant's default assistant has neither).
"""

import errno
import logging
import shutil

from homeassistant.components.ffmpeg import get_ffmpeg_manager
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir
from homeassistant.util.hass_dict import HassKey
from yarl import URL

from .admission.urls import internal_base
from .const import CONF_WEBSOCKET_URL, DOMAIN

ISSUE_UNREACHABLE_URL = "unreachable_url"
ISSUE_FFMPEG_MISSING = "ffmpeg_missing"
ISSUE_WRONG_TOKEN = "wrong_token"
WRONG_TOKEN_LIMIT = 5
"""Refused connections in a row, with a paired MAC, before the user is told."""

ISSUE_PIPELINE_INCOMPLETE = "pipeline_incomplete"
ISSUE_MQTT_PORT = "mqtt_port_unavailable"
ISSUE_UDP_BLOCKED = "udp_blocked"
ISSUE_REPLY_PLAYER = "reply_player_failed"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
_LOGGER = logging.getLogger(__name__)
_WARNED: HassKey[set[tuple[str, str]]] = HassKey(f"{DOMAIN}_pipeline_warned")
"""(assistant, what it lacks) already logged, per Home Assistant instance."""


@callback
def async_check_url(hass: HomeAssistant, options: dict[str, object]) -> None:
    """Raise or clear ``unreachable_url`` for the URLs devices are given now."""
    if options.get(CONF_WEBSOCKET_URL):
        ir.async_delete_issue(hass, DOMAIN, ISSUE_UNREACHABLE_URL)  # the user chose the URL devices reach
        return
    base = internal_base(hass)
    host = URL(base).host if base else None
    if host is None or host in LOOPBACK_HOSTS or host.startswith("127."):
        ir.async_create_issue(
            hass,
            DOMAIN,
            ISSUE_UNREACHABLE_URL,
            is_fixable=False,
            severity=ir.IssueSeverity.WARNING,
            translation_key=ISSUE_UNREACHABLE_URL,
            translation_placeholders={"url": base or "-"},
            learn_more_url="https://www.home-assistant.io/docs/configuration/basic/#internal_url",
        )
    else:
        ir.async_delete_issue(hass, DOMAIN, ISSUE_UNREACHABLE_URL)


async def async_check_ffmpeg(hass: HomeAssistant) -> None:
    """Raise or clear ``ffmpeg_missing``."""
    binary = get_ffmpeg_manager(hass).binary
    found = await hass.async_add_executor_job(shutil.which, binary)
    if found is None:
        ir.async_create_issue(
            hass,
            DOMAIN,
            ISSUE_FFMPEG_MISSING,
            is_fixable=False,
            severity=ir.IssueSeverity.ERROR,
            translation_key=ISSUE_FFMPEG_MISSING,
            translation_placeholders={"binary": binary},
        )
    else:
        ir.async_delete_issue(hass, DOMAIN, ISSUE_FFMPEG_MISSING)


@callback
def async_wrong_token(hass: HomeAssistant, mac: str, name: str, refusals: int) -> None:
    """A paired device was refused for its token ``refusals`` times in a row.

    The issue appears at ``WRONG_TOKEN_LIMIT`` and its count is updated each time it doubles:
    anyone who knows a paired MAC can send wrong tokens, and each update is a write to disk and
    an event. The exact count is in the device's diagnostics.
    """
    if refusals < WRONG_TOKEN_LIMIT:
        return
    issue_id = f"{ISSUE_WRONG_TOKEN}_{mac}"
    shown = ir.async_get(hass).async_get_issue(DOMAIN, issue_id)
    placeholders = shown.translation_placeholders if shown is not None else None
    if placeholders is not None and refusals < 2 * int(placeholders.get("count", "0")):
        return
    ir.async_create_issue(
        hass,
        DOMAIN,
        issue_id,
        is_fixable=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=ISSUE_WRONG_TOKEN,
        translation_placeholders={"device": name, "mac": mac, "count": str(refusals)},
    )


@callback
def async_reply_player_failed(hass: HomeAssistant, mac: str, name: str, player: str, *, kind: str, said: str) -> None:
    """The player chosen for ``name``'s replies could not play one: it played on the device.

    The notice says why in the user's language (``kind``: ``reply_player_<kind>``); only an error of
    the player's own (``error``) quotes its words, as its integration wrote them.
    """
    _LOGGER.warning("%s: its reply speaker %s could not play (%s); the device played it", name, player, said)
    ir.async_create_issue(
        hass,
        DOMAIN,
        f"{ISSUE_REPLY_PLAYER}_{mac}",
        is_fixable=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=f"reply_player_{kind}",
        translation_placeholders={"device": name, "player": player, "error": said},
    )


@callback
def async_reply_player_played(hass: HomeAssistant, mac: str) -> None:
    """The device's reply speaker played (or the device was removed): its issue, if any, is over."""
    ir.async_delete_issue(hass, DOMAIN, f"{ISSUE_REPLY_PLAYER}_{mac}")


@callback
def async_token_accepted(hass: HomeAssistant, mac: str) -> None:
    """The device got in, or it was removed: its wrong-token issue, if any, is over."""
    ir.async_delete_issue(hass, DOMAIN, f"{ISSUE_WRONG_TOKEN}_{mac}")


@callback
def async_pipeline_incomplete(hass: HomeAssistant, assistant: str, missing: list[str]) -> None:
    """A device's assistant cannot serve it: one warning per assistant and lack, and a repair."""
    lacks = "_".join(kind for kind in ("stt", "tts") if kind in missing) or "stt"
    warned = hass.data.setdefault(_WARNED, set())
    if (assistant, lacks) not in warned:
        warned.add((assistant, lacks))
        _LOGGER.warning(
            "The assistant %s has no %s, so xiaozhi devices that use it cannot be answered; "
            "set it up under Settings → Voice assistants",
            assistant,
            {"stt": "speech-to-text", "tts": "text-to-speech"}.get(lacks, "speech-to-text or text-to-speech"),
        )
    for other in ("stt", "tts", "stt_tts"):
        if other != lacks:
            ir.async_delete_issue(hass, DOMAIN, f"{ISSUE_PIPELINE_INCOMPLETE}_{other}")
    ir.async_create_issue(
        hass,
        DOMAIN,
        f"{ISSUE_PIPELINE_INCOMPLETE}_{lacks}",
        is_fixable=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=f"{ISSUE_PIPELINE_INCOMPLETE}_{lacks}",
        translation_placeholders={"assistant": assistant},
        learn_more_url="/config/voice-assistants/assistants",
    )


@callback
def async_pipeline_served(hass: HomeAssistant) -> None:
    """A device was answered: whatever assistant it uses works now."""
    for lacks in ("stt", "tts", "stt_tts"):
        ir.async_delete_issue(hass, DOMAIN, f"{ISSUE_PIPELINE_INCOMPLETE}_{lacks}")


@callback
def async_mqtt_port(hass: HomeAssistant, error: OSError | None, tcp: int, udp: int) -> None:
    """Raise ``mqtt_port_unavailable`` when the endpoint could not bind; clear it once it could."""
    if error is None:
        ir.async_delete_issue(hass, DOMAIN, ISSUE_MQTT_PORT)
        return
    kind = {errno.EADDRINUSE: "mqtt_port_in_use", errno.EACCES: "mqtt_port_not_permitted"}.get(
        error.errno or 0, ISSUE_MQTT_PORT
    )
    ir.async_create_issue(
        hass,
        DOMAIN,
        ISSUE_MQTT_PORT,
        is_fixable=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=kind,  # why, in the user's language; otherwise the system's error code
        translation_placeholders={
            "tcp": str(tcp),
            "udp": str(udp),
            "error": errno.errorcode.get(error.errno or 0, type(error).__name__),
        },
    )


@callback
def async_udp_blocked(hass: HomeAssistant, device: str, port: int) -> None:
    """Raise ``udp_blocked``: the device's audio datagrams never arrive."""
    ir.async_create_issue(
        hass,
        DOMAIN,
        ISSUE_UDP_BLOCKED,
        is_fixable=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=ISSUE_UDP_BLOCKED,
        translation_placeholders={"device": device, "port": str(port)},
    )


@callback
def async_udp_arrived(hass: HomeAssistant) -> None:
    """Audio came through over UDP: the port is open."""
    ir.async_delete_issue(hass, DOMAIN, ISSUE_UDP_BLOCKED)
