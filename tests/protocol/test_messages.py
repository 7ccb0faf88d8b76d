import json
from typing import Any

import pytest

from custom_components.xiaozhi_local.protocol.mcp import safe_name
from custom_components.xiaozhi_local.protocol.messages import (
    AudioParams,
    ClientHello,
    ControlMessage,
    FrameError,
    McpEnvelope,
    loads,
    normalize_mac,
    parse_client_frame,
    server_hello,
)

FIRMWARE_HELLO = (
    '{"type":"hello","version":1,"features":{"mcp":true,"glyph_push":true},'
    '"text_font":{"bundle":"noto-v1","charset":"common","size":20,"bpp":4},"transport":"websocket",'
    '"audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}'
)


def test_firmware_hello() -> None:
    hello = parse_client_frame(FIRMWARE_HELLO)
    assert isinstance(hello, ClientHello)
    assert hello.version == 1
    assert hello.supports_mcp
    assert hello.transport == "websocket"
    assert hello.audio_params == AudioParams("opus", 16000, 1, 60)


def test_minimal_hello() -> None:
    hello = parse_client_frame('{"type":"hello","features":{"mcp":true}}')
    assert isinstance(hello, ClientHello)
    assert hello.version is None
    assert hello.supports_mcp
    assert hello.audio_params == AudioParams()
    bare = parse_client_frame('{"type":"hello"}')
    assert isinstance(bare, ClientHello)
    assert not bare.supports_mcp


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        ("not json", "not_json"),
        ('{"type": "hello"', "not_json"),
        ("[1, 2, 3]", "not_object"),
        ('"hello"', "not_object"),
        ("{}", "no_type"),
        ('{"type": 5}', "bad_field"),
        ('{"session_id": "S"}', "no_type"),
        ('{"type": "mcp", "payload": [1]}', "bad_field"),
        ('{"type": "mcp"}', "bad_field"),
        ("[" * 100000, "not_json"),
    ],
)
def test_bad_frames(frame: str, kind: str) -> None:
    with pytest.raises(FrameError) as err:
        parse_client_frame(frame)
    assert err.value.kind == kind


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        ('{"type": "hello", "version": 7}', "version 7"),
        ('{"type": "hello", "version": true}', "version True"),
        ('{"type": "hello", "features": []}', "features"),
        ('{"type": "hello", "transport": 1}', "transport"),
        ('{"type": "hello", "audio_params": "opus"}', "audio_params"),
        ('{"type": "hello", "audio_params": {"format": "pcm"}}', "pcm"),
        ('{"type": "hello", "audio_params": {"format": 1}}', "format 1"),
        ('{"type": "hello", "audio_params": {"sample_rate": 1}}', "sample_rate 1"),
        ('{"type": "hello", "audio_params": {"sample_rate": "fast"}}', "sample_rate"),
        ('{"type": "hello", "audio_params": {"frame_duration": 30}}', "frame_duration 30"),
        ('{"type": "hello", "audio_params": {"channels": 6}}', "channels 6"),
    ],
)
def test_odd_hellos_are_accepted_with_defaults(frame: str, problem: str) -> None:
    """Clients differ: a hello is never refused for a field; the field takes its default."""
    hello = parse_client_frame(frame)
    assert isinstance(hello, ClientHello)
    assert any(problem in text for text in hello.problems), hello.problems
    assert hello.audio_params == AudioParams()
    assert hello.version in (None, 1)
    assert not hello.supports_mcp


def test_hellos_of_other_clients() -> None:
    # Numeric strings, another key order, extra keys, other frame durations and rates.
    hello = parse_client_frame(
        '{"audio_params":{"channels":"1","frame_duration":20,"sample_rate":"48000"},"extra":{"x":1},'
        '"type":"hello","version":"3","features":{"mcp":true}}'
    )
    assert isinstance(hello, ClientHello)
    assert hello.problems == ()
    assert (hello.version, hello.audio_params) == (3, AudioParams("opus", 48000, 1, 20))
    assert hello.supports_mcp


def test_bare_json_rpc() -> None:
    """The registerTools dialect sends JSON-RPC without the envelope."""
    register = parse_client_frame('{"jsonrpc":"2.0","method":"mcp/registerTools","params":{},"id":"r1"}')
    assert register == McpEnvelope({"jsonrpc": "2.0", "method": "mcp/registerTools", "params": {}, "id": "r1"}, True)
    reply = parse_client_frame('{"jsonrpc":"2.0","id":"tool-call-1","result":5}')
    assert isinstance(reply, McpEnvelope)
    assert reply.bare


def test_mcp_and_control() -> None:
    msg = parse_client_frame('{"session_id":"S","type":"mcp","payload":{"jsonrpc":"2.0","id":1,"result":{}}}')
    assert msg == McpEnvelope({"jsonrpc": "2.0", "id": 1, "result": {}})
    listen = parse_client_frame('{"session_id":"S","type":"listen","state":"start","mode":"auto"}')
    assert isinstance(listen, ControlMessage)
    assert listen.type == "listen"
    assert listen.data["mode"] == "auto"


def test_server_hello_always_has_transport() -> None:
    hello = server_hello("abc", 16000)
    assert hello["transport"] == "websocket"
    assert hello["session_id"] == "abc"
    assert hello["audio_params"] == {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60}
    json.dumps(hello)


@pytest.mark.parametrize(
    ("raw", "mac"),
    [
        ("cc:ba:97:04:92:94", "cc:ba:97:04:92:94"),
        ("CC-BA-97-04-92-94", "cc:ba:97:04:92:94"),
        (" ccba97049294 ", "cc:ba:97:04:92:94"),
        ("ccba.9704.9294", "cc:ba:97:04:92:94"),
        ("cc:ba:97:04:92", None),
        ("zz:ba:97:04:92:94", None),
        ("", None),
    ],
)
def test_normalize_mac(raw: str, mac: str | None) -> None:
    assert normalize_mac(raw) == mac


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("18446744073709551616", float(2**64)),  # 2**64: beyond what orjson stores as an integer
        (str(2**63 - 1), 2**63 - 1),
        (str(-(2**63)), -(2**63)),
        ("9" * 5000, None),  # beyond float range; int() would raise past 4300 digits
        ("1e999", None),
        ("NaN", None),
        ("-Infinity", None),
        ("0." + "1" * 5000, 0.1111111111111111),
        ('{"a": [1, 2.5, 1e400]}', {"a": [1, 2.5, None]}),
    ],
)
def test_loads_bounds_every_number(text: str, expected: Any) -> None:
    assert loads(text) == expected


def test_hello_with_odd_numbers_takes_defaults() -> None:
    hello = parse_client_frame(
        '{"type":"hello","version":"' + "9" * 5000 + '","audio_params":{"sample_rate":"１６０００","channels":1e999}}'
    )
    assert isinstance(hello, ClientHello)
    assert hello.version == 1
    assert hello.audio_params.sample_rate == 16000
    assert hello.audio_params.channels == 1
    assert len(hello.problems) == 3
    assert all(len(problem) < 80 for problem in hello.problems)


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("self.audio_speaker.set_volume", True),
        ("开灯", True),
        ("tv power", True),
        ("nul\x00", False),
        ("esc\x1b[31m", False),
        ("new\nline", False),
        ("rtl\u202eexe", False),
        ("zero\u200bwidth", False),
        ("nbsp\u00a0", False),
        (" padded", False),
    ],
)
def test_safe_name(name: str, safe: bool) -> None:
    assert safe_name(name) is safe
