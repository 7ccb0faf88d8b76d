"""The simulator's MCP server follows the firmware's MCP server (docs/protocol.md §5) to the letter."""

import json
from pathlib import Path
from typing import Any

import pytest

from xiaozhi_sim import Property, SimulatedDevice, SimulatorOptions, Tool
from xiaozhi_sim.mcp_server import McpServer


def device(**kwargs: Any) -> SimulatedDevice:
    return SimulatedDevice(SimulatorOptions(url="ws://unused", **kwargs))


@pytest.mark.parametrize(
    "payload",
    [
        "not an object",
        {"id": 1, "method": "tools/list"},  # no jsonrpc
        {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": "1", "method": "tools/list"},  # string ids are dropped
        {"jsonrpc": "2.0", "id": True, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "tools/list"},  # no id
        {"jsonrpc": "2.0", "id": 1, "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "result": {}},  # responses are ignored
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": []},
    ],
)
async def test_dropped_without_reply(payload: Any) -> None:
    assert await device().mcp.handle(payload) is None


async def test_numeric_id_echoed_as_int_and_no_code_in_errors() -> None:
    reply = await device().mcp.handle({"jsonrpc": "2.0", "id": 7.9, "method": "ping"})
    assert reply == {"jsonrpc": "2.0", "id": 7, "error": {"message": "Method not implemented: ping"}}


async def test_initialize_takes_vision() -> None:
    dev = device(camera=True)
    reply = await dev.mcp.handle(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"capabilities": {"vision": {"url": "http://ha/vision", "token": "vt"}}},
        }
    )
    assert reply is not None
    assert reply["result"]["serverInfo"] == {"name": "bread-compact-wifi", "version": "2.4.2"}
    assert (dev.mcp.vision_url, dev.mcp.vision_token) == ("http://ha/vision", "vt")
    assert dev.mcp.find("self.camera.take_photo") is not None


async def test_take_photo_without_vision_fails_like_firmware() -> None:
    reply = await call(device(camera=True), {"name": "self.camera.take_photo", "arguments": {"question": "?"}})
    assert reply["error"] == {"message": "Image explain URL or token is not set"}


async def test_paging_budget_and_cursor_errors() -> None:
    dev = device(extra_tools=40)
    first = await dev.mcp.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"withUserTools": False}}
    )
    assert first is not None
    result = first["result"]
    assert len(json.dumps(result, separators=(",", ":")).encode()) < 8000
    assert result["nextCursor"] not in {t["name"] for t in result["tools"]}
    assert not any("annotations" in t for t in result["tools"])
    unknown = await dev.mcp.handle(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "self.nope"}}
    )
    assert unknown is not None
    assert unknown["error"] == {"message": "Failed to add tool self.nope because of payload size limit"}
    server = McpServer("b", "1")

    async def ok(_args: dict[str, Any]) -> bool:
        return True

    server.add_tool(Tool("self.huge", "x" * 9000, [], ok))
    huge = await server.handle({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert huge is not None
    assert huge["error"] == {"message": "Failed to add tool self.huge because of payload size limit"}


async def call(dev: SimulatedDevice, params: Any) -> dict[str, Any]:
    reply = await dev.mcp.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    assert reply is not None
    return reply


async def test_call_argument_rules() -> None:
    dev = device(lamp=True)
    assert (await call(dev, {}))["error"]["message"] == "Missing name"
    assert (await call(dev, {"name": "self.x"}))["error"]["message"] == "Unknown tool: self.x"
    bad_args = await call(dev, {"name": "self.reboot", "arguments": [1]})
    assert bad_args["error"]["message"] == "Invalid arguments"
    # Integers are truncated; extra arguments ignored.
    ok = await call(dev, {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 42.9, "x": 1}})
    assert ok["result"] == {"content": [{"type": "text", "text": "true"}], "isError": False}
    assert dev.state.volume == 42
    low = await call(dev, {"name": "self.audio_speaker.set_volume", "arguments": {"volume": -1}})
    assert low["error"]["message"] == "Value is below minimum allowed: 0"
    # The upgrade_firmware bug: url has its description as default, so it is not required.
    upgrade = await call(dev, {"name": "self.upgrade_firmware", "arguments": {}})
    assert upgrade["result"]["content"][0]["text"] == "true"
    assert dev.mcp.calls[-1] == (
        "self.upgrade_firmware",
        {"url": "The URL of the firmware binary file to download and install"},
    )
    # Results: bool → "true"/"false", dict → compact JSON text.
    assert (await call(dev, {"name": "self.screen.set_theme", "arguments": {"theme": "pink"}}))["result"]["content"][0][
        "text"
    ] == "false"
    state = await call(dev, {"name": "self.lamp.get_state"})
    assert state["result"]["content"][0]["text"] == '{"power":false}'
    await call(dev, {"name": "self.lamp.turn_on"})
    assert dev.state.lamp_on
    await call(dev, {"name": "self.lamp.turn_off"})
    assert not dev.state.lamp_on


async def test_wrong_type_with_default_takes_default() -> None:
    server = McpServer("b", "1")
    seen: list[dict[str, Any]] = []

    async def record(args: dict[str, Any]) -> int:
        seen.append(args)
        return 3

    server.add_tool(
        Tool("t", "", [Property("flag", "boolean", default=False), Property("n", "integer", default=5)], record)
    )
    reply = await server.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": {"flag": 1, "n": "x"}}}
    )
    assert reply is not None
    assert seen == [{"flag": False, "n": 5}]
    assert reply["result"]["content"][0]["text"] == "3"


