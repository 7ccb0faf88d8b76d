"""Every client family of the protocol notes on the one endpoint, told apart by what they send.

- the ``mcp/registerTools`` dialect (bare JSON-RPC; seeds/003),
- py-xiaozhi-like desktop clients (seeds/002),
- browser test pages (query-string auth, a hello with only ``features``, typed text).
"""

import asyncio
from collections.abc import AsyncIterator
import json
import logging
from typing import Any

from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
import pytest

from custom_components.xiaozhi_local.const import DOMAIN, EVENT_NOTIFICATION, EVENT_TOOL_ERROR, WS_PATH
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.register_client import RegisterClientOptions, RegisterToolsClient
from xiaozhi_sim.voice import frame, mic_packets

from .conftest import MAC, TOKEN, DeviceFactory, wait_for, wait_settled, ws_url
from .helpers import EventWaiter, announce, hub_device
from .internals import hello_of
from .voice import Voice, speech_pcm


def tts_stop(message: dict[str, Any]) -> bool:
    return message.get("type") == "tts" and message.get("state") == "stop"


async def call(hass: HomeAssistant, tool: str, arguments: dict[str, Any] | None = None, **extra: Any) -> Any:
    data: dict[str, Any] = {"device_id": hub_device(hass).device_id, "tool": tool, **extra}
    if arguments is not None:
        data["arguments"] = arguments
    return await hass.services.async_call(DOMAIN, "call_tool", data, blocking=True, return_response=True)


@pytest.fixture
async def register_client(
    hass: HomeAssistant, setup_integration: Any, client: TestClient[Any, Any]
) -> AsyncIterator[RegisterToolsClient]:
    """A registerTools client that has not connected yet (bare JSON-RPC, no hello)."""
    sim = RegisterToolsClient(RegisterClientOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    yield sim
    await sim.drop()


# -- the registerTools dialect -------------------------------------------------------------------


async def test_register_tools(
    hass: HomeAssistant, entity_registry: er.EntityRegistry, register_client: RegisterToolsClient
) -> None:
    answer = await register_client.connect()
    # The same id, the result the notes show, and bare (no envelope) as the client spoke.
    assert answer["id"] == "client-reg-001"
    assert answer["result"]["status"] == "registered"
    assert answer["result"]["message"]
    assert "type" not in register_client.received[0]
    xdev = hub_device(hass)
    await wait_settled(xdev)
    # Remote tools are the device's tools, with their kind; the local one is the server's.
    assert {name: tool.sub_type for name, tool in xdev.tools.items()} == {
        "amplify_volume": "control",
        "set_virtual_human_expression": "control",
        "get_weather": "query",
        "get_battery": "query",
        "read_sensor": "query",
    }
    assert xdev.tools["amplify_volume"].input_schema["required"] == ["level"]
    # The registration was the session's start: no server hello, no MCP initialize sent to it.
    assert not [m for m in register_client.received if m.get("type") == "hello" or m.get("method") == "initialize"]
    # Entities follow as for any device: the argument-less tool that is no query is a button.
    registry = entity_registry
    assert registry.async_get_entity_id("binary_sensor", DOMAIN, f"{MAC}-connected") is not None
    assert registry.async_get_entity_id("button", DOMAIN, f"{MAC}-tool-read_sensor") is not None


async def test_query_tools_wait_for_the_result(hass: HomeAssistant, register_client: RegisterToolsClient) -> None:
    await register_client.connect()
    result = await call(hass, "get_weather", {"city": "上海"})
    assert result["data"] == {"city": "上海", "weather": "晴", "temperature": 25}
    assert result["is_error"] is False
    assert register_client.executed == [("get_weather", {"city": "上海"})]
    # Any JSON value is a result: a number comes back as its text.
    battery = await call(hass, "get_battery")
    assert (battery["text"], battery["data"]) == ("87", None)
    # Every execute went out bare with a unique string id.
    executes = [m for m in register_client.received if m.get("method") == "mcp/tool/execute"]
    ids = [m["id"] for m in executes]
    assert all(isinstance(i, str) for i in ids)
    assert len(set(ids)) == 2
    assert executes[0]["params"] == {"tool_name": "get_weather", "tool_input": {"city": "上海"}}


async def test_query_tool_error(hass: HomeAssistant, register_client: RegisterToolsClient) -> None:
    await register_client.connect()
    with pytest.raises(HomeAssistantError, match="sensor unplugged"):
        await call(hass, "read_sensor")
    returned = await call(hass, "read_sensor", return_errors=True)
    assert returned["is_error"] is True
    assert returned["text"] == "sensor unplugged"


async def test_query_tool_timeout(hass: HomeAssistant, register_client: RegisterToolsClient) -> None:
    await register_client.connect()
    register_client.silent.add("get_weather")
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "get_weather", timeout=0.2)
    assert err.value.translation_key == "timeout"


