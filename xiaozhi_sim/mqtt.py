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

With ``flavor="py-xiaozhi"`` it is py-xiaozhi's MQTT mode (``src/protocols/mqtt_protocol.py``,
``mqtt_udp.py``, ``mqtt_crypto.py``) instead: it connects only when a conversation starts
(``connect`` opens MQTT, subscribes, then says hello at once) and a ``goodbye`` either way ends the
MQTT session too (``_handle_goodbye`` disconnects); it refuses an ``mqtt`` object missing its user
name, password or publish topic; it subscribes (QoS 1) to ``subscribe_topic`` unless that is missing
or ``"null"``; its hello announces 20 ms frames; its uplink header keeps bytes 8–11 of the nonce (no
timestamp); it ignores the downlink header beyond using it as the counter block.

This file has its own MQTT and UDP code, written from the clients, not the server's.
"""

import asyncio
import contextlib
import json
import logging
import struct
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .device import HelloTimeout, SimulatedDevice, SimulatorOptions

_LOGGER = logging.getLogger(__name__)

RECONNECT_INTERVAL = 60.0
"""``MQTT_RECONNECT_INTERVAL_MS``: seconds before an idle device reconnects."""


class MqttRefused(Exception):
    """The endpoint answered CONNECT with a non-zero return code (or closed instead)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"CONNACK return code {code}")
        self.code = code


def remaining_length(length: int) -> bytes:
    """MQTT's variable-length encoding of a packet's remaining length."""
    out = bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out)


def _str(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">H", len(data)) + data


def mqtt_connect(client_id: str, username: str, password: str, keepalive: int) -> bytes:
    """CONNECT as esp-mqtt sends it (MQTT 3.1.1, clean session, user name and password)."""
    flags = 0x02 | (0x80 if username else 0) | (0x40 if password else 0)
    body = _str("MQTT") + bytes([4, flags]) + struct.pack(">H", keepalive) + _str(client_id)
    if username:
        body += _str(username)
    if password:
        body += _str(password)
    return bytes([0x10]) + remaining_length(len(body)) + body


def mqtt_subscribe(packet_id: int, topic: str, qos: int) -> bytes:
    """SUBSCRIBE to one topic (paho, as py-xiaozhi uses it)."""
    body = struct.pack(">H", packet_id) + _str(topic) + bytes([qos])
    return bytes([0x82]) + remaining_length(len(body)) + body


