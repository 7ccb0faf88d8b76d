"""Smoke run against a real Home Assistant of the newest release (see ``script/smoke``).

The test kit pins an older Home Assistant, so this runs the newest one, installed into its own
venv, as a process: the Xiaozhi Local hub seeded as ``script/develop`` seeds it, the bench's
probe (instant STT, agent and TTS; an access token) beside it, and simulated devices in this
process. It:

1. pairs a new device by the code it speaks, through HA's own config-flow API;
2. brings one device up over MQTT+UDP and one over WebSocket, and checks their entities;
3. calls a tool through ``xiaozhi_local.call_tool``, over each transport;
4. runs one voice turn (real Opus over UDP through the pipeline) and one typed question;
5. checks the tool names an agent gets with both "Device control" and "Xiaozhi devices" (HA
   2026.11 merges equal tools and prefixes the API id to colliding names): each device tool
   once, unprefixed, at most 64 characters;
6. fails on any warning or error Home Assistant logged about the integration: deprecations,
   blocking calls, "is using a deprecated" … (HA's notice that a custom integration is loaded
   is the one line expected).

Usage: ``python script/smoke.py HA_PYTHON`` (the interpreter of the smoke venv).
"""

import asyncio
import contextlib
import importlib.util
import io
import json
import os
from pathlib import Path
import re
import secrets
import shutil
import sys
import tempfile
import time
from typing import Any
import wave

import aiohttp

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import SPEECH, Run, client_id_of, prepare, tool_calls  # noqa: E402
from xiaozhi_sim import SimulatedDevice, SimulatorOptions  # noqa: E402
from xiaozhi_sim.ota import OtaTiming  # noqa: E402

PORT = 18223
MQTT_MAC, WS_MAC, NEW_MAC = "cc:ba:97:00:00:01", "cc:ba:97:00:00:02", "cc:ba:97:00:00:03"
FAST = OtaTiming(check_retry_base=0.5, activate_pending_delay=0.5, activate_error_delay=0.5, no_challenge_wait=0.5)
EXPECTED = re.compile(
    r"We found a custom integration (xiaozhi_local|xiaozhi_demo|bench_probe) which has not been tested"
)
BAD = re.compile(r"deprecat|blocking call|is using a deprecated|Detected (code|that)", re.IGNORECASE)
OURS = re.compile(r"xiaozhi_local|xiaozhi")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class SmokeError(Exception):
    """A check failed."""


def check(ok: bool, what: str) -> None:
    """Say what passed; raise when it did not."""
    if not ok:
        raise SmokeError(what)
    print(f"ok: {what}", flush=True)


async def ws_command(run: Run, message: dict[str, Any]) -> Any:
    """One command on HA's WebSocket API with the probe's token; its result."""
    async with run.api() as ws:
        await ws.send(json.dumps({"id": 1, **message}))
        answer = json.loads(await ws.recv())
    if not answer.get("success"):
        raise SmokeError(f"{message['type']}: {answer.get('error')}")
    return answer["result"]


async def pair_by_code(run: Run, device: SimulatedDevice) -> dict[str, Any]:
    """The device boots, speaks its code; the code goes into its discovery card (HA's flow API)."""
    codes: asyncio.Queue[str] = asyncio.Queue()
    boot = asyncio.create_task(
        device.boot_mqtt(f"{run.base}/api/xiaozhi_local/ota/", timing=FAST, on_code=lambda c, _m: codes.put_nowait(c))
    )
    code = await asyncio.wait_for(codes.get(), 30)
    flow_id = None
    for _ in range(60):
        flows = await ws_command(run, {"type": "config_entries/flow/progress"})
        flow_id = next((f["flow_id"] for f in flows if f["context"].get("unique_id") == NEW_MAC), None)
        if flow_id:
            break
        await asyncio.sleep(0.5)
    check(flow_id is not None, "the new device shows up as discovered")
    assert run.http is not None
    async with run.http.post(
        f"{run.base}/api/config/config_entries/flow/{flow_id}",
        json={"code": code},
        headers={"Authorization": f"Bearer {run.token}"},
    ) as response:
        result = await response.json()
    check(
        result.get("type") == "abort" and result.get("reason") == "pairing_successful", f"the code pairs it ({result})"
    )
    answer = await asyncio.wait_for(boot, 60)
    check("mqtt" in answer, "once paired, its OTA answer carries mqtt")
    return answer


