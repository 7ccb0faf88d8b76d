"""A paired device at runtime: its live connection, its tools, what it last reported, and calls.

What the device said (its tools, the results of its query tools) and settings the user made
while it was away are kept in ``cache``, which the hub persists, so entities show the
last-known state across disconnects and HA restarts and settings reach the device when it
next connects.
"""

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime
import hmac
import itertools
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final, Protocol

from homeassistant.config_entries import ConfigSubentry
from homeassistant.const import CONF_CLIENT_ID, CONF_MAC
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.json import json_bytes
from homeassistant.helpers.typing import UNDEFINED
from homeassistant.util import dt as dt_util

from .const import (
    CONF_OPEN,
    CONF_SERIAL,
    DEFAULT_CALL_TIMEOUT,
    DOMAIN,
    MANUFACTURER,
    MAX_NOTIFICATION_PARAMS,
    NOTIFICATION_BURST,
    NOTIFICATION_RATE,
    VISION_TOKEN_TTL,
)
from .conversations import Conversation
from .limits import TokenBucket
from .pairing import Identity
from .protocol.firmware import BoardFacts
from .protocol.logs import OnceLogger
from .protocol.mcp import (
    McpBusyError,
    McpConnectionError,
    McpError,
    McpRemoteError,
    McpTimeoutError,
    McpTool,
    ServerInfo,
    ToolResult,
    parse_tool,
)
from .protocol.messages import loads
from .tool_map import QUERY_TOOLS, canonical_tools

if TYPE_CHECKING:
    from .link import DeviceLink
    from .pairing import DeviceReport
    from .protocol.messages import ControlMessage

_LOGGER = logging.getLogger(__name__)

type NotificationListener = Callable[[str, Any], None]


class VoiceHandler(Protocol):
    """The device's voice satellite, as the connection sees it."""

    def on_control(self, connection: DeviceLink, message: ControlMessage) -> None:
        """Handle ``listen``, ``abort`` and other control messages."""

    def on_audio(self, connection: DeviceLink, packet: bytes) -> None:
        """One uplink Opus packet."""

    def on_disconnect(self, connection: DeviceLink) -> None:
        """The connection ended."""

    @property
    def busy(self) -> bool:
        """Whether a conversation turn, a reply or an announcement is under way (tells listeners when it ends)."""

    @property
    def media_title(self) -> str | None:
        """The title of the media it plays now, or None (tells listeners when that changes)."""

    async def async_play_media(self, url: str, title: str) -> None:
        """Play media on the speaker; raises a translated error when it cannot."""

    def async_stop_media(self) -> None:
        """Stop the media that plays."""

    async def async_announce_media(self, url: str) -> None:
        """Announce the media at ``url`` (blocks until played)."""


REPORT_CHANGE_BURST = 4
REPORT_CHANGE_RATE = 1 / 600
"""What a device's OTA checks may change (board, chip, version): a few at once, then one in ten
minutes. An upgrade changes it once; a device that changes it at every request is not a board."""
REPORT_SAVE_DELAY = 10.0
"""Seconds before what the device reported is saved (many reports make one write)."""
USER_SAVE_DELAY = 0.0
"""Seconds before a setting the user made while the device was away reaches disk: at once (the
entity shows it from then on, so a crash right after must not lose it)."""


def _number(text: str) -> int | float | None:
    """A query tool's bare number (py-xiaozhi's ``get_volume`` answers ``70``), or None."""
    try:
        value = loads(text)
    except ValueError, RecursionError:
        return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _identity_of(subentry: ConfigSubentry) -> Identity:
    return Identity(subentry.data.get(CONF_CLIENT_ID), subentry.data.get(CONF_SERIAL))


class DeviceOfflineError(McpConnectionError):
    """The device has no open connection now."""


NOT_NOW: Final = frozenset({"device_offline"})
"""Refusals of a request that cannot be served while the device is away: ServiceValidationError,
which Home Assistant answers with 400 and does not log as an error (a 500 means a fault of ours)."""


