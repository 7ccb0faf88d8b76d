"""``python -m bench mqtt``: devices always connected over MQTT+UDP, against a real Home Assistant.

The same Home Assistant as ``load`` (its own process, the probe inside), with the hub handing out
MQTT. Most devices are the firmware's MQTT mode (``xiaozhi_sim.mqtt``); a few are set to
WebSocket, so ``call_tool`` over both transports is measured in one run, next to a bare echo.

Phases: boot (OTA, then MQTT CONNECT, initialize, ``tools/list``, the first status) until all are
online; hold (memory, loop lag); ``call_tool`` over MQTT, over WebSocket, bare echo; voice turns
over encrypted UDP with the pacing figures of ``load``; Home Assistant restarts while every
device reconnects on its own.
"""

import asyncio
import os
from pathlib import Path
import secrets
import shutil
import tempfile
import time
from typing import Any

from xiaozhi_sim import SimulatedDevice

from .load import (
    TOOLS,
    Run,
    bench_options,
    echo_round_trips,
    failure_text,
    mac_of,
    ms,
    pct,
    prepare,
    tool_calls,
)
from .voices import Voices, voice_turns

RECONNECT_S = 5.0
"""How soon a simulated device retries after a disconnect (the firmware waits 60 s)."""


async def boot_all(
    run: Run, mqtt: list[SimulatedDevice], websocket: list[SimulatedDevice], concurrency: int, also_ready: int = 0
) -> float:
    """Every device boots (OTA) and comes online; seconds until all are ready (with ``also_ready`` elsewhere)."""
    gate = asyncio.Semaphore(concurrency)
    ota = f"{run.base}/api/xiaozhi_local/ota/"

    async def one_mqtt(sim: SimulatedDevice) -> None:
        async with gate:
            answer = await sim.boot_mqtt(ota)
            if "mqtt" not in answer:
                raise RuntimeError("no mqtt in the OTA answer")

    async def one_ws(sim: SimulatedDevice) -> None:
        async with gate:
            await sim.boot(ota)
            await sim.connect()

    started = time.monotonic()
    results = await asyncio.gather(
        *(one_mqtt(sim) for sim in mqtt), *(one_ws(sim) for sim in websocket), return_exceptions=True
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        run.figures["boot_failures"] = failure_text(failures)
    total = len(mqtt) + len(websocket) + also_ready
    await run.wait("ready", lambda ready: ready >= total - len(failures), 300)
    return time.monotonic() - started


async def restart(run: Run, mqtt: list[SimulatedDevice]) -> dict[str, Any]:
    """Home Assistant stops and starts; each MQTT device reconnects on its own (every ``RECONNECT_S``)."""

    async def reconnect(sim: SimulatedDevice) -> None:
        await sim.mqtt.wait_offline()
        while True:
            await asyncio.sleep(RECONNECT_S * (0.5 + secrets.randbelow(1000) / 1000))
            try:
                await sim.mqtt.start()
            except Exception:  # noqa: BLE001 - HA not up yet: refused, reset, a timeout
                continue
            return

    retrying = [asyncio.create_task(reconnect(sim)) for sim in mqtt]
    stopped_at = time.monotonic()
    await run.stop()
    await run.start()
    up_s = time.monotonic() - stopped_at
    await run.wait("ready", lambda ready: ready >= len(mqtt), 300)
    ready_s = time.monotonic() - stopped_at
    await asyncio.wait_for(asyncio.gather(*retrying), 60)
    return {"up_s": up_s, "ready_s": ready_s}


async def mqtt_load(
    *, devices: int, concurrency: int, hold: float, calls: int, rate: float, port: int, talkers: int = 20
) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-mqtt-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    ws_count = max(1, min(20, devices // 10))
    ws_macs = frozenset(mac for mac, _ in pairs[-ws_count:])
    mqtt_port = port + 1
    prepare(workdir / "config", pairs, port, mqtt_port=mqtt_port, websocket_macs=ws_macs)
    run = Run(port, workdir / "config")

    mqtt = [SimulatedDevice(bench_options(mac), speaks_mqtt=True) for mac, _ in pairs if mac not in ws_macs]
    websocket = [SimulatedDevice(bench_options(mac)) for mac, _ in pairs if mac in ws_macs]
    # The MQTT devices that talk live in a receiver process of their own (``voices.py``).
    voices = Voices(f"{run.base}/api/xiaozhi_local/ota/", [sim.options.mac for sim in mqtt[:talkers]], mqtt=True)
    mqtt = mqtt[len(voices.macs) :]
    try:
        await run.start()
        await asyncio.sleep(5)  # let startup settle
        idle = await run.probe()
        started = time.monotonic()  # the receiver boots its devices while this process boots the rest
        await asyncio.gather(
            voices.start(concurrency), boot_all(run, mqtt, websocket, concurrency, also_ready=len(voices.macs))
        )
        boot_s = time.monotonic() - started
        await run.probe(reset=True)
        await asyncio.sleep(hold)
        held = await run.probe(reset=True)
        over_mqtt = await tool_calls(run, [sim.options.mac for sim in mqtt], calls, rate)
        mqtt_errors = run.figures.pop("call_errors", "")
        over_ws = await tool_calls(run, sorted(ws_macs), calls, rate)
        ws_errors = run.figures.pop("call_errors", "")
        bare = await echo_round_trips(calls, rate)
        voice = await voice_turns(run, voices, mode="manual", wake=False, silence_after=0.0)
        await voices.stop()
        restarted = await restart(run, mqtt)
    finally:
        await voices.stop()
        await asyncio.gather(*(sim.drop() for sim in [*mqtt, *websocket]), return_exceptions=True)
        await run.stop()
    per_device_kb = (held["rss_kb"] - idle["rss_kb"]) / devices
    boot_note = f" — failures: {run.figures['boot_failures']}" if "boot_failures" in run.figures else ""
    lines = [
        "## Always connected: MQTT+UDP against a real Home Assistant (`python -m bench mqtt`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process, "
        f"{len(mqtt) + len(voices.macs)} simulated stock devices on MQTT and {len(websocket)} on WebSocket, "
        f"loopback; the {len(voices.macs)} that talk are in a receiver process of their own (`bench/voices.py`).",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| {devices} devices online (OTA, MQTT CONNECT or WebSocket hello, initialize, {TOOLS}-tool "
        f"`tools/list`, first status), {concurrency} at a time | {boot_s:.1f} s{boot_note} | ≤ 60 s |",
        f"| HA resident memory per device | {per_device_kb:.0f} KB "
        f"({idle['rss_kb'] / 1024:.0f} → {held['rss_kb'] / 1024:.0f} MB) | < 150 KB |",
        f"| Event-loop lag while holding {hold:.0f} s (p50 / p99 / max) | {held['lag_ms']['p50']:.1f} / "
        f"{held['lag_ms']['p99']:.1f} / {held['lag_ms']['max']:.1f} ms | p99 < 50 ms |",
        f"| `call_tool` over MQTT, {calls} calls at {rate:.0f}/s via HA's WebSocket API (p50 / p99) | "
        f"{pct(over_mqtt, 50) * 1000:.1f} / {pct(over_mqtt, 99) * 1000:.1f} ms"
        f"{' — errors: ' + mqtt_errors if mqtt_errors else ''} | like WebSocket |",
        f"| `call_tool` over WebSocket, same count and rate (p50 / p99) | {pct(over_ws, 50) * 1000:.1f} / "
        f"{pct(over_ws, 99) * 1000:.1f} ms{' — errors: ' + ws_errors if ws_errors else ''} | |",
        f"| Bare `websockets` echo, same count and rate (p50 / p99) | {pct(bare, 50) * 1000:.2f} / "
        f"{pct(bare, 99) * 1000:.2f} ms | |",
        f"| {voice['turns']} voice turns at once over encrypted UDP (3 s of real-time Opus, push-to-talk, a 2 s "
        f"reply): `listen stop` → first reply packet (p50 / p99) | {ms(voice['perceived'], 50)} / "
        f"{ms(voice['perceived'], 99)} ms{' — failures: ' + voice['failures'] if voice['failures'] else ''} | |",
        f"| Downlink pacing at the device, {voice['packets']} packets (lateness p50 / p99 / max) | "
        f"{pct(voice['late'], 50) * 1000:.1f} / {pct(voice['late'], 99) * 1000:.1f} / "
        f"{max(voice['late'], default=0) * 1000:.1f} ms; {voice['gaps']} packets after the speaker needed them | "
        "p99 < 15 ms; no gaps |",
        f"| HA restart, every MQTT device reconnecting on its own (retry every ~{RECONNECT_S:.0f} s): HTTP up / "
        f"all online again, from the stop | {restarted['up_s']:.1f} / {restarted['ready_s']:.1f} s | |",
        "",
        "The firmware retries a lost MQTT session after 60 s; the simulated devices retry sooner so the "
        "run stays short. The pacing is measured in the receiver process, which does nothing but send the "
        "talkers' speech and stamp what they hear.",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)
