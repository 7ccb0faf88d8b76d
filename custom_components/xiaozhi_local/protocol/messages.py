"""Text frames between a xiaozhi device and its server: parse, validate, build.

Everything here is pure: a frame comes in as text, leaves as a typed message or a FrameError
saying what is wrong with it. Nothing raises on bad input.
"""

from dataclasses import dataclass, field
import json
import math
from typing import Any, Final
import uuid

PROTOCOL_VERSIONS: Final = (1, 2, 3)
"""Binary framing versions a device may ask for (``Protocol-Version``)."""

FRAME_DURATIONS_MS: Final = (5, 10, 20, 40, 60, 80, 100, 120)
"""Opus frame durations the firmware's decoder accepts."""

DOWNLINK_SAMPLE_RATE: Final = 24000
"""Rate of the Opus audio we send (the firmware's default and the quality TTS engines give)."""

DOWNLINK_FRAME_DURATION_MS: Final = 60

INT_RANGE: Final = (-(2**63), 2**63 - 1)
"""Integers a device may send as integers: what Home Assistant's JSON (orjson) can store again."""


def _bounded_int(text: str) -> int | float | None:
    """A JSON integer: as it is within ``INT_RANGE``; a float beyond (the digit limit never trips)."""
    if len(text) <= 20:
        value = int(text)
        if INT_RANGE[0] <= value <= INT_RANGE[1]:
            return value
    return _bounded_float(text)


def _bounded_float(text: str) -> float | None:
    """A JSON number with a fraction or exponent; None for one out of float range (``1e999``)."""
    value = float(text)
    return value if math.isfinite(value) else None


def _no_constant(_name: str) -> None:
    """``NaN``, ``Infinity``: not JSON; read as null."""


def loads(text: str | bytes | bytearray) -> Any:
    """JSON from a device, every number bounded so that Home Assistant can store and send it again.

    A ``2**64`` or a 5 000-digit number cannot break a later save of the hub's store or the
    recorder: integers beyond 64 bits become floats, numbers beyond float range and ``NaN``
    become null. Raises ValueError (also for bad unicode) and RecursionError like ``json.loads``.
    """
    return json.loads(text, parse_int=_bounded_int, parse_float=_bounded_float, parse_constant=_no_constant)


class FrameError(Exception):
    """A frame that cannot be used. ``kind`` groups errors for once-per-kind logging."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AudioParams:
    """``audio_params`` of a hello."""

    format: str = "opus"
    sample_rate: int = 16000
    channels: int = 1
    frame_duration: int = 60


@dataclass(frozen=True, slots=True)
class ClientHello:
    """A client's hello: the stock firmware's full one or a minimal ``{"type":"hello"}``.

    Clients differ (types, missing or extra keys), so a hello is never refused for a field:
    a field that cannot be used takes its default and is named in ``problems``.
    """

    version: int | None = None
    transport: str | None = None
    features: dict[str, Any] = field(default_factory=dict)
    audio_params: AudioParams = AudioParams()
    problems: tuple[str, ...] = ()

    @property
    def supports_mcp(self) -> bool:
        """Whether the client serves MCP tools over the ``mcp`` envelope."""
        return self.features.get("mcp") is True


@dataclass(frozen=True, slots=True)
class McpEnvelope:
    """A JSON-RPC message from the client: ``{"type":"mcp","payload":{…}}``, or bare (``bare``).

    Clients of the ``mcp/registerTools`` dialect send JSON-RPC objects without the envelope.
    """

    payload: dict[str, Any]
    bare: bool = False


@dataclass(frozen=True, slots=True)
class ControlMessage:
    """Any other typed message (``listen``, ``abort``, ``goodbye`` …), validated only for ``type``."""

    type: str
    data: dict[str, Any]


type ClientMessage = ClientHello | McpEnvelope | ControlMessage


def _int(value: Any) -> int | None:
    """An integer, also from a numeric string (``"16000"``); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and (digits := value.strip()).isascii() and digits.isdigit() and len(digits) <= 9:
        return int(digits)
    return None


def _int_field(
    obj: dict[str, Any], key: str, default: int, problems: list[str], allowed: tuple[int, ...] | None = None
) -> int:
    if key not in obj:
        return default
    value = _int(obj[key])
    if value is None or (allowed is not None and value not in allowed):
        problems.append(f"{key} {repr(obj[key])[:40]} is not usable")
        return default
    return value


