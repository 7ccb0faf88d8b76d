"""``python -m xiaozhi_sim`` as a separate process against the test HA's endpoint."""

import asyncio
import json
import os
from pathlib import Path
import sys
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from ..conftest import CLIENT_ID, MAC, TOKEN, wait_for, ws_url
from ..helpers import announce, wait_entity
from ..internals import hub_of

ROOT = Path(__file__).parents[2]


async def run_cli(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xiaozhi_sim",
        *args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_cli_connects_and_leaves_when_closed(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    proc = await run_cli("--url", ws_url(client), "--token", TOKEN, "--mac", MAC.upper(), "--ir")
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.decode().startswith(f"connected as {MAC}")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: "self.ir.send_named" in d.tools, timeout=30)
    assert xdev.link is not None
    await xdev.link.async_close("test over")  # the server ends the conversation
    out, _err = await asyncio.wait_for(proc.communicate(), 30)
    assert "disconnected" in out.decode()
    assert proc.returncode == 0


async def test_cli_refused(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    proc = await run_cli("--url", ws_url(client), "--token", "wrong", "--mac", MAC)
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert "401" in err.decode()


async def test_cli_boots_through_ota(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """``--ota``: the paired device learns its URL and token from the OTA answer, then connects.

    Its flash (``--nvs``) holds the Client-Id it paired with; the answer is stored there too.
    The hub hands out no MQTT here: the device stays on WebSocket.
    """
    ota, flash = await booted_flash(hass, setup_integration, client, tmp_path, mqtt=False)
    proc = await run_cli("--ota", ota, "--mac", MAC, "--nvs", str(flash), "--client-id", "ignored: flash has one")
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.decode().startswith(f"connected as {MAC}")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None, timeout=30)
    assert xdev.link is not None
    await xdev.link.async_close("test over")
    await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    stored = json.loads(flash.read_text())
    assert stored["board"] == {"uuid": CLIENT_ID}
    assert stored["websocket"]["token"] == TOKEN


async def test_cli_register_flavor(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """``--flavor register``: a mcp/registerTools client from the command line."""
    proc = await run_cli("--url", ws_url(client), "--token", TOKEN, "--mac", MAC, "--flavor", "register")
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.decode().startswith("registered: {'status': 'registered'")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: "amplify_volume" in d.tools, timeout=30)
    assert xdev.link is not None
    await xdev.link.async_close("test over")
    out, _err = await asyncio.wait_for(proc.communicate(), 30)
    assert "disconnected" in out.decode()
    assert proc.returncode == 0


async def booted_flash(
    hass: HomeAssistant, entry: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path, *, mqtt: bool = True
) -> tuple[str, Path]:
    """Devices are given the test server's URLs; the OTA URL, and a flash holding the paired Client-Id."""
    hass.config_entries.async_update_entry(
        entry, options={"websocket_url": ws_url(client), "mqtt": mqtt, "silence_timeout": 1}
    )
    await hass.async_block_till_done()
    flash = tmp_path / "flash.json"
    flash.write_text(json.dumps({"board": {"uuid": CLIENT_ID}}))
    return str(client.make_url("/api/xiaozhi_local/ota/")), flash


async def typing_device(
    hass: HomeAssistant,
    entry: MockConfigEntry,
    client: TestClient[Any, Any],
    tmp_path: Path,
    *args: str,
    mqtt: bool = True,
) -> tuple[asyncio.subprocess.Process, Path]:
    """The demo's device (``--type-from FIFO``, as script/develop runs it), with ``args``; its pipe."""
    ota, flash = await booted_flash(hass, entry, client, tmp_path, mqtt=mqtt)
    fifo = tmp_path / "questions"
    os.mkfifo(fifo)
    proc = await run_cli("--ota", ota, "--mac", MAC, "--nvs", str(flash), *args, "--type-from", str(fifo))
    assert proc.stdout is not None
    return proc, fifo


async def test_cli_stays_online_over_mqtt(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """``--ota`` with an answer that carries ``mqtt``: online from boot; a restart brings it back."""
    ota, flash = await booted_flash(hass, setup_integration, client, tmp_path)
    proc = await run_cli("--ota", ota, "--mac", MAC, "--nvs", str(flash), "--reconnect", "--mqtt-reconnect", "0.1")
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.decode().startswith(f"connected as {MAC} over MQTT")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None, timeout=30)
    assert xdev.link is not None
    assert xdev.link.transport_name == "mqtt"
    await xdev.link.async_close("test: the link drops")
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().startswith("disconnected")
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().startswith("connected as")
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)
    assert json.loads(flash.read_text())["mqtt"]["username"] == MAC


async def test_cli_types_questions_from_a_pipe(
    hass: HomeAssistant, ready: Any, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """``--type-from FIFO`` (script/develop's demo): each line is asked, and the spoken answer comes back."""
    proc, fifo = await typing_device(hass, setup_integration, client, tmp_path)
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().startswith("connected as")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None, timeout=30)
    await asyncio.get_running_loop().run_in_executor(None, fifo.write_text, "turn on the kitchen light\n")
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    assert line.startswith('you typed: "turn on the kitchen light"; Home Assistant said: "The kitchen light is on.')
    seconds = float(line.rsplit("(", 1)[1].split(" s", 1)[0])
    assert seconds > 1.0  # spoken, over the encrypted UDP channel the device opened
    # What Home Assistant makes it say unasked is printed too (script/develop shows it).
    await announce(hass, "Dinner is ready")
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith(f"{MAC} ")
    assert "Dinner is ready" in line
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)


