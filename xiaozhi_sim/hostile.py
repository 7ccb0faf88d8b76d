"""A curious neighbour: seeded generators of hostile frames and request bodies.

Deterministic for a seed, with no test framework, so the test suite (a fixed slice) and the
benchmark (100 000+ frames) send the same kind of input. Frames are valid ones bent out of
shape (fields of the wrong type, missing, extra), JSON of every shape, deep nesting, huge
strings, broken JSON, and binary frames whose headers lie about their size.

``attack_frame`` adds what a paired device in hostile hands sends on purpose: numbers beyond
64 bits or with thousands of digits (also as strings), ``NaN``/``Infinity``, notifications with
huge params, and tool lists whose names carry control, format and direction characters.
"""

from collections.abc import Iterator
import json
import random
import struct
from typing import Any

KEYS = (
    "type", "state", "mode", "text", "payload", "jsonrpc", "method", "id", "params", "result", "error",
    "version", "features", "audio_params", "transport", "session_id", "tools", "name", "parameters",
    "sub_type", "main_type", "mac_addr", "content", "isError", "nextCursor", "code", "message",
    "sample_rate", "frame_duration", "channels", "format", "mcp", "tool_name", "tool_input", "reason",
)  # fmt: skip

WORDS = (
    "hello", "mcp", "listen", "abort", "goodbye", "start", "stop", "detect", "auto", "manual", "realtime",
    "2.0", "mcp/registerTools", "tools/list", "tools/call", "initialize", "notifications/state_changed",
    "notifications/tools/list_changed", "mcp/tool/execute", "opus", "websocket", "control", "query",
    "remote", "local", "你好小智", "", "\u0000", "\ud7ff", "😀", "null",
)  # fmt: skip

VALID_FRAMES: tuple[dict[str, Any], ...] = (
    {
        "type": "hello",
        "version": 1,
        "features": {"mcp": True},
        "transport": "websocket",
        "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
    },
    {"session_id": "S", "type": "listen", "state": "detect", "text": "你好小智"},
    {"session_id": "S", "type": "abort", "reason": "wake_word_detected"},
    {"session_id": "S", "type": "mcp", "payload": {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}},
    {"session_id": "S", "type": "mcp", "payload": {"jsonrpc": "2.0", "id": 2, "error": {"message": "x"}}},
    {"session_id": "S", "type": "mcp", "payload": {"jsonrpc": "2.0", "method": "notifications/state_changed"}},
    {
        "jsonrpc": "2.0",
        "method": "mcp/registerTools",
        "params": {"mac_addr": "AA-BB-CC-DD-EE-FF", "tools": [{"name": "t", "parameters": {"type": "object"}}]},
        "id": "r1",
    },
    {"jsonrpc": "2.0", "id": "tool-call-1", "result": {"status": "success"}},
    {"jsonrpc": "2.0", "method": "tools/call", "id": 9, "params": {"name": "x"}},
)


NASTY_NAME_PARTS = ("\x00", "\x1b[31m", "\n", "\r", "\t", "\u202e", "\u200b", "\u2028", "\ufeff", " ", "\u00a0")


