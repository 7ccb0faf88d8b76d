"""``python -m bench load``: a real Home Assistant process and many simulated devices, with figures.

Home Assistant runs as its own process, configured the way ``script/develop`` configures it
(hub and device subentries seeded through HA's ConfigEntry class), plus the bench-only
``bench_probe`` component that reports loop lag, tasks, file descriptors, memory and sessions
from the inside. The devices run in this process, on loopback, each a stock-firmware simulator.

Phases: ramp (OTA, hello, initialize, a 20-tool ``tools/list`` each) and hold; ``call_tool``
round trips through HA's WebSocket API next to a bare ``websockets`` echo; a storm of devices
connecting in the same second and many connect/drop cycles, then a leak count; concurrent voice
turns through a real pipeline (the probe's instant STT, agent and TTS; HA's ffmpeg) with real
Opus both ways while the other devices stay connected; a restart of Home Assistant with every
device retrying at once, counting entities before and after.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
import importlib.util
import json
import os
from pathlib import Path
import secrets
import shutil
import signal
import sys
import tempfile
import time
from types import MappingProxyType
from typing import Any

import aiohttp
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import serve

from custom_components.xiaozhi_local.protocol.opus import OPUS_FRAME_MS
from custom_components.xiaozhi_local.sound.speaker import FIRST_FRAME_GAP, TTS_LEAD
from xiaozhi_sim import SimulatedDevice, SimulatorOptions

ROOT = Path(__file__).parent.parent
SPEECH = ROOT / "tests" / "fixtures" / "speech_16k.wav"
DOWNLINK_FRAME_S = OPUS_FRAME_MS / 1000
STOCK_TOOLS = 9  # what a stock board lists (user-only ones included)
TOOLS = 20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


def mac_of(index: int) -> str:
    return f"02:00:00:{index >> 16 & 255:02x}:{index >> 8 & 255:02x}:{index & 255:02x}"


def client_id_of(mac: str) -> str:
    """The Client-Id the bench device ``mac`` paired with (a board keeps its own in flash)."""
    return f"00000000-0000-4000-8000-{mac.replace(':', '')}"


def prepare(
    config: Path,
    devices: list[tuple[str, str]],
    port: int,
    *,
    accept_without_code: bool = False,
    mqtt_port: int | None = None,
    websocket_macs: frozenset[str] = frozenset(),
    nearest: bool = False,
) -> None:
    """A config dir like script/develop's, with ``devices`` paired and the probe installed.

    ``mqtt_port``: the hub hands out MQTT (TCP and UDP on that port), except to ``websocket_macs``.
    ``nearest``: only the nearest of the devices that hear one wake word answers. Off by default:
    the benches' devices talk at once as if each were in a room of its own.
    """
    spec = importlib.util.spec_from_file_location("dev_setup", ROOT / "script" / "dev_setup.py")
    assert spec is not None
    assert spec.loader is not None
    dev_setup = importlib.util.module_from_spec(spec)  # the script dir is not a package
    spec.loader.exec_module(dev_setup)
    seed_entry = dev_setup.seed_entry

    config.mkdir(parents=True)
    seed_entry(
        config,
        [(mac, token, f"Bench {index}", client_id_of(mac)) for index, (mac, token) in enumerate(devices)],
        {
            "accept_without_code": accept_without_code,
            "websocket_url": f"ws://127.0.0.1:{port}/api/xiaozhi_local/v1/",
            # ``load`` measures the WebSocket transport; ``mqtt`` the always-connected one.
            "mqtt": mqtt_port is not None,
            "mqtt_port": mqtt_port or 0,
            "udp_port": mqtt_port or 0,
            "nearest_answers": nearest,
        },
        {mac: {"transport": "websocket"} for mac in websocket_macs},
    )
    seed_probe_entry(config)
    # The port where HA keeps it: a YAML port is a trial that HA reverts (and restarts) after 5 minutes.
    dev_setup.keep_port(config, port)
    (config / "configuration.yaml").write_text("api:\nwebsocket_api:\nbench_probe:\nlogger:\n  default: warning\n")
    (config / "custom_components").mkdir()
    (config / "custom_components" / "xiaozhi_local").symlink_to(ROOT / "custom_components" / "xiaozhi_local")
    shutil.copytree(ROOT / "bench" / "bench_probe", config / "custom_components" / "bench_probe")


def seed_probe_entry(config: Path) -> None:
    """A config entry for ``bench_probe`` too: its voice providers are entity platforms."""
    from homeassistant.config_entries import SOURCE_USER, STORAGE_KEY, ConfigEntry  # noqa: PLC0415

    path = config / ".storage" / STORAGE_KEY
    store = json.loads(path.read_text())
    entry = ConfigEntry(
        data={},
        discovery_keys=MappingProxyType({}),
        domain="bench_probe",
        minor_version=1,
        options={},
        source=SOURCE_USER,
        subentries_data=[],
        title="Bench probe",
        unique_id=None,
        version=1,
    )
    store["data"]["entries"].append(json.loads(json.dumps(entry.as_dict(), default=str)))
    path.write_text(json.dumps(store))


@dataclass
class Run:
    """One bench run's Home Assistant and figures."""

    port: int
    config: Path
    python: str = sys.executable
    """The interpreter whose Home Assistant runs (the smoke run's has the newest release)."""
    process: asyncio.subprocess.Process | None = None
    http: aiohttp.ClientSession | None = None
    env: dict[str, str] | None = None
    """Home Assistant's environment when not the bench's own (the soak's allocator)."""
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        """The probe's access token for HA's APIs."""
        return (self.config / "bench_token").read_text()

    @asynccontextmanager
    async def api(self) -> AsyncIterator[Any]:
        """HA's WebSocket API, authenticated with the probe's token."""
        async with ws_connect(f"ws://127.0.0.1:{self.port}/api/websocket", max_size=2**24) as ws:
            await ws.recv()
            await ws.send(json.dumps({"type": "auth", "access_token": self.token}))
            if json.loads(await ws.recv()).get("type") != "auth_ok":
                raise RuntimeError("the probe's token was refused")
            yield ws

    async def probe(self, reset: bool = False, **extra: str) -> dict[str, Any]:
        assert self.http is not None
        params = {"reset": "1", **extra} if reset else extra
        async with self.http.get(f"{self.base}/api/bench_probe", params=params) as resp:
            if resp.status == 404:  # HA's HTTP server is up; the probe is not set up yet
                return {}
            data: dict[str, Any] = await resp.json()
            return data

    async def start(self) -> None:
        if self.http is not None:  # a restart
            await self.http.close()
        log = (self.config.parent / "ha.log").open("a")  # kept across restarts
        self.process = await asyncio.create_subprocess_exec(
            self.python, "-m", "homeassistant", "--config", str(self.config), "--skip-pip",
            stdout=log, stderr=asyncio.subprocess.STDOUT, env=self.env,
            cwd=self.config.parent,  # not the repository: its custom_components/ would shadow the config's
        )  # fmt: skip
        self.http = aiohttp.ClientSession()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise RuntimeError(f"Home Assistant exited; see {log.name}")
            try:
                if (await self.probe()).get("devices") is not None:
                    return
            except aiohttp.ClientConnectionError:
                pass
            except Exception as err:  # noqa: BLE001 - say what the probe answered
                print(f"probe: {type(err).__name__}: {err}", file=sys.stderr)
            await asyncio.sleep(1)
        raise RuntimeError("Home Assistant did not start within 120 s")

    async def wait(self, key: str, predicate: Any, timeout: float) -> float:
        """Seconds until ``predicate(probe[key])`` holds (polled every 0.25 s); raises on timeout."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if predicate((await self.probe()).get(key, 0)):
                return time.monotonic() - started
            await asyncio.sleep(0.25)
        raise TimeoutError(f"{key} did not settle in {timeout} s: {await self.probe()}")

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 60)
            except TimeoutError:
                self.process.kill()


def bench_options(mac: str, **kwargs: Any) -> SimulatorOptions:
    """A stock device of the benches: the 20 tools, patient with a busy Home Assistant."""
    return SimulatorOptions(
        url="",
        mac=mac,
        client_id=client_id_of(mac),
        extra_tools=TOOLS - STOCK_TOOLS,
        hello_timeout=60,
        handshake_timeout=60,
        **kwargs,
    )


async def ramp(run: Run, sims: list[SimulatedDevice], concurrency: int, also_ready: int = 0) -> float:
    """Boot (OTA) and connect every device, ``concurrency`` at a time; seconds until all are ready
    (with ``also_ready`` devices connected elsewhere)."""
    gate = asyncio.Semaphore(concurrency)
    ota = f"{run.base}/api/xiaozhi_local/ota/"

    async def one(sim: SimulatedDevice) -> None:
        async with gate:
            await sim.boot(ota)
            await sim.connect()

    started = time.monotonic()
    results = await asyncio.gather(*(one(sim) for sim in sims), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        run.figures["ramp_failures"] = failure_text(failures)
    await run.wait("ready", lambda ready: ready >= len(sims) + also_ready - len(failures), 300)
    return time.monotonic() - started


async def tool_calls(run: Run, macs: list[str], count: int, rate: float) -> list[float]:
    """``xiaozhi_local.call_tool`` through HA's WebSocket API at a steady rate; latencies in seconds."""
    async with run.api() as ws:
        await ws.send(json.dumps({"id": 1, "type": "config/device_registry/list"}))
        registry = json.loads(await ws.recv())["result"]
        ids = {conn[1]: dev["id"] for dev in registry for conn in dev["connections"] if conn[0] == "mac"}
        device_ids = [ids[mac] for mac in macs if mac in ids]
        waiting: dict[int, tuple[float, asyncio.Future[None]]] = {}

        async def reader() -> None:
            async for raw in ws:
                msg = json.loads(raw)
                entry = waiting.pop(msg.get("id"), None)
                if entry is not None:
                    sent, future = entry
                    if not msg.get("success"):
                        future.set_exception(RuntimeError(str(msg.get("error"))))
                    else:
                        future.set_result(None)
                    latencies.append(time.perf_counter() - sent)

        latencies: list[float] = []
        read_task = asyncio.create_task(reader())
        futures = []
        loop = asyncio.get_running_loop()
        started = loop.time()
        for index in range(count):
            await asyncio.sleep(max(0.0, started + index / rate - loop.time()))
            msg_id = 100 + index
            future: asyncio.Future[None] = loop.create_future()
            waiting[msg_id] = (time.perf_counter(), future)
            futures.append(future)
            await ws.send(
                json.dumps(
                    {
                        "id": msg_id,
                        "type": "call_service",
                        "domain": "xiaozhi_local",
                        "service": "call_tool",
                        "service_data": {
                            "device_id": device_ids[index % len(device_ids)],
                            "tool": "self.get_device_status",
                        },
                        "return_response": True,
                    }
                )
            )
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 120)
        read_task.cancel()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            run.figures["call_errors"] = f"{len(errors)} ({errors[0]})"
        return latencies