async def test_control_tools_answer_at_once(hass: HomeAssistant, register_client: RegisterToolsClient) -> None:
    await register_client.connect()
    register_client.silent.add("amplify_volume")  # it never confirms; the call still succeeds
    result = await call(hass, "amplify_volume", {"level": 80}, timeout=60)
    assert result["data"] == {"status": "success"}
    register_client.silent.clear()
    await call(hass, "amplify_volume", {"level": 30})
    await register_client.wait_for(
        lambda m: m.get("method") == "mcp/tool/execute" and m["params"]["tool_input"] == {"level": 30}
    )
    assert register_client.state["volume"] == 30
    # Arguments are validated against the registered schema before anything is sent.
    with pytest.raises(HomeAssistantError, match="level"):
        await call(hass, "amplify_volume", {"level": "loud"})
    assert [name for name, _ in register_client.executed] == ["amplify_volume", "amplify_volume"]


async def test_control_tool_late_error_is_logged_and_fired(
    hass: HomeAssistant, register_client: RegisterToolsClient, caplog: pytest.LogCaptureFixture
) -> None:
    await register_client.connect()
    errors = EventWaiter(hass, EVENT_TOOL_ERROR)
    result = await call(hass, "set_virtual_human_expression", {"expression": "cry"})
    assert result["is_error"] is False  # reported done, as the notes ask
    (event,) = await errors.wait()
    assert event.data == {
        "device_id": hub_device(hass).device_id,
        "mac": MAC,
        "tool": "set_virtual_human_expression",
        "message": "this face is not available",
        "code": -32001,
    }
    assert "set_virtual_human_expression failed after it was reported done" in caplog.text


async def test_second_registration_replaces_the_set(
    hass: HomeAssistant,
    entity_registry: er.EntityRegistry,
    register_client: RegisterToolsClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await register_client.connect()
    xdev = hub_device(hass)
    await wait_settled(xdev)
    assert entity_registry.async_get_entity_id("button", DOMAIN, f"{MAC}-tool-read_sensor") is not None
    answer = await register_client.register([register_client.tools[3].declaration()])
    assert answer["result"]["status"] == "registered"
    await wait_for(xdev, lambda d: set(d.tools) == {"get_battery"})
    # The button of a tool that went away is removed from the registry, and the log says which.
    assert entity_registry.async_get_entity_id("button", DOMAIN, f"{MAC}-tool-read_sensor") is None
    assert "no longer has the tools read_sensor; removed their buttons: button." in caplog.text
    with pytest.raises(HomeAssistantError):
        await call(hass, "get_weather")
    assert (await call(hass, "get_battery"))["text"] == "87"


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        pytest.param({"mac_addr": "AA-BB-CC-DD-EE-FF", "tools": []}, "not the MAC", id="another device's MAC"),
        pytest.param({"mac_addr": "nonsense", "tools": []}, "not a MAC", id="not a MAC"),
        pytest.param({"tools": {"name": "x"}}, "tools must be a list", id="tools not a list"),
        pytest.param({"tools": [{"description": "no name"}]}, "tools[0].name", id="no name"),
        pytest.param({"tools": ["x"]}, "tools[0] must be an object", id="tool not an object"),
        pytest.param({"tools": [{"name": "a", "parameters": "int"}]}, "'a': parameters", id="parameters not a schema"),
        pytest.param(
            {"tools": [{"name": "a", "parameters": {"type": "array"}}]}, "describe an object", id="not an object schema"
        ),
        pytest.param(
            {"tools": [{"name": "a", "parameters": {"type": "object", "required": ["x"]}}]},
            "required x",
            id="required not declared",
        ),
        pytest.param({"tools": [{"name": "a", "sub_type": "maybe"}]}, "sub_type", id="bad sub_type"),
        pytest.param({"tools": [{"name": "a", "main_type": "cloud"}]}, "main_type", id="bad main_type"),
        pytest.param({"tools": [{"name": "a"}, {"name": "a"}]}, "registered twice", id="duplicate"),
        pytest.param("tools", "params must be an object", id="params not an object"),
    ],
)
async def test_invalid_registration(
    hass: HomeAssistant, register_client: RegisterToolsClient, params: Any, problem: str
) -> None:
    await register_client.connect()
    xdev = hub_device(hass)
    await wait_settled(xdev)
    before = dict(xdev.tools)
    answer = await register_client.request("mcp/registerTools", params)
    assert answer["error"]["code"] == -32602
    assert problem in answer["error"]["message"]
    assert xdev.tools == before  # nothing changed
    assert xdev.link is not None  # and the client is still in


