"""``python -m bench media``: devices playing a radio stream at once, among many idle ones.

A real Home Assistant (its own process, the probe inside) with every device paired and on MQTT.
The devices that play are in a receiver process of their own (``bench/voices.py``): each opens its
conversation channel (the wake word's hello and its microphone's first datagrams), then HA's
``media_player.play_media`` hands every one of them the same endless MP3 station, served by this
process at real time as Radio Browser's stations are (a short burst, then one second of audio per
second). HA converts each with its own ffmpeg and streams it as paced Opus over encrypted UDP.

Measured: pacing lateness at the device (against real time from its first packet; packets after
the speaker needed them are audible gaps), HA's event-loop lag while they play, and CPU per stream
(HA's process and its ffmpeg children, against the same span with every device idle).
"""

import asyncio
from collections.abc import AsyncIterator
import json
import os
from pathlib import Path
import secrets
import shutil
import subprocess
import tempfile
import time
from typing import Any

from aiohttp import web

from xiaozhi_sim import SimulatedDevice

from .load import Run, bench_options, lateness, mac_of, pct, prepare
from .mqtt import boot_all
from .voices import Voices

STATION_BURST_S = 2.0
"""What a station sends at once when a listener connects (its buffer), before real time."""


def _station_audio(seconds: float) -> bytes:
    """Music-like MP3 (a chord that changes every half second), 44.1 kHz stereo 128 kbit/s."""
    notes = "+".join(f"sin({f}*2*PI*t)*0.2" for f in (220, 277, 330))
    done = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi",
         "-i", f"aevalsrc={notes}*(0.6+0.4*sin(2*PI*t)):s=44100:d={seconds}",
         "-ac", "2", "-b:a", "128k", "-f", "mp3", "pipe:"],
        capture_output=True, check=True,
    )  # fmt: skip
    return done.stdout


class Station:
    """An endless MP3 stream on loopback, paced at real time for each listener."""

    def __init__(self) -> None:
        self.loop_s = 10.0
        self.audio = _station_audio(self.loop_s)
        self.bytes_per_s = len(self.audio) / self.loop_s
        self.listeners = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/jazz.mp3", self.stream)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/jazz.mp3"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg", "icy-name": "Bench FM"})
        await response.prepare(request)
        self.listeners += 1
        loop = asyncio.get_running_loop()
        started, sent = loop.time(), 0
        try:
            async for chunk in self._chunks():
                await response.write(chunk)
                sent += len(chunk)
                due = started + sent / self.bytes_per_s - STATION_BURST_S
                await asyncio.sleep(max(0.0, due - loop.time()))
        except ConnectionError, asyncio.CancelledError:
            pass
        finally:
            self.listeners -= 1
        return response

    async def _chunks(self) -> AsyncIterator[bytes]:
        step = int(self.bytes_per_s / 4)  # a quarter of a second at a time
        while True:
            for start in range(0, len(self.audio), step):
                yield self.audio[start : start + step]


async def media_players(run: Run, macs: list[str]) -> list[str]:
    """The media player entity of each device, in the order of ``macs``."""
    async with run.api() as ws:
        await ws.send(json.dumps({"id": 1, "type": "config/device_registry/list"}))
        devices = json.loads(await ws.recv())["result"]
        await ws.send(json.dumps({"id": 2, "type": "config/entity_registry/list"}))
        entities = json.loads(await ws.recv())["result"]
    device_of = {conn[1]: d["id"] for d in devices for conn in d["connections"] if conn[0] == "mac"}
    player_of = {
        e["device_id"]: e["entity_id"]
        for e in entities
        if e["platform"] == "xiaozhi_local" and e["entity_id"].startswith("media_player.")
    }
    return [player_of[device_of[mac]] for mac in macs]


async def call_all(run: Run, service: str, players: list[str], data: dict[str, Any]) -> list[str]:
    """``media_player.<service>`` on every player at once; the errors."""
    async with run.api() as ws:
        for index, entity_id in enumerate(players):
            message = {
                "id": 10 + index,
                "type": "call_service",
                "domain": "media_player",
                "service": service,
                "service_data": {"entity_id": entity_id, **data},
            }
            await ws.send(json.dumps(message))
        errors: list[str] = []
        for _ in players:
            answer = json.loads(await asyncio.wait_for(ws.recv(), 60))
            if not answer.get("success"):
                errors.append(str(answer.get("error", {}).get("message")))
    return errors


def _cpu(probe: dict[str, Any]) -> float:
    """HA's CPU seconds so far: its own threads and its child processes (ffmpeg)."""
    children: dict[str, float] = probe.get("children_cpu_s", {})
    return float(probe.get("cpu_s", 0.0)) + sum(children.values())


