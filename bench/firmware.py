"""``python -m bench firmware``: many devices download a firmware image from Home Assistant at once.

A real Home Assistant (its own process, the probe inside) with every device paired and on MQTT,
a 2.5 MB image in its ``xiaozhi_firmware`` folder, and the simulated stock devices in this
process. Each device's update entity is installed through HA's WebSocket API at the same moment:
each device is asked through ``self.upgrade_firmware``, downloads the image in 4 KiB pages,
checks and "flashes" it, reboots, and checks OTA again with the new version. Measured: how many
came back with it, how long it took, HA's event-loop lag and its resident memory during the
downloads (sampled from the probe), and the download rate.
"""

import asyncio
import json
import os
from pathlib import Path
import secrets
import shutil
import tempfile
import time
from typing import Any

from xiaozhi_sim.firmware import build_image
from xiaozhi_sim.mqtt import MqttDevice

from .load import Run, bench_options, failure_text, mac_of, pct, prepare
from .mqtt import boot_all

IMAGE_BYTES = 2_500_000
VERSION = "2.5.0"


async def update_entities(run: Run) -> list[str]:
    """The firmware entities of the hub's devices."""
    async with run.api() as ws:
        await ws.send(json.dumps({"id": 1, "type": "config/entity_registry/list"}))
        entities = json.loads(await ws.recv())["result"]
    return sorted(
        e["entity_id"] for e in entities if e["platform"] == "xiaozhi_local" and e["entity_id"].startswith("update.")
    )


async def install_all(run: Run, entity_ids: list[str]) -> tuple[list[float], list[str]]:
    """``update.install`` on every entity at once; seconds each took, and the errors."""
    async with run.api() as ws:
        loop = asyncio.get_running_loop()
        waiting: dict[int, asyncio.Future[Any]] = {}

        async def reader() -> None:
            async for raw in ws:
                msg = json.loads(raw)
                if (future := waiting.pop(msg.get("id"), None)) is not None:
                    future.set_result(msg)

        read_task = asyncio.create_task(reader())
        started = time.monotonic()
        durations: list[float] = []
        errors: list[str] = []

        async def one(index: int, entity_id: str) -> None:
            future: asyncio.Future[Any] = loop.create_future()
            waiting[index] = future
            await ws.send(
                json.dumps(
                    {
                        "id": index,
                        "type": "call_service",
                        "domain": "update",
                        "service": "install",
                        "service_data": {"entity_id": entity_id},
                    }
                )
            )
            msg = await future
            if msg.get("success"):
                durations.append(time.monotonic() - started)
            else:
                errors.append(str(msg.get("error", {}).get("message")))

        await asyncio.wait_for(asyncio.gather(*(one(10 + i, e) for i, e in enumerate(entity_ids))), 900)
        read_task.cancel()
        return durations, errors


async def sample_memory(run: Run, samples: list[int], stop: asyncio.Event) -> None:
    """HA's resident memory every 0.25 s until ``stop``."""
    while not stop.is_set():
        probe = await run.probe()
        if "rss_kb" in probe:
            samples.append(probe["rss_kb"])
        await asyncio.sleep(0.25)


async def firmware_load(*, devices: int, concurrency: int, port: int) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-firmware-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    prepare(workdir / "config", pairs, port, mqtt_port=port + 1)
    folder = workdir / "config" / "xiaozhi_firmware"
    folder.mkdir()
    image = build_image(VERSION, size=IMAGE_BYTES)
    (folder / f"bread-compact-wifi_{VERSION}.bin").write_bytes(image)
    run = Run(port, workdir / "config")
    sims = [MqttDevice(bench_options(mac, upgrade_delay=0.0, reboots=True)) for mac, _ in pairs]
    memory: list[int] = []
    stop = asyncio.Event()
    try:
        await run.start()
        await asyncio.sleep(5)  # let startup settle
        await boot_all(run, sims, [], concurrency)
        entity_ids = await update_entities(run)
        before = await run.probe(reset=True)
        sampler = asyncio.create_task(sample_memory(run, memory, stop))
        started = time.monotonic()
        durations, errors = await install_all(run, entity_ids)
        elapsed = time.monotonic() - started
        during = await run.probe(reset=True)
        stop.set()
        await sampler
        upgraded = sum(1 for sim in sims if sim.options.firmware_version == VERSION)
        read = sum(sum(u["read"] for u in sim.upgrades) for sim in sims)
    except Exception as err:
        run.figures["failure"] = failure_text([err])
        raise
    finally:
        stop.set()
        await asyncio.gather(*(sim.drop() for sim in sims), return_exceptions=True)
        await run.stop()
    peak_growth_mb = (max(memory, default=before["rss_kb"]) - before["rss_kb"]) / 1024
    error_note = f" — errors: {len(errors)} ({errors[0]})" if errors else ""
    lines = [
        "## Firmware updates: many devices download at once (`python -m bench firmware`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process, "
        f"{devices} simulated stock devices on MQTT in the bench's process, loopback. Every device's "
        f"update entity installed at once (`update.install` through HA's WebSocket API): each is asked "
        f"through `self.upgrade_firmware`, reads a {IMAGE_BYTES / 1e6:.1f} MB image in 4 KiB pages, checks "
        "it, reboots and checks OTA again.",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| Devices back with the new version | {upgraded} of {devices} (entity installs that succeeded: "
        f"{len(durations)}){error_note} | all |",
        f"| Time until the last came back / each install (p50 / p99) | {elapsed:.1f} s / "
        f"{pct(durations, 50):.1f} / {pct(durations, 99):.1f} s | |",
        f"| Served | {read / 1e6:.0f} MB, {read / 1e6 / max(elapsed, 0.001):.0f} MB/s | |",
        f"| HA event-loop lag during the downloads (p50 / p99 / max) | {during['lag_ms']['p50']:.1f} / "
        f"{during['lag_ms']['p99']:.1f} / {during['lag_ms']['max']:.1f} ms | p99 < 50 ms |",
        f"| HA resident memory: before → peak (growth) | {before['rss_kb'] / 1024:.0f} → "
        f"{max(memory, default=before['rss_kb']) / 1024:.0f} MB ({peak_growth_mb:+.1f} MB) | reported |",
        "",
        "The image is held once, whatever the number of downloads; each download's socket keeps at most "
        "64 KB waiting for its device, so what the entity shows is what the device has read.",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)
