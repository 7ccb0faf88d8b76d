"""The simulated device: a client that talks like stock firmware 2.4.2 (or its ``profile``).

Another client family of the protocol notes when ``flavor`` says so: its traits are data
(``profiles.py``), read where a family differs.

It holds its parts: the transports (``websocket.py``, ``mqtt.py`` with ``udp.py``), its flash
(``flash.py``), boot and upgrades (``boot.py``), speaker and microphone (``speaker.py``,
``microphone.py``), its tools (``tools.py`` on ``mcp_server.py``).
"""

import asyncio
from collections.abc import Awaitable, Callable
import json
import logging
from typing import Any

from websockets.asyncio.client import ClientConnection

from . import boot, flash, microphone, speaker
from .assets import AssetsPartition
from .errors import DeviceCrashed, HelloTimeout
from .mcp_server import McpServer, is_v25
from .mqtt import MqttLink
from .options import FLAVORS, Flavor, SimulatorOptions
from .ota import OtaClient, OtaTiming
from .profiles import PROFILES
from .tools import (
    DeviceState,
    add_common_tools,
    add_extra_tools,
    add_ir_tools,
    add_lamp_tools,
    add_press_to_talk_tool,
    add_py_xiaozhi_volume_tools,
    add_user_only_tools,
    rename_for_sdk,
    system_info,
)
from .voice import SpeakerDecoder
from .websocket import WebSocketLink

__all__ = ["FLAVORS", "DeviceCrashed", "Flavor", "HelloTimeout", "SimulatedDevice", "SimulatorOptions"]

_LOGGER = logging.getLogger(__name__)