def translated_error(key: str, **placeholders: str) -> HomeAssistantError:
    """A HomeAssistantError with a translated message (``exceptions.<key>`` in strings.json)."""
    kind = ServiceValidationError if key in NOT_NOW else HomeAssistantError
    return kind(translation_domain=DOMAIN, translation_key=key, translation_placeholders=placeholders)


def tool_error(err: McpError, device: str, tool: str) -> HomeAssistantError:
    """Any failure of a tool call as the user reads it: the one mapping for entities, actions and agents."""
    if isinstance(err, DeviceOfflineError):
        return translated_error("device_offline", device=device)
    if isinstance(err, McpRemoteError):
        return remote_error(err, device, tool)
    if isinstance(err, McpTimeoutError):
        return translated_error("timeout", device=device, tool=tool)
    if isinstance(err, McpBusyError):
        return translated_error("busy", device=device)
    if isinstance(err, McpConnectionError):  # it went away during the call
        return translated_error("connection_lost", device=device, tool=tool)
    return translated_error("device_error", device=device, tool=tool, message=str(err))


def remote_error(err: McpRemoteError, device: str, tool: str) -> HomeAssistantError:
    """The device's error as the user reads it, the same for both firmware generations."""
    if err.kind == "unknown_tool":
        return translated_error("unknown_tool", device=device, tool=tool)
    if err.kind == "invalid_arguments":
        return translated_error("invalid_arguments", device=device, tool=tool, errors=err.message)
    return translated_error("device_error", device=device, tool=tool, message=err.message)


