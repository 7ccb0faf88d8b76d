"""``python -m bench fuzz``: hostile frames through the protocol layer, counted and timed.

Every frame of ``xiaozhi_sim.hostile`` (mutated valid frames, JSON of every shape, deep nesting,
huge strings, broken JSON, binary frames with lying headers, and the attacks of a paired device in
hostile hands: numbers beyond 64 bits or with thousands of digits, huge notifications, tool names
with control characters) goes through a ``DeviceSession`` as a connection feeds it. The run fails
if anything but a clean refusal comes out, if anything handed on could not be stored by Home
Assistant (its JSON is orjson: 64-bit integers, no NaN), or if a tool name with a control,
format or direction character is accepted.

The MQTT+UDP wire goes through the same: packets of the firmware and py-xiaozhi, mutated and cut at
random points, through ``PacketDecoder`` and the parser of their type; datagrams of a session,
mutated, through ``AudioChannel.open``. Only ``MqttError`` and ``UdpError`` may come out.
"""

import asyncio
from collections import Counter
from collections.abc import Callable
import json
import logging
import random
import struct
import time
from typing import Any

from homeassistant.helpers.json import json_bytes

from custom_components.xiaozhi_local.protocol import mqtt as codec
from custom_components.xiaozhi_local.protocol.logs import OnceLogger
from custom_components.xiaozhi_local.protocol.mcp import McpError, parse_tool, safe_name
from custom_components.xiaozhi_local.protocol.messages import ClientHello, ControlMessage
from custom_components.xiaozhi_local.protocol.register import Registration
from custom_components.xiaozhi_local.protocol.session import DeviceSession
from custom_components.xiaozhi_local.protocol.udp import AudioChannel, UdpError
from xiaozhi_sim.hostile import Hostile
from xiaozhi_sim.mqtt_wire import DISCONNECT, PINGREQ, aes_ctr, mqtt_connect, mqtt_publish, mqtt_subscribe


class _Handler:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.unstorable = 0  # handed on, but Home Assistant's JSON could not store or send it

    def _check(self, value: Any) -> None:
        try:
            json_bytes(value)
        except TypeError, ValueError:
            self.unstorable += 1

    def on_hello(self, hello: ClientHello) -> None:
        self.counts["hello"] += 1
        self._check(hello.features)

    def on_notification(self, method: str, params: Any) -> None:
        self.counts["notification"] += 1
        self._check(params)

    def on_control(self, message: ControlMessage) -> None:
        self.counts["control"] += 1
        self._check(message.data)

    def on_audio(self, data: bytes) -> None:
        self.counts["audio"] += 1

    def on_register(self, registration: Registration) -> None:
        self.counts["registration"] += 1

    def on_tool_error(self, tool: str, error: McpError) -> None:
        self.counts["tool_error"] += 1


