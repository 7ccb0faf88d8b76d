"""The firmware's MQTT+UDP transport (``main/protocols/mqtt_protocol.cc`` on ``esp-mqtt``).

What the stock firmware does when its OTA answer carries ``mqtt``:

- it connects at boot with the client id, user name and password of the answer, keepalive
  from NVS (240 s by default), plain TCP unless the port is 8883; it **never subscribes** and
  takes every PUBLISH it receives as a message to it, whatever the topic;
- it publishes every JSON message with QoS 0 to ``publish_topic``;
- a conversation opens the audio channel: hello v3 with ``transport: udp``, a 10 s wait for a
  server hello with ``udp {server, port, key, nonce}`` (each hex, 16 bytes), then a UDP socket
  connected to that address. Datagrams are a 16-byte header and AES-128-CTR ciphertext whose
  counter block is the header. The uplink header is the server's nonce with the length,
  timestamp and sequence (from 1) written over it. Downlink datagrams must be type 0x01, their
  length exact, their sequence above the last (older ones are dropped);
- ``goodbye`` closes the channel either way (the device's carries its session id);
- after a disconnect it reconnects in 60 s, but only while idle.

With py-xiaozhi's profile (``profiles.py``) it is py-xiaozhi's MQTT mode (``src/protocols/mqtt_protocol.py``,
``mqtt_udp.py``, ``mqtt_crypto.py``) instead: it connects only when a conversation starts
(``connect`` opens MQTT, subscribes, then says hello at once) and a ``goodbye`` either way ends the
MQTT session too (``_handle_goodbye`` disconnects); it refuses an ``mqtt`` object missing its user
name, password or publish topic; it subscribes (QoS 1) to ``subscribe_topic`` unless that is missing
or ``"null"``; its hello announces 20 ms frames; its uplink header keeps bytes 8–11 of the nonce (no
timestamp); it ignores the downlink header beyond using it as the counter block.

The device composes it (``SimulatedDevice.mqtt``) beside its WebSocket (``websocket.py``) and
uses whichever its boot chose. This file has its own MQTT and UDP code, written from the clients,
not the server's.
"""

import asyncio
import contextlib
import json
import logging
import struct
from typing import TYPE_CHECKING, Any

from .errors import HelloTimeout
from .mqtt_wire import (
    DISCONNECT,
    PINGREQ,
    MqttRefused,
    mqtt_connect,
    mqtt_publish,
    mqtt_subscribe,
    read_packet,
)
from .profiles import mqtt_hello
from .udp import UdpChannel

if TYPE_CHECKING:
    from .device import SimulatedDevice

_LOGGER = logging.getLogger(__name__)

RECONNECT_INTERVAL = 60.0
"""``MQTT_RECONNECT_INTERVAL_MS``: seconds before an idle device reconnects."""


