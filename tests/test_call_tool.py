"""``xiaozhi_local.call_tool`` through the real endpoint and the simulator."""

import asyncio
from typing import Any

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
from homeassistant.helpers import device_registry as dr
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

from custom_components.xiaozhi_local.const import DOMAIN
from xiaozhi_sim import SimulatedDevice, Tool

from .conftest import MAC, MAC2, DeviceFactory, wait_settled
from .helpers import hub_device
from .internals import hub_of, mcp_of


async def call(
    hass: HomeAssistant, tool: str, arguments: dict[str, Any] | None = None, mac: str = MAC, **extra: Any
) -> Any:
    data: dict[str, Any] = {"device_id": hub_device(hass, mac).device_id, "tool": tool, **extra}
    if arguments is not None:
        data["arguments"] = arguments
    return await hass.services.async_call(DOMAIN, "call_tool", data, blocking=True, return_response=True)


def add_hanging_tool(device: SimulatedDevice) -> asyncio.Event:
    """A tool that never answers (the firmware's main task is stuck); returns 'it started'."""
    started = asyncio.Event()

    async def hang(_args: dict[str, Any]) -> bool:
        started.set()
        await asyncio.Event().wait()
        return True

    device.mcp.add_tool(Tool("self.test.hang", "Never answers", [], hang))
    return started


async def test_success_with_response(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device()
    result = await call(hass, "self.audio_speaker.set_volume", {"volume": 35})
    assert result == {"content": [{"type": "text", "text": "true"}], "text": "true", "data": None, "is_error": False}
    assert device.state.volume == 35
    status = await call(hass, "self.get_device_status")
    assert status["data"]["audio_speaker"] == {"volume": 35}
    assert status["is_error"] is False
    # User-only tools were listed (withUserTools) and can be called.
    info = await call(hass, "self.get_system_info")
    assert info["data"]["mac_address"] == MAC


async def test_without_response(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device()
    await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": hub_device(hass).device_id, "tool": "self.screen.set_theme", "arguments": {"theme": "dark"}},
        blocking=True,
    )
    assert device.state.theme == "dark"


async def test_unknown_tool(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    await make_device()
    with pytest.raises(ServiceValidationError) as err:
        await call(hass, "self.nope")
    assert err.value.translation_key == "unknown_tool"
    assert "self.nope" in str(err.value)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, "arguments.volume is required"),
        ({"volume": "loud"}, "arguments.volume must be of type integer"),
        ({"volume": 101}, "arguments.volume must be at most 100"),
    ],
)
async def test_bad_arguments_are_not_sent(
    hass: HomeAssistant, make_device: DeviceFactory, arguments: dict[str, Any], text: str
) -> None:
    device = await make_device()
    await wait_settled(hub_device(hass))
    before = len(device.mcp_requests)
    with pytest.raises(ServiceValidationError) as err:
        await call(hass, "self.audio_speaker.set_volume", arguments)
    assert err.value.translation_key == "invalid_arguments"
    assert text in str(err.value)
    assert len(device.mcp_requests) == before


async def test_device_error_without_code(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device(press_to_talk=True)
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "self.set_press_to_talk", {"mode": "hold"})
    assert err.value.translation_key == "device_error"
    assert "Invalid mode: hold" in str(err.value)
    error_reply = next(p for p in device.mcp.replies if "error" in p)
    assert error_reply["error"] == {"message": "Invalid mode: hold"}  # no code on the wire
    response = await call(hass, "self.set_press_to_talk", {"mode": "hold"}, return_errors=True)
    assert response == {
        "content": [{"type": "text", "text": "Invalid mode: hold"}],
        "text": "Invalid mode: hold",
        "data": None,
        "is_error": True,
    }
    assert (await call(hass, "self.set_press_to_talk", {"mode": "click_to_talk"}))["text"] == "true"


async def test_is_error_result(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    await make_device(ir=True)
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "self.ir.send_named", {"name": "radio"})
    assert err.value.translation_key == "device_error"
    assert "未找到红外编码: radio" in str(err.value)
    response = await call(hass, "self.ir.send_named", {"name": "radio"}, return_errors=True)
    assert response == {
        "content": [{"type": "text", "text": "未找到红外编码: radio"}],
        "text": "未找到红外编码: radio",
        "data": None,
        "is_error": True,
    }
    ok = await call(hass, "self.ir.list_codes")
    assert ok["data"] == {"codes": ["ac_off", "tv_power"]}


async def test_timeout(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device(connect=False)
    started = add_hanging_tool(device)
    await device.connect()
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "self.test.hang", timeout=0.2)
    assert started.is_set()
    assert err.value.translation_key == "timeout"
    connection = hub_device(hass).link
    assert connection is not None
    assert mcp_of(connection).pending_count == 0