async def test_cli_per_conversation_websocket(
    hass: HomeAssistant, ready: Any, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """``--per-conversation``: a stock board on WebSocket is offline until woken, and only then connects."""
    proc, fifo = await typing_device(hass, setup_integration, client, tmp_path, "--per-conversation", mqtt=False)
    assert proc.stdout is not None
    assert "is idle on 2.4.2; it connects when woken" in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    xdev = hub_of(setup_integration).devices[MAC]
    assert xdev.link is None  # booted, and not connected
    await asyncio.get_running_loop().run_in_executor(None, fifo.write_text, "turn on the kitchen light\n")
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().startswith(f"connected as {MAC}")
    assert "The kitchen light is on." in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    assert "is idle again" in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    await wait_for(xdev, lambda d: d.link is None, timeout=10)
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)


async def _install_demo_firmware(hass: HomeAssistant, entry: MockConfigEntry, folder: Path) -> None:
    """A 2.5.0 image in the hub's local firmware folder, offered, then installed (waits until done)."""
    from xiaozhi_sim.firmware import build_image

    def put() -> None:
        folder.mkdir()
        (folder / "bread-compact-wifi_2.5.0.bin").write_bytes(build_image("2.5.0", size=300_000))

    await hass.async_add_executor_job(put)
    hub_of(entry).firmware.catalog.local.folder = folder
    entity = "update.kitchen_firmware"
    await hass.services.async_call("homeassistant", "update_entity", {"entity_id": entity}, blocking=True)
    await wait_entity(hass, entity, lambda s: s.attributes.get("latest_version") == "2.5.0", timeout=30)
    await hass.services.async_call("update", "install", {"entity_id": entity}, blocking=True)
    state = await wait_entity(hass, entity, lambda s: s.attributes.get("installed_version") == "2.5.0", timeout=30)
    assert state.state == "off"
    assert state.attributes["in_progress"] is False


async def test_cli_installs_firmware_and_comes_back_over_mqtt(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """The demo's always-connected device: installed through its tool, it restarts and is back online
    on the new version at once (its MQTT loop, blocked in the tool as the firmware's main task is,
    ends with the restart)."""
    ota, flash = await booted_flash(hass, setup_integration, client, tmp_path)
    proc = await run_cli(
        "--ota", ota, "--mac", MAC, "--nvs", str(flash), "--reconnect", "--mqtt-reconnect", "0.1",
        "--download-delay", "0.03",  # as script/develop runs it: a board on Wi-Fi
    )  # fmt: skip
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().startswith("connected as")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None and d.facts is not None, timeout=30)
    await asyncio.wait_for(_install_demo_firmware(hass, setup_integration, tmp_path / "firmware"), 90)
    await wait_for(xdev, lambda d: d.link is not None, timeout=30)  # online again, by itself
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)


