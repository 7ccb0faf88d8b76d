"""What sets a client family apart, as data (``SimulatorOptions.flavor`` picks a profile).

The simulator's code reads a profile's traits where a family differs ("does it play audio in any
state?"), never the family's name; a new client is a new row here, with the traits its source
shows. The families and where they differ are described in ``options.py``.
"""

from dataclasses import dataclass
from typing import Any, Literal

from .options import Flavor, SimulatorOptions

type Hello = Literal["firmware", "features", "camel", "sdk", "desktop"]
type Auth = Literal["headers", "lower-case headers", "query", "device-id query"]


@dataclass(frozen=True, slots=True)
class Profile:
    """One client family's traits."""

    flavor: Flavor
    hello: Hello = "firmware"
    """The shape of its hello (``websocket_hello``, ``mqtt_hello``)."""
    auth: Auth = "headers"
    """How it says who it is: the firmware's headers, py-xiaozhi's spelling of them, the query
    string of a browser page (token included), or only ``?device-id=`` (the load tester)."""
    frame_ms: int = 60
    """Its uplink Opus frame duration."""
    desktop: bool = False
    """A desktop program: volume tools instead of the board's, no status object, an OTA body of
    ``application`` and ``board`` only."""
    errors_as_results: bool = False
    """Tool failures come back as ``isError`` results, not JSON-RPC errors."""
    tools_without_prefix: bool = False
    """Tool names without ``self.`` (``set_volume``, ``get_device_status``, ``take_photo``)."""
    identifies_uploads: bool = True
    """Camera uploads carry ``Device-Id`` and ``Client-Id`` besides the vision token."""
    follows_session_id: bool = True
    """It sends the session id of the server hello (py-xiaozhi keeps sending an empty one)."""
    plays_in_any_state: bool = False
    """Downlink audio plays whatever state it is in (the firmware drops it unless speaking)."""
    listens_while_speaking: bool = False
    """In realtime mode it stays listening while it plays an answer (echo cancellation)."""
    speaks_like_load_tester: bool = False
    """``say``: ``listen start`` (manual), the speech, silence until ``stt`` or ``tts start``."""
    default_token: str | None = None
    """The token it uses when the OTA answer gives none."""
    keeps_activation_answer: bool = False
    """After activating it keeps that answer's settings instead of checking OTA again."""
    mqtt_per_conversation: bool = False
    """Its MQTT session lives for one conversation: connected when one starts, disconnected at
    its goodbye (a goodbye without a session id counts), settings checked whole before."""
    mqtt_subscribes: bool = False
    """It subscribes to the ``subscribe_topic`` of its MQTT settings (the firmware never does)."""
    keeps_nonce_timestamp: bool = False
    """Its UDP nonces carry the server's timestamp field unchanged."""


PROFILES: dict[Flavor, Profile] = {
    profile.flavor: profile
    for profile in (
        Profile("firmware"),
        Profile(
            "py-xiaozhi",
            hello="desktop",
            auth="lower-case headers",
            frame_ms=20,
            desktop=True,
            errors_as_results=True,
            follows_session_id=False,
            plays_in_any_state=True,
            listens_while_speaking=True,
            default_token="test-token",  # its ``ws.get("token", "test-token") or "test-token"``
            keeps_activation_answer=True,
            mqtt_per_conversation=True,
            mqtt_subscribes=True,
            keeps_nonce_timestamp=True,
        ),
        Profile("browser", hello="features", auth="query"),
        Profile(
            "xiaozhi-sdk",
            hello="sdk",
            tools_without_prefix=True,
            identifies_uploads=False,
            keeps_activation_answer=True,
        ),
        Profile("xiaozhi-concurrent", hello="camel", auth="device-id query", speaks_like_load_tester=True),
    )
}

_AUDIO = {"format": "opus", "sample_rate": 16000, "channels": 1}
_FIRMWARE_FEATURES = {"features": {"mcp": True, "glyph_push": True}}
_FONT = {"text_font": {"bundle": "noto-v1", "charset": "common", "size": 20, "bpp": 4}}


def websocket_hello(profile: Profile, options: SimulatorOptions) -> dict[str, Any]:
    """Its hello over WebSocket: the firmware's (key order as it builds the string), or its own."""
    audio = {**_AUDIO, "frame_duration": profile.frame_ms}
    match profile.hello:
        case "features":
            return {"type": "hello", "features": {"mcp": True}}
        case "camel":
            params = {"format": "opus", "sampleRate": 16000, "channels": 1, "frameDuration": profile.frame_ms}
            return {"type": "hello", "audioParams": params}
        case "sdk":
            features = {"mcp": True, "consistent_sample_rate": False}
            return {
                "type": "hello",
                "version": 1,
                "features": features,
                "transport": "websocket",
                "audio_params": audio,
            }
        case "desktop":
            return {
                "type": "hello",
                "version": options.protocol_version,
                "features": {"mcp": True},
                "transport": "websocket",
                "audio_params": audio,
                "client": "py-xiaozhi",  # an extra field the server does not know
            }
    version = {"type": "hello", "version": options.protocol_version}
    return {**version, **_FIRMWARE_FEATURES, **_FONT, "transport": "websocket", "audio_params": audio}


def mqtt_hello(profile: Profile, frame_ms: int) -> dict[str, Any]:
    """``MqttProtocol::GetHelloMessage``, or py-xiaozhi's own."""
    audio = {**_AUDIO, "frame_duration": frame_ms}
    if profile.hello == "desktop":
        return {"type": "hello", "version": 3, "features": {"mcp": True}, "transport": "udp", "audio_params": audio}
    return {"type": "hello", "version": 3, "transport": "udp", **_FIRMWARE_FEATURES, **_FONT, "audio_params": audio}
