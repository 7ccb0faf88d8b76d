"""Device tools for conversation agents (the llm platform and the "Xiaozhi devices" API)."""

import re
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.components import conversation
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import llm

from custom_components.xiaozhi_local.const import DOMAIN
from custom_components.xiaozhi_local.llm import MAX_NAME, XiaozhiTool, offered, tool_name
from custom_components.xiaozhi_local.protocol.mcp import McpTool
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .conftest import MAC, MAC2, TOKEN, TOKEN2, wait_settled, ws_url
from .internals import hub_of
from .voice import Voice

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


async def connect(
    hass: HomeAssistant, client: TestClient[Any, Any], mac: str = MAC, token: str = TOKEN, **kw: Any
) -> SimulatedDevice:
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=token, mac=mac, **kw))
    await sim.connect()
    await wait_settled(hub_of(hass).devices[mac])
    return sim


def device_id(hass: HomeAssistant, mac: str = MAC) -> str:
    return str(hub_of(hass).devices[mac].device_id)


async def api_tools(hass: HomeAssistant, api_id: str, device: str | None) -> llm.APIInstance:
    context = llm.LLMContext(
        platform="test", context=Context(), language="en", assistant="conversation", device_id=device
    )
    return await llm.async_get_api(hass, api_id, context)


async def test_agent_calls_a_device_tool(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    """An agent, talking through the device, turns its volume down and reads its status."""
    sim = await connect(hass, client)
    ready.agent.tool_plan = [
        ("xiaozhi_local__self_audio_speaker_set_volume", {"volume": 25}),
        ("xiaozhi_local__self_get_device_status", {}),
    ]
    await conversation.async_converse(
        hass, "turn your volume down", None, Context(), agent_id=ready.agent.entity_id, device_id=device_id(hass)
    )
    assert ("self.audio_speaker.set_volume", {"volume": 25}) in sim.mcp.calls
    set_result, status = ready.agent.tool_results
    assert set_result == llm.ToolResult(data={"result": "true"})
    assert status.data["audio_speaker"] == {"volume": 25}
    assert "xiaozhi_local__self_reboot" not in ready.agent.tool_names
    # Merged into the built-in Assist API: the agent also got tools of other integrations.
    assert any(not name.startswith("xiaozhi_local__") for name in ready.agent.tool_names)
    await sim.drop()


async def test_own_device_tools_and_exclusions(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    sim = await connect(hass, client, ir=True, lamp=True, camera=True, press_to_talk=True)
    api = await api_tools(hass, llm.LLM_API_ASSIST, device_id(hass))
    ours = {t.name: t for t in api.tools if isinstance(t, XiaozhiTool)}
    assert all(NAME_RULE.match(name) for name in ours)
    # Every stock tool maps back to its real name, and each name is unique.
    for name, tool in ours.items():
        assert tool.tool.name in {t.name for t in sim.mcp.tools}
        assert tool.integration == DOMAIN
        assert name.startswith("xiaozhi_local__")
    real = {tool.tool.name for tool in ours.values()}
    assert "self.audio_speaker.set_volume" in real
    assert "self.camera.take_photo" in real
    for hidden in ("self.reboot", "self.get_system_info", "self.upgrade_firmware", "self.assets.set_download_url"):
        assert hidden not in real
    assert ours["xiaozhi_local__self_get_device_status"].annotations.read_only
    assert not ours["xiaozhi_local__self_audio_speaker_set_volume"].annotations.read_only
    # The device's own guidance stays in the description.
    assert "self.get_device_status" in (ours["xiaozhi_local__self_audio_speaker_set_volume"].description or "")
    await sim.drop()


async def test_other_requests_see_connected_devices_by_name(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    one = await connect(hass, client)
    api = await api_tools(hass, llm.LLM_API_ASSIST, None)
    names = [t.name for t in api.tools if isinstance(t, XiaozhiTool)]
    assert "xiaozhi_local__kitchen__self_audio_speaker_set_volume" in names
    assert not any("__desk__" in n for n in names)  # Desk is not connected
    two = await connect(hass, client, MAC2, TOKEN2)
    api = await api_tools(hass, llm.LLM_API_ASSIST, None)
    tools = {t.name: t for t in api.tools if isinstance(t, XiaozhiTool)}
    assert "xiaozhi_local__desk__self_audio_speaker_set_volume" in tools
    assert (tools["xiaozhi_local__desk__self_audio_speaker_set_volume"].description or "").startswith("[Desk] ")
    result = await api.async_call_tool(
        llm.ToolInput("xiaozhi_local__desk__self_audio_speaker_set_volume", {"volume": 10})
    )
    assert result == llm.ToolResult(data={"result": "true"})
    assert two.state.volume == 10
    assert one.state.volume == 70
    for sim in (one, two):
        await sim.drop()


async def test_separate_api(hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]) -> None:
    sim = await connect(hass, client)
    assert any(api.id == DOMAIN and api.name == "Xiaozhi devices" for api in llm.async_get_apis(hass))
    api = await api_tools(hass, DOMAIN, device_id(hass))
    assert api.tools
    assert all(isinstance(t, XiaozhiTool) for t in api.tools)
    result = await api.async_call_tool(llm.ToolInput("xiaozhi_local__self_screen_set_theme", {"theme": "dark"}))
    assert result.error is False
    assert sim.state.theme == "dark"
    await sim.drop()


async def test_errors_come_back_as_error_results(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    sim = await connect(hass, client, ir=True)
    api = await api_tools(hass, llm.LLM_API_ASSIST, device_id(hass))
    before = len(sim.mcp.calls)
    bad = await api.async_call_tool(llm.ToolInput("xiaozhi_local__self_audio_speaker_set_volume", {"volume": 500}))
    assert bad.error
    assert bad.data["details"] == ["arguments.volume must be at most 100"]
    assert len(sim.mcp.calls) == before  # nothing was sent
    refused = await api.async_call_tool(llm.ToolInput("xiaozhi_local__self_ir_send_named", {"name": "radio"}))
    assert refused == llm.ToolResult(data={"error": "未找到红外编码: radio", "kind": "failed"}, error=True)
    # The device leaves; a request from it (e.g. a follow-up) gets an error result that says so.
    await sim.drop()
    hub = hub_of(hass)
    await hub.async_wait_no_connections()
    gone = await api.async_call_tool(llm.ToolInput("xiaozhi_local__self_get_device_status", {}))
    assert gone.error
    assert "not connected" in str(gone.data["error"])
    assert await api_tools(hass, llm.LLM_API_ASSIST, None) is not None


async def test_no_tools_without_devices(hass: HomeAssistant, ready: Voice) -> None:
    api = await api_tools(hass, llm.LLM_API_ASSIST, None)
    assert not any(isinstance(t, XiaozhiTool) for t in api.tools)


def test_names_for_every_stock_tool_and_collisions() -> None:
    sim = SimulatedDevice(SimulatorOptions(url="", ir=True, lamp=True, camera=True, press_to_talk=True, extra_tools=5))
    taken: set[str] = set()
    names = {tool.name: tool_name(tool.name, None, taken) for tool in sim.mcp.tools}
    assert len(set(names.values())) == len(names)
    assert all(NAME_RULE.match(n) for n in names.values())
    assert names["self.audio_speaker.set_volume"] == "xiaozhi_local__self_audio_speaker_set_volume"
    # Names that sanitise alike, and names too long, stay distinct and valid.
    taken = set()
    a = tool_name("self.a.b", None, taken)
    b = tool_name("self_a_b", None, taken)
    long1 = tool_name("self." + "x" * 80, "living_room", taken)
    long2 = tool_name("self." + "x" * 80 + ".y", "living_room", taken)
    assert len({a, b, long1, long2}) == 4
    assert all(NAME_RULE.match(n) and len(n) <= MAX_NAME for n in (a, b, long1, long2))


def test_offered() -> None:
    assert offered(McpTool("self.audio_speaker.set_volume", "", {}))
    assert not offered(McpTool("self.get_system_info", "", {}, user_only=True))
    assert not offered(McpTool("self.system.reconfigure_wifi", "", {}))
    assert not offered(McpTool("self.otto.factory_reset", "", {}))


async def test_a_sane_number_of_tools_per_device(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    from custom_components.xiaozhi_local.llm import MAX_TOOLS_PER_DEVICE

    sim = await connect(hass, client, extra_tools=120)
    api = await api_tools(hass, llm.LLM_API_ASSIST, device_id(hass))
    ours = [t for t in api.tools if isinstance(t, XiaozhiTool)]
    assert len(ours) == MAX_TOOLS_PER_DEVICE
    # The device's descriptions are kept as they are.
    extra = next(t for t in ours if t.tool.name == "self.extra.tool_000")
    assert extra.description == sim.mcp.find("self.extra.tool_000").description  # type: ignore[union-attr]
    await sim.drop()


async def test_the_same_tool_from_both_apis_is_one_tool(
    hass: HomeAssistant, ready: Voice, client: TestClient[Any, Any]
) -> None:
    """Device control (Assist) and Xiaozhi devices both offer a device's tools: equal objects, so that
    Home Assistant 2026.11 merges them into one tool under its own name (checked on 2026.11 by the
    smoke run); a different device's or a renamed tool is not equal."""
    sim = await connect(hass, client)
    for device in (device_id(hass), None):
        assist = {
            t.name: t for t in (await api_tools(hass, llm.LLM_API_ASSIST, device)).tools if isinstance(t, XiaozhiTool)
        }
        ours = {t.name: t for t in (await api_tools(hass, DOMAIN, device)).tools}
        assert assist.keys() == ours.keys()
        for name, tool in ours.items():
            assert tool == assist[name]
            assert hash(tool) == hash(assist[name])
            assert tool is not assist[name]
    own = (await api_tools(hass, DOMAIN, device_id(hass))).tools
    every = (await api_tools(hass, DOMAIN, None)).tools
    assert not set(own) & set(every)  # named and described per device when several may be meant
    assert own[0] != own[1]
    await sim.drop()
