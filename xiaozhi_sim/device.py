"""The simulated device: a ``websockets`` client that talks like stock firmware 2.4.2.

``flavor`` makes it another client family of the protocol notes instead:

- ``py-xiaozhi``: a desktop client. 20 ms Opus frames announced in its hello, an empty
  ``session_id`` in every message (it ignores the server's), tool failures as ``isError``
  results, header values spelled its own way; no status tool, its volume read by
  ``self.audio_speaker.get_volume`` (a bare integer). It plays downlink audio in any state,
  and in realtime mode stays listening while it plays an answer (``session.py``).
- ``browser``: a test web page. Authentication in the query string (browsers cannot set
  WebSocket headers), a hello with only ``features``, and typed text through ``listen detect``.
- ``xiaozhi-sdk``: the PyPI SDK (``xiaozhi_sdk/core.py``): its own hello
  (``consistent_sample_rate``), the firmware's tools without ``self.`` (``set_volume``,
  ``get_device_status``, ``take_photo``), and camera uploads with the vision token but no ``Device-Id``.
- ``xiaozhi-concurrent``: the load tester (``src/client.py``). Only ``?device-id=`` in the URL (no
  token: it needs a hub that trusts new devices), a camelCase ``audioParams`` hello, and in
  ``say`` ``listen start`` in manual mode, the speech, then up to 6 s of silence frames until
  ``stt`` or ``tts start`` comes, never ``listen stop``.
"""

import asyncio
from collections.abc import Awaitable, Callable
import contextlib
from dataclasses import dataclass, field
import json
import logging
from pathlib import Path
import time
from typing import Any, Literal
from urllib.parse import urlencode
import uuid

import aiohttp
import av.error
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .assets import ASSETS_PARTITION, AssetsFailed, AssetsPartition
from .firmware import FlashedImage, UpgradeFailed, download_and_flash, firmware_offer
from .mcp_server import McpServer, is_v25
from .ota import OtaClient, OtaError, OtaTiming
from .tools import (
    APP_PARTITION,
    DeviceState,
    add_common_tools,
    add_extra_tools,
    add_ir_tools,
    add_lamp_tools,
    add_press_to_talk_tool,
    add_py_xiaozhi_volume_tools,
    add_user_only_tools,
    dumps,
    rename_for_sdk,
    system_info,
)
from .voice import UPLINK_RATE, SpeakerDecoder, decode_ogg_opus, frame, mic_packets, unframe

_LOGGER = logging.getLogger(__name__)

type Flavor = Literal["firmware", "py-xiaozhi", "browser", "xiaozhi-sdk", "xiaozhi-concurrent"]
FLAVORS: tuple[Flavor, ...] = ("firmware", "py-xiaozhi", "browser", "xiaozhi-sdk", "xiaozhi-concurrent")


class DeviceCrashed(Exception):
    """The server hello would have crashed real firmware (no ``transport``, or not a string)."""


class HelloTimeout(Exception):
    """No valid server hello within the firmware's 10 s."""


