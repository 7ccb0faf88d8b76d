"""The registerTools dialect in the pure protocol layer: registration, execute, early MCP, framing."""

import asyncio
import json
from typing import Any

import pytest

from custom_components.xiaozhi_local.protocol.mcp import (
    CONTROL_ACCEPTED,
    McpConnectionError,
    McpError,
    McpRemoteError,
    McpTimeoutError,
    McpTool,
    parse_tool,
)
from custom_components.xiaozhi_local.protocol.mcp_client import McpClient
from custom_components.xiaozhi_local.protocol.messages import ClientHello, ControlMessage
from custom_components.xiaozhi_local.protocol.register import (
    RegistrationError,
    ai_message,
    parse_registration,
)
from custom_components.xiaozhi_local.protocol.session import MAX_EARLY_MCP, DeviceSession

MAC = "cc:ba:97:04:92:94"


def test_registration_splits_remote_and_local() -> None:
    registration = parse_registration(
        {
            "mac_addr": "CC-BA-97-04-92-94",
            "tools": [
                {"name": "amplify_volume", "description": "volume", "sub_type": "control", "main_type": "remote"},
                {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"name": "search_web", "main_type": "local"},
            ],
        },
        MAC,
    )
    assert [(t.name, t.sub_type) for t in registration.remote] == [
        ("amplify_volume", "control"),
        ("get_weather", "query"),
    ]
    assert [t.name for t in registration.local] == ["search_web"]
    # Without parameters: an object schema with no properties.
    assert registration.remote[0].input_schema == {"type": "object", "properties": {}}
    # Kept across restarts with its kind.
    assert parse_tool(registration.remote[0].as_dict()).sub_type == "control"
    assert "sub_type" not in McpTool("x", "", {}).as_dict()


def test_registration_without_mac_addr_is_the_connection_s() -> None:
    assert parse_registration({"tools": []}, MAC).remote == []


def test_registration_limits() -> None:
    with pytest.raises(RegistrationError, match="at most 256"):
        parse_registration({"tools": [{"name": f"t{i}"} for i in range(257)]}, MAC)
    with pytest.raises(RegistrationError, match="longer than 128"):
        parse_registration({"tools": [{"name": "x" * 129}]}, MAC)
    with pytest.raises(RegistrationError, match="description is longer"):
        parse_registration({"tools": [{"name": "x", "description": "d" * 5000}]}, MAC)
    with pytest.raises(RegistrationError, match="description must be a string"):
        parse_registration({"tools": [{"name": "x", "description": 5}]}, MAC)
    with pytest.raises(RegistrationError, match="properties must map"):
        parse_registration({"tools": [{"name": "x", "parameters": {"properties": {"a": 1}}}]}, MAC)
    with pytest.raises(RegistrationError, match="required must be a list"):
        parse_registration({"tools": [{"name": "x", "parameters": {"required": "a"}}]}, MAC)


def test_ai_message() -> None:
    assert ai_message("chunk", "hi") == {"type": "chunk", "content": "hi"}
    with pytest.raises(ValueError, match="unknown"):
        ai_message("shout", "hi")