async def echo_round_trips(count: int, rate: float) -> list[float]:
    """A bare ``websockets`` echo on loopback, same count and rate: the floor of any WebSocket call."""

    async def echo(ws: Any) -> None:
        async for message in ws:
            await ws.send(message)

    payload = json.dumps({"id": 1, "type": "call_service", "service_data": {"device_id": "x" * 32}})
    latencies: list[float] = []
    async with serve(echo, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with ws_connect(f"ws://127.0.0.1:{port}") as ws:
            loop = asyncio.get_running_loop()
            started = loop.time()
            for index in range(count):
                await asyncio.sleep(max(0.0, started + index / rate - loop.time()))
                sent = time.perf_counter()
                await ws.send(payload)
                await ws.recv()
                latencies.append(time.perf_counter() - sent)
    return latencies


async def storm(run: Run, sims: list[SimulatedDevice], together: int, cycles: int) -> dict[str, Any]:
    """``together`` devices connecting at once, then ``cycles`` connect/drop cycles; then count leaks."""
    await asyncio.gather(*(sim.drop() for sim in sims))
    await run.wait("connections", lambda n: n == 0, 120)
    await asyncio.sleep(2)
    before = await run.probe()
    group = sims[:together]
    started = time.monotonic()
    await asyncio.gather(*(sim.connect() for sim in group), return_exceptions=True)
    await run.wait("ready", lambda ready: ready >= together, 120)
    storm_s = time.monotonic() - started
    await asyncio.gather(*(sim.drop() for sim in group))
    batch = min(100, len(sims))  # a device is in one cycle at a time
    for start in range(0, cycles, batch):
        chosen = [sims[(start + i) % len(sims)] for i in range(min(batch, cycles - start))]
        await asyncio.gather(*(sim.connect() for sim in chosen), return_exceptions=True)
        await asyncio.gather(*(sim.drop() for sim in chosen))
    await run.wait("connections", lambda n: n == 0, 120)
    await asyncio.sleep(2)
    after = await run.probe()
    return {"storm_s": storm_s, "before": before, "after": after}


def lateness(arrivals: list[float]) -> tuple[list[float], int]:
    """How late each downlink packet arrived against real time from the first (the first 0.3 s may come
    early), and how many came after the speaker needed them (an audible gap)."""
    first = arrivals[0]
    late = [
        max(0.0, arrived - (first + max(0.0, i * DOWNLINK_FRAME_S - TTS_LEAD))) for i, arrived in enumerate(arrivals)
    ]
    gaps = sum(arrived > first + i * DOWNLINK_FRAME_S for i, arrived in enumerate(arrivals))
    return late, gaps


def failure_text(failures: list[BaseException]) -> str:
    """How many failed, and the first one."""
    return f"{len(failures)} ({type(failures[0]).__name__}: {failures[0]})" if failures else ""


async def restart(run: Run, sims: list[SimulatedDevice], concurrency: int) -> dict[str, Any]:
    """Every device connected, then Home Assistant stops and starts again while they all retry at once."""
    await ramp(run, sims, concurrency)
    await asyncio.sleep(2)
    before = await run.probe()

    async def reconnect(sim: SimulatedDevice) -> None:
        await sim.wait_closed()
        while True:
            await asyncio.sleep(0.5 + secrets.randbelow(500) / 1000)
            try:
                await sim.connect()  # the token from before the restart
            except Exception:  # noqa: BLE001 - HA is not up yet: refused, 404, a timeout
                continue
            return

    stopped_at = time.monotonic()
    await run.stop()
    down_s = time.monotonic() - stopped_at
    retrying = [asyncio.create_task(reconnect(sim)) for sim in sims]
    await run.start()
    up_s = time.monotonic() - stopped_at
    await run.wait("ready", lambda ready: ready >= len(sims), 300)
    ready_s = time.monotonic() - stopped_at
    await asyncio.wait_for(asyncio.gather(*retrying), 60)
    await asyncio.sleep(2)
    after = await run.probe()
    return {"down_s": down_s, "up_s": up_s, "ready_s": ready_s, "before": before, "after": after}


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1000:.0f}"