@dataclass
class SimulatorOptions:
    """How the simulated device is built."""

    url: str
    token: str = ""
    mac: str = "cc:ba:97:04:92:94"
    client_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    protocol_version: int = 1
    board: str = "bread-compact-wifi"
    firmware_version: str = "2.4.2"
    camera: bool = False
    ir: bool = False
    lamp: bool = False
    press_to_talk: bool = False
    extra_tools: int = 0
    hello_timeout: float = 10.0
    handshake_timeout: float = 10.0
    language: str = "en-US"
    flavor: Flavor = "firmware"
    frame_ms: int | None = None
    """Uplink Opus frame duration; None: the flavor's own (60 ms firmware/browser, 20 ms py-xiaozhi)."""
    serial_number: str | None = None
    """A factory serial number in eFuse: the OTA check is activation version 2 (``Serial-Number``)."""
    decode_speaker: bool = True
    """Decode what the speaker plays into ``speaker_pcm``. A bench that only stamps the packets'
    arrival turns it off (100 devices decoding would load the process that measures)."""
    nvs_path: str | None = None
    """A file that plays the device's flash: its ``Client-Id`` (NVS ``board/uuid``, made once and
    kept across boots, as the firmware does) and what OTA answers stored. None: kept in memory."""
    chip: str = "esp32s3"
    """``chip_model_name``: the chip its images must be built for."""
    app_partition: int = APP_PARTITION
    """Bytes of each app slot in its partition table (an image larger than it cannot be flashed)."""
    upgrade_delay: float = 4.0
    """Seconds ``UpgradeFirmware`` waits before its download (its alert 3 s, then 1 s)."""
    download_delay: float = 0.0
    """Seconds added to each 4 KiB page of a firmware download (weak Wi-Fi; tests act mid-way)."""
    fail_flash: bool = False
    """Every flash fails at ``esp_ota_end`` (a worn flash): the device keeps its version."""
    assets_partition: int = ASSETS_PARTITION
    """Bytes of its ``assets`` partition (in its partition table; a larger pack is refused)."""
    assets_cut_after: int | None = None
    """Its first assets download breaks off after this many bytes (then the partition is broken)."""
    assets_pack: bytes | None = None
    """What its assets partition holds at first (None: a default pack that wakes on 你好小智)."""
    reboots: bool = False
    """After a reboot it boots again by itself, as a real device does: the OTA check (where a
    ``firmware`` in the answer is installed), then its transport. Off: the caller boots it."""


