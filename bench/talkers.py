"""``python -m bench talkers``: many devices talking at once, as load testers of xiaozhi servers do.

Each talker says its wake word (``listen detect``), starts listening in auto mode, and streams a
real spoken question as real-time Opus (60 ms a packet), then silence, until Home Assistant's
VAD ends the utterance and the answer comes. First one talker alone (the baseline), then N at once.

Per turn: wake → first answer packet at the device; perceived latency (end of speech → first
packet); where the time goes (HA's VAD ending the utterance, the pipeline, the TTS to the first
packet); downlink pacing at the device; HA's event-loop lag during the talk (the probe); and what
Home Assistant's own VAD costs its event loop per talker (``ha_vad_cost``), which sets how many
can talk at once.
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

from .load import SPEECH, Run, mac_of, ms, pct, prepare
from .voices import Voices, voice_turns


def ha_vad_cost(rounds: int = 20) -> float:
    """CPU seconds per second of audio that Home Assistant's own audio path spends on one talker.

    Exactly what its pipeline does on the event loop for every 10 ms of a satellite's audio (the
    defaults satellites get: no noise suppression, no gain; micro-VAD and the command segmenter),
    called directly on the speech the talkers say.
    """
    from homeassistant.components.assist_pipeline.audio_enhancer import (  # noqa: PLC0415 - HA only here
        MicroVadSpeexEnhancer,
    )
    from homeassistant.components.assist_pipeline.vad import (  # noqa: PLC0415
        AudioBuffer,
        VoiceCommandSegmenter,
        chunk_samples,
    )

    chunk = 320  # HA's BYTES_PER_CHUNK: 10 ms at 16 kHz
    with wave.open(str(SPEECH)) as wav:
        pcm = wav.readframes(wav.getnframes())
    packets = [pcm[i : i + 1920] for i in range(0, len(pcm), 1920)]  # as 60 ms packets arrive
    enhancer = MicroVadSpeexEnhancer(0, 0, True)
    started = time.process_time()
    for _ in range(rounds):
        segmenter, buffer = VoiceCommandSegmenter(silence_seconds=0.7), AudioBuffer(chunk)
        for packet in packets:
            for piece in chunk_samples(packet, chunk, buffer):
                segmenter.process(0.01, enhancer.enhance_chunk(piece, 0).speech_probability)
    return (time.process_time() - started) / rounds / (len(pcm) / 2 / 16000)


async def talkers(*, devices: int, port: int, concurrency: int = 50) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-talkers-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    prepare(workdir / "config", pairs, port)
    run = Run(port, workdir / "config")
    voices = Voices(f"{run.base}/api/xiaozhi_local/ota/", [mac for mac, _token in pairs])
    alone_voices = Voices(voices.ota, voices.macs[:1])
    figures: list[dict[str, Any]] = []
    try:
        await run.start()
        await asyncio.sleep(5)
        for voices_now in (alone_voices, voices):  # one talker alone (the baseline), then all at once
            booted = await voices_now.start(concurrency)
            await run.wait("ready", lambda ready, n=booted["ready"]: ready >= n, 300)
            await asyncio.sleep(5)  # let the boot settle
            figures.append(await voice_turns(run, voices_now, mode="auto", wake=True, silence_after=4.0))
            await voices_now.stop()
        alone, crowd = figures
    finally:
        await voices.stop()
        await run.stop()
    base = pct(alone["perceived"], 50)
    ratio = pct(crowd["perceived"], 50) / base if base else 0.0
    vad = ha_vad_cost()
    lines = [
        f"## {devices} talkers at once (`python -m bench talkers`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process with "
        f"the bench's instant STT, agent and TTS (WAV at 22.05 kHz); {devices} simulated stock devices on "
        "WebSocket in a receiver process of their own (`bench/voices.py`), which stamps every packet's arrival "
        "and does nothing else. Each says its wake word, then 3 s of real speech as real-time Opus on the "
        "microphone's clock, then silence until the answer (auto mode: HA's VAD ends the utterance). Their wake "
        "phrases differ (`你好小智 <n>`): Home Assistant lets only one of several turns that start with the same "
        "phrase at the same moment go on, as it should for satellites in one room.",
        "",
        "| Figure | One talker | All at once | Goal |",
        "|---|---|---|---|",
        f"| Wake → first answer packet at the device (p50 / p99) | {ms(alone['wake_to_audio'], 50)} ms | "
        f"{ms(crowd['wake_to_audio'], 50)} / {ms(crowd['wake_to_audio'], 99)} ms"
        f"{' — failures: ' + crowd['failures'] if crowd['failures'] else ''} | |",
        f"| Perceived latency: end of speech → first answer packet (p50 / p99) | {ms(alone['perceived'], 50)} ms | "
        f"{ms(crowd['perceived'], 50)} / {ms(crowd['perceived'], 99)} ms ({ratio:.1f}× one talker) | ≤ 1.5× |",
        f"| … HA's VAD ends the utterance: end of speech → STT stream ended (p50 / p99) | {ms(alone['ended'], 50)} ms "
        f"| {ms(crowd['ended'], 50)} / {ms(crowd['ended'], 99)} ms | |",
        f"| … of which HA's pipeline reading behind the device: STT ended → when the device sent the last audio "
        f"the STT read (p50 / p99) | {ms(alone['behind'], 50)} ms | "
        f"{ms(crowd['behind'], 50)} / {ms(crowd['behind'], 99)} ms | |",
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
        f"| CPU during the talk, cores busy on average: HA's event-loop thread / our codec thread / the receiver "
        f"(its own loop lag p99) | {_threads(alone)} | {_threads(crowd)} | |",
        f"| Home Assistant's own VAD on its event loop (micro-VAD and the command segmenter, every 10 ms of "
        f"audio): CPU per talker | {vad * 1000:.1f} ms per second of audio | "
        f"{devices} talkers: {vad * devices:.2f} cores | |",
        "",
        f"Reading it: the perceived latency is HA's VAD ending the utterance (it waits for 0.7 s of silence) plus "
        f"the answer's first packet. HA's VAD runs on Home Assistant's one event-loop thread, {vad * 1000:.1f} ms "
        f"of CPU for every second of every talker, so {devices} talkers ask {vad * devices:.2f} cores of that "
        "thread. "
        + (
            "That is more than the one it has: HA's pipeline reads the audio later than the device sent it for "
            "as long as they speak, and every answer waits for that. `python -m bench talkers 50` shows where "
            "the goals hold on this machine."
            if vad * devices >= 1
            else "It keeps up: the pipeline reads the audio as it comes, and the answers come about as fast as "
            "for one talker."
        )
        + " The integration's own work (Opus both ways, resampling) is on its codec thread, beside the loop.",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)


def _threads(figures: dict[str, Any]) -> str:
    threads = figures["ha_threads"]
    return (
        f"{threads.get('event loop', 0.0):.2f} / {threads.get('xiaozhi_local codec', 0.0):.2f} / "
        f"{figures['receiver_cpu']:.2f} ({figures['receiver_lag_p99']:.1f} ms)"
    )
