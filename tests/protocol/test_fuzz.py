"""Property-based fuzzing of every parser in ``protocol/`` (hypothesis, derandomized: a fixed slice).

Each parser may refuse input only with its own clean error type; nothing else may escape.
The benchmark (``python -m bench fuzz``) runs far more frames through the same code.
"""

import asyncio
import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from custom_components.xiaozhi_local.protocol.framing import unpack_frame
from custom_components.xiaozhi_local.protocol.mcp import McpError, parse_tool, parse_tool_result
from custom_components.xiaozhi_local.protocol.mcp_client import McpClient
from custom_components.xiaozhi_local.protocol.messages import (
    ClientHello,
    ControlMessage,
    FrameError,
    McpEnvelope,
    parse_client_frame,
)
from custom_components.xiaozhi_local.protocol.pcm import AudioError
from custom_components.xiaozhi_local.protocol.register import Registration, RegistrationError, parse_registration
from custom_components.xiaozhi_local.protocol.schema import validate
from custom_components.xiaozhi_local.protocol.session import DeviceSession
from custom_components.xiaozhi_local.protocol.wav import WavStream
from xiaozhi_sim.hostile import KEYS, VALID_FRAMES, WORDS

MAX_REASON = 400
"""Characters an error about hostile input may carry into the log."""

FUZZ = settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(WORDS)
    | st.text(max_size=40)
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)
objects = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8)


@st.composite
def mutated_frames(draw: st.DrawFn) -> dict[str, Any]:
    """A valid frame with some fields replaced and some added."""
    frame = dict(draw(st.sampled_from(VALID_FRAMES)))
    for key in draw(st.lists(st.sampled_from(sorted(frame)), max_size=3)):
        frame[key] = draw(json_values)
    frame.update(draw(objects))
    return frame


text_frames = st.one_of(
    mutated_frames().map(json.dumps),
    objects.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=200),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n + "]" * n),
    st.builds(lambda obj: '{"type":"mcp","payload":' + json.dumps(obj) + "}", json_values),
)


@FUZZ
@given(text_frames)
def test_parse_client_frame(text: str) -> None:
    message: object = None
    try:
        message = parse_client_frame(text)
    except FrameError as err:
        message = err
    # A property test: hypothesis draws the input, and either outcome (parsed or refused) is checked.
    if isinstance(message, FrameError):  # pylint: disable=home-assistant-test-non-deterministic
        assert message.kind in {"not_json", "not_object", "no_type", "bad_field"}
        assert len(str(message)) <= MAX_REASON  # logged: never the whole frame
    else:
        assert isinstance(message, (ClientHello, McpEnvelope, ControlMessage))


@FUZZ
@given(st.one_of(objects, json_values), st.sampled_from(["cc:ba:97:04:92:94", "AA-BB-CC-DD-EE-FF"]))
def test_parse_registration(params: Any, mac: str) -> None:
    outcome: object = None
    try:
        outcome = parse_registration(params, mac)
    except RegistrationError as err:
        outcome = err
    # A property test: hypothesis draws the input, and either outcome (parsed or refused) is checked.
    if isinstance(outcome, RegistrationError):  # pylint: disable=home-assistant-test-non-deterministic
        assert 0 < len(str(outcome)) <= MAX_REASON  # logged and sent back: never the whole input
    else:
        assert isinstance(outcome, Registration)
        assert all(tool.name for tool in (*outcome.remote, *outcome.local))


@FUZZ
@given(st.dictionaries(st.sampled_from(["tools", "mac_addr"]), st.lists(objects, max_size=4) | json_values))
def test_parse_registration_tools(params: dict[str, Any]) -> None:
    with contextlib.suppress(RegistrationError):
        parse_registration(params, "cc:ba:97:04:92:94")


@FUZZ
@given(json_values | objects)
def test_parse_tool_and_result(raw: Any) -> None:
    for parse in (parse_tool, parse_tool_result):
        with contextlib.suppress(ValueError):
            parse(raw)


@FUZZ
@given(st.sampled_from([1, 2, 3]), st.binary(max_size=300))
def test_unpack_frame(version: int, data: bytes) -> None:
    try:
        payload = unpack_frame(version, data)
    except FrameError:
        return
    assert len(payload) <= len(data)


@FUZZ
@given(st.lists(st.binary(max_size=200), max_size=6))
def test_wav_stream(chunks: list[bytes]) -> None:
    stream = WavStream()
    try:
        for chunk in chunks:
            stream.feed(chunk)
    except AudioError:
        pass


@FUZZ
@given(objects | json_values, objects | json_values)
def test_schema_validate(schema: Any, arguments: Any) -> None:
    """Schemas come from devices: any shape, never a crash."""
    problems = validate(schema if isinstance(schema, dict) else {}, arguments if isinstance(arguments, dict) else {})
    assert isinstance(problems, list)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_hello(self, hello: Any) -> None:
        self.events.append(hello)

    def on_notification(self, method: str, params: Any) -> None:
        assert isinstance(method, str)

    def on_control(self, message: ControlMessage) -> None:
        assert isinstance(message.type, str)

    def on_audio(self, data: bytes) -> None:
        assert data

    def on_register(self, registration: Any) -> None:
        self.events.append(registration)

    def on_tool_error(self, tool: str, error: McpError) -> None:
        self.events.append(error)


@FUZZ
@given(st.lists(st.one_of(text_frames, st.binary(max_size=100)), max_size=12))
def test_session_never_raises(frames: list[str | bytes]) -> None:
    """Any sequence of frames into a session: every frame handled, every reply valid JSON-RPC."""
    sent: list[str] = []

    async def send_text(text: str) -> None:
        sent.append(text)

    async def run() -> None:
        session = DeviceSession("cc:ba:97:04:92:94", send_text, Recorder())
        await session.handle_text('{"type":"hello"}')
        for frame in frames:
            if isinstance(frame, bytes):
                session.handle_binary(frame)
            else:
                await session.handle_text(frame)
        session.close()

    asyncio.run(run())
    for text in sent:
        reply = json.loads(text)
        payload = reply.get("payload", reply)
        assert reply.get("type") == "hello" or payload.get("jsonrpc") == "2.0"


@FUZZ
@given(objects)
def test_mcp_client_handle_response(payload: dict[str, Any]) -> None:
    async def run() -> None:
        async def send(_message: dict[str, Any]) -> None:
            return None

        client = McpClient(send)
        client.handle_response(payload)
        client.use_registered_tools([])
        client.handle_response(payload)

    asyncio.run(run())