class SimulatedDevice:
    """One device. ``await device.connect()`` opens a conversation channel as the firmware does."""

    def __init__(self, options: SimulatorOptions) -> None:
        self.options = options
        self.nvs: dict[str, dict[str, Any]] = {}  # settings kept across boots ("board", "websocket", "mqtt")
        self._load_nvs()
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
        self.mcp = McpServer(options.board, options.firmware_version, errors_as_results=options.flavor == "py-xiaozhi")
        self.frame_ms = options.frame_ms or (20 if options.flavor == "py-xiaozhi" else 60)
        if options.flavor == "py-xiaozhi":  # a desktop: its volume tools, no status object
            add_py_xiaozhi_volume_tools(self.mcp, self.state)
        else:
            add_common_tools(
                self.mcp,
                self.state,
                self.system_info,
                camera=options.camera,
                identify_uploads=options.flavor != "xiaozhi-sdk",
            )
        if options.lamp:
            add_lamp_tools(self.mcp, self.state)
        if options.press_to_talk:
            add_press_to_talk_tool(self.mcp)
        if options.ir:
            add_ir_tools(self.mcp, self.state)
        add_extra_tools(self.mcp, options.extra_tools)
        add_user_only_tools(self.mcp, self.system_info, self._schedule_reboot, self.upgrade, self._set_assets_url)
        if options.flavor == "xiaozhi-sdk":
            rename_for_sdk(self.mcp)
        self.session_id = ""
        self.server_hello: dict[str, Any] | None = None
        self.log: list[dict[str, Any]] = []  # server JSON other than mcp/hello, in order
        self.sent: list[dict[str, Any]] = []  # its own JSON (what the client sent), in order
        self._logged = asyncio.Event()
        self.audio: list[bytes] = []  # downlink packets accepted while speaking
        self.audio_at: list[float] = []  # when each of them arrived (time.monotonic())
        self.dropped_audio = 0  # downlink packets that arrived in another state (the firmware drops them)
        self.decode_queue = 20 if is_v25(options.firmware_version) else 40
        """``MAX_DECODE_PACKETS_IN_QUEUE``: packets beyond it are dropped (2.5 halved it: 1.2 s)."""
        self.queue_dropped = 0
        self._playing_since: float | None = None
        self._queued = 0
        self.speaker_pcm = bytearray()  # what the speaker played, decoded
        self._speaker: SpeakerDecoder | None = None
        self.device_state = "idle"  # idle | listening | speaking
        self.listening_mode = "auto"
        self.relisten = True  # auto mode: listen start again once playback has drained
        self.mcp_requests: list[Any] = []  # every MCP payload received, for tests
        self.notify_tasks: list[asyncio.Task[None]] = []
        self.notify_status: list[int] = []  # HTTP status of each notify fetch
        self.notify_pcm = bytearray()  # what notify played (24 kHz)
        self.closed = asyncio.Event()
        self.rebooted = False
        self._power_off_timer: asyncio.TimerHandle | None = None
        self.restarts = asyncio.Event()
        """Set at each restart (``esp_restart``): a runner that boots the device itself waits for it."""
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
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
        self._boot_again: Callable[[], Awaitable[Any]] | None = None
        self._power_cycle: asyncio.Task[None] | None = None

    # -- flash ------------------------------------------------------------------------------

    def _load_nvs(self) -> None:
        """The Client-Id and stored settings from "flash"; a new Client-Id is kept there for good."""
        path = self.options.nvs_path
        if path is None:
            return
        with contextlib.suppress(OSError, ValueError):
            stored = json.loads(Path(path).read_text())
            if isinstance(stored, dict):
                self.nvs = {k: v for k, v in stored.items() if isinstance(v, dict)}
        uuid_ = self.nvs.get("board", {}).get("uuid")
        if isinstance(uuid_, str) and uuid_:
            self.options.client_id = uuid_
        websocket = self.nvs.get("websocket", {})
        if isinstance(websocket.get("token"), str) and not self.options.token:
            self.options.token = websocket["token"]
        self.nvs.setdefault("board", {})["uuid"] = self.options.client_id
        self.save_nvs()

    def save_nvs(self) -> None:
        """Write "flash" (after an OTA answer stored something)."""
        if self.options.nvs_path is not None:
            path = Path(self.options.nvs_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.nvs, indent=2))

    # -- connection ---------------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        """The application headers of the firmware's WebSocket request (none for a browser)."""
        options = self.options
        if options.flavor in ("browser", "xiaozhi-concurrent"):
            return {}
        headers: dict[str, str] = {}
        token = options.token
        if options.flavor == "py-xiaozhi":  # its own spelling: lower-case scheme, upper-case MAC
            if token:
                headers["authorization"] = f"bearer {token}"
            headers["protocol-version"] = str(options.protocol_version)
            headers["device-id"] = options.mac.upper()
            headers["client-id"] = options.client_id
            return headers
        if token:
            headers["Authorization"] = token if " " in token else f"Bearer {token}"
        headers["Protocol-Version"] = str(options.protocol_version)
        headers["Device-Id"] = options.mac
        headers["Client-Id"] = options.client_id
        return headers

    def connect_url(self) -> str:
        """The URL to open; a browser page puts what the headers would carry in the query."""
        options = self.options
        if options.flavor == "xiaozhi-concurrent":
            return f"{options.url}{'&' if '?' in options.url else '?'}{urlencode({'device-id': options.mac})}"
        if options.flavor != "browser":
            return options.url
        query = {"device-id": options.mac, "client-id": options.client_id}
        if options.token:
            query["authorization"] = f"Bearer {options.token}"
        return f"{options.url}{'&' if '?' in options.url else '?'}{urlencode(query)}"

    def hello(self) -> dict[str, Any]:
        """The client's hello: the firmware's (key order as it builds the string), or its flavor's."""
        if self.options.flavor == "browser":
            return {"type": "hello", "features": {"mcp": True}}
        if self.options.flavor == "xiaozhi-concurrent":
            return {
                "type": "hello",
                "audioParams": {"format": "opus", "sampleRate": 16000, "channels": 1, "frameDuration": 60},
            }
        if self.options.flavor == "xiaozhi-sdk":
            return {
                "type": "hello",
                "version": 1,
                "features": {"mcp": True, "consistent_sample_rate": False},
                "transport": "websocket",
                "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
            }
        if self.options.flavor == "py-xiaozhi":
            return {
                "type": "hello",
                "version": self.options.protocol_version,
                "features": {"mcp": True},
                "transport": "websocket",
                "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 20},
                "client": "py-xiaozhi",  # an extra field the server does not know
            }
        return {
            "type": "hello",
            "version": self.options.protocol_version,
            "features": {"mcp": True, "glyph_push": True},
            "text_font": {"bundle": "noto-v1", "charset": "common", "size": 20, "bpp": 4},
            "transport": "websocket",
            "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
        }

    async def boot(
        self, ota_url: str, timing: OtaTiming | None = None, on_code: Callable[[str, str], None] | None = None
    ) -> dict[str, Any]:
        """The boot-time OTA check, then the WebSocket settings it stored are used.

        Returns the last OTA answer; ``self.ota`` keeps the client (its log, the codes it spoke).
        Raises OtaError, or RuntimeError when the answer switched the device to MQTT (this
        device speaks WebSocket only; ``xiaozhi_sim.mqtt.MqttDevice`` speaks both).
        """
        self._boot_again = lambda: self.boot(ota_url, timing, on_code)
        answer = await self.check_ota(ota_url, timing, on_code)
        if "mqtt" in answer:
            raise RuntimeError("the OTA answer carried mqtt: the device would switch to MQTT")
        self.use_websocket_settings()
        return answer

    async def check_ota(
        self, ota_url: str, timing: OtaTiming | None = None, on_code: Callable[[str, str], None] | None = None
    ) -> dict[str, Any]:
        """The boot-time OTA check (with activation); what it answered last is stored in NVS.

        ``CheckNewVersion``: an answer whose ``firmware`` is newer (or ``force`` 1) is installed
        at once; after a successful flash the device restarts, so the check runs again with the
        new version. A failed upgrade lets the boot go on with the old one.
        """
        await self.check_assets()
        while True:
            client = OtaClient(self, ota_url, timing, on_code)
            self.ota = client
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                answer = await client.run(session)
            offer = firmware_offer(answer, self.options.firmware_version)
            if offer is None or not await self._upgrade(offer.url, offer.version, rebooting=False):
                self.boots += 1
                self.booted.set()
                return answer

    # -- the assets partition (``Application::CheckAssetsVersion``) -----------------------------

    def _set_assets_url(self, url: str) -> None:
        self.nvs.setdefault("assets", {})["download_url"] = url
        self.save_nvs()

    @property
    def wake_word(self) -> str | None:
        """What it sends as ``listen detect`` text when its wake word is heard (None: it has none)."""
        return self.assets.wake_word

    async def check_assets(self) -> None:
        """At boot, before the OTA check: a stored download URL is erased, then fetched and applied."""
        url = self.nvs.get("assets", {}).pop("download_url", None)
        if not isinstance(url, str) or not url:
            return
        self.save_nvs()
        self.device_state = "upgrading"
        try:
            await self.assets.download(url)
        except AssetsFailed as err:
            _LOGGER.warning("Assets download failed: %s", err)
        self.device_state = "idle"

    # -- firmware upgrades (``Application::UpgradeFirmware``) ------------------------------------

    async def upgrade(self, url: str) -> bool:
        """``self.upgrade_firmware``: close the audio channel, wait, download, flash, reboot."""
        return await self._upgrade(url, "", rebooting=True)

    async def _upgrade(self, url: str, version: str, *, rebooting: bool) -> bool:
        record: dict[str, Any] = {"url": url, "version": version, "read": 0, "size": 0, "result": None}
        self.upgrades.append(record)
        self.upgrade_started.set()
        self.upgraded.clear()
        await self._close_audio_channel()
        await asyncio.sleep(self.options.upgrade_delay)
        if self.device_state != "listening":  # the state machine refuses listening → upgrading
            self.device_state = "upgrading"  # ... and nothing resets it if the upgrade fails

        def progress(read: int, size: int) -> None:
            record["read"], record["size"] = read, size

        try:
            flashed = await download_and_flash(
                url,
                self.options.chip,
                on_progress=progress,
                fail_flash=self.options.fail_flash,
                partition=self.options.app_partition,
                read_delay=self.options.download_delay,
                frozen=self.power_cut,
            )
        except UpgradeFailed as err:
            _LOGGER.warning("Firmware upgrade failed: %s", err)
            record["result"] = str(err)
            self.upgraded.set()
            return False
        record["result"] = "ok"
        self._run_image(flashed)
        self.upgraded.set()
        if rebooting:
            self._schedule_reboot()
        return True

    async def wait_boots(self, count: int, timeout: float = 10.0) -> None:
        """Until it has booted ``count`` times (each boot's OTA check ran to the end)."""
        async with asyncio.timeout(timeout):
            while self.boots < count:
                self.booted.clear()
                await self.booted.wait()

    def _run_image(self, flashed: FlashedImage) -> None:
        """The new image boots: its version is the one reported from now on (kept in "flash")."""
        version = flashed.version
        self.options.firmware_version = version
        self.system_info["application"]["version"] = version
        self.mcp.firmware_version = version
        self.decode_queue = 20 if is_v25(version) else 40
        self.nvs.setdefault("ota", {})["running"] = version
        self.save_nvs()
        self.device_state = "idle"

    async def _close_audio_channel(self) -> None:
        """``CloseAudioChannel`` before an upgrade: over WebSocket the socket itself goes."""
        if self._ws is not None and not self.closed.is_set():
            self._ws.transport.abort()
            self.closed.set()

    def use_websocket_settings(self) -> None:
        """Take the WebSocket URL, token and version the OTA answers stored."""
        websocket = self.nvs.get("websocket", {})
        if not isinstance(websocket.get("url"), str):
            raise OtaError("no WebSocket URL stored")
        self.options.url = websocket["url"]
        self.options.token = str(websocket.get("token", ""))
        if self.options.flavor == "py-xiaozhi" and not self.options.token:
            self.options.token = "test-token"  # its ``ws.get("token", "test-token") or "test-token"``
        self.options.protocol_version = int(websocket.get("version", 1))

    async def open(self) -> None:
        """Open the socket without saying hello (tests of what happens before a hello)."""
        self.closed.clear()
        self._ws = await connect(
            self.connect_url(),
            additional_headers=self.headers(),
            compression=None,
            ping_interval=None,  # the firmware never pings; it answers the server's pings
            max_size=2**20,
            open_timeout=self.options.handshake_timeout,
            close_timeout=1,
        )

    async def connect(self) -> None:
        """Connect, send the hello and wait for a valid server hello, as the firmware does."""
        self._check_not_upgrading()
        self.server_hello = None
        await self.open()
        assert self._ws is not None
        await self._ws.send(dumps(self.hello()))
        try:
            async with asyncio.timeout(self.options.hello_timeout):
                while not self._handle_hello_candidate(await self._ws.recv()):
                    pass
        except TimeoutError:
            await self.drop()
            raise HelloTimeout("no valid server hello") from None
        except DeviceCrashed:
            await self.drop()
            raise
        self._reader = asyncio.create_task(self._read_loop(), name=f"xiaozhi_sim {self.options.mac}")

    def _logged_message(self, msg: dict[str, Any]) -> None:
        self.log.append(msg)
        self._logged.set()
        if self.on_message is not None:
            self.on_message(msg)

    def _check_not_upgrading(self) -> None:
        """A device left "upgrading" by a failed upgrade ignores the wake word until it restarts."""
        if self.device_state == "upgrading":
            raise RuntimeError("the device is upgrading (or was left so by a failed upgrade): it ignores wake-ups")

    def _handle_hello_candidate(self, frame: str | bytes) -> bool:
        """Take a valid server hello (True); ignore anything else (False), as the firmware does."""
        if isinstance(frame, bytes):
            return False
        try:
            msg = json.loads(frame)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("type") != "hello":
            return False
        if "transport" not in msg or not isinstance(msg["transport"], str):
            # ParseServerHello logs transport->valuestring on a null pointer.
            raise DeviceCrashed(f"server hello without a string transport: {frame!r}")
        if msg["transport"] != "websocket":
            _LOGGER.warning("Unsupported transport: %s", msg["transport"])
            return False
        if isinstance(msg.get("session_id"), str) and self.options.flavor != "py-xiaozhi":
            self.session_id = msg["session_id"]  # py-xiaozhi keeps sending an empty one
        self.server_hello = msg
        return True

    async def _read_loop(self) -> None:
        assert self._ws is not None
        try:
            async for frame in self._ws:
                if isinstance(frame, bytes):
                    self._on_audio(frame)
                else:
                    await self._on_text(frame)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def _on_text(self, frame: str) -> None:
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
        elif msg["type"] == "hello":
            self._handle_hello_candidate(frame)
        else:
            if msg["type"] == "system" and msg.get("command") == "reboot":
                self._schedule_reboot()
            if msg["type"] == "notify":
                self._on_notify(msg)
            if msg["type"] == "tts":
                await self._on_tts(msg)
            self._logged_message(msg)

    # -- voice --------------------------------------------------------------------------------

    def _on_audio(self, data: bytes) -> None:
        if self.device_state != "speaking" and self.options.flavor != "py-xiaozhi":
            self.dropped_audio += 1  # "Binary audio is accepted only in the speaking state"
            return  # (py-xiaozhi plays whatever arrives, in any state)
        # The decode queue: 40 packets on 2.4, 20 on 2.5, played at real time; a full queue drops.
        now = time.monotonic()
        if self._playing_since is None or self._queued - self._played(now) <= 0:
            self._playing_since, self._queued = now, 0  # the speaker caught up: playback restarts
        if self._queued - self._played(now) >= self.decode_queue:
            self.queue_dropped += 1
            return
        self._queued += 1
        packet = unframe(self.options.protocol_version, data)
        self.audio.append(packet)
        self.audio_at.append(time.monotonic())
        self._logged.set()  # wakes wait_audio as well
        if self._speaker is not None:
            with contextlib.suppress(av.error.FFmpegError):  # logged and dropped by the firmware
                self.speaker_pcm += self._speaker.decode(packet)

    def _played(self, now: float) -> int:
        """Packets the speaker has played since playback (re)started (60 ms each)."""
        assert self._playing_since is not None
        return int((now - self._playing_since) / 0.06)

    async def _on_tts(self, msg: dict[str, Any]) -> None:
        state = msg.get("state")
        py_xiaozhi = self.options.flavor == "py-xiaozhi"
        if state == "start":
            # py-xiaozhi in realtime mode keeps listening while it plays the answer (its AEC).
            self.device_state = "listening" if py_xiaozhi and self.listening_mode == "realtime" else "speaking"
            rate = ((self.server_hello or {}).get("audio_params") or {}).get("sample_rate", 24000)
            # the decoder queue is reset on entering speaking
            self._speaker = SpeakerDecoder(int(rate)) if self.options.decode_speaker else None
            self._playing_since, self._queued = None, 0
        elif state == "stop" and (self.device_state == "speaking" or py_xiaozhi):
            if self.listening_mode == "manual":
                self.device_state = "idle"
            else:
                self.device_state = "listening"
                if self.listening_mode == "auto" and self.relisten:
                    with contextlib.suppress(ConnectionClosed, ConnectionError):  # closed right after
                        await self.send_json(
                            {"session_id": self.session_id, "type": "listen", "state": "start", "mode": "auto"}
                        )

    def _on_notify(self, msg: dict[str, Any]) -> None:
        """Firmware 2.5: while idle, fetch ``audio_url`` (mono Ogg Opus, no redirects) and play it."""
        url = msg.get("audio_url")
        if not is_v25(self.options.firmware_version) or self.device_state != "idle" or not isinstance(url, str):
            return  # older firmware: "Unknown message type"; busy: ignored
        self.notify_tasks.append(asyncio.create_task(self._play_notify(url)))

    async def _play_notify(self, url: str) -> None:
        self.device_state = "notifying"
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, allow_redirects=False) as response,
            ):
                self.notify_status.append(response.status)
                if response.status == 200:
                    self.notify_pcm += decode_ogg_opus(await response.read())
        except aiohttp.ClientError as err:  # the stream was cut: the firmware stops playing
            _LOGGER.debug("notify stream ended: %s", err)
        finally:
            if self.device_state == "notifying":
                self.device_state = "idle"

    async def wait_message(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0, *, after: int = 0
    ) -> dict[str, Any]:
        """The first logged server message (from ``after`` in the log) matching ``predicate``."""
        async with asyncio.timeout(timeout):
            while True:
                for msg in self.log[after:]:
                    if predicate(msg):
                        return msg
                self._logged.clear()
                await self._logged.wait()

    async def wait_audio(self, packets: int, timeout: float = 10.0) -> None:
        """Until the speaker has received ``packets`` packets in this session."""
        async with asyncio.timeout(timeout):
            while len(self.audio) < packets:
                self._logged.clear()
                await self._logged.wait()

    def count(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        """How many logged server messages match."""
        return sum(1 for msg in self.log if predicate(msg))

    async def say(
        self,
        pcm: bytes,
        *,
        mode: str = "auto",
        wake_word: str | None = None,
        silence_after: float = 3.0,
        start: bool = True,
        realtime: bool = False,
    ) -> None:
        """A spoken turn: (``listen detect``), ``listen start``, the microphone's packets, then silence.

        Auto mode keeps streaming silence, as the firmware streams continuously, until the server
        ends the turn (``stt`` or ``tts start``) or ``silence_after`` seconds of it were sent.
        Manual mode sends ``listen stop`` after the speech (push-to-talk released). ``start=False``
        streams into a turn the device already started (after ``tts stop`` in auto mode).
        ``realtime`` sends one packet per frame duration, as a microphone does (else 2 ms apart).
        """
        if self.options.flavor == "xiaozhi-concurrent":
            await self._say_as_load_tester(pcm)
            return
        self.listening_mode = mode
        if wake_word is not None:
            await self.send_json(
                {"session_id": self.session_id, "type": "listen", "state": "detect", "text": wake_word}
            )
        if start:
            await self.send_json({"session_id": self.session_id, "type": "listen", "state": "start", "mode": mode})
        self.device_state = "listening"
        marker = len(self.log)
        silence = bytes(int(UPLINK_RATE * 2 * silence_after)) if mode != "manual" else b""
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            for index, packet in enumerate(mic_packets(pcm + silence, self.frame_ms)):
                if any(m.get("type") in ("stt", "tts") for m in self.log[marker:]) or self.closed.is_set():
                    break  # the server ended the turn (or the conversation)
                await self.send_raw(frame(self.options.protocol_version, packet))
                if realtime:  # on the microphone's clock: a late wake-up does not delay what follows
                    await asyncio.sleep(max(0.0, began + (index + 1) * self.frame_ms / 1000 - loop.time()))
                else:  # faster than real time, but never a flood
                    await asyncio.sleep(0.002)
            if mode == "manual":
                await self.send_json({"session_id": self.session_id, "type": "listen", "state": "stop"})
                self.device_state = "idle"
        except ConnectionClosed:
            self.device_state = "idle"  # the server closed the socket: the firmware goes idle

    async def _say_as_load_tester(self, pcm: bytes) -> None:
        """xiaozhi-concurrent's turn, without ``listen stop``.

        Manual ``listen start``, the speech, then silence frames (at most 100: 6 s of audio) until
        ``stt`` or ``tts start`` arrives.
        """
        self.listening_mode = "manual"
        await self.send_json({"type": "listen", "state": "start", "mode": "manual"})
        self.device_state = "listening"
        marker = len(self.log)
        silence = mic_packets(bytes(UPLINK_RATE * 2 * 60 // 1000), 60)[0]

        def answered() -> bool:
            return any(m.get("type") == "stt" or m.get("state") == "start" for m in self.log[marker:])

        with contextlib.suppress(ConnectionClosed):
            for packet in mic_packets(pcm, 60):
                await self.send_raw(frame(self.options.protocol_version, packet))
                await asyncio.sleep(0.002)
            for _ in range(100):
                if answered() or self.closed.is_set():
                    return
                await self.send_raw(frame(self.options.protocol_version, silence))
                await asyncio.sleep(0.002)

    async def type_text(self, text: str) -> None:
        """Typed input, as a browser page sends it: ``listen detect`` with the text."""
        await self.send_json(
            {"session_id": self.session_id, "type": "listen", "state": "detect", "mode": "manual", "text": text}
        )

    async def abort(self, reason: str | None = None) -> None:
        """Button (no reason) or wake word (``wake_word_detected``) while speaking."""
        msg: dict[str, Any] = {"session_id": self.session_id, "type": "abort"}
        if reason is not None:
            msg["reason"] = reason
        await self.send_json(msg)

    # -- sending ------------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """Whether its socket is open (a conversation is running)."""
        return self._ws is not None and not self.closed.is_set()

    @property
    def connection(self) -> ClientConnection:
        """The open socket."""
        if self._ws is None:
            raise RuntimeError("not connected")
        return self._ws

    async def send_json(self, msg: dict[str, Any]) -> None:
        """Send one JSON text frame."""
        self.sent.append(msg)
        await self.connection.send(dumps(msg))

    async def send_raw(self, frame: str | bytes) -> None:
        """Send any frame (tests of hostile input)."""
        await self.connection.send(frame)

    async def send_notification(self, method: str, params: dict[str, Any] | None = None) -> None:
        """An MCP notification (stock firmware sends none; newer builds and other clients do)."""
        payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            payload["params"] = params
        await self.send_json({"session_id": self.session_id, "type": "mcp", "payload": payload})

    # -- ending -------------------------------------------------------------------------------

    async def drop(self) -> None:
        """End the session the firmware's way: close TCP, no Close frame."""
        if self._power_off_timer is not None:  # (what it would do, done now)
            self._power_off_timer.cancel()
            self._power_off_timer = None
        await self._stop_power_cycle()
        if self._ws is not None:
            self._ws.transport.abort()
        if self._reader is not None:
            self._reader.cancel()  # it may be inside a tool that never returns
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        self.closed.set()

    async def wait_closed(self) -> None:
        """Until the server (or the network) ends the session."""
        await self.closed.wait()

    def _schedule_reboot(self) -> None:
        self.rebooted = True
        self.restarts.set()
        self.device_state = "idle"  # a restart clears every state, "upgrading" too
        if self._power_off_timer is not None:
            self._power_off_timer.cancel()
            self._power_off_timer = None
        if self._ws is not None or self._reader is not None:  # a connection to drop
            self._power_off_timer = asyncio.get_running_loop().call_later(0.1, self._power_off)
        self._restart_later()

    def _power_off(self) -> None:
        """``esp_restart``: the socket drops, and every task stops where it is.

        The upgrade tool, which never returns on success, included.
        """
        self._power_off_timer = None
        if self._ws is not None:
            self._ws.transport.abort()
        if self._reader is not None:
            self._reader.cancel()
        self.closed.set()

    async def _stop_power_cycle(self) -> None:
        """Switched off for good (the test's end): a reboot under way does not boot it again."""
        cycle = self._power_cycle
        if cycle is not None and cycle is not asyncio.current_task() and not cycle.done():
            cycle.cancel()
            await asyncio.gather(cycle, return_exceptions=True)

    def _restart_later(self) -> None:
        """With ``reboots``: power off, then boot again by itself (as ``esp_restart`` does)."""
        if not self.options.reboots or self._boot_again is None:
            return
        if self._power_cycle is not None and not self._power_cycle.done():
            return

        async def cycle() -> None:
            await asyncio.sleep(0.2)  # the channel is closed first
            await self.drop()
            self.device_state = "idle"
            self.booted.clear()
            assert self._boot_again is not None
            try:
                await self._boot_again()
            except Exception as err:  # noqa: BLE001 - a device that cannot boot keeps trying in reality
                _LOGGER.warning("Boot after the reboot failed: %s", err)

        self._power_cycle = asyncio.create_task(cycle(), name=f"xiaozhi_sim reboot {self.options.mac}")

    async def __aenter__(self) -> SimulatedDevice:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.drop()
