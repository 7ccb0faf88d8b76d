"""A client of the ``mcp/registerTools`` dialect (``seeds/003``): it announces its tools.

Bare JSON-RPC 2.0 (``envelope=True`` wraps it in ``{"type":"mcp"}`` instead). After connecting
(with or without a hello) it sends ``mcp/registerTools``; it runs ``mcp/tool/execute`` for its
``remote`` tools and collects the ``mcp/ai/message`` stream the server sends.
"""

import asyncio
from collections.abc import Awaitable, Callable
import contextlib
from dataclasses import dataclass, field
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

type Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class ExecuteError(Exception):
    """A tool failed: answered as a JSON-RPC error with ``code`` (-32000..-32099)."""

    def __init__(self, message: str, code: int = -32000) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class RegisteredTool:
    """A tool as the dialect declares it, with what running it does."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    main_type: str = "remote"
    sub_type: str = "query"

    def declaration(self) -> dict[str, Any]:
        """Its entry in ``mcp/registerTools``."""
        return {
            "name": self.name,
            "description": self.description,
            "main_type": self.main_type,
            "sub_type": self.sub_type,
            "parameters": self.parameters,
        }


@dataclass
class RegisterClientOptions:
    """Where and who."""

    url: str
    token: str
    mac: str
    envelope: bool = False
    hello: bool = False
    """Send a hello first (audio-capable clients); otherwise the registration opens the session."""
    mac_addr: str | None = None
    """``mac_addr`` in the registration; None: the MAC, spelled ``AA-BB-CC-DD-EE-FF`` as in the notes."""


def demo_tools(state: dict[str, Any]) -> list[RegisteredTool]:
    """The tools of the notes (volume, expression) and a few more to exercise every path."""

    async def amplify_volume(args: dict[str, Any]) -> Any:
        level = args.get("level")
        if not isinstance(level, int) or not 0 <= level <= 100:
            raise ExecuteError("执行失败：音量级别超出范围（0-100）。", -32000)
        state["volume"] = level
        return {"status": "success", "message": f"音量已成功设置为 {level}"}

    async def set_expression(args: dict[str, Any]) -> Any:
        if args.get("expression") == "cry":
            raise ExecuteError("this face is not available", -32001)
        state["expression"] = args.get("expression")
        return {"status": "success"}

    async def get_weather(args: dict[str, Any]) -> Any:
        return {"city": args.get("city", "北京"), "weather": "晴", "temperature": 25}

    async def get_battery(_args: dict[str, Any]) -> Any:
        return 87

    async def read_sensor(_args: dict[str, Any]) -> Any:
        raise ExecuteError("sensor unplugged", -32010)

    async def never(_args: dict[str, Any]) -> Any:
        raise AssertionError("a local tool runs on the server")

    obj = {"type": "object", "properties": {}}
    return [
        RegisteredTool(
            "amplify_volume",
            "设置设备音量",
            {
                "type": "object",
                "properties": {"level": {"type": "integer", "description": "音量大小，从0到100。"}},
                "required": ["level"],
            },
            amplify_volume,
            sub_type="control",
        ),
        RegisteredTool(
            "set_virtual_human_expression",
            "设置AI虚拟人的表情",
            {
                "type": "object",
                "properties": {
                    "expression": {
                        "type": "string",
                        "enum": ["close_eyes_smile", "close_eyes", "amazed", "smile", "cry", "idle"],
                    }
                },
                "required": ["expression"],
            },
            set_expression,
            sub_type="control",
        ),
        RegisteredTool(
            "get_weather",
            "查询天气",
            {"type": "object", "properties": {"city": {"type": "string"}}},
            get_weather,
        ),
        RegisteredTool("get_battery", "电池电量（百分比）", obj, get_battery),
        RegisteredTool("read_sensor", "读取温湿度传感器", obj, read_sensor),
        RegisteredTool("search_web", "联网搜索（服务端工具）", obj, never, main_type="local"),
    ]


@dataclass
class RegisterToolsClient:
    """One dialect client. ``await client.connect()`` registers; ``drop()`` ends it."""

    options: RegisterClientOptions
    state: dict[str, Any] = field(default_factory=dict)
    tools: list[RegisteredTool] = field(default_factory=list)
    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    ai_messages: list[tuple[str, str]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)  # every server frame, parsed
    silent: set[str] = field(default_factory=set)  # tools that never answer
    registration: dict[str, Any] | None = None  # the server's answer to the last registration
    _ws: ClientConnection | None = None
    _reader: asyncio.Task[None] | None = None
    _waiters: dict[Any, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _next_id: int = 1

    def __post_init__(self) -> None:
        if not self.tools:
            self.tools = demo_tools(self.state)

    @property
    def mac_addr(self) -> str:
        """``mac_addr`` as the notes spell it."""
        return self.options.mac_addr or self.options.mac.upper().replace(":", "-")

    async def connect(self) -> dict[str, Any]:
        """Open the socket, (say hello), register; returns the server's answer to the registration."""
        self._ws = await connect(
            self.options.url,
            additional_headers={
                "Authorization": f"Bearer {self.options.token}",
                "Device-Id": self.options.mac,
                "Protocol-Version": "1",
            },
            ping_interval=None,
            close_timeout=1,
        )
        self._reader = asyncio.create_task(self._read_loop(), name=f"register client {self.options.mac}")
        if self.options.hello:
            await self.send({"type": "hello", "version": 1, "transport": "websocket", "features": {}})
            await self.wait_for(lambda m: m.get("type") == "hello")
        return await self.register()

    async def register(self, tools: list[dict[str, Any]] | None = None, mac_addr: str | None = None) -> dict[str, Any]:
        """``mcp/registerTools`` with our tools (or ``tools`` as given); the server's response."""
        declared = tools if tools is not None else [tool.declaration() for tool in self.tools]
        answer = await self.request(
            "mcp/registerTools", {"mac_addr": mac_addr or self.mac_addr, "tools": declared}, "client-reg"
        )
        self.registration = answer
        return answer

    async def request(self, method: str, params: Any, id_prefix: str = "client") -> dict[str, Any]:
        """A request to the server; its response (``result`` or ``error``)."""
        request_id = f"{id_prefix}-{self._next_id:03d}"
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = future
        await self.send_rpc({"jsonrpc": "2.0", "method": method, "params": params, "id": request_id})
        try:
            async with asyncio.timeout(10):
                return await future
        finally:
            self._waiters.pop(request_id, None)

    async def send_rpc(self, payload: dict[str, Any]) -> None:
        """A JSON-RPC object, bare or in the envelope."""
        await self.send({"type": "mcp", "payload": payload} if self.options.envelope else payload)

    async def send(self, message: dict[str, Any]) -> None:
        """One JSON text frame."""
        assert self._ws is not None
        await self._ws.send(json.dumps(message, ensure_ascii=False))

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10) -> dict[str, Any]:
        """The first received frame (from the start) matching ``predicate``."""
        async with asyncio.timeout(timeout):
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                self._changed.clear()
                await self._changed.wait()

    async def wait_ai_final(self, timeout: float = 10) -> str:
        """The content of the first ``final`` ai message."""
        await self.wait_for(
            lambda m: (
                _payload(m).get("method") == "mcp/ai/message"
                and (_payload(m).get("params") or {}).get("type") == "final"
            ),
            timeout,
        )
        return next(content for kind, content in self.ai_messages if kind == "final")

    async def _read_loop(self) -> None:
        assert self._ws is not None
        with contextlib.suppress(ConnectionClosed):
            async for frame in self._ws:
                if isinstance(frame, bytes):
                    continue  # audio: this client has no speaker
                try:
                    message = json.loads(frame)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                self.received.append(message)
                await self._on_message(_payload(message))
                self._changed.set()

    async def _on_message(self, payload: dict[str, Any]) -> None:
        method = payload.get("method")
        if method is None:
            future = self._waiters.get(payload.get("id"))
            if future is not None and not future.done():
                future.set_result(payload)
            return
        params = payload.get("params") or {}
        if method == "mcp/ai/message":
            self.ai_messages.append((str(params.get("type")), str(params.get("content"))))
        elif method == "mcp/tool/execute":
            await self._execute(payload.get("id"), params)

    async def _execute(self, request_id: Any, params: dict[str, Any]) -> None:
        name, arguments = params.get("tool_name"), params.get("tool_input") or {}
        self.executed.append((str(name), arguments))
        tool = next((t for t in self.tools if t.name == name and t.main_type == "remote"), None)
        if name in self.silent:
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if tool is None:
            reply["error"] = {"code": -32001, "message": f"unknown tool {name}"}
        else:
            try:
                reply["result"] = await tool.handler(arguments)
            except ExecuteError as err:
                reply["error"] = {"code": err.code, "message": str(err)}
        await self.send_rpc(reply)

    async def wait_closed(self) -> None:
        """Until the server (or the network) ends the connection."""
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def drop(self) -> None:
        """Close TCP without a Close frame."""
        if self._ws is not None:
            self._ws.transport.abort()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None


def _payload(message: dict[str, Any]) -> dict[str, Any]:
    """The JSON-RPC object of a frame, bare or enveloped."""
    if message.get("type") == "mcp" and isinstance(message.get("payload"), dict):
        payload: dict[str, Any] = message["payload"]
        return payload
    return message
