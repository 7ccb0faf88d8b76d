"""The talking devices of a bench, in a process of their own: a receiver that does no other work.

Pacing is measured where the device would measure it. If the devices that talk shared the bench
process with the 1000 idle ones (or with each other's encoders), that process's own event-loop
lag would be counted as lateness of Home Assistant's packets. Here a child process (``python -m
bench.voices``) boots only the talking devices, sends their speech (one encoding shared by all:
``mic_packets``), does not decode what they hear, and stamps every packet's arrival with
``time.monotonic()``, which is system-wide on Linux and so comparable with the probe inside
Home Assistant.

The parent speaks to it in JSON lines: a spec (the devices, the OTA URL, the transport), then
``talk`` commands, each answered with what every device did and heard; then ``quit``.
"""

import asyncio
from dataclasses import dataclass
import json
import os
import sys
import time
from typing import Any
import wave

from xiaozhi_sim import SimulatedDevice
from xiaozhi_sim.voice import MicEncoder

from .load import SPEECH, Run, bench_options, failure_text, lateness

WAKE = "你好小智"
"""Each talker adds its number: HA ends all but one of the turns that start with the same wake phrase
at the same moment (``duplicate_wake_up_detected``: several satellites in one room heard one person)."""


@dataclass
class Voices:
    """The parent's handle on the child process."""

    ota: str
    macs: list[str]
    mqtt: bool = False
    process: asyncio.subprocess.Process | None = None

    async def start(self, concurrency: int = 50, *, prove: bool = False) -> dict[str, Any]:
        """Start the child; returns once its devices are booted and connected (``{"ready", "failures"}``).

        ``prove``: MQTT devices also send their microphone's first datagrams (the channel carries
        downlink audio once the device has proved its UDP address), as after a wake word."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.voices",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=2**26,
        )  # fmt: skip
        spec = {"ota": self.ota, "macs": self.macs, "mqtt": self.mqtt, "concurrency": concurrency, "prove": prove}
        return await self._ask(spec)

    async def talk(self, *, mode: str, wake: bool, silence_after: float) -> dict[str, Any]:
        """Every device talks at once (real-time Opus): ``turns``, per device what it did and heard;
        the receiver's own ``cpu_s`` and ``lag_p99_ms`` meanwhile."""
        return await self._ask({"talk": {"mode": mode, "wake": wake, "silence_after": silence_after}})

    async def play(self, seconds: float) -> dict[str, Any]:
        """Every device listens for ``seconds`` to what HA plays it (the parent starts it meanwhile):
        per device its ``arrivals`` and drops; the receiver's own ``cpu_s`` and ``lag_p99_ms``."""
        return await self._ask({"play": {"seconds": seconds}})

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(b'{"quit": true}\n')
            await self.process.stdin.drain()
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError, ConnectionError:
            self.process.kill()
            await self.process.wait()

    async def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process is not None
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the voices process exited ({await self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer


async def voice_turns(run: Run, voices: Voices, *, mode: str, wake: bool, silence_after: float) -> dict[str, Any]:
    """Every device of ``voices`` talks at once; the figures per stage, with HA's loop lag meanwhile.

    Per turn: wake → first answer packet; perceived latency (the end of speaking, i.e. ``listen
    stop`` in manual mode, the speech's end in auto mode → first packet), split into the utterance
    ending (→ the STT's audio stream ended: ours, or HA's VAD in auto mode), HA's pipeline (→ TTS
    asked) and the downlink (→ first packet). Pacing as the device hears it: how late each packet
    came against a schedule that starts at the first packet (``lateness``), and how many came
    after the speaker needed them (an audible gap).
    """
    before = await run.probe(reset=True)
    started = time.monotonic()
    answer = await voices.talk(mode=mode, wake=wake, silence_after=silence_after)
    turns: list[dict[str, Any]] = answer["turns"]
    probe = await run.probe(reset=True)
    wall = time.monotonic() - started
    if profile := probe.get("profile"):  # BENCH_PROFILE=1: HA's loop thread, inclusive shares
        print("\n".join(f"{share:5.1f} %  {name}" for name, share in profile.items()), file=sys.stderr)
    seen = {turn["mac"]: turn for turn in probe.get("voice", []) if turn["mac"]}
    keys = ("wake_to_audio", "perceived", "ended", "behind", "heard", "pipeline", "downlink", "late", "sensor_off")
    out: dict[str, Any] = {key: [] for key in keys}
    gaps = packets = 0
    errors = [turn["error"] for turn in turns if "error" in turn]
    for turn in turns:
        arrivals, heard = turn["arrivals"], seen.get(turn["mac"])
        if not arrivals or heard is None or "spoken_end" not in turn:
            continue
        first = arrivals[0]
        out["wake_to_audio"].append(first - turn["started"])
        out["perceived"].append(first - turn["spoken_end"])
        out["ended"].append(heard["stt_end"] - turn["spoken_end"])
        # The STT had the audio up to ``audio_s`` (the wake word's audio is not counted): how long
        # after the device sent its last packet did the pipeline read it?
        out["behind"].append(heard["stt_end"] - (turn["started"] + heard["audio_s"]))
        out["heard"].append(heard["audio_s"])
        out["pipeline"].append(heard["tts_at"] - heard["stt_end"])
        out["downlink"].append(first - heard["tts_at"])
        if mode == "manual" and (shown := probe.get("response_ms", {}).get(turn["mac"])) is not None:
            # The device's Response time sensor against the device's own measure (both from the release).
            out["sensor_off"].append(first - turn["spoken_end"] - shown / 1000)
        turn_late, turn_gaps = lateness(arrivals)
        out["late"] += turn_late
        gaps += turn_gaps
        packets += len(arrivals)
    out.update(
        turns=len(out["perceived"]),
        failures=f"{len(errors)} ({errors[0]})" if errors else "",
        gaps=gaps,
        packets=packets,
        lag=probe.get("lag_ms", {}),
        ha_cpu=(probe.get("cpu_s", 0.0) - before.get("cpu_s", 0.0)) / wall,  # cores busy on average
        receiver_cpu=answer["cpu_s"] / wall,
        receiver_lag_p99=answer["lag_p99_ms"],
        ha_threads={
            name: round((cpu - before.get("threads_cpu_s", {}).get(name, 0.0)) / wall, 2)
            for name, cpu in probe.get("threads_cpu_s", {}).items()
            if cpu - before.get("threads_cpu_s", {}).get(name, 0.0) > 0.01 * wall
        },
        wall=wall,
    )
    print(f"HA threads, cores busy over {wall:.1f} s: {out['ha_threads']}", file=sys.stderr)
    return out


# -- the child -------------------------------------------------------------------------------------


async def _boot(spec: dict[str, Any]) -> tuple[list[SimulatedDevice], str]:
    gate = asyncio.Semaphore(int(spec.get("concurrency", 50)))

    # It only stamps what it hears: no decoding.
    sims = [
        SimulatedDevice(bench_options(mac, decode_speaker=False), speaks_mqtt=bool(spec.get("mqtt")))
        for mac in spec["macs"]
    ]

    async def one(sim: SimulatedDevice) -> None:
        async with gate:
            if sim.speaks_mqtt:
                await sim.boot_mqtt(spec["ota"])
            else:
                await sim.boot(spec["ota"])
            await sim.connect()  # MQTT: the wake word's hello opens the UDP channel
            if sim.speaks_mqtt and spec.get("prove"):  # its microphone's first datagrams
                for packet in MicEncoder(sim.frame_ms).packets(bytes(16000 * 2 * sim.frame_ms // 1000 * 3)):
                    sim.mqtt.udp.send_datagram(packet)

    results = await asyncio.gather(*(one(sim) for sim in sims), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    return [sim for sim, r in zip(sims, results, strict=True) if not isinstance(r, BaseException)], failure_text(
        failures
    )


async def _talk(sims: list[SimulatedDevice], pcm: bytes, mode: str, wake: bool, silence_after: float) -> dict[str, Any]:
    speech_s = len(pcm) / 2 / 16000
    turns: list[dict[str, Any]] = [{} for _ in sims]

    async def one(index: int, sim: SimulatedDevice) -> None:
        sim.relisten = False
        mark, marker = len(sim.audio_at), len(sim.log)
        started = time.monotonic()
        turn = turns[index]
        turn.update(mac=sim.options.mac, started=started, arrivals=[])
        try:
            await sim.say(
                pcm,
                mode=mode,
                wake_word=f"{WAKE} {index}" if wake else None,
                realtime=True,
                silence_after=silence_after,
            )
            # Manual: the release (listen stop) is where the user stops; auto: the speech's end.
            turn["spoken_end"] = time.monotonic() if mode == "manual" else started + speech_s
            await sim.wait_message(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 60, after=marker)
        except Exception as err:  # noqa: BLE001 - reported with the figures
            turn["error"] = f"{type(err).__name__}: {err}"
        turn["arrivals"] = sim.audio_at[mark:]

    loop = asyncio.get_running_loop()
    lags: list[float] = []

    async def lag() -> None:  # this process's own lateness: if it is large, the figures are ours, not HA's
        while True:
            start = loop.time()
            await asyncio.sleep(0.02)
            lags.append(max(0.0, loop.time() - start - 0.02))

    sampler = asyncio.create_task(lag())
    cpu = sum(os.times()[:2])
    await asyncio.gather(*(one(i, sim) for i, sim in enumerate(sims)))
    sampler.cancel()
    lags.sort()
    return {
        "turns": turns,
        "lag_p99_ms": lags[int(0.99 * len(lags))] * 1000 if lags else 0.0,
        "cpu_s": sum(os.times()[:2]) - cpu,
    }


async def _play(sims: list[SimulatedDevice], seconds: float) -> dict[str, Any]:
    marks = [len(sim.audio_at) for sim in sims]
    dropped = [(sim.queue_dropped, getattr(sim, "datagrams_dropped", 0)) for sim in sims]
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    cpu = sum(os.times()[:2])
    until = loop.time() + seconds
    while (start := loop.time()) < until:  # this process's own lateness, as in _talk
        await asyncio.sleep(0.02)
        lags.append(max(0.0, loop.time() - start - 0.02))
    lags.sort()
    return {
        "devices": [
            {
                "mac": sim.options.mac,
                "arrivals": sim.audio_at[mark:],
                "queue_dropped": sim.queue_dropped - queue,
                "datagrams_dropped": getattr(sim, "datagrams_dropped", 0) - datagrams,
            }
            for sim, mark, (queue, datagrams) in zip(sims, marks, dropped, strict=True)
        ],
        "lag_p99_ms": lags[int(0.99 * len(lags))] * 1000 if lags else 0.0,
        "cpu_s": sum(os.times()[:2]) - cpu,
    }


async def _serve() -> None:
    loop = asyncio.get_running_loop()

    async def read() -> dict[str, Any]:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        return json.loads(line) if line else {"quit": True}

    def write(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    spec = await read()
    sims, failures = await _boot(spec)
    write({"ready": len(sims), "failures": failures})
    with wave.open(str(SPEECH)) as wav:
        pcm = wav.readframes(wav.getnframes())
    try:
        while "quit" not in (command := await read()):
            if "play" in command:
                write(await _play(sims, float(command["play"]["seconds"])))
                continue
            talk = command["talk"]
            write(await _talk(sims, pcm, talk["mode"], talk["wake"], talk["silence_after"]))
    finally:
        await asyncio.gather(*(sim.drop() for sim in sims), return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(_serve())