async def load(
    *, devices: int, concurrency: int, hold: float, calls: int, rate: float, port: int, talkers: int = 20
) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches
    from .voices import Voices, voice_turns  # noqa: PLC0415 - it builds on this module

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    prepare(workdir / "config", pairs, port)
    run = Run(port, workdir / "config")
    sims = [SimulatedDevice(bench_options(mac)) for mac, _token in pairs]
    # The devices that talk live in a receiver process of their own (``voices.py``); the rest here.
    voices = Voices(f"{run.base}/api/xiaozhi_local/ota/", [mac for mac, _ in pairs[: min(talkers, devices)]])
    sims = sims[len(voices.macs) :]
    try:
        await run.start()
        await asyncio.sleep(5)  # let startup settle
        idle = await run.probe()
        started = time.monotonic()  # the receiver boots its devices while this process boots the rest
        await asyncio.gather(voices.start(concurrency), ramp(run, sims, concurrency, also_ready=len(voices.macs)))
        ramp_s = time.monotonic() - started
        await run.probe(reset=True)
        await asyncio.sleep(hold)
        held = await run.probe(reset=True)
        ours = await tool_calls(run, [mac for mac, _ in pairs], calls, rate)
        bare = await echo_round_trips(calls, rate)
        voice = await voice_turns(run, voices, mode="manual", wake=False, silence_after=0.0)
        await voices.stop()
        leaks = await storm(run, sims, min(200, len(sims)), max(devices, 1000))
        restarted = await restart(run, sims, concurrency)
    finally:
        await voices.stop()
        await asyncio.gather(*(sim.drop() for sim in sims), return_exceptions=True)
        await run.stop()
    per_device_kb = (held["rss_kb"] - idle["rss_kb"]) / devices
    tts_source = (
        "MP3: HA's ffmpeg" if os.environ.get("BENCH_TTS") == "mp3" else "WAV at 22.05 kHz: resampled in-process"
    )
    before, after = leaks["before"], leaks["after"]
    p99_goal = 2 * pct(bare, 99) + 0.002
    ramp_note = f" — failures: {run.figures['ramp_failures']}" if "ramp_failures" in run.figures else ""
    lines = [
        "## Load against a real Home Assistant (`python -m bench load`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process "
        f"(configured as `script/develop` does), {devices} simulated stock devices ({devices - len(voices.macs)} "
        f"in the bench process, the {len(voices.macs)} that talk in a receiver process), loopback.",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| {devices} devices ready (OTA, hello, initialize, {TOOLS}-tool `tools/list`, first status), "
        f"{concurrency} at a time | {ramp_s:.1f} s{ramp_note} | ≤ 60 s |",
        f"| HA resident memory per connected device | {per_device_kb:.0f} KB "
        f"({idle['rss_kb'] / 1024:.0f} → {held['rss_kb'] / 1024:.0f} MB) | < 150 KB |",
        f"| Event-loop lag while holding {hold:.0f} s (p50 / p99 / max) | {held['lag_ms']['p50']:.1f} / "
        f"{held['lag_ms']['p99']:.1f} / {held['lag_ms']['max']:.1f} ms | p99 < 50 ms |",
        f"| `call_tool` via HA's WebSocket API, {calls} calls at {rate:.0f}/s (p50 / p99) | "
        f"{pct(ours, 50) * 1000:.1f} / {pct(ours, 99) * 1000:.1f} ms"
        f"{' — errors: ' + run.figures['call_errors'] if 'call_errors' in run.figures else ''} | "
        f"p99 ≤ {p99_goal * 1000:.1f} ms |",
        f"| Bare `websockets` echo, same count and rate (p50 / p99) | {pct(bare, 50) * 1000:.2f} / "
        f"{pct(bare, 99) * 1000:.2f} ms | |",
        f"| {min(200, devices)} devices connecting at once, until all ready | {leaks['storm_s']:.1f} s | |",
        f"| After {max(devices, 1000)} connect/drop cycles: sessions, tasks, file descriptors | "
        f"{after['connections']} sessions; tasks {before['tasks']} → {after['tasks']}; "
        f"fds {before['fds']} → {after['fds']} | no growth |",
        f"| Memory after the cycles | {before['rss_kb'] / 1024:.0f} → {after['rss_kb'] / 1024:.0f} MB "
        f"({(after['rss_kb'] / before['rss_kb'] - 1) * 100:+.1f} %) | within 10 % |",
        f"| {voice['turns']} voice turns at once (3 s of real-time Opus speech each, push-to-talk, a 2 s reply) "
        f"with {devices - voice['turns']} other devices connected and idle: `listen stop` → first reply packet "
        f"at the device (p50 / p99) | {ms(voice['perceived'], 50)} / {ms(voice['perceived'], 99)} ms"
        f"{' — failures: ' + voice['failures'] if voice['failures'] else ''} | |",
        f"| … of which ours, ending the uplink: `listen stop` → the STT's audio stream ended (p50 / p99) | "
        f"{ms(voice['ended'], 50)} / {ms(voice['ended'], 99)} ms | |",
        f"| … of which HA's pipeline (instant STT, agent and TTS): stream ended → TTS asked (p50 / p99) | "
        f"{ms(voice['pipeline'], 50)} / {ms(voice['pipeline'], 99)} ms | |",
        f"| … of which the TTS engine's audio to PCM ({tts_source}) and ours (Opus encode, the "
        f"{FIRST_FRAME_GAP * 1000:.0f} ms first-frame gap, send): "
        f"TTS asked → first packet at the device (p50 / p99) | {ms(voice['downlink'], 50)} / "
        f"{ms(voice['downlink'], 99)} ms | |",
        f"| The device's Response time sensor against that measure: the device's figure minus the "
        f"sensor's, {len(voice['sensor_off'])} turns (p50 / p99 / min) | {pct(voice['sensor_off'], 50) * 1000:.1f} / "
        f"{pct(voice['sensor_off'], 99) * 1000:.1f} / {min(voice['sensor_off'], default=0) * 1000:.1f} ms | "
        f"p99 ≤ 5 ms |",
        f"| Downlink pacing at the device, {voice['packets']} packets (lateness p50 / p99 / max) | "
        f"{pct(voice['late'], 50) * 1000:.1f} / {pct(voice['late'], 99) * 1000:.1f} / "
        f"{max(voice['late'], default=0) * 1000:.1f} ms; {voice['gaps']} packets after the speaker needed them | "
        f"p99 < 15 ms; no gaps |",
        f"| HA restart with all {devices} devices retrying at once: stopped / HTTP up / all ready again "
        f"(from the stop) | {restarted['down_s']:.1f} / {restarted['up_s']:.1f} / {restarted['ready_s']:.1f} s | |",
        f"| Entities and available entities before → after the restart (same tokens) | "
        f"{restarted['before'].get('entities')} / {restarted['before'].get('available')} → "
        f"{restarted['after'].get('entities')} / {restarted['after'].get('available')} | unchanged |",
        "",
        "Reading the voice rows: the providers are instant, so a turn is HA's pipeline plus ours. A single "
        f"turn on an idle machine takes about 85 ms from `listen stop` to the first packet, "
        f"{FIRST_FRAME_GAP * 1000:.0f} of them the deliberate first-frame gap. The bench's engine returns WAV "
        "at 22.05 kHz, as Piper does: Home Assistant passes it through and the satellite resamples it "
        "in-process, with no ffmpeg process. With an engine that returns MP3 (`BENCH_TTS=mp3`), HA converts "
        "each reply with one ffmpeg process; on this machine that made TTS asked → first packet 669 / 729 ms "
        "(p50 / p99) and `listen stop` → first packet 698 / 730 ms, with the same 20 turns, pacing lateness "
        "p99 2.0 ms and no packet after the speaker needed it (each answer starts once 0.3 s of it is encoded, "
        "so ffmpeg's slow start delays the first word instead of leaving a gap after it). The devices that "
        "talk run in a receiver process of their own (`bench/voices.py`) that only sends their speech and "
        "stamps each packet's arrival, so the pacing is measured where the device would, not in the process "
        f"that drives the other devices; the satellite sends {TTS_LEAD} s ahead, so lateness below that is "
        "never heard.",
        "",
        "Entities: Home Assistant adds at most 10 000 enabled entities to one config entry. 1000 devices "
        "reach that limit (HA logged that it stopped adding entities), so about 900 fully equipped devices "
        "is the practical ceiling of one hub.",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)