async def check_agent_tools(run: Run, mac: str) -> None:
    """An agent with both APIs that offer our tools gets each once, under its own valid name."""
    devices = await ws_command(run, {"type": "config/device_registry/list"})
    device_id = next(d["id"] for d in devices if ["mac", mac] in d["connections"])
    for scope, extra in (("its own device", {"device_id": device_id}), ("every device", {})):
        both = await ws_command(run, {"type": "bench_probe/llm_tools", "apis": ["assist", "xiaozhi_local"], **extra})
        alone = await ws_command(run, {"type": "bench_probe/llm_tools", "apis": ["xiaozhi_local"], **extra})
        names, ours = both["tools"], alone["tools"]
        check(bool(ours) and set(ours) <= set(names), f"agent tools ({scope}): every device tool is offered")
        check(len(names) == len(set(names)), f"agent tools ({scope}): names are unique")
        check(all(TOOL_NAME.match(name) for name in names), f"agent tools ({scope}): names are valid and <= 64")
        check(
            not any(name.endswith(tuple("__" + o for o in ours)) for name in names),
            f"agent tools ({scope}): none twice",
        )


def check_tokens_kept_once(storage: Path, seeded: list[str]) -> None:
    """As HA left its files: the entry (seeded at version 1 with tokens) holds none; the journal all, 0600."""
    entries = json.loads((storage / "core.config_entries").read_text())["data"]["entries"]
    (hub,) = [entry for entry in entries if entry["domain"] == "xiaozhi_local"]
    check(hub["version"] == 2, "the hub entry is migrated to version 2")
    subentries = hub.get("subentries", [])
    check(len(subentries) == 3 and not any("token" in sub["data"] for sub in subentries), "no token in the entry")
    (journal,) = storage.glob("xiaozhi_local.*.identities")
    check(journal.stat().st_mode & 0o077 == 0, "the token journal is private (0600)")
    kept = {record.get("token") for record in json.loads(journal.read_text())["data"]["devices"].values()}
    check(set(seeded) < kept, "the journal keeps every token, the new device's too")


