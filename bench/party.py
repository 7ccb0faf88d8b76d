"""A house party: many devices online, waking in groups at once; the nearest of each group answers.

``python -m bench party [N]``: N devices (30) on WebSocket, as the firmware wakes (its wake word's
audio, ``listen detect``, ``listen start``), in groups of 2-5 at once (spread over 30 ms), 200
times. Each group's devices record the wake word at known levels over their noise (and at
different microphone gains); the one with the most speech over its noise is the nearest. Counted:
conversations per group, how often the nearest answered, the wait the choice added.
"""

import asyncio
import contextlib
import os
from pathlib import Path
import random
import secrets
import shutil
import tempfile
import time
from typing import Any
import wave

from xiaozhi_sim import SimulatedDevice

from .load import Run, bench_options, mac_of, pct, prepare

LEVELS = (-18.0, -22.0, -26.0, -30.0, -34.0)
"""Speech levels (dBFS) over a -50 dBFS room: 4 dB apart, nearest first."""
QUESTION_S = 0.6


def _answered(sim: SimulatedDevice, marker: int) -> bool:
    return any(m.get("type") == "stt" for m in sim.log[marker:])


async def _wake(sim: SimulatedDevice, delay: float, pcm: bytes) -> None:
    await asyncio.sleep(delay)
    if sim.closed.is_set() or not sim.is_connected:
        await sim.connect()
    with contextlib.suppress(ConnectionError):  # ended: another device answers
        await sim.say(pcm, mode="manual", wake_word="你好小智")


async def _group(run: Run, sims: list[SimulatedDevice], rng: random.Random, pcm: bytes) -> dict[str, Any]:
    size = rng.randint(2, 5)
    group = rng.sample(sims, size)
    levels = rng.sample(LEVELS, size)
    for sim, level in zip(group, levels, strict=True):
        gain = rng.uniform(-6.0, 6.0)  # a microphone of more or less gain: speech and noise alike
        sim.options.wake_level_db = level + gain
        sim.options.noise_db = -50.0 + gain
    nearest = group[levels.index(max(levels))]
    marks = {sim.options.mac: len(sim.log) for sim in group}
    before = (await run.probe()).get("nearest_rounds", 0)
    await asyncio.gather(*(_wake(sim, rng.uniform(0.0, 0.03), pcm) for sim in group))
    deadline = time.monotonic() + 30
    answered: list[SimulatedDevice] = []
    while time.monotonic() < deadline:
        answered = [sim for sim in group if _answered(sim, marks[sim.options.mac])]
        ended = [sim for sim in group if sim.closed.is_set()]
        if answered and len(answered) + len(ended) >= size:
            break
        await asyncio.sleep(0.05)
    probe = await run.probe()
    decision = (probe.get("nearest") or [{}])[-1]
    for sim in answered:  # the reply plays out; then a moment of quiet before the next group
        with contextlib.suppress(TimeoutError):
            await sim.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 15,
                                   after=marks[sim.options.mac])  # fmt: skip
    await asyncio.sleep(1.0)
    return {
        "size": size,
        "answers": len(answered),
        "nearest": answered == [nearest],
        "waited_ms": decision.get("waited_ms"),
        "rounds": probe.get("nearest_rounds", 0) - before,
    }


async def party(*, devices: int, port: int, groups: int = 200, seed: int = 5) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches
    from .load import SPEECH  # noqa: PLC0415

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-party-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    prepare(workdir / "config", pairs, port, nearest=True)
    run = Run(port, workdir / "config")
    sims = [SimulatedDevice(bench_options(mac, wake_level_db=-20.0)) for mac, _token in pairs]
    rng = random.Random(seed)
    with wave.open(str(SPEECH)) as wav:
        pcm = wav.readframes(int(16000 * QUESTION_S))
    results: list[dict[str, Any]] = []
    try:
        await run.start()
        ota = f"{run.base}/api/xiaozhi_local/ota/"
        for sim in sims:
            await sim.boot(ota)
            await sim.connect()
            sim.relisten = False
        await run.wait("ready", lambda ready: ready >= devices, 120)
        await asyncio.sleep(2)  # their conversations opened at boot, not at a wake
        for index in range(groups):
            results.append(await _group(run, sims, rng, pcm))
            if os.environ.get("BENCH_VERBOSE"):
                print(results[-1], flush=True)
            if (index + 1) % 20 == 0:
                print(f"party {index + 1}/{groups}", flush=True)
    finally:
        for sim in sims:
            await sim.drop()
        await run.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    one = sum(1 for r in results if r["answers"] == 1)
    nearest = sum(1 for r in results if r["nearest"])
    waits = [float(r["waited_ms"]) for r in results if r["waited_ms"] is not None]
    return "\n".join(
        [
            "## A house party: the nearest device answers (`python -m bench party`)",
            "",
            f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process, "
            f"{devices} simulated stock devices on WebSocket, each waking as the firmware does "
            "(about 2 s of its wake word's Opus audio, `listen detect`, `listen start`), in groups of 2-5 "
            f"within 30 ms, {groups} times. In each group the speech levels are 4 dB apart over a -50 dBFS room, "
            "each device's microphone gain ±6 dB (speech and noise alike).",
            "",
            "| Figure | Result | Goal |",
            "|---|---|---|",
            f"| Groups with exactly one conversation | {one} of {len(results)} | all |",
            f"| … where it was the nearest device | {nearest} of {len(results)} "
            f"({nearest / max(1, len(results)) * 100:.1f} %) | ≥ 95 % |",
            f"| Wait the choice added, from the first wake of a group (p50 / p99 / max) | "
            f"{pct(waits, 50):.0f} / {pct(waits, 99):.0f} / {max(waits, default=0):.0f} ms | p99 ≤ window + 20 ms "
            "(320 ms) |",
            "| Wake audio kept per device | at most 48 packets of ≤ 1000 B (47 KB; "
            "`tests/test_nearest.py` floods it) | ≤ 64 KB |",
            "",
            "With one device that could answer (the others off, or in other areas) no round opens and nothing "
            "waits: `tests/test_nearest.py::test_alone_it_does_not_wait`.",
        ]
    )