class Hostile:
    """Hostile input from one seed."""

    def __init__(self, seed: int = 0, max_string: int = 70_000) -> None:
        self.rng = random.Random(seed)
        self.max_string = max_string

    def string(self) -> str:
        """A word the protocol uses, random text, or a huge string."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.4:
            return rng.choice(WORDS)
        if roll < 0.97:
            return "".join(
                chr(rng.choice((rng.randrange(32, 127), rng.randrange(0x80, 0xD800)))) for _ in range(rng.randrange(12))
            )
        return rng.choice('x中"\\') * rng.randrange(1000, self.max_string)  # huge

    def number(self) -> int | float:
        """Small, huge, fractional and boundary numbers."""
        rng = self.rng
        return rng.choice(
            (rng.randrange(-5, 5), rng.randrange(-(2**70), 2**70), rng.uniform(-1e308, 1e308), 2**31 - 1, 2**31, -1)
        )

    def value(self, depth: int = 0) -> Any:
        """Any JSON value, nested up to a few levels."""
        rng = self.rng
        kinds = ("none", "bool", "number", "string", "list", "dict") if depth < 4 else ("none", "number", "string")
        kind = rng.choice(kinds)
        if kind == "none":
            return None
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "number":
            return self.number()
        if kind == "string":
            return self.string()
        if kind == "list":
            return [self.value(depth + 1) for _ in range(rng.randrange(4))]
        return {
            rng.choice(KEYS) if rng.random() < 0.8 else self.string(): self.value(depth + 1)
            for _ in range(rng.randrange(5))
        }

    def mutate(self, obj: Any, depth: int = 0) -> Any:
        """A valid frame with fields replaced, dropped or added, at any depth."""
        rng = self.rng
        if not isinstance(obj, dict) or depth > 3:
            return self.value(depth) if rng.random() < 0.5 else obj
        out = dict(obj)
        for key in list(out):
            roll = rng.random()
            if roll < 0.15:
                del out[key]
            elif roll < 0.45:
                out[key] = self.value(depth + 1)
            elif isinstance(out[key], dict):
                out[key] = self.mutate(out[key], depth + 1)
        if rng.random() < 0.3:
            out[rng.choice(KEYS)] = self.value(depth + 1)
        return out

    def text_frame(self) -> str:
        """One text frame."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.55:
            return json.dumps(self.mutate(rng.choice(VALID_FRAMES)), ensure_ascii=rng.random() < 0.5)
        if roll < 0.75:
            return json.dumps(self.value())
        if roll < 0.85:
            good = json.dumps(rng.choice(VALID_FRAMES))
            return good[: rng.randrange(len(good))]  # cut short
        if roll < 0.9:
            depth = rng.randrange(100, 50_000)
            return "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth
        if roll < 0.93:
            return self.string()
        if roll < 0.96:
            return self.attack_frame()
        return '{"type":"mcp","payload":' + json.dumps(self.value()) + "}"

    def big_number(self) -> str:
        """A JSON number literal no 64-bit store takes: 2**64, thousands of digits, out of float range."""
        rng = self.rng
        return rng.choice(
            (
                str(2**64),
                "-" + str(2**70),
                "9" * rng.randrange(4000, 6000),
                "1e999",
                "-1e999",
                "NaN",
                "Infinity",
                "0." + "1" * 5000,
            )
        )

    def nasty_name(self) -> str:
        """A tool or code name with control, format, direction or odd space characters in it."""
        rng = self.rng
        parts = [rng.choice(("self.", "tv_", "x", "灯")) for _ in range(rng.randrange(1, 4))]
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(NASTY_NAME_PARTS))
        return "".join(parts)

    def tool_list(self, count: int) -> list[dict[str, Any]]:
        """A ``tools/list`` page as a hostile device answers it: some names fine, many not."""
        rng = self.rng
        return [
            {
                "name": self.nasty_name() if rng.random() < 0.7 else f"self.ok_{i}",
                "description": self.string(),
                "inputSchema": {"type": "object", "properties": {}},
            }
            for i in range(count)
        ]

    def attack_frame(self) -> str:
        """One frame a paired device sends on purpose to hurt Home Assistant."""
        rng = self.rng
        number = self.big_number()
        roll = rng.random()
        if roll < 0.3:
            return f'{{"type":"hello","version":"{"9" * 5000}","audio_params":{{"sample_rate":{number}}}}}'
        if roll < 0.6:
            params = f'{{"n":{number},"blob":"{"x" * rng.randrange(1000, 30_000)}"}}'
            return f'{{"type":"mcp","payload":{{"jsonrpc":"2.0","method":"notifications/message","params":{params}}}}}'
        if roll < 0.8:
            return '{"type":"listen","state":"detect","text":' + json.dumps(self.nasty_name()) + f',"n":{number}}}'
        page = {"tools": self.tool_list(rng.randrange(1, 20))}
        return json.dumps({"type": "mcp", "payload": {"jsonrpc": "2.0", "id": rng.randrange(1, 40), "result": page}})

    def binary_frame(self) -> bytes:
        """One binary frame."""
        rng = self.rng
        payload = rng.randbytes(rng.randrange(0, 400))
        roll = rng.random()
        if roll < 0.3:  # v2 header with a lying size
            return struct.pack(">HHIII", rng.choice((2, 0, 9)), rng.randrange(3), 0, 0, rng.randrange(2**32)) + payload
        if roll < 0.6:  # v3 header with a lying size
            return struct.pack(">BBH", rng.randrange(3), 0, rng.randrange(2**16)) + payload
        if roll < 0.65:
            return rng.randbytes(rng.randrange(16_000, 20_000))  # over the audio frame limit
        return payload

    def frames(self, count: int, binary_share: float = 0.2) -> Iterator[str | bytes]:
        """``count`` frames, text and binary mixed."""
        for _ in range(count):
            yield self.binary_frame() if self.rng.random() < binary_share else self.text_frame()

    def ota_body(self) -> bytes:
        """An OTA request body: system info bent out of shape, or no JSON at all."""
        rng = self.rng
        base = {
            "version": 2,
            "mac_address": "cc:ba:97:04:92:94",
            "uuid": "u",
            "chip_model_name": "esp32s3",
            "application": {"name": "xiaozhi", "version": "2.4.2"},
            "board": {"type": "bread-compact-wifi", "name": "bread-compact-wifi"},
        }
        roll = rng.random()
        if roll < 0.6:
            return json.dumps(self.mutate(base)).encode()
        if roll < 0.8:
            return json.dumps(self.value()).encode()
        if roll < 0.9:
            return rng.randbytes(rng.randrange(200))  # not UTF-8, not JSON
        return json.dumps(base).encode()[: rng.randrange(100)]