async def run_fuzz(frames: int, seed: int) -> dict[str, Any]:
    """Feed ``frames`` hostile frames; returns counts, crashes, refusals by kind and the rate."""
    logging.getLogger("custom_components.xiaozhi_local").setLevel(logging.CRITICAL)  # once-per-kind noise
    handler = _Handler()
    replies: list[str] = []

    async def send_text(text: str) -> None:
        replies.append(text)

    log = OnceLogger("fuzz")
    crashes: Counter[str] = Counter()
    hostile = Hostile(seed)
    sessions = 0
    session = DeviceSession("cc:ba:97:04:92:94", send_text, handler, log=log)
    started = time.perf_counter()
    for index, frame in enumerate(hostile.frames(frames)):
        if index % 500 == 0:  # a new connection now and then: frames before a hello too
            session.close()
            session = DeviceSession("cc:ba:97:04:92:94", send_text, handler, log=log)
            sessions += 1
        try:
            if isinstance(frame, bytes):
                session.handle_binary(frame)
            else:
                await session.handle_text(frame)
        except Exception as err:  # noqa: BLE001 - this is what the run counts
            crashes[type(err).__name__] += 1
    elapsed = time.perf_counter() - started
    session.close()
    # Hostile tool lists: not one unsafe name may be accepted (it would reach entity ids and names).
    tools_seen = unsafe_accepted = 0
    for _ in range(max(1, frames // 100)):
        for raw in hostile.tool_list(20):
            tools_seen += 1
            try:
                tool = parse_tool(raw)
            except ValueError:
                continue
            unsafe_accepted += not safe_name(tool.name) or any(not ch.isprintable() for ch in tool.name)
    bad_replies = 0
    for text in replies:
        try:
            reply = json.loads(text)
            payload = reply.get("payload", reply)
            if reply.get("type") != "hello" and payload.get("jsonrpc") != "2.0":
                bad_replies += 1
        except ValueError, AttributeError:
            bad_replies += 1
    return {
        "frames": frames,
        "sessions": sessions,
        "seconds": elapsed,
        "crashes": dict(crashes),
        "refusals": dict(log.counts.most_common()),
        "handled": dict(handler.counts),
        "replies": len(replies),
        "bad_replies": bad_replies,
        "unstorable": handler.unstorable,
        "tools_seen": tools_seen,
        "unsafe_tools_accepted": unsafe_accepted,
        "wire": run_wire_fuzz(frames, seed),
    }


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """One hostile variant of ``data``: bytes flipped, cut, repeated, lengths that lie, or noise."""
    out = bytearray(data)
    match rng.randrange(6):
        case 0:
            for _ in range(rng.randint(1, 4)):
                if out:
                    out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        case 1:
            del out[rng.randrange(len(out) + 1) :]
        case 2:
            out += out[: rng.randrange(len(out) + 1)]
        case 3:
            if len(out) > 1:  # the length field or the first string's length lies
                out[1 if rng.random() < 0.5 else min(len(out) - 1, 3)] = rng.randrange(256)
        case 4:
            out = bytearray(rng.randbytes(rng.randrange(1, 64)))
        case _:
            out[:1] = bytes([rng.randrange(256)])
    return bytes(out)


def _parse(packet: codec.Packet) -> None:
    """What the MQTT endpoint does with a packet of each type."""
    match packet.type:
        case codec.PacketType.CONNECT:
            codec.parse_connect(packet.body)
        case codec.PacketType.PUBLISH:
            codec.parse_publish(packet)
        case codec.PacketType.SUBSCRIBE:
            codec.parse_subscribe(packet.body)
        case codec.PacketType.UNSUBSCRIBE | codec.PacketType.PUBACK:
            codec.parse_packet_id(packet.body)


def run_wire_fuzz(count: int, seed: int) -> dict[str, Any]:
    """``count`` hostile MQTT byte streams and as many UDP datagrams; what came out of each."""
    rng = random.Random(seed)
    valid = [
        mqtt_connect("GID_test@@@cc_ba_97_04_92_94@@@uuid", "cc:ba:97:04:92:94", "t" * 43, 240),
        mqtt_publish("device-server", b'{"type":"hello","version":3,"transport":"udp"}'),
        mqtt_subscribe(1, "devices/p2p/cc_ba_97_04_92_94", 1),
        PINGREQ,
        DISCONNECT,
        codec.publish("devices/p2p/x", b"{}"),
        codec.acknowledge(codec.PacketType.PUBACK, 7),
        bytes([0xA2, 4, 0, 9, 0, 0]),  # UNSUBSCRIBE
    ]
    outcomes: Counter[str] = Counter()
    crashes: Counter[str] = Counter()

    def run(action: Callable[[], object], refused: type[Exception]) -> None:
        try:
            action()
            outcomes["accepted"] += 1
        except refused as err:
            outcomes[f"refused {getattr(err, 'kind', type(err).__name__)}"] += 1
        except Exception as err:  # noqa: BLE001 - this is what the run counts
            crashes[type(err).__name__] += 1

    started = time.perf_counter()
    for _ in range(count):
        stream = b"".join(
            _mutate(rng, rng.choice(valid)) if rng.random() < 0.7 else rng.choice(valid) for _ in range(3)
        )
        cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(4)))

        def feed(stream: bytes = stream, cuts: list[int] = cuts) -> None:
            decoder = codec.PacketDecoder()
            for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
                for packet in decoder.feed(stream[start:end]):
                    _parse(packet)

        run(feed, codec.MqttError)
    mqtt_s = time.perf_counter() - started
    mqtt_outcomes, outcomes = outcomes, Counter()
    channel = AudioChannel()
    payload = bytes([0x58]) + rng.randbytes(60)  # an Opus packet of one 60 ms frame (TOC config 11)
    started = time.perf_counter()
    for sequence in range(1, count + 1):
        header = bytearray(channel.nonce)
        struct.pack_into(">H", header, 2, len(payload))
        struct.pack_into(">I", header, 12, sequence)
        datagram = bytes(header) + aes_ctr(channel.key, bytes(header), payload)
        hostile = _mutate(rng, datagram) if rng.random() < 0.9 else datagram
        run(lambda hostile=hostile: channel.open(hostile), UdpError)  # type: ignore[misc]
    udp_s = time.perf_counter() - started
    return {
        "count": count,
        "mqtt": dict(mqtt_outcomes.most_common()),
        "udp": dict(outcomes.most_common()),
        "crashes": dict(crashes),
        "mqtt_per_s": count / mqtt_s,
        "udp_per_s": count / udp_s,
    }


