"""A paired device at runtime: its live connection, its tools, what it last reported, and calls.

What the device said (its tools, the results of its query tools) and settings the user made
while it was away are kept in its cache, which the hub persists, so entities show the
last-known state across disconnects and HA restarts and settings reach the device when it
next connects (tools/readings.py runs that round).
"""

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime
import logging
from typing import TYPE_CHECKING, Any

from homeassistant.config_entries import ConfigSubentry
from homeassistant.const import CONF_MAC
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.typing import UNDEFINED
from homeassistant.util import dt as dt_util

from .admission.identities import Identity
from .const import (
    CONF_OPEN,
    DEFAULT_CALL_TIMEOUT,
    DOMAIN,
    MANUFACTURER,
    TRANSPORT_MQTT,
    VISION_TOKEN_TTL,
)
from .conversations import Conversation, VoiceHandler
from .errors import DeviceOfflineError, tool_error, translated_error
from .limits import ExpiringToken, TokenBucket
from .protocol import mcp
from .protocol.firmware import BoardFacts, leading_version
from .protocol.logs import OnceLogger
from .protocol.mcp import McpError, McpTimeoutError, McpTool, ServerInfo, ToolResult
from .restarts import OwedRestarts
from .store.cache import REPORT_SAVE_DELAY, DeviceCache
from .tasks import watched
from .timings import ResponseTimes
from .tools.notifications import DeviceNotifications
from .tools.readings import DeviceValues

if TYPE_CHECKING:
    from .link import DeviceLink

_LOGGER = logging.getLogger(__name__)