class MqttLink:
    """One device's MQTT session and its UDP audio channel.

    ``InitializeProtocol``: MQTT+UDP when the OTA answer has ``mqtt`` (online from boot, audio over
    UDP), else WebSocket when it has ``websocket`` (a socket per conversation), else MQTT with
    what flash holds. The device's ``boot_mqtt`` makes that choice; this is the MQTT side of it.
    """

    name = "mqtt"

    def __init__(self, device: SimulatedDevice) -> None:
        self.device = device
        self.options = device.options
        self._reader_stream: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._mqtt_task: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self._keepalive_task: asyncio.Task[None] | None = None
        self.online = asyncio.Event()
        self.offline = asyncio.Event()
        self.offline.set()
        self._hello_received = asyncio.Event()
        self.udp = UdpChannel(device.on_audio, keeps_nonce_timestamp=device.profile.keeps_nonce_timestamp)
        """The conversation's audio channel (``udp.py``)."""
        self.subscribed = False  # the firmware never subscribes; py-xiaozhi does
        self.subacks = 0
        self._reboot_timer: asyncio.TimerHandle | None = None
        self.publishes_received = 0

    @property
    def settings(self) -> dict[str, Any]:
        """What flash holds for MQTT (the last OTA answer's ``mqtt``)."""
        return self.device.nvs.get("mqtt", {})

    async def start(self) -> None:
        """``MqttProtocol::StartMqttClient``: connect with what NVS holds; MqttRefused if refused.

        One client: a start while another is under way waits for it, and an online one stays.
        """
        async with self._starting:
            if self._writer is not None and not self._writer.is_closing() and self.online.is_set():
                return
            await self._start()

    async def _start(self) -> None:
        settings = self.settings
        endpoint = str(settings.get("endpoint", ""))
        if not endpoint:
            raise RuntimeError("MQTT endpoint is not specified")
        if self.device.profile.mqtt_per_conversation and not all(
            settings.get(key) for key in ("username", "password", "publish_topic")
        ):
            raise RuntimeError("MQTT配置不完整")  # py-xiaozhi's words: the configuration is incomplete
        host, _, port_text = endpoint.partition(":")
        port = int(port_text) if port_text else 8883
        if port == 8883:
            raise RuntimeError("port 8883 means TLS to the firmware; the simulator speaks plain TCP")
        keepalive = int(settings.get("keepalive", 240))
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            mqtt_connect(
                str(settings.get("client_id", "")),
                str(settings.get("username", "")),
                str(settings.get("password", "")),
                keepalive,
            )
        )
        await writer.drain()
        try:
            async with asyncio.timeout(10):
                kind, _flags, body = await read_packet(reader)
        except asyncio.IncompleteReadError, TimeoutError:
            writer.close()
            raise MqttRefused(-1) from None
        except asyncio.CancelledError:  # switched off while connecting
            writer.transport.abort()
            raise
        if kind != 2 or len(body) < 2 or body[1] != 0:
            writer.close()
            raise MqttRefused(body[1] if len(body) >= 2 else -1)
        self._reader_stream, self._writer = reader, writer
        topic = settings.get("subscribe_topic")
        if self.device.profile.mqtt_subscribes and isinstance(topic, str) and topic and topic != "null":
            writer.write(mqtt_subscribe(1, topic, 1))
            await writer.drain()
            self.subscribed = True
        self.offline.clear()
        self.online.set()
        self.device.closed.clear()
        self._mqtt_task = asyncio.create_task(self._mqtt_loop(), name=f"xiaozhi_sim mqtt {self.options.mac}")
        self._keepalive_task = asyncio.create_task(self._ping_loop(keepalive))

    async def _ping_loop(self, keepalive: int) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while self._writer is not None and keepalive > 0:
                await asyncio.sleep(keepalive)
                self._writer.write(PINGREQ)

    async def _mqtt_loop(self) -> None:
        reader = self._reader_stream
        assert reader is not None
        try:
            while True:
                kind, _flags, body = await read_packet(reader)
                if kind == 9:  # SUBACK
                    self.subacks += 1
                if kind != 3:  # PINGRESP, SUBACK: nothing more to do
                    continue
                self.publishes_received += 1
                (topic_length,) = struct.unpack_from(">H", body)
                payload = body[2 + topic_length :]  # QoS 0: no packet id
                await self._on_message(payload.decode(errors="replace"))
        except asyncio.IncompleteReadError, ConnectionError:
            pass
        finally:
            if self._reader_stream is reader:  # not a session that a newer one replaced
                self._lost()

    def _lost(self) -> None:
        if self._reboot_timer is not None:
            self._reboot_timer.cancel()  # (gone already: nothing left to abort)
            self._reboot_timer = None
        self.online.clear()
        self.offline.set()
        self.udp.close()
        self.device.closed.set()
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()

    async def _on_message(self, payload: str) -> None:
        """``mqtt_->OnMessage``: hello and goodbye are the transport's, the rest the application's."""
        try:
            msg = json.loads(payload)
        except ValueError:
            return
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            return
        if msg["type"] == "hello":
            self._parse_server_hello(msg)
        elif msg["type"] == "goodbye":
            session_id = msg.get("session_id")
            if self.device.profile.mqtt_per_conversation:  # a missing session id counts; MQTT goes too
                if not session_id or session_id == self.device.session_id:
                    self._close_channel(send_goodbye=False)
                    await self._disconnect()
            elif isinstance(session_id, str) and session_id == self.device.session_id:
                self._close_channel(send_goodbye=False)
            self.device.log_message(msg)
        else:
            await self.device.on_text(payload)

    # -- the audio channel --------------------------------------------------------------------

    def _parse_server_hello(self, msg: dict[str, Any]) -> None:
        """``ParseServerHello``: any invalid field and the hello is ignored (the device times out)."""
        if msg.get("transport") != "udp":
            return
        if isinstance(msg.get("session_id"), str):
            self.device.session_id = msg["session_id"]
        if not self.udp.configure(msg.get("udp")):
            return
        self.device.server_hello = msg
        self._hello_received.set()

    async def connect(self) -> None:
        """``OpenAudioChannel``: (re)connect MQTT if needed, hello v3, wait 10 s, open UDP."""
        if self._writer is None or self._writer.is_closing():
            await self.start()
        self.device.session_id = ""
        self._hello_received.clear()
        await self.send_json(self.hello())
        try:
            async with asyncio.timeout(self.options.hello_timeout):
                await self._hello_received.wait()
        except TimeoutError:
            raise HelloTimeout("no valid server hello") from None
        await self.udp.open()
        self.device.closed.clear()

    def hello(self) -> dict[str, Any]:
        """``MqttProtocol::GetHelloMessage`` (py-xiaozhi: its own, 20 ms frames)."""
        return mqtt_hello(self.device.profile, self.device.frame_ms)

    @property
    def is_connected(self) -> bool:
        """Whether a conversation's audio channel is open."""
        return self.udp.is_open and not self.device.closed.is_set()

    @property
    def audio_channel_open(self) -> bool:
        """Whether the UDP channel exists (``IsAudioChannelOpened``, without its 120 s timeout)."""
        return self.udp.is_open

    def _close_channel(self, *, send_goodbye: bool) -> None:
        """``CloseAudioChannel``: the UDP socket goes; the device is idle."""
        self.udp.close()
        self.device.device_state = "idle"
        if send_goodbye and self._writer is not None:
            goodbye = {"session_id": self.device.session_id, "type": "goodbye"}
            self._writer.write(mqtt_publish(self._topic(), json.dumps(goodbye).encode()))
        self.device.closed.set()

    async def goodbye(self) -> None:
        """The device ends the conversation (button, or its own timeout)."""
        self._close_channel(send_goodbye=True)
        if self._writer is not None:
            await self._writer.drain()
        if self.device.profile.mqtt_per_conversation:
            await self._disconnect()

    async def _disconnect(self) -> None:
        """A clean MQTT DISCONNECT (py-xiaozhi's ``mqtt_client.disconnect()``)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.write(DISCONNECT)
            writer.close()

    # -- what the conversation API sends --------------------------------------------------------

    def _topic(self) -> str:
        return str(self.settings.get("publish_topic", ""))

    async def send_json(self, msg: dict[str, Any]) -> None:
        """``SendText``: one PUBLISH to the publish topic."""
        if self._writer is None or self._writer.is_closing():
            raise ConnectionError("MQTT is not connected")
        self.device.sent.append(msg)
        self._writer.write(mqtt_publish(self._topic(), json.dumps(msg, ensure_ascii=False).encode()))
        await self._writer.drain()

    async def send_raw(self, frame: str | bytes) -> None:
        """Text as a PUBLISH; bytes are one Opus packet for the audio channel."""
        if isinstance(frame, bytes):
            self.udp.send_datagram(frame, self.udp.local_sequence * self.device.frame_ms)
        else:
            if self._writer is None:
                raise ConnectionError("MQTT is not connected")
            self._writer.write(mqtt_publish(self._topic(), frame.encode()))
            await self._writer.drain()

    async def send_mqtt_raw(self, data: bytes) -> None:
        """Any bytes on the MQTT socket (tests of hostile input)."""
        if self._writer is None:
            raise ConnectionError("MQTT is not connected")
        self._writer.write(data)
        await self._writer.drain()

    # -- ending ---------------------------------------------------------------------------------

    async def drop_mqtt(self) -> None:
        """The MQTT connection alone is cut (whatever the device is doing goes on, or hangs)."""
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None

    async def close(self) -> None:
        """Power off: the TCP connection and the UDP socket vanish without a word."""
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None
        for task in (self._mqtt_task, self._keepalive_task):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._mqtt_task, self._keepalive_task) if t is not None), return_exceptions=True
        )
        self._mqtt_task = self._keepalive_task = None
        self._lost()

    def lose_power(self) -> None:
        """The power goes: nothing more is read or sent (no ping), and the sockets stay open.

        As on the firmware (fwhost stopped with SIGSTOP): no FIN, no RST; the server learns of it
        only from the keepalive it handed out. ``close`` then ends the sockets.
        """
        for task in (self._mqtt_task, self._keepalive_task):
            if task is not None:
                task.cancel()
        self.udp.close()

    async def wait_offline(self) -> None:
        """Until the endpoint (or the network) ends the MQTT session."""
        await self.offline.wait()

    async def stay_online(self, reconnect_interval: float = RECONNECT_INTERVAL) -> None:
        """Connect, and reconnect ``reconnect_interval`` s after each disconnect, forever."""
        while True:
            try:
                await self.start()
            except (OSError, MqttRefused) as err:
                _LOGGER.warning("MQTT connect failed: %s", err)
            else:
                await self.wait_offline()
            await asyncio.sleep(reconnect_interval)

    def power_off_soon(self) -> None:
        """A restart: the MQTT session drops a moment later (the reply to ``reboot`` goes out first)."""
        self._reboot_timer = asyncio.get_running_loop().call_later(0.1, self._power_off_mqtt)

    def _power_off_mqtt(self) -> None:
        """``esp_restart``: the MQTT socket drops and its loop stops, wherever it waits.

        The upgrade tool that runs in the loop never returns: only this ends it.
        """
        self._reboot_timer = None
        if self._writer is not None:
            self._writer.transport.abort()
        if self._mqtt_task is not None and self._mqtt_task is not asyncio.current_task():
            self._mqtt_task.cancel()

    async def close_audio_channel(self) -> None:
        """``CloseAudioChannel`` before an upgrade: the UDP channel goes (with a goodbye); MQTT stays."""
        if self.udp.is_open:
            self._close_channel(send_goodbye=True)
