"""``python -m bench fuzz``: hostile frames through the protocol layer, counted and timed.

Every frame of ``xiaozhi_sim.hostile`` (mutated valid frames, JSON of every shape, deep nesting,
huge strings, broken JSON, binary frames with lying headers, and the attacks of a paired device in
hostile hands: numbers beyond 64 bits or with thousands of digits, huge notifications, tool names
with control characters) goes through a ``DeviceSession`` as a connection feeds it. The run fails
if anything but a clean refusal comes out, if anything handed on could not be stored by Home
Assistant (its JSON is orjson: 64-bit integers, no NaN), or if a tool name with a control,
format or direction character is accepted.
"""

import asyncio
from collections import Counter
import json
import logging
import time
from typing import Any

from homeassistant.helpers.json import json_bytes

from custom_components.xiaozhi_local.protocol.mcp import McpError, parse_tool, safe_name
from custom_components.xiaozhi_local.protocol.messages import ClientHello, ControlMessage
from custom_components.xiaozhi_local.protocol.register import Registration
from custom_components.xiaozhi_local.protocol.session import DeviceSession, OnceLogger
from xiaozhi_sim.hostile import Hostile


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
        ]
    )


if __name__ == "__main__":
    print(asyncio.run(run_fuzz(2000, 0)))