async def test_cli_per_conversation_device_installs_firmware_at_its_next_start(
    hass: HomeAssistant, ready: Any, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """The demo's WebSocket device, woken for a question while an install waits: it is restarted at
    the end of that conversation, boots, installs and says which version it is idle on."""
    proc, fifo = await typing_device(hass, setup_integration, client, tmp_path, "--per-conversation", mqtt=False)
    assert proc.stdout is not None
    assert "is idle on 2.4.2" in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    install = hass.async_create_task(_install_demo_firmware(hass, setup_integration, tmp_path / "firmware"))
    await wait_entity(hass, "update.kitchen_firmware", lambda s: s.attributes["in_progress"] is True, timeout=30)
    await asyncio.get_running_loop().run_in_executor(None, fifo.write_text, "turn on the kitchen light\n")
    await asyncio.wait_for(install, 90)
    lines: list[str] = []
    while not any("is idle on 2.5.0" in line for line in lines):
        lines.append((await asyncio.wait_for(proc.stdout.readline(), 60)).decode())
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)


async def _ask(proc: asyncio.subprocess.Process, fifo: Path, question: str) -> list[str]:
    """Type a question; the lines the CLI printed up to its answer (which is the last)."""
    assert proc.stdout is not None
    await asyncio.get_running_loop().run_in_executor(None, fifo.write_text, f"{question}\n")
    lines: list[str] = []
    while not lines or not lines[-1].startswith(f'you typed: "{question}"'):
        lines.append((await asyncio.wait_for(proc.stdout.readline(), 60)).decode())
    assert "Home Assistant said: " in lines[-1]
    return lines


async def _until_line(proc: asyncio.subprocess.Process, text: str) -> None:
    assert proc.stdout is not None
    while text not in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode():
        pass


async def test_cli_follows_the_connection_select_there_and_back(
    hass: HomeAssistant, ready: Any, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """The demo's always-connected device, switched to WebSocket and back: one connection at a time,
    and every typed question answered on the transport of the moment."""
    from ..conftest import wait_settled

    proc, fifo = await typing_device(
        hass, setup_integration, client, tmp_path, "--reconnect", "--mqtt-reconnect", "0.1"
    )
    await _until_line(proc, "over MQTT (always online)")
    xdev = hub_of(setup_integration).devices[MAC]
    await wait_for(xdev, lambda d: d.link is not None, timeout=30)
    await wait_settled(xdev)
    replaced: list[Any] = []
    xdev.async_add_listener(lambda: replaced.append(xdev.link) if xdev.link is not None else None)

    async def choose(option: str) -> None:
        await hass.services.async_call(
            "select", "select_option", {"entity_id": "select.kitchen_connection", "option": option}, blocking=True
        )

    await _ask(proc, fifo, "turn on the kitchen light")  # over MQTT
    await choose("websocket")  # restarted once the conversation is over (silence: goodbye)
    await _until_line(proc, "it connects when woken")
    lines = await _ask(proc, fifo, "turn off the kitchen light")  # woken: a WebSocket for it
    assert any(line.startswith(f"connected as {MAC}, session") for line in lines)
    await _until_line(proc, "is idle again")
    await choose("mqtt")  # it is away: the next conversation ends with a restart onto MQTT
    await _ask(proc, fifo, "what time is it")
    await _until_line(proc, "over MQTT (always online)")
    await wait_for(xdev, lambda d: d.link is not None and d.link.transport_name == "mqtt", timeout=30)
    await _ask(proc, fifo, "turn on the kitchen light")  # over MQTT again
    # Each conversation over WebSocket is a connection of its own; never two at once.
    assert [link.transport_name for link in dict.fromkeys(replaced)] == ["mqtt", "websocket", "websocket", "mqtt"]
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)