def fuzz_report(result: dict[str, Any], machine: str, date: str) -> str:
    refused = sum(result["refusals"].values())
    kinds = ", ".join(f"{kind} {count}" for kind, count in list(result["refusals"].items())[:8])
    handled = ", ".join(f"{kind} {count}" for kind, count in sorted(result["handled"].items()))
    return "\n".join(
        [
            "## Hostile input (`python -m bench fuzz`)",
            "",
            f"Machine: {machine}. Measured {date}.",
            "",
            "| Figure | Result | Goal |",
            "|---|---|---|",
            f"| Generated frames through the protocol layer | {result['frames']:,} in {result['sessions']} sessions, "
            f"{result['frames'] / result['seconds']:,.0f} frames/s | ≥ 100 000 |",
            f"| Exceptions out of the session | {sum(result['crashes'].values())} {result['crashes'] or ''} | 0 |",
            f"| Replies that are not valid JSON-RPC / hello | {result['bad_replies']} of {result['replies']} | 0 |",
            f"| Handed on but not storable by HA (2**64, 5000 digits, NaN) | {result['unstorable']} | 0 |",
            f"| Unsafe tool names accepted (NUL, ESC, newline, RTL …) | {result['unsafe_tools_accepted']} of "
            f"{result['tools_seen']:,} hostile tools | 0 |",
            f"| Refused cleanly, by kind (top 8) | {refused:,}: {kinds} | |",
            f"| Accepted and handed on | {handled} | |",
            *wire_rows(result["wire"]),
        ]
    )


def wire_rows(wire: dict[str, Any]) -> list[str]:
    """The MQTT+UDP rows of the report."""

    def top(outcomes: dict[str, int]) -> str:
        return ", ".join(f"{kind} {count:,}" for kind, count in list(outcomes.items())[:6])

    return [
        f"| Hostile MQTT streams (3 packets each, mutated, cut at random points) through the decoder and "
        f"parsers | {wire['count']:,}, {wire['mqtt_per_s']:,.0f}/s: {top(wire['mqtt'])} | |",
        f"| Hostile UDP datagrams through the session's audio guard | {wire['count']:,}, "
        f"{wire['udp_per_s']:,.0f}/s: {top(wire['udp'])} | |",
        f"| Exceptions other than `MqttError` / `UdpError` | {sum(wire['crashes'].values())} "
        f"{wire['crashes'] or ''} | 0 |",
    ]


if __name__ == "__main__":
    print(asyncio.run(run_fuzz(2000, 0)))