async def media_load(*, devices: int, playing: int, seconds: float, concurrency: int, port: int) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-media-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    prepare(workdir / "config", pairs, port, mqtt_port=port + 1)
    run = Run(port, workdir / "config")
    idle = [SimulatedDevice(bench_options(mac), speaks_mqtt=True) for mac, _ in pairs[playing:]]
    voices = Voices(f"{run.base}/api/xiaozhi_local/ota/", [mac for mac, _ in pairs[:playing]], mqtt=True)
    station = Station()
    try:
        await station.start()
        await run.start()
        await asyncio.sleep(5)  # let startup settle
        await asyncio.gather(
            voices.start(concurrency, prove=True), boot_all(run, idle, [], concurrency, also_ready=playing)
        )
        players = await media_players(run, voices.macs)
        await asyncio.sleep(5)  # the connect-time rounds are over
        before = await run.probe(reset=True)
        await asyncio.sleep(seconds)
        baseline = await run.probe(reset=True)
        listening = asyncio.create_task(voices.play(seconds + 5))
        started = time.monotonic()
        errors = await call_all(run, "play_media", players, {
            "media_content_id": station.url, "media_content_type": "music",
            "extra": {"metadata": {"title": "Jazz", "artist": "Bench FM"}},
        })  # fmt: skip
        asked_s = time.monotonic() - started
        await asyncio.sleep(5)  # the first seconds (ffmpeg starting) are not the steady state
        steady = await run.probe(reset=True)
        steady_from = time.monotonic()
        heard = await listening
        during = await run.probe(reset=True)
        steady_s = time.monotonic() - steady_from
        stop_errors = await call_all(run, "media_stop", players, {})
        await asyncio.sleep(2)
        after = await run.probe()
    finally:
        await voices.stop()
        await asyncio.gather(*(sim.drop() for sim in idle), return_exceptions=True)
        await run.stop()
        await station.stop()
    idle_cores = (_cpu(baseline) - _cpu(before)) / seconds
    playing_cores = (_cpu(during) - _cpu(steady)) / steady_s
    late: list[float] = []
    gaps = packets = dropped = 0
    firsts: list[float] = []
    for device in heard["devices"]:
        arrivals = device["arrivals"]
        dropped += device["queue_dropped"] + device["datagrams_dropped"]
        if not arrivals:
            continue
        firsts.append(arrivals[0] - started)
        device_late, device_gaps = lateness(arrivals)
        late += device_late
        gaps += device_gaps
        packets += len(arrivals)
    per_stream = (playing_cores - idle_cores) / max(1, playing)
    children = {
        name: round(cpu - steady.get("children_cpu_s", {}).get(name, 0.0), 1)
        for name, cpu in during.get("children_cpu_s", {}).items()
    }
    failures = f" — errors: {len(errors)} ({errors[0]})" if errors else ""
    lines = [
        "## Music and radio: devices playing a stream among idle ones (`python -m bench media`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process, "
        f"{devices} simulated stock devices on MQTT+UDP, loopback; the {playing} that play are in a receiver "
        "process of their own (`bench/voices.py`), each in a conversation; one MP3 station (128 kbit/s, "
        f"44.1 kHz stereo) served at real time after a {STATION_BURST_S:.0f} s burst.",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| {playing} × `play_media` at once → all accepted; first packet at the device (p50 / max) | "
        f"{asked_s:.2f} s; {pct(firsts, 50):.2f} / {max(firsts, default=0):.2f} s{failures} | |",
        f"| Pacing lateness at the device, {packets} packets over {seconds + 5:.0f} s (p50 / p99 / max) | "
        f"{pct(late, 50) * 1000:.1f} / {pct(late, 99) * 1000:.1f} / {max(late, default=0) * 1000:.1f} ms; "
        f"{gaps} packets after the speaker needed them; {dropped} dropped | p99 < 15 ms |",
        f"| HA event-loop lag while they play (p50 / p99 / max) | {during['lag_ms']['p50']:.1f} / "
        f"{during['lag_ms']['p99']:.1f} / {during['lag_ms']['max']:.1f} ms (idle: p99 "
        f"{baseline['lag_ms']['p99']:.1f} ms) | p99 < 50 ms |",
        f"| CPU per stream (HA's process and its ffmpeg, above idle) | {per_stream * 100:.1f} % of a core "
        f"({idle_cores:.2f} cores idle, {playing_cores:.2f} playing) | |",
        f"| The receiver (does nothing but stamp arrivals): its loop lag p99 | {heard['lag_p99_ms']:.1f} ms | |",
        f"| Stopped: `media_stop` on all; ffmpeg left running | {len(stop_errors)} errors; "
        f"{after.get('children', {}).get('ffmpeg', 0)} | 0; 0 |",
        "",
        f"CPU seconds of HA's children over the {steady_s:.0f} s measured: {children}. The lateness counts from each "
        "device's first packet; the first 0.3 s may come early (the pacer's lead).",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)