def mqtt_publish(topic: str, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH."""
    body = _str(topic) + payload
    return bytes([0x30]) + remaining_length(len(body)) + body


PINGREQ = bytes([0xC0, 0])
DISCONNECT = bytes([0xE0, 0])


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """(type, flags, body) of the next packet; IncompleteReadError at the end."""
    first = (await reader.readexactly(1))[0]
    length, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first >> 4, first & 0x0F, await reader.readexactly(length)


def aes_ctr(key: bytes, counter_block: bytes, data: bytes) -> bytes:
    """AES-128-CTR over ``data``, the 16-byte header as the counter (``CryptAesCtr``)."""
    context = Cipher(algorithms.AES(key), modes.CTR(counter_block)).encryptor()
    return context.update(data) + context.finalize()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, device: MqttDevice) -> None:
        self.device = device

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.device.on_datagram(data)


class MqttDevice(SimulatedDevice):
    """A stock device that speaks both transports, each boot the one its OTA answer picks.

    ``InitializeProtocol``: MQTT+UDP when the answer has ``mqtt`` (online from boot, audio over
    UDP), else WebSocket when it has ``websocket`` (a socket per conversation), else MQTT with
    what flash holds. Flash keeps the settings of earlier answers either way.
    """

    def __init__(self, options: SimulatorOptions, mqtt: dict[str, Any] | None = None) -> None:
        options.protocol_version = 1  # audio packets travel bare inside the datagrams
        super().__init__(options)
        if mqtt is not None:
            self.nvs["mqtt"] = dict(mqtt)
        self._reader_stream: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._mqtt_task: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self._keepalive_task: asyncio.Task[None] | None = None
        self.online = asyncio.Event()
        self.offline = asyncio.Event()
        self.offline.set()
        self._hello_received = asyncio.Event()
        self._udp: asyncio.DatagramTransport | None = None
        self._key = b""
        self._nonce = b""
        self._udp_address: tuple[str, int] | None = None
        self.local_sequence = 0
        self.remote_sequence = 0
        self.subscribed = False  # the firmware never subscribes; py-xiaozhi does
        self.subacks = 0
        self.datagrams_dropped = 0
        self._reboot_timer: asyncio.TimerHandle | None = None
        self.publishes_received = 0
        self.transport = "mqtt"
        """What this boot chose: ``mqtt``, or ``websocket`` (then it behaves as ``SimulatedDevice``)."""

    # -- boot and the MQTT session ----------------------------------------------------------

    async def boot_mqtt(self, ota_url: str, **kwargs: Any) -> dict[str, Any]:
        """The OTA check, then the transport it chose (``mqtt`` wins, as in ``InitializeProtocol``)."""
        self._boot_again = lambda: self.boot_mqtt(ota_url, **kwargs)
        answer = await self.check_ota(ota_url, **kwargs)
        if "mqtt" not in answer and isinstance(answer.get("websocket"), dict):
            self.transport = "websocket"  # flash keeps the MQTT settings; this boot does not use them
            self.use_websocket_settings()
            return answer
        self.transport = "mqtt"
        if self.options.flavor != "py-xiaozhi":  # py-xiaozhi connects when a conversation starts
            await self.start()
        return answer

    @property
    def on_websocket(self) -> bool:
        """Whether this boot chose WebSocket (the device then opens a socket per conversation)."""
        return self.transport == "websocket"

    @property
    def uses_mqtt(self) -> bool:
        """Whether flash holds an MQTT endpoint."""
        return bool(self.nvs.get("mqtt", {}).get("endpoint"))

    async def start(self) -> None:
        """``MqttProtocol::StartMqttClient``: connect with what NVS holds; MqttRefused if refused.

        One client: a start while another is under way waits for it, and an online one stays.
        """
        async with self._starting:
            if self._writer is not None and not self._writer.is_closing() and self.online.is_set():
                return
            await self._start()

    async def _start(self) -> None:
        settings = self.nvs.get("mqtt", {})
        endpoint = str(settings.get("endpoint", ""))
        if not endpoint:
            raise RuntimeError("MQTT endpoint is not specified")
        py_xiaozhi = self.options.flavor == "py-xiaozhi"
        if py_xiaozhi and not all(settings.get(key) for key in ("username", "password", "publish_topic")):
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
        if py_xiaozhi and isinstance(topic, str) and topic and topic != "null":
            writer.write(mqtt_subscribe(1, topic, 1))
            await writer.drain()
            self.subscribed = True
        self.offline.clear()
        self.online.set()
        self.closed.clear()
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
        self._close_udp()
        self.closed.set()
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
            if self.options.flavor == "py-xiaozhi":  # a missing session id counts; MQTT goes too
                if not session_id or session_id == self.session_id:
                    self._close_channel(send_goodbye=False)
                    await self._disconnect()
            elif isinstance(session_id, str) and session_id == self.session_id:
                self._close_channel(send_goodbye=False)
            self._logged_message(msg)
        else:
            await self._on_text(payload)

    # -- the audio channel --------------------------------------------------------------------

    def _parse_server_hello(self, msg: dict[str, Any]) -> None:
        """``ParseServerHello``: any invalid field and the hello is ignored (the device times out)."""
        if msg.get("transport") != "udp":
            return
        if isinstance(msg.get("session_id"), str):
            self.session_id = msg["session_id"]
        udp = msg.get("udp")
        if not isinstance(udp, dict):
            return
        server, port, key, nonce = udp.get("server"), udp.get("port"), udp.get("key"), udp.get("nonce")
        if not isinstance(server, str) or not isinstance(port, int) or not 0 < port <= 65535:
            return
        try:
            key_bytes, nonce_bytes = bytes.fromhex(str(key)), bytes.fromhex(str(nonce))
        except ValueError:
            return
        if len(key_bytes) != 16 or len(nonce_bytes) != 16:
            return
        self._key, self._nonce = key_bytes, nonce_bytes
        self._udp_address = (server, port)
        self.local_sequence = self.remote_sequence = 0
        self.server_hello = msg
        self._hello_received.set()

    async def connect(self) -> None:
        """``OpenAudioChannel``: (re)connect MQTT if needed, hello v3, wait 10 s, open UDP."""
        if self.on_websocket:
            await super().connect()
            return
        self._check_not_upgrading()
        if self._writer is None or self._writer.is_closing():
            await self.start()
        self.session_id = ""
        self.server_hello = None
        self._hello_received.clear()
        await self.send_json(self.hello())
        try:
            async with asyncio.timeout(self.options.hello_timeout):
                await self._hello_received.wait()
        except TimeoutError:
            raise HelloTimeout("no valid server hello") from None
        assert self._udp_address is not None
        self._close_udp()
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Udp(self), remote_addr=self._udp_address
        )
        self._udp = transport
        self.closed.clear()

    def hello(self) -> dict[str, Any]:
        """``MqttProtocol::GetHelloMessage`` (py-xiaozhi: its own, 20 ms frames)."""
        if self.on_websocket:
            return super().hello()
        if self.options.flavor == "py-xiaozhi":
            return {
                "type": "hello",
                "version": 3,
                "features": {"mcp": True},
                "transport": "udp",
                "audio_params": {
                    "format": "opus",
                    "sample_rate": 16000,
                    "channels": 1,
                    "frame_duration": self.frame_ms,
                },
            }
        return {
            "type": "hello",
            "version": 3,
            "transport": "udp",
            "features": {"mcp": True, "glyph_push": True},
            "text_font": {"bundle": "noto-v1", "charset": "common", "size": 20, "bpp": 4},
            "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": self.frame_ms},
        }

    @property
    def audio_channel_open(self) -> bool:
        """Whether the UDP channel exists (``IsAudioChannelOpened``, without its 120 s timeout)."""
        return self._udp is not None

    def _close_udp(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None

    def _close_channel(self, *, send_goodbye: bool) -> None:
        """``CloseAudioChannel``: the UDP socket goes; the device is idle."""
        self._close_udp()
        self.device_state = "idle"
        if send_goodbye and self._writer is not None:
            self._writer.write(
                mqtt_publish(self._topic(), json.dumps({"session_id": self.session_id, "type": "goodbye"}).encode())
            )
        self.closed.set()

    async def goodbye(self) -> None:
        """The device ends the conversation (button, or its own timeout)."""
        self._close_channel(send_goodbye=True)
        if self._writer is not None:
            await self._writer.drain()
        if self.options.flavor == "py-xiaozhi":
            await self._disconnect()

    async def _disconnect(self) -> None:
        """A clean MQTT DISCONNECT (py-xiaozhi's ``mqtt_client.disconnect()``)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.write(DISCONNECT)
            writer.close()

    def send_datagram(self, payload: bytes, timestamp: int = 0) -> bytes:
        """``SendAudio``: the nonce with length, timestamp and sequence written in; returns it."""
        if self._udp is None:
            raise ConnectionError("the audio channel is closed")
        datagram = self.seal(payload, timestamp)
        self._udp.sendto(datagram)
        return datagram

    def seal(self, payload: bytes, timestamp: int = 0) -> bytes:
        """The next uplink datagram, as ``SendAudio`` builds it, without sending it (its sequence is used)."""
        self.local_sequence += 1
        header = bytearray(self._nonce)
        struct.pack_into(">H", header, 2, len(payload))
        if self.options.flavor != "py-xiaozhi":  # py-xiaozhi leaves the nonce's bytes 8–11 there
            struct.pack_into(">I", header, 8, timestamp & 0xFFFFFFFF)
        struct.pack_into(">I", header, 12, self.local_sequence)
        return bytes(header) + aes_ctr(self._key, bytes(header), payload)

    async def rebind_udp(self) -> None:
        """A NAT on the way maps the device's UDP socket to a new port (same address, same session)."""
        assert self._udp_address is not None
        self._close_udp()
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Udp(self), remote_addr=self._udp_address
        )
        self._udp = transport

    def send_udp_raw(self, datagram: bytes) -> None:
        """Any datagram to the server's audio port (tests of hostile input)."""
        if self._udp is None:
            raise ConnectionError("the audio channel is closed")
        self._udp.sendto(datagram)

    def on_datagram(self, data: bytes) -> None:
        """The UDP ``OnMessage`` checks, in the firmware's order; then the speaker."""
        if len(data) < 16 or data[0] != 0x01:
            self.datagrams_dropped += 1
            return
        length, sequence = struct.unpack_from(">H", data, 2)[0], struct.unpack_from(">I", data, 12)[0]
        if len(data) != 16 + length or sequence <= self.remote_sequence:
            self.datagrams_dropped += 1
            return
        self.remote_sequence = sequence
        self._on_audio(aes_ctr(self._key, data[:16], data[16:]))

    # -- what the conversation API sends --------------------------------------------------------

    def _topic(self) -> str:
        return str(self.nvs.get("mqtt", {}).get("publish_topic", ""))

    async def send_json(self, msg: dict[str, Any]) -> None:
        """``SendText``: one PUBLISH to the publish topic."""
        if self.on_websocket:
            await super().send_json(msg)
            return
        if self._writer is None or self._writer.is_closing():
            raise ConnectionError("MQTT is not connected")
        self.sent.append(msg)
        self._writer.write(mqtt_publish(self._topic(), json.dumps(msg, ensure_ascii=False).encode()))
        await self._writer.drain()

    async def send_raw(self, frame: str | bytes) -> None:
        """Text as a PUBLISH; bytes are one Opus packet for the audio channel."""
        if self.on_websocket:
            await super().send_raw(frame)
            return
        if isinstance(frame, bytes):
            self.send_datagram(frame, self.local_sequence * self.frame_ms)
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

    async def drop(self) -> None:
        """Power off: the TCP connection and the UDP socket vanish without a word."""
        await super().drop()  # a WebSocket conversation, and a reboot under way
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None
        for task in (self._mqtt_task, self._keepalive_task, self._reader):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._mqtt_task, self._keepalive_task) if t is not None), return_exceptions=True
        )
        self._mqtt_task = self._keepalive_task = None
        self._lost()

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

    def _schedule_reboot(self) -> None:
        if self.on_websocket:
            super()._schedule_reboot()
            return
        self.rebooted = True
        self.restarts.set()
        self.device_state = "idle"
        self._reboot_timer = asyncio.get_running_loop().call_later(0.1, self._power_off_mqtt)
        self._restart_later()

    def _power_off_mqtt(self) -> None:
        """``esp_restart``: the MQTT socket drops and its loop stops, wherever it waits.

        The upgrade tool that runs in the loop never returns: only this ends it.
        """
        self._reboot_timer = None
        if self._writer is not None:
            self._writer.transport.abort()
        if self._mqtt_task is not None and self._mqtt_task is not asyncio.current_task():
            self._mqtt_task.cancel()

    async def _close_audio_channel(self) -> None:
        """``CloseAudioChannel`` before an upgrade: the UDP channel goes (with a goodbye); MQTT stays."""
        if self.on_websocket:
            await super()._close_audio_channel()
            return
        if self._udp is not None:
            self._close_channel(send_goodbye=True)