REPORT_CHANGE_BURST = 4
REPORT_CHANGE_RATE = 1 / 600
"""What a device's OTA checks may change (board, chip, version): a few at once, then one in ten
minutes. An upgrade changes it once; a device that changes it at every request is not a board."""


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
        self.token = token  # kept in the hub's identity journal, not in the subentry (admission/identities.py)
        self.identity = Identity.from_data(subentry.data)
        self.open = bool(subentry.data.get(CONF_OPEN))  # paired without a token (load testers)
        self.name = subentry.title
        self.link: DeviceLink | None = None
        self.conversation: Conversation | None = None
        """Its open conversation, on whichever link carries it (conversations.py)."""
        self.voice: VoiceHandler | None = None  # the assist satellite, once it exists
        self.server_info = ServerInfo()
        self.last_seen: datetime | None = None
        self.refused_tokens = 0
        """Connections refused in a row for a token it had before (admission/policy.py: a repair at 5)."""
        self.log = OnceLogger(self.mac, _LOGGER)  # each kind of problem is logged once per device
        self._persist = persist or (lambda _delay: None)
        self.notifications = DeviceNotifications(self.log, hass.loop)
        """What it notifies, bounded, and who listens (tools/notifications.py)."""
        self.report_changes = TokenBucket(REPORT_CHANGE_RATE, REPORT_CHANGE_BURST)
        """How often what it reports at its OTA check may change (admission/reports.py)."""
        self._listeners: list[tuple[Callable[[], None], bool]] = []  # with: also told of activity
        kept = DeviceCache.from_dict(cache)
        self.tool_lists = 0  # tools/list answers (or registrations) since start; 0: tools from the cache
        self.tools: dict[str, McpTool] = kept.tools
        """By the firmware's name (``TOOL_ALIASES``); each ``McpTool.name`` is what the device calls it."""
        self.values = DeviceValues(self, kept.queries, kept.pending, self._persist)
        """Its last query results and its waiting settings (tools/readings.py)."""
        self.vision_token = ExpiringToken(VISION_TOKEN_TTL, hass.loop)
        """The short-lived token for camera uploads (sent in ``initialize``; not the main token)."""
        self.response_times = ResponseTimes()  # the wait people feel (timings.py)
        self.photo: bytes | None = None  # the last camera photo (JPEG)
        self.photo_at: datetime | None = None
        self.facts = kept.facts
        """What its last OTA check said of its board and firmware (stock firmware only)."""
        self.address: str | None = None
        """The network address it last reached Home Assistant from (OTA check or connection)."""
        self.told_transport = kept.told_transport
        """What its last OTA answer told it to use (``mqtt`` or ``websocket``): see admission/transport_choice.py."""
        self.picks_transport = kept.picks_transport
        """A client that picks its transport itself (its OTA check lacks the stock firmware's
        partition table): never restarted for the connection choice (admission/transport_choice.py)."""
        self.chosen_wake_word = kept.wake_word
        """The wake word chosen in Home Assistant and confirmed by the device (None: as built; wake_words.py)."""
        self.expected_wake_word = kept.wake_phrase
        """What it sends as ``listen detect`` text for that wake word (the satellite takes it as one)."""
        self.last_wake_word: str | None = None
        self.heard_wake_words = 0  # ``listen detect`` messages since start (a change is verified by the next)
        self.restarts = OwedRestarts()
        """What its conversation's end owes it instead of a close, and its transport restart (restarts.py)."""
        registry_entry = dr.async_get(hass).async_get_or_create(
            config_entry_id=entry_id,
            config_subentry_id=subentry.subentry_id,
            identifiers={(DOMAIN, self.mac)},
            connections={(dr.CONNECTION_NETWORK_MAC, self.mac)},
            manufacturer=MANUFACTURER,
            name=subentry.title,
        )
        self.device_id = registry_entry.id

    @property
    def queries(self) -> dict[str, Any]:
        """Last result of each query tool (parsed JSON), by tool name."""
        return self.values.queries

    @callback
    def async_set_photo(self, jpeg: bytes) -> None:
        """A photo arrived from the camera."""
        self.photo = jpeg
        self.photo_at = dt_util.utcnow()
        self.async_changed()

    def as_cache(self) -> dict[str, Any]:
        """What to keep across restarts."""
        return DeviceCache(
            self.tools,
            self.queries,
            self.values.pending,
            self.facts,
            self.told_transport,
            self.picks_transport,
            self.chosen_wake_word,
            self.expected_wake_word,
        ).as_dict()

    @property
    def firmware(self) -> tuple[int, ...]:
        """The firmware version it reported (OTA check, else ``initialize``), as numbers; () if unknown."""
        entry = dr.async_get(self.hass).async_get(self.device_id)
        return leading_version(getattr(entry, "sw_version", None) or self.server_info.version or "")

    @property
    def plays_notify(self) -> bool:
        """Firmware 2.5 plays ``notify`` (an Ogg Opus URL) while idle; older firmware does not."""
        return self.firmware >= (2, 5)

    @property
    def off(self) -> bool:
        """Stock firmware told MQTT (on from boot) and not connected: off. py-xiaozhi connects per conversation."""
        return self.link is None and self.told_transport == TRANSPORT_MQTT and not self.picks_transport

    @property
    def connected(self) -> bool:
        """Whether a connection with a completed hello is open."""
        return self.link is not None

    @property
    def exchanging(self) -> bool:
        """Whether a turn, a reply or an announcement (its voice's exchange) runs on the device now.

        With ``idle`` the one answer to "is it busy": a conversation (``conversation``) is what the
        device opened (a WebSocket from hello to close, an MQTT audio channel), an exchange runs in
        it. The device tells its listeners when either changes; nobody else reads ``busy``.
        """
        return self.voice is not None and self.voice.busy

    @property
    def idle(self) -> bool:
        """No conversation open and nothing running: a restart now cuts nobody off."""
        return self.conversation is None and not self.exchanging

    @callback
    def async_update_from(self, subentry: ConfigSubentry, token: str) -> bool:
        """The subentry changed (title, token, identity). True when the identity changed."""
        self.name = subentry.title
        if token != self.token:
            self.token = token
            if self.link is not None:  # a replaced token ends the session it opened
                self.async_create_task(self.link.async_close("token changed"), f"xiaozhi_local close {self.mac}")
        identity, self.identity = self.identity, Identity.from_data(subentry.data)
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
        if background:  # nobody awaits it: a failure is logged with its name (tasks.py)
            return watched(entry.async_create_background_task(self.hass, target, name))
        return entry.async_create_task(self.hass, target, name)

    @callback
    def async_add_listener(self, listener: Callable[[], None], *, activity: bool = False) -> CALLBACK_TYPE:
        """Be told of what entities show (link, tools, values); ``activity``: of conversations too."""
        entry = (listener, activity)
        self._listeners.append(entry)
        return lambda: self._listeners.remove(entry)

    @callback
    def async_changed(self) -> None:
        """Something its entities show changed: tell the listeners."""
        for listener, _ in list(self._listeners):
            listener()

    @callback
    def async_activity_changed(self) -> None:
        """A conversation opened or closed, or what runs in it changed (a turn, a reply, media)."""
        for listener in [listener for listener, activity in self._listeners if activity]:
            listener()

    @callback
    def async_heard_wake_word(self, text: str) -> None:
        """It sent ``listen detect``: what it woke on (or typed text, from a client with a keyboard)."""
        self.last_wake_word = text[:64]
        self.heard_wake_words += 1
        self.async_changed()

    def expect_wake_word(self, phrase: str | None) -> None:
        """What it will send as ``listen detect`` text for its wake word (a change under way, or undone)."""
        self.expected_wake_word = phrase

    @callback
    def async_set_voice(self, voice: VoiceHandler) -> None:
        """Its assist satellite exists: it takes the device's voice."""
        self.voice = voice

    @callback
    def async_release_voice(self, voice: VoiceHandler) -> None:
        """That satellite is removed (another may have taken the voice meanwhile)."""
        if self.voice is voice:
            self.voice = None

    @callback
    def async_seen_at(self, address: str) -> None:
        """Its OTA check came from ``address`` (a wake word pack is handed only there)."""
        self.address = address

    def count_refused_token(self) -> int:
        """A connection was refused for a token it had before; how many in a row now."""
        self.refused_tokens += 1
        return self.refused_tokens

    def accept_token(self) -> bool:
        """Its right token came; whether wrong ones had come before (their repair issue goes)."""
        had, self.refused_tokens = self.refused_tokens, 0
        return had > 0

    @callback
    def async_set_wake_word(self, option: str | None, phrase: str | None) -> None:
        """A change of its wake word was verified: kept from now on."""
        self.chosen_wake_word, self.expected_wake_word = option, phrase
        self._persist(REPORT_SAVE_DELAY)
        self.async_changed()

    # -- connection ---------------------------------------------------------------------------

    @callback
    def async_attach(self, link: DeviceLink) -> None:
        """A connection finished its hello: it is now the device's one connection."""
        old, self.link = self.link, link
        self.last_seen = dt_util.utcnow()
        self.address = link.client.address or self.address
        if old is not None and old is not link:
            _LOGGER.debug("Device %s reconnected; closing its previous connection", self.mac)
            self.async_create_task(old.async_close("replaced by a new connection"), f"xiaozhi_local close {self.mac}")
        self.async_changed()

    @callback
    def async_open_conversation(self, link: DeviceLink) -> Conversation:
        """``link`` opened a conversation (a WebSocket hello, an MQTT hello): a new one, from nothing."""
        self.conversation = Conversation(link, self.hass.loop.time())
        self.async_activity_changed()
        return self.conversation

    @callback
    def async_end_conversation(self, link: DeviceLink) -> None:
        """The conversation on ``link`` is over (goodbye, the socket closed); another link's stays."""
        if self.conversation is not None and self.conversation.link is link:
            self.conversation = None
            self.async_activity_changed()

    def conversation_of(self, link: DeviceLink) -> Conversation | None:
        """The open conversation if ``link`` carries it."""
        conversation = self.conversation
        return conversation if conversation is not None and conversation.link is link else None

    @callback
    def async_detach(self, link: DeviceLink) -> None:
        """A connection ended (and a conversation it carried)."""
        if self.conversation is not None and self.conversation.link is link:
            self.conversation = None
        if self.link is link:
            self.link = None
            self.last_seen = dt_util.utcnow()
            self.async_changed()

    @callback
    def async_set_discovery(self, info: ServerInfo, tools: list[McpTool]) -> None:
        """``initialize`` and ``tools/list`` of the current connection are in."""
        self.server_info = info
        self.tools = mcp.canonical_tools({tool.name: tool for tool in tools})
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
        self.async_changed()

    @callback
    def async_set_facts(self, facts: BoardFacts) -> None:
        """What its OTA check said of its board and firmware changed (admission/reports.py)."""
        self.facts = facts
        self._persist(REPORT_SAVE_DELAY)
        self.async_changed()

    @callback
    def async_told(self, transport: str, *, follows: bool = True) -> None:
        """Its OTA answer named this transport: a device that ``follows`` it uses it from this boot on."""
        self.restarts.answered()
        if self.picks_transport == follows:
            self.picks_transport = not follows
            self._persist(REPORT_SAVE_DELAY)
        if transport != self.told_transport:
            self.told_transport = transport
            self._persist(REPORT_SAVE_DELAY)
        self.async_changed()

    async def async_wait_ready(self, timeout: float) -> DeviceLink:
        """The live connection once its tools are known. Raises DeviceOfflineError/McpTimeoutError."""
        link = self.link
        if link is None:
            raise DeviceOfflineError(f"device {self.mac} is not connected")
        try:
            async with asyncio.timeout(timeout):
                await link.discovered.wait()
        except TimeoutError:
            raise McpTimeoutError("the device did not finish listing its tools in time") from None
        return link

    def find_tool(self, name: str) -> McpTool | None:
        """A tool by the firmware's name or by the name the device gave it."""
        return self.tools.get(name) or next((tool for tool in self.tools.values() if tool.name == name), None)

    async def async_call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Call a tool (by either name) on the live connection. Raises McpError subclasses."""
        link = self.link
        if link is None:
            raise DeviceOfflineError(f"device {self.mac} is not connected")
        wire = tool.name if (tool := self.tools.get(name)) is not None else name
        return await link.async_call_tool(wire, arguments, timeout)

    # -- what entities use --------------------------------------------------------------------

    async def async_restart(self) -> None:
        """``{"type":"system","command":"reboot"}``: stock firmware since 1.x reboots on it."""
        link = self.link
        if link is None or not await link.async_send_json({"type": "system", "command": "reboot"}):
            raise translated_error("device_offline", device=self.name)

    async def async_restart_quietly(self) -> bool:
        """Restart if connected (to pick up a new transport at boot); False when it could not be told."""
        link = self.link
        return link is not None and await link.async_send_json({"type": "system", "command": "reboot"})

    async def async_press(self, tool: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """A button: the device must be connected."""
        if self.link is None:
            raise translated_error("device_offline", device=self.name)
        try:
            return await self.async_call_tool(tool, arguments or {}, DEFAULT_CALL_TIMEOUT)
        except McpError as err:
            raise tool_error(err, self.name, tool) from None
