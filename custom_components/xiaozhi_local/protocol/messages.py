"""Text frames between a xiaozhi device and its server: parse, validate, build.

Everything here is pure: a frame comes in as text, leaves as a typed message or a FrameError
saying what is wrong with it. Nothing raises on bad input.
"""

from dataclasses import dataclass, field
import json
from typing import Any, Final
import uuid

PROTOCOL_VERSIONS: Final = (1, 2, 3)
"""Binary framing versions a device may ask for (``Protocol-Version``)."""

FRAME_DURATIONS_MS: Final = (5, 10, 20, 40, 60, 80, 100, 120)
"""Opus frame durations the firmware's decoder accepts."""

DOWNLINK_SAMPLE_RATE: Final = 24000
"""Rate of the Opus audio we send (the firmware's default and the quality TTS engines give)."""

DOWNLINK_FRAME_DURATION_MS: Final = 60


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
    """A client's hello: the stock firmware's full one or a minimal ``{"type":"hello"}``."""

    version: int | None = None
    transport: str | None = None
    features: dict[str, Any] = field(default_factory=dict)
    audio_params: AudioParams = AudioParams()

    @property
    def supports_mcp(self) -> bool:
        """Whether the client serves MCP tools over the ``mcp`` envelope."""
        return self.features.get("mcp") is True


@dataclass(frozen=True, slots=True)
class McpEnvelope:
    """``{"type":"mcp","payload":{…}}``: a JSON-RPC message from the device."""

    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ControlMessage:
    """Any other typed message (``listen``, ``abort``, ``goodbye`` …), validated only for ``type``."""

    type: str
    data: dict[str, Any]


type ClientMessage = ClientHello | McpEnvelope | ControlMessage


def _int_field(obj: dict[str, Any], key: str, default: int, allowed: tuple[int, ...] | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError("bad_field", f"{key} must be an integer, got {type(value).__name__}")
    if allowed is not None and value not in allowed:
        raise FrameError("bad_field", f"{key} must be one of {allowed}, got {value}")
    return value


def parse_audio_params(raw: Any) -> AudioParams:
    """Validate ``audio_params``; missing keys take the firmware's defaults."""
    if raw is None:
        return AudioParams()
    if not isinstance(raw, dict):
        raise FrameError("bad_field", "audio_params must be an object")
    fmt = raw.get("format", "opus")
    if not isinstance(fmt, str):
        raise FrameError("bad_field", "audio_params.format must be a string")
    if fmt != "opus":
        raise FrameError("bad_field", f"unsupported audio format {fmt!r}")
    sample_rate = _int_field(raw, "sample_rate", 16000)
    if not 8000 <= sample_rate <= 48000:
        raise FrameError("bad_field", f"sample_rate {sample_rate} out of range")
    return AudioParams(
        format=fmt,
        sample_rate=sample_rate,
        channels=_int_field(raw, "channels", 1, (1, 2)),
        frame_duration=_int_field(raw, "frame_duration", 60, FRAME_DURATIONS_MS),
    )


def parse_hello(obj: dict[str, Any]) -> ClientHello:
    """Validate a client hello (``type`` already checked)."""
    version: int | None = None
    if "version" in obj:
        version = _int_field(obj, "version", 1, PROTOCOL_VERSIONS)
    transport = obj.get("transport")
    if transport is not None and not isinstance(transport, str):
        raise FrameError("bad_field", "transport must be a string")
    features = obj.get("features", {})
    if not isinstance(features, dict):
        raise FrameError("bad_field", "features must be an object")
    return ClientHello(
        version=version,
        transport=transport,
        features=features,
        audio_params=parse_audio_params(obj.get("audio_params")),
    )


def parse_client_frame(text: str) -> ClientMessage:
    """Parse one text frame from a client. Raises FrameError (never anything else)."""
    try:
        obj = json.loads(text)
    except ValueError as err:  # JSONDecodeError and bad unicode escapes
        raise FrameError("not_json", str(err)) from None
    except RecursionError:
        raise FrameError("not_json", "nested too deeply") from None
    if not isinstance(obj, dict):
        raise FrameError("not_object", f"a JSON {type(obj).__name__} is not a message")
    msg_type = obj.get("type")
    if msg_type is None:
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