async def smoke(ha_python: str) -> list[str]:
    """The whole run; returns the log lines that fail it."""
    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-smoke-"))
    pairs = [(MQTT_MAC, secrets.token_urlsafe(32)), (WS_MAC, secrets.token_urlsafe(32))]
    prepare(workdir / "config", pairs, PORT, mqtt_port=PORT + 1, websocket_macs=frozenset({WS_MAC}))
    run = Run(PORT, workdir / "config", python=ha_python)
    probe = await asyncio.create_subprocess_exec(
        ha_python, "-c", "import homeassistant.const as c; print(c.__version__)", stdout=asyncio.subprocess.PIPE
    )
    version, _ = await probe.communicate()
    print(f"Home Assistant {version.decode().strip()}", flush=True)

    def options(mac: str, **kwargs: Any) -> SimulatorOptions:
        return SimulatorOptions(url="", mac=mac, client_id=client_id_of(mac), hello_timeout=30, **kwargs)

    mqtt = SimulatedDevice(options(MQTT_MAC, ir=True), speaks_mqtt=True)
    websocket = SimulatedDevice(options(WS_MAC))
    new = SimulatedDevice(options(NEW_MAC, firmware_version="2.5.0"), speaks_mqtt=True)
    try:
        await run.start()
        check(bool(await mqtt.boot_mqtt(f"{run.base}/api/xiaozhi_local/ota/")), "the MQTT device boots")
        await websocket.boot(f"{run.base}/api/xiaozhi_local/ota/")
        await websocket.connect()
        await pair_by_code(run, new)
        await run.wait("ready", lambda ready: ready >= 3, 60)
        check(True, "all three devices are connected and ready")

        states = {s["entity_id"]: s for s in await ws_command(run, {"type": "get_states"})}
        for wanted in ("number.bench_0_volume", "binary_sensor.bench_0_connected", "button.bench_0_restart"):
            check(wanted in states, f"entity {wanted} exists")
        check(states["binary_sensor.bench_0_connected"]["state"] == "on", "the MQTT device is Connected while idle")
        check(any(e.startswith("assist_satellite.") for e in states), "an assist satellite exists")

        for mac, how in ((MQTT_MAC, "MQTT"), (WS_MAC, "WebSocket")):
            latencies = await tool_calls(run, [mac], 5, 5.0)
            check(len(latencies) == 5 and "call_errors" not in run.figures, f"call_tool over {how}")

        await check_agent_tools(run, MQTT_MAC)

        await mqtt.connect()  # the wake word: hello v3, the UDP channel
        with wave.open(str(SPEECH)) as wav:
            speech = wav.readframes(wav.getnframes())
        marker, heard = len(mqtt.log), len(mqtt.audio_at)
        await mqtt.say(speech, mode="manual", realtime=True)  # push-to-talk
        await mqtt.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 60, after=marker)
        check(any(m.get("type") == "stt" for m in mqtt.log[marker:]), "a voice turn over UDP is heard")
        check(len(mqtt.audio_at) - heard > 10, "and answered with speech over UDP")
        marker = len(websocket.log)
        await websocket.type_text("what time is it")  # typed text: the satellite's own chat session
        await websocket.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 30, after=marker)
        check(True, "a typed question is answered")
    finally:
        await asyncio.gather(*(d.drop() for d in (mqtt, websocket, new)), return_exceptions=True)
        await run.stop()
    check_tokens_kept_once(workdir / "config" / ".storage", [token for _mac, token in pairs])
    bad = logged_badly(workdir / "ha.log")
    await start_again(run, workdir / "config", options(MQTT_MAC, ir=True))
    bad += logged_badly(workdir / "ha.log")
    if os.environ.get("XIAOZHI_SMOKE_KEEP"):
        print(f"kept: {workdir}", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return bad


def logged_badly(path: Path) -> list[str]:
    """Warnings and errors Home Assistant logged about the integration (or deprecations, blocking calls)."""
    return [
        line
        for line in path.read_text(errors="replace").splitlines()
        if (" WARNING " in line or " ERROR " in line or " CRITICAL " in line)
        and not EXPECTED.search(line)
        and (OURS.search(line) or BAD.search(line))
    ]


async def start_again(run: Run, config: Path, device: SimulatorOptions) -> None:
    """script/develop, Ctrl+C, script/develop: its setup again, on a config HA has migrated.

    The tokens are in the journal by now; HA starts again, and the paired device is back and answers.
    """
    spec = importlib.util.spec_from_file_location("dev_setup", ROOT / "script" / "dev_setup.py")
    assert spec is not None
    assert spec.loader is not None
    dev_setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev_setup)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        dev_setup.main(config, PORT)
    check(len(printed.getvalue().split()) == 4, "the demo setup runs again on a started config")
    mqtt = SimulatedDevice(device, speaks_mqtt=True)
    try:
        await run.start()
        check(bool(await mqtt.boot_mqtt(f"{run.base}/api/xiaozhi_local/ota/")), "after a second start the device boots")
        await run.wait("ready", lambda ready: ready >= 1, 60)
        latencies = await tool_calls(run, [MQTT_MAC], 3, 5.0)
        check(len(latencies) == 3 and "call_errors" not in run.figures, "and its tools answer")
    finally:
        await mqtt.drop()
        await run.stop()


def main() -> int:
    """Run it; 0 when every check passed and HA logged nothing about the integration."""
    started = time.monotonic()
    try:
        bad = asyncio.run(smoke(sys.argv[1]))
    except (SmokeError, TimeoutError, aiohttp.ClientError, RuntimeError) as err:
        print(f"FAILED: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    for line in bad:
        print(f"FAILED: Home Assistant logged: {line}", file=sys.stderr)
    if bad:
        return 1
    print(f"smoke run passed in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
