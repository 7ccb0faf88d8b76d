"""``python -m bench soak``: a home's month compressed into hours, against a real Home Assistant.

Home Assistant in its own process (the probe inside, the recorder on, ``tracemalloc`` tracing one
frame), a fleet of simulated stock devices in this process (most on MQTT+UDP, a tenth on
WebSocket), and the work of a month, fleet-wide, at the rates of ``RATES``: tool calls, settings,
voice and typed turns, announcements, drops, reboots, firmware installs, pairing and removal, with
Home Assistant restarted ``--restarts`` times. Every minute it samples RSS, threads, tasks, file
descriptors, loop lag, the recorder's and ``.storage``'s sizes and the state writes of our entities;
after each segment's warm-up, and every ``ATTRIBUTE_EVERY`` minutes, it asks the probe where
memory lives (Python's heap by file against the warm-up's, glibc's arenas, SQLite's own count,
objects of PyAV and of ours). The report (``bench/results/soak-<date>.md``, its samples beside it
as JSON) gives each segment's slopes after its warm-up and where any growth lives.
"""

import asyncio
from collections import Counter
import contextlib
from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import random
import secrets
import shutil
import signal
import tempfile
import time
from typing import Any
import wave

from xiaozhi_sim import SimulatedDevice
from xiaozhi_sim.firmware import build_image

from .load import SPEECH, Run, bench_options, mac_of, prepare

RATES: dict[str, float] = {
    "tool_call": 12.0,
    "setting": 4.0,
    "voice_turn": 2.0,
    "typed_turn": 2.0,
    "announcement": 2.0,
    "drop": 5.0,
    "reboot": 0.5,
    "firmware": 1 / 15,
    "pairing": 1 / 10,
    "removal": 1 / 10,
}
"""Per minute, the whole fleet: the two-hour load of issue 46 doubled where a home does it more,
and the rarer events of a month (installs, new and removed devices) a few times an hour."""
ATTRIBUTE_EVERY = 30.0
REPORT_EVERY = 10
"""Samples between two writes of the report while the run goes on."""
RECONNECT_S = 5.0
IMAGE_BYTES = 2_500_000
CONFIGURATION = "api:\nwebsocket_api:\nbench_probe:\nrecorder:\n  commit_interval: 5\nlogger:\n  default: warning\n"
# The control arm (``--no-recorder``): the same work without the recorder, to tell its memory from ours.
CONFIGURATION_NO_RECORDER = CONFIGURATION.replace("recorder:\n  commit_interval: 5\n", "")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(hours, value)`` points, per hour."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


@dataclass
class Fleet:
    """The devices of the run and what each is doing."""

    ota: str
    mqtt: dict[str, SimulatedDevice] = field(default_factory=dict)
    websocket: dict[str, SimulatedDevice] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)
    keepers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def idle(self, kind: str) -> SimulatedDevice | None:
        pool = self.mqtt if kind == "mqtt" else self.websocket if kind == "websocket" else self.mqtt | self.websocket
        choices = [mac for mac, sim in pool.items() if mac not in self.busy and _online(sim)]
        return pool[random.choice(choices)] if choices else None

    def keep(self, sim: SimulatedDevice) -> None:
        """Reconnect it whenever it is cut, as the firmware does (sooner, so the run stays short)."""
        self.keepers[sim.options.mac] = asyncio.create_task(_keeper(sim), name=f"soak keeper {sim.options.mac}")

    async def forget(self, mac: str) -> None:
        sim = self.mqtt.pop(mac, None) or self.websocket.pop(mac, None)
        if (task := self.keepers.pop(mac, None)) is not None:
            task.cancel()
        if sim is not None:
            await sim.drop()


def _online(sim: SimulatedDevice) -> bool:
    if sim.speaks_mqtt:
        return sim.mqtt.online.is_set() and not sim.mqtt.offline.is_set()
    return sim.is_connected


async def _keeper(sim: SimulatedDevice) -> None:
    while True:
        try:
            if sim.speaks_mqtt:
                await sim.mqtt.start()
                await sim.mqtt.wait_offline()
            else:
                await sim.connect()
                await sim.wait_closed()
        except Exception:  # noqa: BLE001 - HA restarting: refused, reset, a timeout; try again
            pass
        await asyncio.sleep(RECONNECT_S * (0.5 + random.random()))


