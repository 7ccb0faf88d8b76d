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
from ..helpers import announce

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
    xdev = setup_integration.runtime_data.devices[MAC]
    await wait_for(xdev, lambda d: "self.ir.send_named" in d.tools, timeout=30)
    await xdev.connection.async_close("test over")  # the server ends the conversation
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
    xdev = setup_integration.runtime_data.devices[MAC]
    await wait_for(xdev, lambda d: d.connection is not None, timeout=30)
    await xdev.connection.async_close("test over")
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
    xdev = setup_integration.runtime_data.devices[MAC]
    await wait_for(xdev, lambda d: "amplify_volume" in d.tools, timeout=30)
    await xdev.connection.async_close("test over")
    out, _err = await asyncio.wait_for(proc.communicate(), 30)
    assert "disconnected" in out.decode()
    assert proc.returncode == 0


async def booted_flash(
    hass: HomeAssistant, entry: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path, *, mqtt: bool = True
) -> tuple[str, Path]:
    """Devices are given the test server's URLs; the OTA URL, and a flash holding the paired Client-Id."""
    hass.config_entries.async_update_entry(entry, options={"websocket_url": ws_url(client), "mqtt": mqtt})
    await hass.async_block_till_done()
    flash = tmp_path / "flash.json"
    flash.write_text(json.dumps({"board": {"uuid": CLIENT_ID}}))
    return str(client.make_url("/api/xiaozhi_local/ota/")), flash


async def test_cli_stays_online_over_mqtt(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """``--ota`` with an answer that carries ``mqtt``: online from boot; a restart brings it back."""
    ota, flash = await booted_flash(hass, setup_integration, client, tmp_path)
    proc = await run_cli("--ota", ota, "--mac", MAC, "--nvs", str(flash), "--reconnect", "--mqtt-reconnect", "0.1")
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.decode().startswith(f"connected as {MAC} over MQTT")
    xdev = setup_integration.runtime_data.devices[MAC]
    await wait_for(xdev, lambda d: d.connection is not None, timeout=30)
    assert xdev.connection is not None
    assert xdev.connection.transport_name == "mqtt"
    await xdev.connection.async_close("test: the link drops")
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().startswith("disconnected")
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().startswith("connected as")
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)
    assert json.loads(flash.read_text())["mqtt"]["username"] == MAC


async def test_cli_types_questions_from_a_pipe(
    hass: HomeAssistant, ready: Any, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """``--type-from FIFO`` (script/develop's demo): each line is asked, and the spoken answer comes back."""
    ota, flash = await booted_flash(hass, setup_integration, client, tmp_path)
    fifo = tmp_path / "questions"
    os.mkfifo(fifo)
    proc = await run_cli("--ota", ota, "--mac", MAC, "--nvs", str(flash), "--type-from", str(fifo))
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().startswith("connected as")
    xdev = setup_integration.runtime_data.devices[MAC]
    await wait_for(xdev, lambda d: d.connection is not None, timeout=30)
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
    ota, flash = await booted_flash(hass, setup_integration, client, tmp_path, mqtt=False)
    fifo = tmp_path / "questions"
    os.mkfifo(fifo)
    proc = await run_cli(
        "--ota", ota, "--mac", MAC, "--nvs", str(flash), "--per-conversation", "--type-from", str(fifo)
    )
    assert proc.stdout is not None
    assert "is idle; it connects when woken" in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    xdev = setup_integration.runtime_data.devices[MAC]
    assert xdev.connection is None  # booted, and not connected
    await asyncio.get_running_loop().run_in_executor(None, fifo.write_text, "turn on the kitchen light\n")
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().startswith(f"connected as {MAC}")
    assert "The kitchen light is on." in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    assert "is idle again" in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    await wait_for(xdev, lambda d: d.connection is None, timeout=10)
    proc.terminate()
    await asyncio.wait_for(proc.communicate(), 30)