async def test_device_disconnects_mid_call(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    device = await make_device(connect=False)
    started = add_hanging_tool(device)
    await device.connect()
    await hub_device(hass).async_wait_ready(5)
    task = asyncio.create_task(call(hass, "self.test.hang", timeout=60))
    await started.wait()
    await device.drop()  # TCP gone, no Close frame
    with pytest.raises(HomeAssistantError) as err:
        await task
    assert err.value.translation_key == "connection_lost"
    assert "disconnected" in str(err.value)


async def test_device_offline(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    await make_device()  # the other device is connected; MAC2 is not
    # A condition of the moment, not wrong input: a HomeAssistantError (not a validation error).
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "self.get_device_status", mac=MAC2)
    assert not isinstance(err.value, ServiceValidationError)
    assert err.value.translation_key == "device_offline"
    assert "Desk is not connected" in str(err.value)


@pytest.fixture
async def rest_api(hass: HomeAssistant, setup_integration: Any) -> None:
    """HA's REST API, set up before the HTTP server starts (its router is frozen then)."""
    assert await async_setup_component(hass, "api", {})


async def test_device_offline_over_the_rest_api(
    hass: HomeAssistant,
    rest_api: None,
    make_device: DeviceFactory,
    hass_client: ClientSessionGenerator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What an automation tool calling the REST API gets: Home Assistant's answer to a runtime error
    (500, as for every integration's device that cannot be reached), with the message."""
    await make_device()
    desk = hub_of(hass).devices[MAC2]
    http = await hass_client()
    response = await http.post(
        "/api/services/xiaozhi_local/call_tool",
        json={"device_id": desk.device_id, "tool": "self.get_device_status"},
    )
    assert response.status == 500
    assert "Desk is not connected" in (await response.json())["message"]


async def test_unknown_device(hass: HomeAssistant, device_registry: dr.DeviceRegistry, client: Any) -> None:
    other = device_registry.async_get_or_create(
        config_entry_id=hass.config_entries.async_entries(DOMAIN)[0].entry_id, identifiers={("other", "x")}
    )
    for device_id in ("nope", other.id):
        with pytest.raises(ServiceValidationError) as err:
            await hass.services.async_call(
                DOMAIN, "call_tool", {"device_id": device_id, "tool": "x"}, blocking=True, return_response=True
            )
        assert err.value.translation_key == "unknown_device"


async def test_busy(hass: HomeAssistant, make_device: DeviceFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    device = await make_device(connect=False)
    started = add_hanging_tool(device)
    await device.connect()
    await wait_settled(hub_device(hass))
    mcp = mcp_of(await hub_device(hass).async_wait_ready(5))
    monkeypatch.setattr(mcp, "_max_pending", 1)
    task = asyncio.create_task(call(hass, "self.test.hang", timeout=60))
    await started.wait()  # the first call is in flight
    assert mcp.pending_count == 1
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "self.get_device_status")
    assert err.value.translation_key == "busy"
    await device.drop()
    with pytest.raises(HomeAssistantError):
        await task


async def test_call_waits_for_discovery(hass: HomeAssistant, make_device: DeviceFactory) -> None:
    """A call right after the hello waits for the tool list instead of calling the tool unknown."""
    device = await make_device(connect=False)
    gate = asyncio.Event()
    original = device.mcp.handle

    async def slow_list(payload: Any) -> Any:
        if isinstance(payload, dict) and payload.get("method") == "tools/list":
            await gate.wait()
        return await original(payload)

    device.mcp.handle = slow_list  # type: ignore[method-assign]
    await device.connect()
    task = asyncio.create_task(call(hass, "self.get_device_status"))
    await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    assert (await task)["data"]["battery"]["level"] == 85


async def test_discovery_timeout(
    hass: HomeAssistant, make_device: DeviceFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from custom_components.xiaozhi_local.tools import discovery

    monkeypatch.setattr(discovery, "DISCOVERY_TIMEOUT", 0.1)
    device = await make_device(connect=False)
    original = device.mcp.handle

    async def never_list(payload: Any) -> Any:
        if isinstance(payload, dict) and payload.get("method") == "tools/list":
            return None  # dropped, as the firmware drops what it cannot parse
        return await original(payload)

    device.mcp.handle = never_list  # type: ignore[method-assign]
    await device.connect()
    await hub_device(hass).async_wait_ready(5)
    assert "could not list its tools" in caplog.text
    with pytest.raises(HomeAssistantError):
        await call(hass, "self.get_device_status")


@pytest.mark.parametrize("firmware", ["2.4.2", "2.5.0"])
async def test_both_firmware_generations_give_the_same_clear_errors(
    hass: HomeAssistant, make_device: DeviceFactory, firmware: str
) -> None:
    """2.5 answers with JSON-RPC codes and refuses a wrongly typed argument; 2.4.2 calls it missing."""
    device = await make_device(firmware_version=firmware)
    xdev = hub_of(hass).devices[MAC]
    await wait_settled(xdev)
    with pytest.raises(HomeAssistantError) as unknown:
        await xdev.async_press("self.no_such_tool")
    assert unknown.value.translation_key == "unknown_tool"
    with pytest.raises(HomeAssistantError) as typed:
        await xdev.async_press("self.audio_speaker.set_volume", {"volume": "loud"})
    assert typed.value.translation_key == "invalid_arguments"
    assert "volume" in (typed.value.translation_placeholders or {})["errors"]
    errors = [reply["error"] for reply in device.mcp.replies if "error" in reply]
    assert all(("code" in error) is (firmware == "2.5.0") for error in errors)


async def test_one_deadline_covers_the_wait_for_tools_and_the_call(
    hass: HomeAssistant, make_device: DeviceFactory
) -> None:
    """Its tools come after 0.6 s and the call takes 0.6 s: with ``timeout: 1`` that is too late
    (before, each step had the whole timeout and the action took up to twice as long)."""
    device = await make_device(connect=False)
    original = device.mcp.handle

    async def slow(payload: Any) -> Any:
        if isinstance(payload, dict) and payload.get("method") in ("tools/list", "tools/call"):
            await asyncio.sleep(0.6)
        return await original(payload)

    device.mcp.handle = slow  # type: ignore[method-assign]
    await device.connect()
    with pytest.raises(HomeAssistantError) as err:
        await call(hass, "self.get_device_status", timeout=1)
    assert err.value.translation_key == "timeout"
    assert await call(hass, "self.get_device_status", timeout=5)  # its tools known: the call alone fits