class XiaozhiDevice:
    """One paired device (a config subentry of the hub)."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry_id: str,
        subentry: ConfigSubentry,
        token: str,
        *,
        cache: dict[str, Any] | None = None,
        persist: Callable[[float], None] | None = None,
    ) -> None:
        self.hass = hass
        self.entry_id = entry_id
        self.subentry_id = subentry.subentry_id
        self.mac: str = subentry.data[CONF_MAC]
        self.token = token  # kept in the hub's identity journal, not in the subentry (identities.py)
        self.identity = _identity_of(subentry)
        self.open = bool(subentry.data.get(CONF_OPEN))  # paired without a token (load testers)
        self.name = subentry.title
        self.connection: DeviceLink | None = None
        self.conversation: Conversation | None = None
        """Its open conversation, on whichever link carries it (conversations.py)."""
        self.voice: VoiceHandler | None = None  # the assist satellite, once it exists
        self.server_info = ServerInfo()
        self.last_seen: datetime | None = None
        self.refused_tokens = 0  # connections refused in a row for a wrong token (a repair issue at 5)
        self.log = OnceLogger(self.mac, _LOGGER)  # each kind of problem is logged once per device
        self._persist = persist or (lambda _delay: None)
        self._notifications = TokenBucket(NOTIFICATION_RATE, NOTIFICATION_BURST)
        self._report_changes = TokenBucket(REPORT_CHANGE_RATE, REPORT_CHANGE_BURST)
        self.dropped_notifications = 0
        self._listeners: list[Callable[[], None]] = []
        self._notification_listeners: list[NotificationListener] = []
        self._refresh_lock = asyncio.Lock()
        cache = cache or {}
        self.tool_lists = 0  # tools/list answers (or registrations) since start; 0: tools from the cache
        cached: dict[str, McpTool] = {}
        for raw in cache.get("tools", []):
            try:
                tool = parse_tool(raw)
            except ValueError:
                continue
            cached[tool.name] = tool
        self.tools: dict[str, McpTool] = canonical_tools(cached)
        """By the firmware's name (``TOOL_ALIASES``); each ``McpTool.name`` is what the device calls it."""
        self.queries: dict[str, Any] = dict(cache.get("queries", {}))
        """Last result of each query tool (parsed JSON), by tool name."""
        self.pending: dict[str, dict[str, Any]] = dict(cache.get("pending", {}))
        self._vision_token: tuple[str, float] | None = None  # token, expiry (loop time)
        self.photo: bytes | None = None  # the last camera photo (JPEG)
        self.photo_at: datetime | None = None
        self.facts = BoardFacts.from_dict(cache.get("firmware"))
        """What its last OTA check said of its board and firmware (stock firmware only)."""
        self.address: str | None = None
        """The network address it last reached Home Assistant from (OTA check or connection)."""
        told = cache.get("transport")
        self.told_transport: str | None = told if isinstance(told, str) else None
        """What its last OTA answer told it to use (``mqtt`` or ``websocket``): see transport.py."""
        self.picks_transport = bool(cache.get("picks_transport"))
        """A client that picks its transport itself (its OTA check lacks the stock firmware's
        partition table): never restarted for the connection choice (transport.py)."""
        self.transport_restart_sent = False  # restarted for its transport since that answer
        self.restart_at_end = False  # on WebSocket, restart it when its conversation ends (transport.py)
        self.install_at_end = False  # the same, for firmware that waits for it (firmware/installer.py)
        """Settings made while the device was away: key → {tool, arguments, value}."""
        registry_entry = dr.async_get(hass).async_get_or_create(
            config_entry_id=entry_id,
            config_subentry_id=subentry.subentry_id,
            identifiers={(DOMAIN, self.mac)},
            connections={(dr.CONNECTION_NETWORK_MAC, self.mac)},
            manufacturer=MANUFACTURER,
            name=subentry.title,
        )
        self.device_id = registry_entry.id

    @callback
    def async_new_vision_token(self) -> str:
        """A short-lived token for camera uploads (sent in ``initialize``; not the main token)."""
        token = secrets.token_urlsafe(24)
        self._vision_token = (token, self.hass.loop.time() + VISION_TOKEN_TTL)
        return token

    @callback
    def async_check_vision_token(self, token: str) -> bool | None:
        """Constant-time check of an upload's token: True valid, None this device's but expired, False."""
        if self._vision_token is None:
            return False
        expected, expires = self._vision_token
        if not hmac.compare_digest(expected.encode(), token.encode()):
            return False
        return True if self.hass.loop.time() < expires else None

    @callback
    def async_set_photo(self, jpeg: bytes) -> None:
        """A photo arrived from the camera."""
        self.photo = jpeg
        self.photo_at = dt_util.utcnow()
        self._async_notify()

    def as_cache(self) -> dict[str, Any]:
        """What to keep across restarts."""
        return {
            "tools": [tool.as_dict() for tool in self.tools.values()],
            "queries": self.queries,
            "pending": self.pending,
            "firmware": self.facts.as_dict() if self.facts is not None else None,
            "transport": self.told_transport,
            "picks_transport": self.picks_transport,
        }

    @property
    def firmware(self) -> tuple[int, ...]:
        """The firmware version it reported (OTA check, else ``initialize``), as numbers; () if unknown."""
        entry = dr.async_get(self.hass).async_get(self.device_id)
        text = getattr(entry, "sw_version", None) or self.server_info.version or ""
        numbers: list[int] = []
        for part in text.split("."):
            digits = "".join(itertools.takewhile(str.isdigit, part))
            if not digits:
                break
            numbers.append(int(digits))
        return tuple(numbers)

    @property
    def plays_notify(self) -> bool:
        """Firmware 2.5 plays ``notify`` (an Ogg Opus URL) while idle; older firmware does not."""
        return self.firmware >= (2, 5)

    @property
    def connected(self) -> bool:
        """Whether a connection with a completed hello is open."""
        return self.connection is not None

    @callback
    def async_update_from(self, subentry: ConfigSubentry, token: str) -> bool:
        """The subentry changed (title, token, identity). True when the identity changed."""
        self.name = subentry.title
        if token != self.token:
            self.token = token
            if self.connection is not None:  # a replaced token ends the session it opened
                self.async_create_task(self.connection.async_close("token changed"), f"xiaozhi_local close {self.mac}")
        identity, self.identity = self.identity, _identity_of(subentry)
        return identity != self.identity

    # -- listeners ----------------------------------------------------------------------------

    @callback
    def async_create_task[T](
        self, target: Coroutine[Any, Any, T], name: str, *, background: bool = False
    ) -> asyncio.Task[T]:
        """A task of the device's hub entry: awaited (``background``: cancelled) when the hub unloads."""
        entry = self.hass.config_entries.async_get_entry(self.entry_id)
        if entry is None:  # the hub is being removed: a plain task, the link's close still runs
            return self.hass.async_create_task(target, name)
        if background:
            return entry.async_create_background_task(self.hass, target, name)
        return entry.async_create_task(self.hass, target, name)

    @callback
    def async_add_listener(self, listener: Callable[[], None]) -> CALLBACK_TYPE:
        """Be told when the connection, tools, reported values or device info change."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    @callback
    def async_add_notification_listener(self, listener: NotificationListener) -> CALLBACK_TYPE:
        """Be told of each notification the device sends (method, params)."""
        self._notification_listeners.append(listener)
        return lambda: self._notification_listeners.remove(listener)

    @callback
    def _async_notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    @callback
    def async_link_changed(self) -> None:
        """The link's state changed (a conversation channel opened or closed): tell the listeners."""
        self._async_notify()

    @callback
    def async_allow_notification(self, method: str, params: Any) -> bool:
        """Whether a notification may become an event: bounded in size and rate, per device.

        Events go to the recorder's database: a device that floods or sends large ones would fill
        it. The excess is dropped, counted (diagnostics) and logged once.
        """
        try:
            size = len(json_bytes(params))
        except TypeError, ValueError:
            size = MAX_NOTIFICATION_PARAMS + 1
        if size > MAX_NOTIFICATION_PARAMS:
            self.dropped_notifications += 1
            self.log.report("notification_too_large", f"dropped notification {method[:64]!r}: params of {size} bytes")
            return False
        if not self._notifications.allow(self.hass.loop.time()):
            self.dropped_notifications += 1
            self.log.report(
                "notification_flood", f"sends more than {NOTIFICATION_RATE:g} notifications a second; dropping"
            )
            return False
        return True

    @callback
    def async_notification(self, method: str, params: Any) -> None:
        """A notification arrived from the device."""
        for listener in list(self._notification_listeners):
            listener(method, params)

    # -- connection ---------------------------------------------------------------------------

    @callback
    def async_attach(self, connection: DeviceLink) -> None:
        """A connection finished its hello: it is now the device's one connection."""
        old, self.connection = self.connection, connection
        self.last_seen = dt_util.utcnow()
        self.address = connection.client.address or self.address
        if old is not None and old is not connection:
            _LOGGER.debug("Device %s reconnected; closing its previous connection", self.mac)
            self.async_create_task(old.async_close("replaced by a new connection"), f"xiaozhi_local close {self.mac}")
        self._async_notify()

    @callback
    def async_open_conversation(self, link: DeviceLink) -> Conversation:
        """``link`` opened a conversation (a WebSocket hello, an MQTT hello): a new one, from nothing."""
        self.conversation = Conversation(link, self.hass.loop.time())
        self._async_notify()
        return self.conversation

    @callback
    def async_end_conversation(self, link: DeviceLink) -> None:
        """The conversation on ``link`` is over (goodbye, the socket closed); another link's stays."""
        if self.conversation is not None and self.conversation.link is link:
            self.conversation = None
            self._async_notify()

    def conversation_of(self, link: DeviceLink) -> Conversation | None:
        """The open conversation if ``link`` carries it."""
        conversation = self.conversation
        return conversation if conversation is not None and conversation.link is link else None

    @callback
    def async_detach(self, connection: DeviceLink) -> None:
        """A connection ended (and a conversation it carried)."""
        if self.conversation is not None and self.conversation.link is connection:
            self.conversation = None
        if self.connection is connection:
            self.connection = None
            self.last_seen = dt_util.utcnow()
            self._async_notify()

    @callback
    def async_set_discovery(self, info: ServerInfo, tools: list[McpTool]) -> None:
        """``initialize`` and ``tools/list`` of the current connection are in."""
        self.server_info = info
        self.tools = canonical_tools({tool.name: tool for tool in tools})
        self.tool_lists += 1
        # What the OTA check reported (board type, application.version) wins: serverInfo only fills
        # in what is unknown. An SDK names itself there, and an empty name must not erase the board.
        registry = dr.async_get(self.hass)
        known = registry.async_get(self.device_id)
        known_model = getattr(known, "model", None)
        known_version = getattr(known, "sw_version", None)
        model = info.name if info.name and not known_model else UNDEFINED
        sw_version = info.version if info.version and not known_version else UNDEFINED
        if model is not UNDEFINED or sw_version is not UNDEFINED:
            registry.async_update_device(self.device_id, model=model, sw_version=sw_version)
        self._persist(REPORT_SAVE_DELAY)
        self._async_notify()

    @callback
    def async_apply_report(self, report: DeviceReport, address: str | None = None) -> bool:
        """What the device said at its OTA check goes to the device registry and its facts.

        True when its firmware facts changed (a new version, say): what it can install is
        looked up again.
        """
        if address:
            self.address = address
        known = dr.async_get(self.hass).async_get(self.device_id)
        changes = {
            key: value
            for key, value, was in (
                ("model", report.board, getattr(known, "model", None)),
                ("sw_version", report.firmware, getattr(known, "sw_version", None)),
                ("hw_version", report.chip, getattr(known, "hw_version", None)),
            )
            if value and value != was
        }
        if (changes or self._reported_facts(report) != self.facts) and not self._report_changes.allow(
            self.hass.loop.time()
        ):
            # A real board changes what it reports once an upgrade; one in hostile hands at every
            # request, and each change is a registry write (a recorder event), a firmware check, a
            # save. Past a few, its reports change nothing for a while.
            self.log.report("reports_change_too_often", "what it reports at its OTA check changes too often; ignored")
            return False
        if changes:
            dr.async_get(self.hass).async_update_device(
                self.device_id,
                model=changes.get("model", UNDEFINED),
                sw_version=changes.get("sw_version", UNDEFINED),
                hw_version=changes.get("hw_version", UNDEFINED),
            )
        facts = self._reported_facts(report)
        if facts is None or facts == self.facts:
            return False
        self.facts = facts
        self._persist(REPORT_SAVE_DELAY)
        self._async_notify()
        return True

    @staticmethod
    def _reported_facts(report: DeviceReport) -> BoardFacts | None:
        """What an OTA check says of the board and its firmware (None: not stock firmware)."""
        return BoardFacts.from_dict(
            {
                "board": report.board,
                "chip": report.chip,
                "version": report.firmware,
                "project": report.project,
                "board_name": report.board_name,
                "manufacturer": report.manufacturer,
                "app_slot": report.app_slot,
            }
        )

    @callback
    def async_told(self, transport: str, *, follows: bool = True) -> None:
        """Its OTA answer named this transport: a device that ``follows`` it uses it from this boot on."""
        self.transport_restart_sent = False
        if self.picks_transport == follows:
            self.picks_transport = not follows
            self._persist(REPORT_SAVE_DELAY)
        if transport != self.told_transport:
            self.told_transport = transport
            self._persist(REPORT_SAVE_DELAY)
        self._async_notify()

    async def async_wait_ready(self, timeout: float) -> DeviceLink:
        """The live connection once its tools are known. Raises DeviceOfflineError/McpTimeoutError."""
        connection = self.connection
        if connection is None:
            raise DeviceOfflineError(f"device {self.mac} is not connected")
        try:
            async with asyncio.timeout(timeout):
                await connection.discovered.wait()
        except TimeoutError:
            raise McpTimeoutError("the device did not finish listing its tools in time") from None
        return connection

    def find_tool(self, name: str) -> McpTool | None:
        """A tool by the firmware's name or by the name the device gave it."""
        return self.tools.get(name) or next((tool for tool in self.tools.values() if tool.name == name), None)

    async def async_call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Call a tool (by either name) on the live connection. Raises McpError subclasses."""
        connection = self.connection
        if connection is None:
            raise DeviceOfflineError(f"device {self.mac} is not connected")
        wire = tool.name if (tool := self.tools.get(name)) is not None else name
        return await connection.async_call_tool(wire, arguments, timeout)

    # -- what entities use --------------------------------------------------------------------

    async def async_on_ready(self) -> None:
        """The connection's tools are known: apply waiting settings, then read the device."""
        for key, setting in list(self.pending.items()):
            if setting["tool"] not in self.tools:
                continue
            try:
                await self._async_run_setter(setting["tool"], setting["arguments"])
            except (McpError, HomeAssistantError) as err:
                _LOGGER.warning("Device %s refused the setting %s made while it was away: %s", self.mac, key, err)
            if self.pending.get(key) is setting:  # not replaced meanwhile (latest value wins)
                del self.pending[key]
        self._persist(REPORT_SAVE_DELAY)
        await self.async_read_queries()

    async def async_read_queries(self) -> None:
        """Call the query tools the device has (``get_device_status`` …); keep what they return."""
        async with self._refresh_lock:  # one at a time: a later refresh sees later values
            for tool in QUERY_TOOLS:
                if tool not in self.tools or self.connection is None:
                    continue
                try:
                    result = await self.async_call_tool(tool, {}, DEFAULT_CALL_TIMEOUT)
                except McpError as err:
                    self.log.report("query_failed", f"{tool} failed: {err}")
                    continue
                value = result.json if result.json is not None else _number(result.text)
                if value is None:
                    self.log.report("query_not_json", f"{tool} did not answer with JSON")
                    continue
                self.queries[tool] = value
        self._persist(REPORT_SAVE_DELAY)
        self._async_notify()

    async def async_set(self, key: str, tool: str, arguments: dict[str, Any], value: Any) -> None:
        """A setting from an entity. Offline: kept and applied at the next connect."""
        if self.connection is None:
            self.pending[key] = {"tool": tool, "arguments": arguments, "value": value}
            _LOGGER.info(
                "%s is not connected: %s %s is kept and set when it connects%s",
                self.name,
                key,
                value,
                " (at its next conversation)" if self.told_transport == "websocket" else "",
            )
            self._persist(USER_SAVE_DELAY)
            self._async_notify()
            return
        self.pending.pop(key, None)
        try:
            await self._async_run_setter(tool, arguments)
        finally:  # success or not, show what the device really has now
            await self.async_read_queries()

    async def _async_run_setter(self, tool: str, arguments: dict[str, Any]) -> None:
        try:
            result = await self.async_call_tool(tool, arguments, DEFAULT_CALL_TIMEOUT)
        except McpError as err:
            raise tool_error(err, self.name, tool) from None
        if result.text.strip() == "false":
            raise translated_error("setting_refused", device=self.name, tool=tool)

    async def async_restart(self) -> None:
        """``{"type":"system","command":"reboot"}``: stock firmware since 1.x reboots on it."""
        connection = self.connection
        if connection is None or not await connection.async_send_json({"type": "system", "command": "reboot"}):
            raise translated_error("device_offline", device=self.name)

    async def async_restart_quietly(self) -> bool:
        """Restart if connected (to pick up a new transport at boot); False when it could not be told."""
        connection = self.connection
        return connection is not None and await connection.async_send_json({"type": "system", "command": "reboot"})

    async def async_press(self, tool: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """A button: the device must be connected."""
        if self.connection is None:
            raise translated_error("device_offline", device=self.name)
        try:
            return await self.async_call_tool(tool, arguments or {}, DEFAULT_CALL_TIMEOUT)
        except McpError as err:
            raise tool_error(err, self.name, tool) from None
