"""``python -m bench talkers``: many devices talking at once, as load testers of xiaozhi servers do.

Each talker says its wake word (``listen detect``), starts listening in auto mode, and streams a
real spoken question as real-time Opus (60 ms a packet), then silence, until Home Assistant's
VAD ends the utterance and the answer comes. First one talker alone (the baseline), then N at once.

Per turn: wake → first answer packet at the device; perceived latency (end of speech → first
packet); where the time goes (HA's VAD ending the utterance, the pipeline, the TTS to the first
packet); downlink pacing at the device; and HA's event-loop lag during the talk (the probe).
"""

import asyncio
import os
from pathlib import Path
import secrets
import shutil
import tempfile
import time
from typing import Any
import wave

from xiaozhi_sim import SimulatedDevice, SimulatorOptions

from .load import (
    SPEECH,
    STOCK_TOOLS,
    TOOLS,
    Run,
    client_id_of,
    failure_text,
    lateness,
    mac_of,
    ms,
    pct,
    prepare,
    ramp,
)

WAKE = "你好小智"
"""Each talker adds its number: HA ends all but one of the turns that start with the same wake phrase
at the same moment (``duplicate_wake_up_detected``: several satellites in one room heard one person)."""


async def talk(run: Run, talkers: list[SimulatedDevice], pcm: bytes) -> dict[str, Any]:
    """Every talker at once: wake, real-time speech, silence until answered; figures per stage."""
    speech_s = len(pcm) / 2 / 16000
    marks = [len(sim.audio_at) for sim in talkers]
    woke = [0.0] * len(talkers)

    async def one(index: int, sim: SimulatedDevice) -> None:
        sim.relisten = False
        woke[index] = time.monotonic()
        marker = len(sim.log)
        await sim.say(pcm, mode="auto", wake_word=f"{WAKE} {index}", realtime=True, silence_after=4.0)
        await sim.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 60, after=marker)

    await run.probe(reset=True)
    results = await asyncio.gather(*(one(i, sim) for i, sim in enumerate(talkers)), return_exceptions=True)
    probe = await run.probe(reset=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    seen = {turn["mac"]: turn for turn in probe.get("voice", []) if turn["mac"]}
    wake_to_audio, perceived, vad, pipeline, downlink, late = [], [], [], [], [], []
    gaps = packets = 0
    for sim, mark, started in zip(talkers, marks, woke, strict=True):
        arrivals = sim.audio_at[mark:]
        turn = seen.get(sim.options.mac)
        if not arrivals or turn is None:
            continue
        first = arrivals[0]
        spoken_end = started + speech_s
        wake_to_audio.append(first - started)
        perceived.append(first - spoken_end)
        vad.append(turn["stt_end"] - spoken_end)
        pipeline.append(turn["tts_at"] - turn["stt_end"])
        downlink.append(first - turn["tts_at"])
        turn_late, turn_gaps = lateness(arrivals)
        late += turn_late
        gaps += turn_gaps
        packets += len(arrivals)
    return {
        "turns": len(perceived),
        "failures": failure_text(failures),
        "wake_to_audio": wake_to_audio,
        "perceived": perceived,
        "vad": vad,
        "pipeline": pipeline,
        "downlink": downlink,
        "late": late,
        "gaps": gaps,
        "packets": packets,
        "lag": probe["lag_ms"],
    }


async def talkers(*, devices: int, port: int, concurrency: int = 50) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-talkers-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    prepare(workdir / "config", pairs, port)
    run = Run(port, workdir / "config")
    sims = [
        SimulatedDevice(
            SimulatorOptions(
                url="", mac=mac, client_id=client_id_of(mac), extra_tools=TOOLS - STOCK_TOOLS, hello_timeout=60
            )
        )
        for mac, _token in pairs
    ]
    with wave.open(str(SPEECH)) as wav:
        pcm = wav.readframes(wav.getnframes())
    try:
        await run.start()
        await asyncio.sleep(5)
        await ramp(run, sims, concurrency)
        await asyncio.sleep(2)
        alone = await talk(run, sims[:1], pcm)
        await asyncio.sleep(2)
        crowd = await talk(run, sims, pcm)
    finally:
        await asyncio.gather(*(sim.drop() for sim in sims), return_exceptions=True)
        await run.stop()
    base = pct(alone["perceived"], 50)
    ratio = pct(crowd["perceived"], 50) / base if base else 0.0
    lines = [
        f"## {devices} talkers at once (`python -m bench talkers`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process with "
        f"the bench's instant STT, agent and TTS (WAV at 22.05 kHz); {devices} simulated stock devices on "
        "WebSocket in the bench process. Each says its wake word, then 3 s of real speech as real-time Opus, "
        "then silence until the answer (auto mode: HA's VAD ends the utterance). Their wake phrases differ "
        "(`你好小智 <n>`): Home Assistant lets only one of several turns that start with the same phrase at "
        "the same moment go on, as it should for satellites in one room.",
        "",
        "| Figure | One talker | All at once | Goal |",
        "|---|---|---|---|",
        f"| Wake → first answer packet at the device (p50 / p99) | {ms(alone['wake_to_audio'], 50)} ms | "
        f"{ms(crowd['wake_to_audio'], 50)} / {ms(crowd['wake_to_audio'], 99)} ms"
        f"{' — failures: ' + crowd['failures'] if crowd['failures'] else ''} | |",
        f"| Perceived latency: end of speech → first answer packet (p50 / p99) | {ms(alone['perceived'], 50)} ms | "
        f"{ms(crowd['perceived'], 50)} / {ms(crowd['perceived'], 99)} ms ({ratio:.1f}× one talker) | ≤ 1.5× |",
        f"| … HA's VAD ends the utterance: end of speech → STT stream ended (p50 / p99) | {ms(alone['vad'], 50)} ms "
        f"| {ms(crowd['vad'], 50)} / {ms(crowd['vad'], 99)} ms | |",
        f"| … the pipeline: STT ended → TTS asked (p50 / p99) | {ms(alone['pipeline'], 50)} ms | "
        f"{ms(crowd['pipeline'], 50)} / {ms(crowd['pipeline'], 99)} ms | |",
        f"| … TTS asked → first packet at the device (p50 / p99) | {ms(alone['downlink'], 50)} ms | "
        f"{ms(crowd['downlink'], 50)} / {ms(crowd['downlink'], 99)} ms | |",
        f"| Downlink pacing lateness at the device (p50 / p99 / max); packets after the speaker needed them | "
        f"{pct(alone['late'], 99) * 1000:.1f} ms p99; {alone['gaps']} | "
        f"{pct(crowd['late'], 50) * 1000:.1f} / {pct(crowd['late'], 99) * 1000:.1f} / "
        f"{max(crowd['late'], default=0) * 1000:.1f} ms; {crowd['gaps']} of {crowd['packets']} | no gaps |",
        f"| HA's event-loop lag during the talk (p50 / p99 / max) | {alone['lag']['p99']:.1f} ms p99 | "
        f"{crowd['lag']['p50']:.1f} / {crowd['lag']['p99']:.1f} / {crowd['lag']['max']:.1f} ms | p99 < 50 ms |",
        "",
        "The devices, and the clock that stamps the packets' arrival, run in the bench process, which also "
        "encodes and decodes every talker's audio: on 2 cores its own load is inside the pacing figures.",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)