async def test_enveloped_dialect_with_hello(
    hass: HomeAssistant, setup_integration: Any, client: TestClient[Any, Any]
) -> None:
    sim = RegisterToolsClient(
        RegisterClientOptions(url=ws_url(client), token=TOKEN, mac=MAC, envelope=True, hello=True, mac_addr=MAC)
    )
    try:
        answer = await sim.connect()
        assert answer["result"]["status"] == "registered"
        assert sim.received[0]["type"] == "hello"
        assert sim.received[1]["type"] == "mcp"  # answered in the envelope it spoke
        result = await call(hass, "get_battery")
        assert result["text"] == "87"
    finally:
        await sim.drop()


async def test_client_requests_get_an_error_never_silence(
    hass: HomeAssistant, register_client: RegisterToolsClient
) -> None:
    await register_client.connect()
    # A "local" tool is the server's: asking for it (or anything we do not serve) is an error reply.
    for method in ("search_web", "tools/call"):
        answer = await register_client.request(method, {"query": "weather"})
        assert answer["error"]["code"] == -32601
        assert method in answer["error"]["message"]
    # A request with an id that is no JSON-RPC id still gets an answer (id null).
    await register_client.send_rpc({"jsonrpc": "2.0", "method": "x", "id": {"bad": 1}})
    bad = await register_client.wait_for(lambda m: "error" in m and m.get("id") is None)
    assert bad["error"]["code"] == -32600