async def test_ir_tools_report_errors_as_results() -> None:
    dev = device(ir=True)
    hexed = await call(dev, {"name": "self.ir.send_hex", "arguments": {"hex": "zz"}})
    assert hexed["result"]["isError"] is True
    assert (await call(dev, {"name": "self.ir.send_hex", "arguments": {"hex": "20DF"}}))["result"]["isError"] is False
    assert (await call(dev, {"name": "self.ir.send_named", "arguments": {"name": "tv_power"}}))["result"][
        "isError"
    ] is False


def test_headers() -> None:
    assert device(token="abc", mac="aa:bb:cc:dd:ee:ff", client_id="u", protocol_version=2).websocket.headers() == {
        "Authorization": "Bearer abc",
        "Protocol-Version": "2",
        "Device-Id": "aa:bb:cc:dd:ee:ff",
        "Client-Id": "u",
    }
    assert device(token="Token abc").websocket.headers()["Authorization"] == "Token abc"  # a space: sent as is
    assert "Authorization" not in device(token="").websocket.headers()


def test_hello_is_the_firmware_hello() -> None:
    hello = device().hello()
    assert list(hello) == ["type", "version", "features", "text_font", "transport", "audio_params"]
    assert hello["features"] == {"mcp": True, "glyph_push": True}
    assert hello["audio_params"] == {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60}


async def test_user_only_tools_are_annotated() -> None:
    dev = device()
    reply = await dev.mcp.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"withUserTools": True}})
    assert reply is not None
    tools = {t["name"]: t for t in reply["result"]["tools"]}
    assert tools["self.reboot"]["annotations"] == {"audience": ["user"]}
    assert "required" not in tools["self.get_device_status"]["inputSchema"]
    status = await call(dev, {"name": "self.get_device_status"})
    assert json.loads(status["result"]["content"][0]["text"]) == {
        "audio_speaker": {"volume": 70},
        "screen": {"brightness": 80, "theme": "light"},
        "battery": {"level": 85, "charging": False},
        "network": {"type": "wifi", "ssid": "MyWiFi", "signal": "strong"},
        "chip": {"temperature": 41.5},
    }


def test_client_id_is_made_once_and_kept_in_flash(tmp_path: Path) -> None:
    """NVS ``board/uuid``: a new device makes its Client-Id once; every later boot sends the same."""
    flash = tmp_path / "nvs.json"
    first = device(nvs_path=str(flash))
    again = device(nvs_path=str(flash))
    assert again.options.client_id == first.options.client_id
    assert again.system_info["uuid"] == first.options.client_id  # the body's uuid is the same value
    assert json.loads(flash.read_text())["board"]["uuid"] == first.options.client_id
    flash.unlink()  # NVS erased: a new identity, as on the firmware
    assert device(nvs_path=str(flash)).options.client_id != first.options.client_id


def test_activation_v2_headers_and_hmac() -> None:
    """A board with a factory serial number: Activation-Version 2, its serial, an HMAC of the challenge."""
    from xiaozhi_sim.ota import OtaClient

    dev = device(serial_number="SN" + "0" * 30)
    ota = OtaClient(dev, "http://unused/ota/")
    headers = ota.headers()
    assert (headers["Activation-Version"], headers["Serial-Number"]) == ("2", "SN" + "0" * 30)
    body = json.loads(ota.activate_body("abc"))
    assert body["algorithm"] == "hmac-sha256"
    assert (body["serial_number"], body["challenge"]) == ("SN" + "0" * 30, "abc")
    assert len(body["hmac"]) == 64
    assert json.loads(OtaClient(device(), "http://unused/ota/").activate_body("abc")) == {}


def test_the_decode_queue_of_each_generation() -> None:
    """2.4 holds 40 packets (2.4 s), 2.5 holds 20 (1.2 s); a burst beyond that is dropped."""

    for version, limit in (("2.4.2", 40), ("2.5.0", 20)):
        device = SimulatedDevice(SimulatorOptions(url="", firmware_version=version))
        device.device_state = "speaking"
        for _ in range(30):
            device.on_audio(b"\xf8\xff\xfe")  # a burst, all at once
        assert device.decode_queue == limit
        assert device.queue_dropped == max(0, 30 - limit)


async def test_a_bench_device_stamps_what_it_hears_without_decoding() -> None:
    """``decode_speaker=False`` (the bench's receiver): arrivals counted and stamped, nothing decoded;
    the default decodes, as the firmware plays."""
    from xiaozhi_sim.speaker import on_tts
    from xiaozhi_sim.voice import mic_packets

    packets = mic_packets(bytes(1920 * 3))
    assert mic_packets(bytes(1920 * 3)) is packets  # one clip, one encoding, however many devices say it
    for decode, heard in ((True, True), (False, False)):
        sim = SimulatedDevice(SimulatorOptions(url="", decode_speaker=decode))
        await on_tts(sim, {"type": "tts", "state": "start"})
        for packet in packets:
            sim.on_audio(packet)
        assert len(sim.audio_at) == len(packets)
        assert bool(sim.speaker_pcm) is heard