class SimulatedDevice:
    """One device. ``await device.connect()`` opens a conversation channel as the firmware does.

    Its transports are parts it holds: ``websocket`` (``websocket.py``) and ``mqtt`` (``mqtt.py``,
    MQTT with UDP audio); ``link`` is the one its boot chose. ``speaks_mqtt``: the stock firmware,
    which picks at each boot from its OTA answer (``boot_mqtt``; MQTT until one says otherwise);
    without it the device is a WebSocket-only client (``boot``). ``mqtt``: what its flash holds.
    """

    def __init__(
        self, options: SimulatorOptions, mqtt: dict[str, Any] | None = None, *, speaks_mqtt: bool = False
    ) -> None:
        if speaks_mqtt:
            options.protocol_version = 1  # audio packets travel bare inside the datagrams
        self.options = options
        self.profile = PROFILES[options.flavor]
        """Its client family's traits (``profiles.py``)."""
        self.speaks_mqtt = speaks_mqtt
        self.nvs = flash.load(options)  # settings kept across boots ("board", "websocket", "mqtt")
        if mqtt is not None:
            self.nvs["mqtt"] = dict(mqtt)
        self.state = DeviceState()
        running = self.nvs.get("ota", {}).get("running")  # an image flashed by an earlier upgrade
        if isinstance(running, str) and running:
            options.firmware_version = running
        self.system_info = system_info(
            options.mac,
            options.client_id,
            options.board,
            options.firmware_version,
            options.chip,
            app_size=options.app_partition,
            assets_size=options.assets_partition,
        )
        self.assets = AssetsPartition(options.assets_partition, options.assets_pack)
        self.assets.cut_after = options.assets_cut_after
        """Its assets partition: the wake word it reports comes from there (``CheckAssetsVersion``)."""
        profile = self.profile
        self.mcp = McpServer(options.board, options.firmware_version, errors_as_results=profile.errors_as_results)
        self.frame_ms = options.frame_ms or profile.frame_ms
        if profile.desktop:  # its volume tools, no status object
            add_py_xiaozhi_volume_tools(self.mcp, self.state)
        else:
            add_common_tools(
                self.mcp,
                self.state,
                self.system_info,
                camera=options.camera,
                identify_uploads=profile.identifies_uploads,
            )
        if options.lamp:
            add_lamp_tools(self.mcp, self.state)
        if options.press_to_talk:
            add_press_to_talk_tool(self.mcp)
        if options.ir:
            add_ir_tools(self.mcp, self.state)
        add_extra_tools(self.mcp, options.extra_tools)
        add_user_only_tools(self.mcp, self.system_info, self.schedule_reboot, self.upgrade, self._set_assets_url)
        if profile.tools_without_prefix:
            rename_for_sdk(self.mcp)
        self.session_id = ""
        self.server_hello: dict[str, Any] | None = None
        self.log: list[dict[str, Any]] = []  # server JSON other than mcp/hello, in order
        self.sent: list[dict[str, Any]] = []  # its own JSON (what the client sent), in order
        self.logged = asyncio.Event()
        self.audio: list[bytes] = []  # downlink packets accepted while speaking
        self.audio_at: list[float] = []  # when each of them arrived (time.monotonic())
        self.dropped_audio = 0  # downlink packets that arrived in another state (the firmware drops them)
        self.decode_queue = 20 if is_v25(options.firmware_version) else 40
        """``MAX_DECODE_PACKETS_IN_QUEUE``: packets beyond it are dropped (2.5 halved it: 1.2 s)."""
        self.queue_dropped = 0
        self.playing_since: float | None = None
        self.queued = 0
        self.speaker_pcm = bytearray()  # what the speaker played, decoded
        self.decoder: SpeakerDecoder | None = None
        self.device_state = "idle"  # idle | listening | speaking
        self.listening_mode = "auto"
        self.relisten = True  # auto mode: listen start again once playback has drained
        self.mcp_requests: list[Any] = []  # every MCP payload received, for tests
        self.notify_tasks: list[asyncio.Task[None]] = []
        self.notify_status: list[int] = []  # HTTP status of each notify fetch
        self.notify_pcm = bytearray()  # what notify played (24 kHz)
        self.closed = asyncio.Event()
        self.rebooted = False
        self.restarts = asyncio.Event()
        """Set at each restart (``esp_restart``): a runner that boots the device itself waits for it."""
        self.websocket = WebSocketLink(self)
        self.mqtt = MqttLink(self)
        self.link: WebSocketLink | MqttLink = self.mqtt if speaks_mqtt else self.websocket
        self.on_mcp_request: Callable[[Any], None] | None = None
        self.on_message: Callable[[dict[str, Any]], None] | None = None
        """Told of each server message it logs (the CLI prints announcements and alerts)."""
        self.ota: OtaClient | None = None
        self.upgrades: list[dict[str, Any]] = []
        """Every firmware upgrade it tried: url, version asked, bytes read, result ("ok" or the error)."""
        self.upgraded = asyncio.Event()  # set when an upgrade ends, either way
        self.power_cut = asyncio.Event()
        """Set mid-download: the device falls silent there (no more reads, no close, no RST)."""
        self.boots = 0  # OTA checks run to the end (a boot; an upgrade's reboot boots again)
        self.booted = asyncio.Event()  # set at the end of each boot's OTA check
        self.upgrade_started = asyncio.Event()  # set when an upgrade begins
        self.boot_again: Callable[[], Awaitable[Any]] | None = None
        self.power_cycle: asyncio.Task[None] | None = None

    # -- flash ------------------------------------------------------------------------------

    def save_nvs(self) -> None:
        """Write flash (after an OTA answer stored something; ``flash.py``)."""
        flash.save(self.options, self.nvs)

    # -- connection ---------------------------------------------------------------------------

    @property
    def transport(self) -> str:
        """What this boot chose: ``mqtt`` or ``websocket``."""
        return self.link.name

    @property
    def on_websocket(self) -> bool:
        """Whether this boot chose WebSocket (the device then opens a socket per conversation)."""
        return self.link is self.websocket

    @property
    def uses_mqtt(self) -> bool:
        """Whether flash holds an MQTT endpoint."""
        return bool(self.nvs.get("mqtt", {}).get("endpoint"))

    def hello(self) -> dict[str, Any]:
        """The client's hello on the transport in use (its family's own, ``profiles.py``)."""
        return self.link.hello()

    async def boot(
        self, ota_url: str, timing: OtaTiming | None = None, on_code: Callable[[str, str], None] | None = None
    ) -> dict[str, Any]:
        """The boot-time OTA check, then the WebSocket settings it stored are used.

        Returns the last OTA answer; ``self.ota`` keeps the client (its log, the codes it spoke).
        Raises OtaError, or RuntimeError when the answer switched the device to MQTT (this
        device is WebSocket-only; one that ``speaks_mqtt`` boots with ``boot_mqtt``).
        """
        self.boot_again = lambda: self.boot(ota_url, timing, on_code)
        answer = await boot.check_ota(self, ota_url, timing, on_code)
        if "mqtt" in answer:
            raise RuntimeError("the OTA answer carried mqtt: the device would switch to MQTT")
        self.use_websocket_settings()
        return answer

    async def boot_mqtt(self, ota_url: str, **kwargs: Any) -> dict[str, Any]:
        """The OTA check, then the transport it chose (``mqtt`` wins, as in ``InitializeProtocol``)."""
        self.boot_again = lambda: self.boot_mqtt(ota_url, **kwargs)
        answer = await boot.check_ota(self, ota_url, **kwargs)
        if "mqtt" not in answer and isinstance(answer.get("websocket"), dict):
            self.link = self.websocket  # flash keeps the MQTT settings; this boot does not use them
            self.use_websocket_settings()
            return answer
        self.link = self.mqtt
        if not self.profile.mqtt_per_conversation:  # else it connects when a conversation starts
            await self.mqtt.start()
        return answer

    # -- the assets partition (``Application::CheckAssetsVersion``) -----------------------------

    def _set_assets_url(self, url: str) -> None:
        self.nvs.setdefault("assets", {})["download_url"] = url
        self.save_nvs()

    @property
    def wake_word(self) -> str | None:
        """What it sends as ``listen detect`` text when its wake word is heard (None: it has none)."""
        return self.assets.wake_word

    # -- firmware upgrades (``Application::UpgradeFirmware``) ------------------------------------

    async def upgrade(self, url: str) -> bool:
        """``self.upgrade_firmware``: close the audio channel, wait, download, flash, reboot."""
        return await boot.install(self, url, "", rebooting=True)

    async def check_ota(
        self, ota_url: str, timing: OtaTiming | None = None, on_code: Callable[[str, str], None] | None = None
    ) -> dict[str, Any]:
        """The boot-time OTA check (with activation; ``boot.py``); its answer is kept in NVS."""
        return await boot.check_ota(self, ota_url, timing, on_code)

    async def check_assets(self) -> None:
        """At boot: a stored assets download URL is fetched and applied (``boot.py``)."""
        await boot.check_assets(self)

    async def wait_boots(self, count: int, timeout: float = 10.0) -> None:
        """Until it has booted ``count`` times (each boot's OTA check ran to the end)."""
        async with asyncio.timeout(timeout):
            while self.boots < count:
                self.booted.clear()
                await self.booted.wait()

    def use_websocket_settings(self) -> None:
        """Take the WebSocket URL, token and version the OTA answers stored."""
        flash.use_websocket_settings(self.options, self.nvs)

    async def open(self) -> None:
        """Open a WebSocket without saying hello (tests of what happens before a hello)."""
        await self.websocket.open()

    async def connect(self) -> None:
        """Open a conversation channel and wait for a valid server hello, as the firmware does."""
        self._check_not_upgrading()
        self.server_hello = None
        await self.link.connect()

    def log_message(self, msg: dict[str, Any]) -> None:
        """A server message for the log (and whoever follows it)."""
        self.log.append(msg)
        self.logged.set()
        if self.on_message is not None:
            self.on_message(msg)

    def _check_not_upgrading(self) -> None:
        """A device left "upgrading" by a failed upgrade ignores the wake word until it restarts."""
        if self.device_state == "upgrading":
            raise RuntimeError("the device is upgrading (or was left so by a failed upgrade): it ignores wake-ups")

    async def on_text(self, frame: str) -> None:
        """One JSON message from the server, handled as ``Application::OnIncomingJson`` does."""
        try:
            msg = json.loads(frame)
        except ValueError:
            return
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            return  # "Missing message type"
        if msg["type"] == "mcp":
            if isinstance(msg.get("payload"), dict):
                self.mcp_requests.append(msg["payload"])
                if self.on_mcp_request:
                    self.on_mcp_request(msg["payload"])
                # The firmware runs tool calls on its main task, one after another.
                reply = await self.mcp.handle(msg["payload"])
                if reply is not None:
                    await self.send_json({"session_id": self.session_id, "type": "mcp", "payload": reply})
        elif msg["type"] == "hello":  # (over MQTT the transport takes hellos itself)
            self.websocket.hello_candidate(frame)
        else:
            if msg["type"] == "system" and msg.get("command") == "reboot":
                self.schedule_reboot()
            if msg["type"] == "notify":
                speaker.on_notify(self, msg)
            if msg["type"] == "tts":
                await speaker.on_tts(self, msg)
            self.log_message(msg)

    # -- voice (``speaker.py``, ``microphone.py``) ---------------------------------------------

    def on_audio(self, data: bytes) -> None:
        """One downlink Opus packet, into the firmware's decode queue."""
        speaker.on_audio(self, data)

    async def say(self, pcm: bytes, **turn: Any) -> None:
        """A spoken turn (``microphone.say``: mode, wake_word, silence_after, start, realtime)."""
        await microphone.say(self, pcm, **turn)

    async def type_text(self, text: str) -> None:
        """Typed input, as a browser page sends it: ``listen detect`` with the text."""
        await microphone.type_text(self, text)

    async def abort(self, reason: str | None = None) -> None:
        """Button (no reason) or wake word (``wake_word_detected``) while speaking."""
        await microphone.abort(self, reason)

    async def wait_message(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0, *, after: int = 0
    ) -> dict[str, Any]:
        """The first logged server message (from ``after`` in the log) matching ``predicate``."""
        async with asyncio.timeout(timeout):
            while True:
                for msg in self.log[after:]:
                    if predicate(msg):
                        return msg
                self.logged.clear()
                await self.logged.wait()

    async def wait_audio(self, packets: int, timeout: float = 10.0) -> None:
        """Until the speaker has received ``packets`` packets in this session."""
        async with asyncio.timeout(timeout):
            while len(self.audio) < packets:
                self.logged.clear()
                await self.logged.wait()

    def count(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        """How many logged server messages match."""
        return sum(1 for msg in self.log if predicate(msg))

    # -- sending ------------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """Whether a conversation channel is open (a socket, or the UDP channel)."""
        return self.link.is_connected

    @property
    def connection(self) -> ClientConnection:
        """The open WebSocket."""
        return self.websocket.connection

    async def send_json(self, msg: dict[str, Any]) -> None:
        """Send one JSON message on the transport in use."""
        await self.link.send_json(msg)

    async def send_raw(self, frame: str | bytes) -> None:
        """Send any frame (tests of hostile input)."""
        await self.link.send_raw(frame)

    async def send_notification(self, method: str, params: dict[str, Any] | None = None) -> None:
        """An MCP notification (stock firmware sends none; newer builds and other clients do)."""
        payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            payload["params"] = params
        await self.send_json({"session_id": self.session_id, "type": "mcp", "payload": payload})

    # -- ending -------------------------------------------------------------------------------

    async def drop(self) -> None:
        """Power off, or the end of a session the firmware's way: every connection cut, no word."""
        await boot.stop_power_cycle(self)
        await self.websocket.close()
        await self.mqtt.close()
        self.closed.set()

    async def wait_closed(self) -> None:
        """Until the server (or the network) ends the session."""
        await self.closed.wait()

    def schedule_reboot(self) -> None:
        """``esp_restart`` (its reply goes out first); with ``reboots`` it boots again by itself."""
        self.rebooted = True
        self.restarts.set()
        self.device_state = "idle"  # a restart clears every state, "upgrading" too
        self.link.power_off_soon()
        boot.restart_later(self)

    async def __aenter__(self) -> SimulatedDevice:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.drop()