async def test_ai_message_stream(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    """Typed text from a dialect client: the agent's reply streams as chunks, then one final."""
    ready.agent._attr_supports_streaming = True
    ready.agent.thinking = "The user wants the light."
    sim = RegisterToolsClient(RegisterClientOptions(url=ws_url(client), token=TOKEN, mac=MAC, hello=True))
    try:
        await sim.connect()
        await sim.send({"type": "listen", "state": "detect", "text": "is the kitchen light on"})
        final = await sim.wait_ai_final(timeout=15)
        await sim.wait_for(tts_stop, timeout=30)  # the spoken answer went out too
        assert final == ready.agent.reply
        kinds = [kind for kind, _ in sim.ai_messages]
        assert kinds[0] == "thought"
        assert sim.ai_messages[0][1] == "The user wants the light."
        chunks = [content for kind, content in sim.ai_messages if kind == "chunk"]
        assert len(chunks) > 1  # streamed while produced, not at the end
        assert "".join(chunks).strip() == ready.agent.reply
        assert kinds[-1] == "final"
        assert kinds.count("final") == 1
        assert ready.agent.inputs[0].text == "is the kitchen light on"
    finally:
        await sim.drop()


async def test_ai_message_without_streaming_and_for_announcements(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    sim = RegisterToolsClient(RegisterClientOptions(url=ws_url(client), token=TOKEN, mac=MAC, hello=True))
    try:
        await sim.connect()
        await sim.send({"type": "listen", "state": "detect", "text": "hello there"})
        await sim.wait_ai_final(timeout=15)
        await sim.wait_for(tts_stop, timeout=30)
        # An agent that does not stream: its reply is one chunk, then the final.
        assert sim.ai_messages == [("chunk", ready.agent.reply), ("final", ready.agent.reply)]
        sim.ai_messages.clear()
        await announce(hass, "Dinner is ready")
        assert sim.ai_messages == [("chunk", "Dinner is ready"), ("final", "Dinner is ready")]
    finally:
        await sim.drop()


async def test_agent_uses_registered_tools(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    """Registered tools reach conversation agents like MCP tools: a query's value, a control's success."""
    from homeassistant.components import conversation
    from homeassistant.core import Context
    from homeassistant.helpers import llm

    sim = RegisterToolsClient(RegisterClientOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    try:
        await sim.connect()
        await wait_settled(hub_device(hass))
        ready.agent.tool_plan = [
            ("xiaozhi_local__get_weather", {"city": "北京"}),
            ("xiaozhi_local__amplify_volume", {"level": 40}),
        ]
        await conversation.async_converse(
            hass, "weather?", None, Context(), agent_id=ready.agent.entity_id, device_id=hub_device(hass).device_id
        )
        weather, volume = ready.agent.tool_results
        assert weather == llm.ToolResult(data={"city": "北京", "weather": "晴", "temperature": 25})
        assert volume == llm.ToolResult(data={"status": "success"})
        assert "xiaozhi_local__search_web" not in ready.agent.tool_names  # local: the server's, not the client's
    finally:
        await sim.drop()


async def test_stock_firmware_gets_no_ai_messages(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC))
    await sim.connect()
    try:
        await wait_settled(hub_device(hass))
        await announce(hass, "Dinner is ready")
        assert not [p for p in sim.mcp_requests if p.get("method") == "mcp/ai/message"]
    finally:
        await sim.drop()


# -- py-xiaozhi-like desktop clients -------------------------------------------------------------


async def test_py_xiaozhi_client(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device(flavor="py-xiaozhi", ir=True)
    xdev = hub_device(hass)
    await wait_settled(xdev)
    assert device.session_id == ""  # it echoes an empty session id in everything it sends
    assert device.server_hello is not None
    assert "self.ir.send_named" in xdev.tools
    # A tool failure as an isError result: its text reaches the user.
    with pytest.raises(HomeAssistantError, match="未找到红外编码: nope"):
        await call(hass, "self.ir.send_named", {"name": "nope"})
    returned = await call(hass, "self.ir.send_named", {"name": "nope"}, return_errors=True)
    assert returned["is_error"] is True
    assert returned["content"] == [{"type": "text", "text": "未找到红外编码: nope"}]
    # Its own notifications, with an empty session id, still arrive.
    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    await device.send_notification("notifications/state_changed", {"newState": "idle"})
    (event,) = await waiter.wait()
    assert event.data["params"] == {"newState": "idle"}


async def test_py_xiaozhi_voice_with_20ms_frames(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, flavor="py-xiaozhi"))
    await device.connect()
    try:
        await wait_settled(hub_device(hass))
        device.relisten = False
        await device.say(speech_pcm())
        stt = await device.wait_message(lambda m: m.get("type") == "stt", timeout=30)
        heard = float(stt["text"].split()[1])
        assert 1.0 <= heard <= 3.5  # 20 ms packets decoded whole
        await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
        assert len(device.speaker_pcm) > 0
        connection = hub_device(hass).link
        assert connection is not None
        assert connection.audio_frames > 3 * 50  # three times as many packets as 60 ms ones
    finally:
        await device.drop()


async def test_a_py_xiaozhi_session_writes_no_warning(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Auto mode, a turn answered, then frames after HA's VAD ended the turn (what py-xiaozhi, the
    browser page and the load tester always do): counted, never a WARNING of ours."""
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, flavor="py-xiaozhi"))
    await device.connect()
    try:
        await wait_settled(hub_device(hass))
        device.relisten = False
        await device.say(speech_pcm())
        await device.wait_message(lambda m: m.get("type") == "stt", timeout=30)
        for packet in mic_packets(bytes(16000 * 2 * device.frame_ms // 1000 * 10), device.frame_ms):
            await device.send_raw(frame(device.options.protocol_version, packet))  # the microphone goes on
        await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
        connection = hub_device(hass).link
        assert connection is not None
        async with asyncio.timeout(5):
            while not connection.log.counts["audio_outside_turn"]:  # noqa: ASYNC110 - a counter, no event
                await asyncio.sleep(0.01)
    finally:
        await device.drop()
    ours = [r for r in caplog.records if r.name.startswith("custom_components.xiaozhi_local")]
    assert [r.getMessage() for r in ours if r.levelno >= logging.WARNING] == []


async def test_mcp_before_the_hello_is_kept(
    hass: HomeAssistant, setup_integration: Any, client: TestClient[Any, Any]
) -> None:
    """A client that sends MCP before its hello: handled once the session starts, in order."""
    waiter = EventWaiter(hass, EVENT_NOTIFICATION)
    headers = {"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC}
    async with client.ws_connect(WS_PATH, headers=headers) as ws:
        for n in range(2):
            note = {"jsonrpc": "2.0", "method": f"notifications/early{n}", "params": {}}
            await ws.send_str(json.dumps({"session_id": "", "type": "mcp", "payload": note}))
        await ws.send_str(json.dumps({"type": "hello", "features": {"mcp": False}, "extra": [1, 2]}))
        hello = json.loads((await ws.receive()).data)
        assert hello["type"] == "hello"
        events = await waiter.wait(2)
        assert [e.data["method"] for e in events] == ["notifications/early0", "notifications/early1"]


async def test_hellos_with_other_audio_params(
    hass: HomeAssistant, setup_integration: Any, client: TestClient[Any, Any]
) -> None:
    headers = {"authorization": f"bearer {TOKEN}", "device-id": MAC.upper().replace(":", "-"), "protocol-version": "x"}
    async with client.ws_connect(WS_PATH, headers=headers) as ws:
        hello = {
            "audio_params": {"frame_duration": 20, "sample_rate": 48000, "format": "opus"},
            "transport": "websocket",
            "type": "hello",
        }
        await ws.send_str(json.dumps(hello))
        reply = await ws.receive()
        assert reply.type is WSMsgType.TEXT
        assert json.loads(reply.data)["type"] == "hello"
        conn = await hub_device(hass).async_wait_ready(5)
        device_hello = hello_of(conn)
        assert device_hello is not None
        assert device_hello.audio_params.sample_rate == 48000
        assert conn.client.protocol_version == 1  # an unreadable version falls back to 1


# -- browser test pages --------------------------------------------------------------------------


async def test_browser_client_typed_text(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    device = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, flavor="browser"))
    assert device.websocket.headers() == {}
    await device.connect()
    try:
        xdev = hub_device(hass)
        await wait_settled(xdev)
        assert "self.get_device_status" in xdev.tools  # its mock MCP tools were listed
        device.listening_mode = "manual"
        await device.type_text("what time is it")
        await device.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", timeout=30)
        # Answered with text and audio.
        assert ready.agent.inputs[0].text == "what time is it"
        assert [m["text"] for m in device.log if m.get("state") == "sentence_start"] == [
            "The kitchen light is on.",
            "Anything else?",
        ]
        assert len(device.speaker_pcm) > 0
    finally:
        await device.drop()


async def test_py_xiaozhi_volume_is_read_from_get_volume(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    """py-xiaozhi has no status object: its Volume comes from ``self.audio_speaker.get_volume``."""
    from .test_entities import entity_id

    device = await make_device(flavor="py-xiaozhi")
    await wait_settled(hub_device(hass))
    volume = entity_id(hass, "number:volume")
    state = hass.states.get(volume)
    assert state is not None
    assert float(state.state) == 70
    await hass.services.async_call("number", "set_value", {"entity_id": volume, "value": 35}, blocking=True)
    assert device.state.volume == 35
    state = hass.states.get(volume)
    assert state is not None
    assert float(state.state) == 35  # read back at once, not "unknown"


async def test_xiaozhi_sdk_tool_names_map_to_the_firmware_rows(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    """``set_volume``, ``get_device_status``: the same entities as the firmware's ``self.…`` tools."""
    from .test_entities import entity_id

    device = await make_device(flavor="xiaozhi-sdk")
    xdev = hub_device(hass)
    await wait_settled(xdev)
    assert "set_volume" in {tool.name for tool in xdev.tools.values()}  # called by its own name
    volume = entity_id(hass, "number:volume")
    await hass.services.async_call("number", "set_value", {"entity_id": volume, "value": 20}, blocking=True)
    assert device.state.volume == 20
    state = hass.states.get(volume)
    assert state is not None
    assert float(state.state) == 20
    assert "set_volume" in [name for name, _args in device.mcp.calls]
    battery = hass.states.get(entity_id(hass, "sensor:battery"))
    assert battery is not None
    assert battery.state == "85"
    # call_tool takes either name.
    for name in ("set_volume", "self.audio_speaker.set_volume"):
        assert (await call(hass, name, {"volume": 30}))["text"] == "true"
