"""The MCP client against the simulator's firmware-faithful MCP server, wired back to back."""

import asyncio
import json
from typing import Any

import pytest

from custom_components.xiaozhi_local.protocol.mcp import (
    McpBusyError,
    McpConnectionError,
    McpRemoteError,
    McpTimeoutError,
    ServerInfo,
    parse_tool,
    parse_tool_result,
)
from custom_components.xiaozhi_local.protocol.mcp_client import McpClient
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.mcp_server import McpServer


class Loop:
    """Client → server → client in-process; records the wire payloads."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.sent: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []
        self.client = McpClient(self.send, warn=self.warn)
        self.warnings: list[str] = []
        self.hold = False

    def warn(self, kind: str, msg: str) -> None:
        self.warnings.append(kind)

    async def send(self, payload: dict[str, Any]) -> None:
        wire = json.loads(json.dumps(payload))
        self.sent.append(wire)
        if self.hold:
            return
        reply = await self.server.handle(wire)
        if reply is not None:
            reply = json.loads(json.dumps(reply))
            self.replies.append(reply)
            asyncio.get_running_loop().call_soon(self.client.handle_response, reply)


def sim(**kwargs: Any) -> SimulatedDevice:
    return SimulatedDevice(SimulatorOptions(url="ws://unused", **kwargs))


async def test_initialize_and_ids_are_numbers() -> None:
    loop = Loop(sim(board="bread-compact-wifi").mcp)
    info = await loop.client.initialize({"vision": {"url": "http://x/vision", "token": "t"}})
    assert info == ServerInfo("bread-compact-wifi", "2.4.2")
    assert loop.server.vision_url == "http://x/vision"
    await loop.client.list_tools()
    ids = [p["id"] for p in loop.sent]
    assert all(isinstance(i, int) for i in ids)
    assert len(set(ids)) == len(ids)
    assert loop.sent[0]["params"]["protocolVersion"] == "2024-11-05"


async def test_paged_tools_list_with_tool_name_cursor() -> None:
    loop = Loop(sim(extra_tools=60, ir=True, lamp=True).mcp)
    tools = await loop.client.list_tools()
    pages = [p for p in loop.sent if p["method"] == "tools/list"]
    assert len(pages) >= 3
    assert all(p["params"]["withUserTools"] is True for p in pages)
    # The cursor is a tool name, and each page after the first starts with that tool.
    for page, reply in zip(pages[1:], loop.replies[1:], strict=False):
        assert page["params"]["cursor"] == reply["result"]["tools"][0]["name"]
    for reply in loop.replies:
        assert len(json.dumps(reply["result"], separators=(",", ":")).encode()) < 8000
    names = [t.name for t in tools]
    assert names == [t.name for t in loop.server.tools]
    assert names[0] == "self.get_device_status"
    by_name = {t.name: t for t in tools}
    assert by_name["self.reboot"].user_only
    assert by_name["self.get_system_info"].user_only
    assert not by_name["self.audio_speaker.set_volume"].user_only
    assert by_name["self.audio_speaker.set_volume"].input_schema["required"] == ["volume"]


async def test_without_user_tools() -> None:
    loop = Loop(sim().mcp)
    tools = await loop.client.list_tools(with_user_tools=False)
    assert not any(t.user_only for t in tools)


async def test_list_caps_and_loops() -> None:
    loop = Loop(sim(extra_tools=60).mcp)
    tools = await loop.client.list_tools(max_pages=2)
    assert "too_many_pages" in loop.warnings
    assert 0 < len(tools) < 60
    loop = Loop(sim(extra_tools=60).mcp)
    tools = await loop.client.list_tools(max_tools=10)
    assert len(tools) == 10
    assert "too_many_tools" in loop.warnings


async def test_cursor_that_repeats_stops() -> None:
    replies = iter([{"tools": [{"name": "a"}], "nextCursor": "b"}, {"tools": [{"name": "b"}], "nextCursor": "b"}])

    async def send(payload: dict[str, Any]) -> None:
        asyncio.get_running_loop().call_soon(
            client.handle_response, {"jsonrpc": "2.0", "id": payload["id"], "result": next(replies)}
        )

    warnings: list[str] = []
    client = McpClient(send, warn=lambda kind, _msg: warnings.append(kind))
    assert [t.name for t in await client.list_tools()] == ["a", "b"]
    assert warnings == ["cursor_loop"]


async def test_call_success_and_json() -> None:
    loop = Loop(sim().mcp)
    result = await loop.client.call_tool("self.audio_speaker.set_volume", {"volume": 30})
    assert result.text == "true"
    assert result.json is None
    status = await loop.client.call_tool("self.get_device_status")
    assert status.json["audio_speaker"]["volume"] == 30


async def test_errors_without_code() -> None:
    loop = Loop(sim().mcp)
    with pytest.raises(McpRemoteError) as err:
        await loop.client.call_tool("self.nope")
    assert err.value.message == "Unknown tool: self.nope"
    assert err.value.code is None
    assert "code" not in loop.replies[-1]["error"]
    with pytest.raises(McpRemoteError, match="Value exceeds maximum allowed: 100"):
        await loop.client.call_tool("self.audio_speaker.set_volume", {"volume": 101})
    with pytest.raises(McpRemoteError, match="Missing valid argument: volume"):
        await loop.client.call_tool("self.audio_speaker.set_volume", {"volume": "loud"})
    with pytest.raises(McpRemoteError, match="Method not implemented: ping"):
        await loop.client.request("ping")


async def test_is_error_result() -> None:
    loop = Loop(sim(ir=True).mcp)
    with pytest.raises(McpRemoteError) as err:
        await loop.client.call_tool("self.ir.learn_external", {"name": "x"})
    assert err.value.result is not None
    assert err.value.result.is_error
    assert "Permission denied" in err.value.message


async def test_error_with_code_and_odd_errors() -> None:
    async def send(payload: dict[str, Any]) -> None:
        error = errors.pop(0)
        asyncio.get_running_loop().call_soon(client.handle_response, {"id": payload["id"], "error": error})

    errors: list[Any] = [{"code": -32601, "message": "nope"}, "plain", 5, {"message": 3, "code": True}]
    client = McpClient(send)
    with pytest.raises(McpRemoteError) as err:
        await client.request("x")
    assert (err.value.code, err.value.message) == (-32601, "nope")
    for expected in ("plain", "unknown error", "unknown error"):
        with pytest.raises(McpRemoteError) as err:
            await client.request("x")
        assert err.value.message == expected
        assert err.value.code is None


async def test_timeout_then_late_reply_is_unknown() -> None:
    loop = Loop(sim().mcp)
    loop.hold = True
    with pytest.raises(McpTimeoutError):
        await loop.client.call_tool("self.get_device_status", timeout=0.01)
    assert loop.client.pending_count == 0
    late = {"jsonrpc": "2.0", "id": loop.sent[-1]["id"], "result": {"content": []}}
    assert loop.client.handle_response(late) is False


async def test_close_fails_pending_at_once() -> None:
    loop = Loop(sim().mcp)
    loop.hold = True
    task = asyncio.create_task(loop.client.call_tool("self.get_device_status", timeout=30))
    await asyncio.sleep(0)
    assert loop.client.pending_count == 1
    loop.client.close("device went away")
    with pytest.raises(McpConnectionError, match="device went away"):
        await task
    with pytest.raises(McpConnectionError):
        await loop.client.request("tools/list")


async def test_busy_and_send_failure() -> None:
    async def never(payload: dict[str, Any]) -> None:
        return None

    client = McpClient(never, max_pending=2)
    tasks = [asyncio.create_task(client.request("a", timeout=30)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(McpBusyError):
        await client.request("a")
    client.close()
    await asyncio.gather(*tasks, return_exceptions=True)

    async def broken(payload: dict[str, Any]) -> None:
        raise ConnectionResetError("reset")

    with pytest.raises(McpConnectionError, match="reset"):
        await McpClient(broken).request("a")


async def test_ping_is_answered_by_any_answer_and_not_by_silence() -> None:
    """The firmware answers ``ping`` with an error ("Method not implemented"): that is an answer.
    Silence or a closed link is none; a full request table raises (it says nothing of the device)."""
    sent: list[dict[str, Any]] = []

    async def record(payload: dict[str, Any]) -> None:
        sent.append(payload)

    client = McpClient(record, max_pending=1)
    answered = asyncio.create_task(client.ping(5))
    await asyncio.sleep(0)
    assert sent[-1]["method"] == "ping"
    client.handle_response(
        {"jsonrpc": "2.0", "id": sent[-1]["id"], "error": {"message": "Method not implemented: ping"}}
    )
    assert await answered is True
    assert await client.ping(0.01) is False  # nobody answers
    waiting = asyncio.create_task(client.request("a", timeout=30))
    await asyncio.sleep(0)
    with pytest.raises(McpBusyError):
        await client.ping(5)
    client.close()
    await asyncio.gather(waiting, return_exceptions=True)
    assert await client.ping(5) is False  # closed


async def test_ids_wrap_and_skip_pending() -> None:
    async def never(payload: dict[str, Any]) -> None:
        sent.append(payload["id"])

    sent: list[int] = []
    client = McpClient(never)
    client._next_id = 2**31 - 1
    first = asyncio.create_task(client.request("a", timeout=30))
    await asyncio.sleep(0)
    second = asyncio.create_task(client.request("a", timeout=30))
    await asyncio.sleep(0)
    assert sent == [2**31 - 1, 1]
    client.close()
    await asyncio.gather(first, second, return_exceptions=True)


def test_handle_response_rejects_non_int_ids() -> None:
    client = McpClient(lambda p: asyncio.sleep(0))
    assert client.handle_response({"id": True, "result": 1}) is False
    assert client.handle_response({"id": "1", "result": 1}) is False


def test_parse_tool_and_result() -> None:
    tool = parse_tool({"name": "t", "parameters": {"type": "object"}, "annotations": {"audience": ["user"]}})
    assert tool.input_schema == {"type": "object"}
    assert tool.user_only
    assert tool.as_dict()["name"] == "t"
    assert not parse_tool({"name": "t", "annotations": {"audience": ["user", "assistant"]}}).user_only
    assert parse_tool({"name": "t", "inputSchema": None, "annotations": 3}).input_schema == {}
    for bad in (
        1,
        {"name": ""},
        {"name": "x" * 200},
        {"name": "t", "description": 1},
        {"name": "t", "inputSchema": []},
    ):
        with pytest.raises(ValueError, match="tool"):
            parse_tool(bad)
    bad_results: tuple[Any, ...] = (1, {"content": {}}, {"content": [1]}, {"isError": "yes"})
    for bad in bad_results:
        with pytest.raises(ValueError, match=r"result|content|isError"):
            parse_tool_result(bad)
    result = parse_tool_result({"content": [{"type": "text", "text": "[1, 2]"}, {"type": "image"}]})
    assert result.json == [1, 2]
    assert parse_tool_result({"content": [{"type": "text", "text": "{bad"}]}).json is None


async def test_bad_tools_are_skipped_and_malformed_results_raise() -> None:
    async def send(payload: dict[str, Any]) -> None:
        result = replies.pop(0)
        asyncio.get_running_loop().call_soon(client.handle_response, {"id": payload["id"], "result": result})

    replies: list[Any] = [
        {"tools": [{"name": "good"}, {"name": 5}, "junk"]},
        {"tools": "nope"},
        {"content": "nope"},
        {"serverInfo": {"name": 1, "version": "3"}},
    ]
    warnings: list[str] = []
    client = McpClient(send, warn=lambda kind, _m: warnings.append(kind))
    assert [t.name for t in await client.list_tools()] == ["good"]
    assert warnings == ["bad_tool", "bad_tool"]
    with pytest.raises(McpRemoteError, match="no tools list"):
        await client.list_tools()
    with pytest.raises(McpRemoteError, match="malformed result"):
        await client.call_tool("x")
    assert await client.initialize() == ServerInfo(None, "3")