def parse_audio_params(raw: Any, problems: list[str]) -> AudioParams:
    """``audio_params``; missing or unusable keys take the firmware's defaults (named in ``problems``)."""
    if raw is None:
        return AudioParams()
    if not isinstance(raw, dict):
        problems.append("audio_params is not an object")
        return AudioParams()
    fmt = raw.get("format", "opus")
    if fmt != "opus":
        problems.append(f"audio format {fmt!r} is not opus; opus is used")
    sample_rate = _int_field(raw, "sample_rate", 16000, problems)
    if not 8000 <= sample_rate <= 48000:
        problems.append(f"sample_rate {sample_rate} out of range")
        sample_rate = 16000
    return AudioParams(
        format="opus",
        sample_rate=sample_rate,
        channels=_int_field(raw, "channels", 1, problems, (1, 2)),
        frame_duration=_int_field(raw, "frame_duration", 60, problems, FRAME_DURATIONS_MS),
    )


def parse_hello(obj: dict[str, Any]) -> ClientHello:
    """A client hello (``type`` already checked). Never refused: see ``ClientHello.problems``."""
    problems: list[str] = []
    version: int | None = None
    if "version" in obj:
        version = _int_field(obj, "version", 1, problems, PROTOCOL_VERSIONS)
    transport = obj.get("transport")
    if transport is not None and not isinstance(transport, str):
        problems.append("transport is not a string")
        transport = None
    features = obj.get("features", {})
    if not isinstance(features, dict):
        problems.append("features is not an object")
        features = {}
    return ClientHello(
        version=version,
        transport=transport,
        features=features,
        audio_params=parse_audio_params(obj.get("audio_params"), problems),
        problems=tuple(problems),
    )


def parse_client_frame(text: str) -> ClientMessage:
    """Parse one text frame from a client. Raises FrameError (never anything else)."""
    try:
        obj = loads(text)
    except ValueError as err:  # JSONDecodeError and bad unicode escapes
        raise FrameError("not_json", str(err)) from None
    except RecursionError:
        raise FrameError("not_json", "nested too deeply") from None
    if not isinstance(obj, dict):
        raise FrameError("not_object", f"a JSON {type(obj).__name__} is not a message")
    msg_type = obj.get("type")
    if msg_type is None:
        if "jsonrpc" in obj or "method" in obj:
            return McpEnvelope(obj, bare=True)  # the registerTools dialect: JSON-RPC without envelope
        raise FrameError("no_type", "message has no type")
    if not isinstance(msg_type, str):
        raise FrameError("bad_field", "type must be a string")
    if msg_type == "hello":
        return parse_hello(obj)
    if msg_type == "mcp":
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            raise FrameError("bad_field", "mcp payload must be an object")
        return McpEnvelope(payload)
    return ControlMessage(msg_type, obj)


def new_session_id() -> str:
    """A session id the firmware can echo unescaped (a plain UUID)."""
    return str(uuid.uuid4())


def server_hello(session_id: str, sample_rate: int = DOWNLINK_SAMPLE_RATE) -> dict[str, Any]:
    """The server hello. ``transport`` is always present: without it the firmware crashes."""
    return {
        "type": "hello",
        "transport": "websocket",
        "session_id": session_id,
        "audio_params": {
            "format": "opus",
            "sample_rate": sample_rate,
            "channels": 1,
            "frame_duration": DOWNLINK_FRAME_DURATION_MS,
        },
    }


def mcp_envelope(payload: dict[str, Any], session_id: str | None) -> dict[str, Any]:
    """Wrap a JSON-RPC message for the device."""
    msg: dict[str, Any] = {"type": "mcp", "payload": payload}
    if session_id is not None:
        msg = {"session_id": session_id, **msg}
    return msg


def dumps(msg: dict[str, Any]) -> str:
    """Compact JSON, UTF-8 kept as is (the device renders Chinese text)."""
    return json.dumps(msg, ensure_ascii=False, separators=(",", ":"))


def normalize_mac(value: str) -> str | None:
    """``AA-BB-CC-DD-EE-FF``, ``aabbccddeeff`` … → ``aa:bb:cc:dd:ee:ff``; None if it is not a MAC."""
    digits = "".join(ch for ch in value.strip().lower() if ch not in ":-. ")
    if len(digits) != 12 or any(ch not in "0123456789abcdef" for ch in digits):
        return None
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))