class Wire:
    """What a McpClient sends; replies are fed back by the test."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.late: list[tuple[str, McpError]] = []
        self.client = McpClient(self.send, on_late_error=lambda tool, err: self.late.append((tool, err)))
        self.client.use_registered_tools(
            [McpTool("volume", "", {}, sub_type="control"), McpTool("weather", "", {}, sub_type="query")]
        )

    async def send(self, payload: dict[str, Any]) -> None:
        self.sent.append(json.loads(json.dumps(payload)))

    def answer(self, reply: dict[str, Any]) -> bool:
        return self.client.handle_response({"jsonrpc": "2.0", "id": self.sent[-1]["id"], **reply})


async def test_query_waits_for_any_json_value() -> None:
    wire = Wire()
    for value, text in ((25, "25"), ("晴", "晴"), ({"t": 25}, '{"t": 25}'), ([1], "[1]"), (None, "null")):
        call = asyncio.ensure_future(wire.client.call_tool("weather", {"city": "北京"}))
        await asyncio.sleep(0)
        assert wire.sent[-1]["method"] == "mcp/tool/execute"
        assert wire.sent[-1]["params"] == {"tool_name": "weather", "tool_input": {"city": "北京"}}
        assert wire.answer({"result": value})
        assert (await call).text == text
    ids = [p["id"] for p in wire.sent]
    assert all(isinstance(i, str) for i in ids)
    assert len(set(ids)) == len(ids)


async def test_query_error_with_code() -> None:
    wire = Wire()
    call = asyncio.ensure_future(wire.client.call_tool("weather"))
    await asyncio.sleep(0)
    wire.answer({"error": {"code": -32000, "message": "执行失败"}})
    with pytest.raises(McpRemoteError) as err:
        await call
    assert (err.value.code, err.value.message) == (-32000, "执行失败")


async def test_control_succeeds_once_sent_and_reports_late_errors() -> None:
    wire = Wire()
    result = await wire.client.call_tool("volume", {"level": 80})
    assert result.text == CONTROL_ACCEPTED
    assert wire.client.pending_count == 1  # still listening for a late answer
    wire.answer({"error": {"code": -32001, "message": "out of range"}})
    await asyncio.sleep(0)  # future callbacks run on the next loop turn
    assert wire.client.pending_count == 0
    assert [(tool, str(err)) for tool, err in wire.late] == [("volume", "out of range")]
    # A success answer, or none at all, is not reported.
    await wire.client.call_tool("volume", {"level": 10})
    wire.answer({"result": {"status": "success"}})
    await wire.client.call_tool("volume", {"level": 20}, timeout=0)  # expires on the next loop turns
    for _ in range(3):
        await asyncio.sleep(0)
    assert wire.client.pending_count == 0
    assert len(wire.late) == 1


async def test_control_pending_when_closed_is_not_a_late_error() -> None:
    wire = Wire()
    await wire.client.call_tool("volume", {"level": 80})
    wire.client.close("gone")
    assert wire.late == []
    with pytest.raises(McpConnectionError):
        await wire.client.call_tool("volume", {"level": 80})


async def test_unregistered_tool_is_a_query() -> None:
    wire = Wire()
    call = asyncio.ensure_future(wire.client.call_tool("other", timeout=0.01))
    with pytest.raises(McpTimeoutError):
        await call


class Handler:
    def __init__(self) -> None:
        self.hellos: list[ClientHello] = []
        self.notifications: list[str] = []
        self.registrations: list[Any] = []

    def on_hello(self, hello: ClientHello) -> None:
        self.hellos.append(hello)

    def on_notification(self, method: str, params: Any) -> None:
        self.notifications.append(method)

    def on_control(self, message: ControlMessage) -> None:
        pass

    def on_audio(self, data: bytes) -> None:
        pass

    def on_register(self, registration: Any) -> None:
        self.registrations.append(registration)

    def on_tool_error(self, tool: str, error: McpError) -> None:
        pass


def session() -> tuple[DeviceSession, Handler, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    handler = Handler()

    async def send_text(text: str) -> None:
        sent.append(json.loads(text))

    return DeviceSession(MAC, send_text, handler), handler, sent


async def test_registration_opens_a_session_without_hello() -> None:
    sess, handler, sent = session()
    await sess.handle_text('{"jsonrpc":"2.0","method":"mcp/registerTools","params":{"tools":[{"name":"a"}]},"id":7}')
    assert len(handler.hellos) == 1
    assert sent == [
        {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"status": "registered", "message": "1 tools were successfully registered."},
        }
    ]
    assert sess.registered
    assert sess.bare
    assert await sess.send_ai_message("final", "done")
    assert sent[-1] == {"jsonrpc": "2.0", "method": "mcp/ai/message", "params": {"type": "final", "content": "done"}}


async def test_stock_sessions_send_no_ai_messages() -> None:
    sess, _handler, sent = session()
    await sess.handle_text('{"type":"hello","features":{"mcp":true}}')
    assert not await sess.send_ai_message("final", "done")
    assert [m["type"] for m in sent] == ["hello"]


async def test_early_mcp_is_bounded_and_replayed_in_order() -> None:
    sess, handler, sent = session()
    for n in range(MAX_EARLY_MCP + 5):
        note = {"jsonrpc": "2.0", "method": f"n{n}"}
        await sess.handle_text(json.dumps({"type": "mcp", "payload": note}))
    assert handler.notifications == []
    assert sess.log.counts["before_hello"] == 5
    await sess.handle_text('{"type":"hello"}')
    assert handler.notifications == [f"n{n}" for n in range(5, MAX_EARLY_MCP + 5)]
    assert sent[0]["type"] == "hello"


async def test_answers_follow_the_framing_of_the_request() -> None:
    sess, _handler, sent = session()
    await sess.handle_text('{"type":"hello"}')
    await sess.handle_text('{"jsonrpc":"2.0","method":"local_tool","id":"x1"}')
    assert sent[-1] == {
        "jsonrpc": "2.0",
        "id": "x1",
        "error": {"code": -32601, "message": "Method not found: local_tool"},
    }
    await sess.handle_text('{"type":"mcp","payload":{"jsonrpc":"2.0","method":"local_tool","id":2}}')
    assert sent[-1]["type"] == "mcp"
    assert sent[-1]["payload"]["id"] == 2
    await sess.handle_text('{"jsonrpc":"2.0","method":5,"id":3}')
    assert sent[-1]["error"]["code"] == -32600