def _fresh(sim: SimulatedDevice) -> None:
    """What the simulator keeps of earlier turns, dropped: the driver must not grow either."""
    for kept in (sim.log, sim.sent, sim.audio, sim.audio_at):
        kept.clear()


class Soak:
    """One soak run."""

    def __init__(self, run: Run, fleet: Fleet, workdir: Path) -> None:
        self.run = run
        self.fleet = fleet
        self.workdir = workdir
        self.ok: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.errors: dict[str, list[str]] = {}
        self.running = asyncio.Event()
        self.in_flight = 0
        self.ids: dict[str, dict[str, str]] = {}  # mac → device_id, subentry, entities
        self.ours: set[str] = set()
        self.writes: Counter[str] = Counter()  # state writes this minute: ours, all
        self.next_mac = 100_000
        self.message_id = 10
        self.version = 0
        with wave.open(str(SPEECH)) as wav:
            self.pcm = wav.readframes(wav.getnframes())

    async def call(self, ws: Any, message: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        self.message_id += 1  # HA wants them rising on each connection
        message = {"id": self.message_id, **message}
        await ws.send(json.dumps(message))
        async with asyncio.timeout(timeout):
            while True:
                answer: dict[str, Any] = json.loads(await ws.recv())
                if answer.get("id") == message["id"]:
                    if not answer.get("success"):
                        raise RuntimeError(str(answer.get("error")))
                    return answer

    async def service(self, domain: str, service: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
        async with self.run.api() as ws:
            return await self.call(
                ws, {"type": "call_service", "domain": domain, "service": service, "service_data": data, **extra}, 300
            )

    async def refresh(self) -> None:
        """Which device, subentry and entities each MAC has now (after a pairing or a removal)."""
        async with self.run.api() as ws:
            devices = (await self.call(ws, {"type": "config/device_registry/list"}))["result"]
            entities = (await self.call(ws, {"type": "config/entity_registry/list"}))["result"]
        ids: dict[str, dict[str, str]] = {}
        by_device: dict[str, str] = {}
        for dev in devices:
            for kind, value in dev["connections"]:
                if kind == "mac":
                    subentries = [s for subs in dev["config_entries_subentries"].values() for s in subs if s]
                    ids[value] = {"device_id": dev["id"], "subentry": subentries[0] if subentries else ""}
                    by_device[dev["id"]] = value
        self.ours = set()
        for entity in entities:
            if entity["platform"] != "xiaozhi_local":
                continue
            self.ours.add(entity["entity_id"])
            mac = by_device.get(entity["device_id"] or "")
            if mac is None:
                continue
            domain = entity["entity_id"].split(".")[0]
            if domain == "number" and "volume" in entity["entity_id"]:
                ids[mac]["volume"] = entity["entity_id"]
            elif domain in ("assist_satellite", "update"):
                ids[mac][domain] = entity["entity_id"]
        self.ids = ids

    # -- the month's work ---------------------------------------------------------------------

    async def tool_call(self) -> None:
        sim = self.fleet.idle("any")
        if sim is None:
            return
        await self.service(
            "xiaozhi_local",
            "call_tool",
            {"device_id": self.ids[sim.options.mac]["device_id"], "tool": "self.get_device_status"},
            return_response=True,
        )

    async def setting(self) -> None:
        sim = self.fleet.idle("any")
        if sim is not None and (entity := self.ids[sim.options.mac].get("volume")):
            await self.service("number", "set_value", {"entity_id": entity, "value": random.randint(10, 90)})

    async def voice_turn(self) -> None:
        await self._turn("mqtt")

    async def typed_turn(self) -> None:
        await self._turn("websocket")

    async def _turn(self, kind: str) -> None:
        sim = self.fleet.idle(kind)
        if sim is None:
            return
        self.fleet.busy.add(sim.options.mac)
        try:
            _fresh(sim)
            if sim.speaks_mqtt:
                await sim.connect()  # the wake word's hello opens the UDP channel
                await sim.say(self.pcm, mode="manual", realtime=True)
            else:
                await sim.type_text("What time is it?")
            await sim.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 60)
            if sim.speaks_mqtt:
                await sim.mqtt.goodbye()
        finally:
            self.fleet.busy.discard(sim.options.mac)

    async def announcement(self) -> None:
        sim = self.fleet.idle("any")
        if sim is None or not (entity := self.ids[sim.options.mac].get("assist_satellite")):
            return
        self.fleet.busy.add(sim.options.mac)
        try:
            _fresh(sim)
            message = {"entity_id": entity, "message": "Dinner is ready", "preannounce": False}
            await self.service("assist_satellite", "announce", message)
        finally:
            self.fleet.busy.discard(sim.options.mac)

    async def drop(self) -> None:
        if (sim := self.fleet.idle("any")) is not None:
            await sim.drop()  # power lost: its keeper brings it back

    async def reboot(self) -> None:
        sim = self.fleet.idle("mqtt")
        if sim is None or not sim.speaks_mqtt:
            return
        self.fleet.busy.add(sim.options.mac)
        try:
            await sim.drop()
            await sim.boot_mqtt(self.fleet.ota)  # the OTA check of every boot, then MQTT
        finally:
            self.fleet.busy.discard(sim.options.mac)

    async def firmware(self) -> None:
        sim = self.fleet.idle("mqtt")
        if sim is None or not (entity := self.ids[sim.options.mac].get("update")):
            return
        self.version += 1
        version = f"2.5.{self.version}"
        folder = self.run.config / "xiaozhi_firmware"
        for old in folder.glob("*.bin"):
            old.unlink()
        image = build_image(version, size=IMAGE_BYTES)
        (folder / f"bread-compact-wifi_{version}.bin").write_bytes(image)
        self.fleet.busy.add(sim.options.mac)
        try:
            await self.service("homeassistant", "update_entity", {"entity_id": entity})
            sim.upgraded.clear()
            await self.service("update", "install", {"entity_id": entity})
            async with asyncio.timeout(120):
                while sim.options.firmware_version != version or not _online(sim):  # noqa: ASYNC110 - polls the sim
                    await asyncio.sleep(0.5)
        finally:
            self.fleet.busy.discard(sim.options.mac)

    async def pairing(self) -> None:
        """A new device: the hub accepts it without a code (the trial option), as a bulk pairing does."""
        mac = mac_of(self.next_mac)
        self.next_mac += 1
        sim = SimulatedDevice(
            bench_options(mac, decode_speaker=False, reboots=True, upgrade_delay=0.0), speaks_mqtt=True
        )
        self.fleet.mqtt[mac] = sim
        self.fleet.busy.add(mac)
        try:
            answer = await sim.boot_mqtt(self.fleet.ota)
            if "mqtt" not in answer:
                raise RuntimeError("no mqtt in the new device's OTA answer")
            self.fleet.keep(sim)
            async with asyncio.timeout(60):
                while mac not in self.ids or "update" not in self.ids[mac]:
                    await asyncio.sleep(1)
                    await self.refresh()
        finally:
            self.fleet.busy.discard(mac)

    async def removal(self) -> None:
        """The owner deletes a device: its subentry goes, and the device is switched off."""
        sim = self.fleet.idle("mqtt")
        if sim is None:
            return
        mac = sim.options.mac
        self.fleet.busy.add(mac)
        try:
            async with self.run.api() as ws:
                entries = (await self.call(ws, {"type": "config_entries/get", "domain": "xiaozhi_local"}))["result"]
                delete = {"type": "config_entries/subentries/delete", "entry_id": entries[0]["entry_id"]}
                await self.call(ws, {**delete, "subentry_id": self.ids[mac]["subentry"]})
            await self.fleet.forget(mac)
            await self.refresh()
        finally:
            self.fleet.busy.discard(mac)

    async def activity(self, name: str, per_minute: float) -> None:
        action = getattr(self, name)
        while True:
            await asyncio.sleep(random.expovariate(per_minute / 60))
            await self.running.wait()
            self.in_flight += 1
            try:
                async with asyncio.timeout(300):
                    await action()
                self.ok[name] += 1
            except Exception as err:  # noqa: BLE001 - counted and kept for the report
                self.failed[name] += 1
                kept = self.errors.setdefault(name, [])
                if len(kept) < 3:
                    kept.append(f"{type(err).__name__}: {err}"[:300])
            finally:
                self.in_flight -= 1

    async def count_writes(self) -> None:
        """State writes, ours and all, from HA's own event stream (again after each restart)."""
        while True:
            try:
                async with self.run.api() as ws:
                    await ws.send(json.dumps({"id": 1, "type": "subscribe_events", "event_type": "state_changed"}))
                    async for raw in ws:
                        msg = json.loads(raw)
                        if msg.get("type") == "event":
                            self.writes["all"] += 1
                            if msg["event"]["data"]["entity_id"] in self.ours:
                                self.writes["ours"] += 1
            except Exception:  # noqa: BLE001 - HA restarting
                await asyncio.sleep(2)

    # -- measuring ----------------------------------------------------------------------------

    async def sample(self, started: float, segment: int) -> dict[str, Any]:
        probe = await self.run.probe(reset=True, native="1")  # the loop's lag over the last minute
        assert self.run.process is not None
        pid = self.run.process.pid
        config = self.run.config
        native = probe.get("native", {})
        writes = dict(self.writes)
        self.writes.clear()
        return {
            "minute": round((time.monotonic() - started) / 60, 2),
            "segment": segment,
            "rss_mb": probe.get("rss_kb", 0) / 1024,
            # What the allocator hands out (glibc: heap and mapped blocks; jemalloc: "allocated"):
            # RSS less the free memory it keeps. A checkpoint's snapshot raises RSS once (the
            # allocator keeps what it freed); this does not move.
            "in_use_mb": native.get("alloc_in_use_b", 0) / 2**20,
            "held_mb": native.get("alloc_held_b", 0) / 2**20,
            "allocator": native.get("allocator", "unknown"),
            "anonymous_mb": native.get("maps_anonymous_kb", 0) / 1024,
            "files_mb": (native.get("maps_library_kb", 0) + native.get("maps_file_kb", 0)) / 1024,
            "pymalloc_arenas": native.get("pymalloc_arenas", 0),
            "threads": len(os.listdir(f"/proc/{pid}/task")),
            "tasks": probe.get("tasks"),
            "fds": probe.get("fds"),
            "lag_p99_ms": probe.get("lag_ms", {}).get("p99"),
            "lag_max_ms": probe.get("lag_ms", {}).get("max"),
            "connected": probe.get("connected"),
            "recorder_mb": sum(p.stat().st_size for p in config.glob("home-assistant_v2.db*")) / 1e6,
            "storage_kb": _dir_bytes(config / ".storage") / 1000,
            "writes_ours": writes.get("ours", 0),
            "writes_all": writes.get("all", 0),
            "fleet": len(self.fleet.mqtt) + len(self.fleet.websocket),
        }

    async def attribute(self, started: float, segment: int, *, baseline: bool) -> list[dict[str, Any]]:
        """Where memory lives now (a list of one; none if the probe could not say: the run goes on)."""
        assert self.run.http is not None
        params = {"attribution": "baseline" if baseline else "1"}
        try:
            async with self.run.http.get(f"{self.run.base}/api/bench_probe", params=params) as resp:
                data = await resp.json()
        except Exception as err:  # noqa: BLE001 - reported, not fatal to hours of work
            print(f"soak: no attribution: {type(err).__name__}: {err}", flush=True)
            return []
        return [
            {
                "minute": round((time.monotonic() - started) / 60, 2),
                "segment": segment,
                "baseline": baseline,
                "rss_mb": data["rss_kb"] / 1024,
                **data["attribution"],
            }
        ]

    async def restart(self) -> float:
        """HA stops and starts (the devices reconnect on their own); seconds until the fleet is back."""
        self.running.clear()
        async with asyncio.timeout(180):
            while self.in_flight:  # noqa: ASYNC110 - a count, not an event
                await asyncio.sleep(0.5)
        stopped = time.monotonic()
        await self.run.stop()
        await self.run.start()
        fleet = len(self.fleet.mqtt) + len(self.fleet.websocket)
        try:
            await self.run.wait("ready", lambda ready: ready >= fleet - 2, 300)
        except TimeoutError as err:  # reported with the comeback's time; the work goes on
            print(f"soak: the fleet did not come back: {err}", flush=True)
        back = time.monotonic() - stopped
        await self.refresh()
        self.running.set()
        return back


# Home Assistant's container images (HA OS, the Docker image) preload jemalloc with these settings
# (rootfs/etc/services.d/home-assistant/run in home-assistant/core); a venv install runs glibc's malloc.
HA_MALLOC_CONF = "background_thread:true,metadata_thp:auto,dirty_decay_ms:20000,muzzy_decay_ms:20000"
JEMALLOC_PATHS = (
    "/usr/local/lib/libjemalloc.so.2",
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
)


def allocator_env(allocator: str) -> dict[str, str] | None:
    """Home Assistant's environment for the chosen allocator (None: the bench's own, glibc)."""
    if allocator == "glibc":
        return None
    found = next((path for path in JEMALLOC_PATHS if Path(path).exists()), None)
    if found is None:
        raise SystemExit("soak: --allocator jemalloc needs libjemalloc.so.2 (Debian: apt install libjemalloc2)")
    return {**os.environ, "LD_PRELOAD": found, "MALLOC_CONF": HA_MALLOC_CONF}


async def soak_run(
    *,
    minutes: float,
    devices: int,
    restarts: int,
    warmup: float,
    port: int,
    allocator: str = "glibc",
    recorder: bool = True,
) -> str:
    """The whole run; writes its report under ``bench/results/`` (again every ten minutes, so that a
    run cut short leaves one) and returns the README section."""
    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-soak-"))
    stem = (
        f"soak-{time.strftime('%Y-%m-%d')}"
        + ("" if allocator == "glibc" else f"-{allocator}")
        + ("" if recorder else "-no-recorder")
    )
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    ws_macs = frozenset(mac for mac, _ in pairs[-max(1, devices // 10) :])
    config = workdir / "config"
    prepare(config, pairs, port, accept_without_code=True, mqtt_port=port + 1, websocket_macs=ws_macs)
    (config / "configuration.yaml").write_text(CONFIGURATION if recorder else CONFIGURATION_NO_RECORDER)
    (config / "xiaozhi_firmware").mkdir()
    os.environ["BENCH_TRACEMALLOC"] = "1"  # the probe traces Python's heap (one frame) from its setup
    run = Run(port, config, env=allocator_env(allocator))
    fleet = Fleet(f"{run.base}/api/xiaozhi_local/ota/")
    for mac, _ in pairs:
        options = bench_options(mac, decode_speaker=False, reboots=True, upgrade_delay=0.0)
        if mac in ws_macs:
            fleet.websocket[mac] = SimulatedDevice(options)
        else:
            fleet.mqtt[mac] = SimulatedDevice(options, speaks_mqtt=True)
    soak = Soak(run, fleet, workdir)
    samples: list[dict[str, Any]] = []
    attributions: list[dict[str, Any]] = []
    comebacks: list[float] = []
    workers: list[asyncio.Task[None]] = []
    try:
        await run.start()
        await asyncio.sleep(5)
        gate = asyncio.Semaphore(50)

        async def boot(sim: SimulatedDevice) -> None:
            async with gate:
                if sim.speaks_mqtt:
                    await sim.boot_mqtt(fleet.ota)
                else:
                    await sim.boot(fleet.ota)
            fleet.keep(sim)

        await asyncio.gather(*(boot(sim) for sim in [*fleet.mqtt.values(), *fleet.websocket.values()]))
        await run.wait("ready", lambda ready: ready >= devices - 2, 300)
        await soak.refresh()
        for pair in filter(None, os.environ.get("BENCH_SOAK_RATES", "").split(",")):  # name=per_minute
            name, _, rate = pair.partition("=")
            RATES[name] = float(rate)
        workers = [asyncio.create_task(soak.activity(name, rate)) for name, rate in RATES.items() if rate > 0]
        workers.append(asyncio.create_task(soak.count_writes()))
        started = time.monotonic()
        soak.running.set()
        restart_at = [minutes * (i + 1) / (restarts + 1) for i in range(restarts)]
        segment, segment_start, attributed = 0, 0.0, -1.0
        # SIGINT or SIGTERM ends the run at the next minute, with its report (a session that must stop).
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        while (minute := (time.monotonic() - started) / 60) < minutes and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 60 - (time.monotonic() - started) % 60)
            if stop.is_set():
                print("soak: asked to stop; reporting what was measured", flush=True)
                break
            try:
                samples.append(s := await soak.sample(started, segment))
            except Exception as err:  # noqa: BLE001 - HA busy or restarting: the next minute says
                print(f"soak: no sample: {type(err).__name__}: {err}", flush=True)
                continue
            (workdir / "samples.json").write_text(  # enough to report a run that was cut short
                json.dumps(
                    {
                        "samples": samples,
                        "attributions": attributions,
                        "comebacks": comebacks,
                        "ok": soak.ok,
                        "failed": soak.failed,
                    }
                )
            )
            if len(samples) % REPORT_EVERY == 0:
                write_report(workdir, stem, samples, attributions, comebacks, soak, devices, warmup)
            print(
                f"soak {s['minute']:6.1f} min seg {segment}: RSS {s['rss_mb']:.0f} MB, threads {s['threads']}, "
                f"tasks {s['tasks']}, fds {s['fds']}, lag p99 {s['lag_p99_ms']:.1f} ms, "
                f"online {s['connected']}/{s['fleet']}, ok {sum(soak.ok.values())}, failed {sum(soak.failed.values())}",
                flush=True,
            )
            minute = s["minute"]
            warm = minute - segment_start >= warmup
            # The baseline half-way through the warm-up: the snapshot's own memory stays out of the slopes.
            if minute - segment_start >= warmup / 2 and attributed < segment_start:
                attributions.extend(await soak.attribute(started, segment, baseline=True))
                attributed = minute
            elif warm and minute - attributed >= ATTRIBUTE_EVERY:
                attributions.extend(await soak.attribute(started, segment, baseline=False))
                attributed = minute
            if restart_at and minute >= restart_at[0]:
                restart_at.pop(0)
                attributions.extend(await soak.attribute(started, segment, baseline=False))
                comebacks.append(await soak.restart())
                segment, segment_start = segment + 1, (time.monotonic() - started) / 60
        attributions.extend(await soak.attribute(started, segment, baseline=False))
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for task in fleet.keepers.values():
            task.cancel()
        await asyncio.gather(
            *(sim.drop() for sim in [*fleet.mqtt.values(), *fleet.websocket.values()]), return_exceptions=True
        )
        await run.stop()
    section = write_report(workdir, stem, samples, attributions, comebacks, soak, devices, warmup)
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return section


def write_report(  # noqa: PLR0917 - the run's figures, in one place
    workdir: Path,
    stem: str,
    samples: list[dict[str, Any]],
    attributions: list[dict[str, Any]],
    comebacks: list[float],
    soak: Soak,
    devices: int,
    warmup: float,
) -> str:
    """The report as measured so far, under ``bench/results/``; returns the README section."""
    log = (workdir / "ha.log").read_text(errors="replace").splitlines()
    ours = [
        line
        for line in log
        if "[custom_components.xiaozhi_local" in line and (" WARNING " in line or " ERROR " in line)
    ]
    from .soak_report import report  # noqa: PLC0415 - the text of the figures

    text, section = report(
        samples=samples,
        attributions=attributions,
        comebacks=comebacks,
        soak=soak,
        warnings=ours,
        minutes=samples[-1]["minute"] if samples else 0.0,
        devices=devices,
        warmup=warmup,
        stem=stem,
    )
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / f"{stem}.md").write_text(text)
    (results / f"{stem}.json").write_text(json.dumps({"samples": samples, "attributions": attributions}, indent=1))
    return section
