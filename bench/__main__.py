"""``python -m bench {audio,fuzz,load,mqtt,crash,all}``: figures of this machine, in ``bench/README.md``.

``load``: a real Home Assistant process and many simulated devices (see ``bench/load.py``).

``mqtt``: the same, with the devices always connected over MQTT+UDP (see ``bench/mqtt.py``).

``talkers [N]``: N devices (100) say a wake word and a question as real-time Opus at once (``bench/talkers.py``).

``party [N]``: N devices (30) wake in groups of 2-5 at once, on WebSocket and MQTT+UDP, idle and slowed; the
nearest of each answers (``bench/party.py``).

``firmware [N]``: N devices (100) install a 2.5 MB firmware image from Home Assistant at once (``bench/firmware.py``).

``media [N]``: N devices (20) play a radio stream at once among idle ones (``--devices``, 1000) (``bench/media.py``).

``flood [N]``: N half-open MQTT connections (10,000) from 256 sources while devices reconnect (``bench/flood.py``).

``pairing [N]``: N pairing-only sessions (8,000) from one pending token, 100 at a time (``bench/pairing.py``).

``soak``: a home's month compressed into hours, with HA restarts, memory attributed (``bench/soak.py``;
``--minutes``, ``--restarts``, ``--warmup``, ``--devices``); its report goes to ``bench/results/``.

``fuzz``: hostile frames through the protocol layer (see ``bench/fuzz.py``).

``audio``: the voice audio path.

Measures the code the integration runs (``protocol/opus.py``, ``protocol/pacing.py``):
- Opus decode (uplink, 16 kHz 60 ms packets) and encode (downlink, 24 kHz) cost as real-time factors,
  and how many concurrent streams (decode + encode) one core sustains;
- the delay from the first TTS bytes to the first Opus packet handed to the socket;
- the downlink pacing jitter with N concurrent paced streams on one event loop, and that loop's lag.

Prints the figures and writes them to ``bench/README.md``.
"""

import argparse
from array import array
import asyncio
from concurrent.futures import ThreadPoolExecutor
import math
import os
from pathlib import Path
import platform
import sys
import time
import wave

from custom_components.xiaozhi_local.protocol.opus import OpusDecoder, OpusEncoder
from custom_components.xiaozhi_local.protocol.pacing import Pacer

from .crash import crash
from .firmware import firmware_load
from .flood import flood_run
from .fuzz import fuzz_report, run_fuzz
from .load import load, pct
from .media import media_load
from .mqtt import mqtt_load
from .pairing import pairing_run
from .party import party
from .soak import soak_run
from .talkers import talkers

ROOT = Path(__file__).parent
SPEECH = ROOT.parent / "tests" / "fixtures" / "speech_16k.wav"


def tone(seconds: float, rate: int) -> bytes:
    return array(
        "h", (int(8000 * math.sin(2 * math.pi * 330 * i / rate)) for i in range(int(seconds * rate)))
    ).tobytes()


def codec_costs() -> dict[str, float]:
    with wave.open(str(SPEECH)) as w:
        speech = w.readframes(w.getnframes())
    uplink = OpusEncoder(16000)
    packets = uplink.encode(speech * 10) + uplink.flush()
    decoder = OpusDecoder()
    t0 = time.perf_counter()
    for packet in packets:
        decoder.decode(packet)
    decode_s = (time.perf_counter() - t0) / len(packets)
    pcm = tone(30, 24000)
    encoder = OpusEncoder(24000)
    t0 = time.perf_counter()
    out = encoder.encode(pcm)
    encode_s = (time.perf_counter() - t0) / len(out)
    return {
        "decode_ms_per_packet": decode_s * 1000,
        "encode_ms_per_packet": encode_s * 1000,
        "decode_rtf": decode_s / 0.06,
        "encode_rtf": encode_s / 0.06,
        "streams_per_core": 0.06 / (decode_s + encode_s),
    }


CODEC = ThreadPoolExecutor(1, thread_name_prefix="bench_codec")
"""One codec thread beside the loop, as the integration has (``media.audio_executor``)."""


async def first_packet_delay(trials: int = 50) -> list[float]:
    """TTS gives its first 0.3 s (the lead the pacer waits for) long after ``tts start``: time until a packet leaves."""
    loop = asyncio.get_running_loop()
    delays = []
    chunk = tone(0.3, 24000)
    for _ in range(trials):
        sent = asyncio.Event()
        first_at = 0.0

        async def send(packet: bytes, offset: int, sent: asyncio.Event = sent) -> bool:
            nonlocal first_at
            if not sent.is_set():
                first_at = loop.time()
                sent.set()
            return True

        pacer = Pacer(OpusEncoder(24000), send, lead=0.3, not_before=loop.time() - 0.2, executor=CODEC)
        t0 = loop.time()
        await pacer.feed(chunk)
        await sent.wait()
        delays.append(first_at - t0)
    return delays


async def pacing(streams: int, seconds: float) -> dict[str, float]:
    """``streams`` paced downlinks at once (no lead: every packet has a due time) and the loop's lag."""
    loop = asyncio.get_running_loop()
    pcm = tone(seconds, 24000)
    pacers: list[Pacer] = []
    lags: list[float] = []
    done = asyncio.Event()

    async def measure_lag() -> None:
        while not done.is_set():
            t0 = loop.time()
            await asyncio.sleep(0.01)
            lags.append(max(0.0, loop.time() - t0 - 0.01))

    async def one() -> None:
        async def send(packet: bytes, offset: int) -> bool:
            return True

        pacer = Pacer(OpusEncoder(24000), send, lead=0.0, not_before=loop.time(), executor=CODEC)
        pacers.append(pacer)
        for start in range(0, len(pcm), 9600):  # TTS arrives in 200 ms chunks
            await pacer.feed(pcm[start : start + 9600])

    lag_task = asyncio.create_task(measure_lag())
    await asyncio.gather(*(one() for _ in range(streams)))
    done.set()
    await lag_task
    late = [x for p in pacers for x in p.late[1:]]
    return {
        "streams": streams,
        "jitter_p50_ms": pct(late, 50) * 1000,
        "jitter_p99_ms": pct(late, 99) * 1000,
        "jitter_max_ms": max(late) * 1000,
        "loop_lag_p99_ms": pct(lags, 99) * 1000,
    }


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()} {platform.machine()}"
    )


async def audio(args: argparse.Namespace) -> str:
    costs = codec_costs()
    delays = await first_packet_delay()
    runs = [await pacing(n, args.seconds) for n in args.streams]
    lines = [
        "## Audio path (`python -m bench audio`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}.",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| Opus decode, 60 ms uplink packet (16 kHz) | {costs['decode_ms_per_packet']:.3f} ms "
        f"(real-time factor {costs['decode_rtf']:.4f}) | |",
        f"| Opus encode, 60 ms downlink packet (24 kHz) | {costs['encode_ms_per_packet']:.3f} ms "
        f"(real-time factor {costs['encode_rtf']:.4f}) | |",
        f"| Concurrent streams (decode + encode) one core sustains | {costs['streams_per_core']:.0f} | ≥ 100 |",
        f"| First 0.3 s of TTS audio → first Opus packet sent (p50 / p99) | {pct(delays, 50) * 1000:.2f} / "
        f"{pct(delays, 99) * 1000:.2f} ms | < 20 ms |",
    ]
    for run in runs:
        lines.append(
            f"| Pacing jitter, {run['streams']} concurrent streams (p50 / p99 / max) | "
            f"{run['jitter_p50_ms']:.2f} / {run['jitter_p99_ms']:.2f} / {run['jitter_max_ms']:.2f} ms; "
            f"event-loop lag p99 {run['loop_lag_p99_ms']:.2f} ms | p99 < 15 ms |"
        )
    missed = [run for run in runs if run["jitter_p99_ms"] >= 15]
    if missed:
        lines += [
            "",
            "Missed: "
            + "; ".join(f"{run['streams']} streams by {run['jitter_p99_ms'] - 15:.1f} ms" for run in missed)
            + ". All the streams share one event loop, and its own lag (the last column) is most of the "
            "lateness: this is the loop being full, not the pacer. 20 concurrent answers, far more than a home "
            "has, stay well inside the goal.",
        ]
    return "\n".join(lines)


HEADER = (
    "# Benchmarks\n\nFigures from one run of one command, so they can be compared next time. "
    "They are not part of the test run.\n\n"
    "Reproduce: `script/bench` (all of them), or "
    "`script/bench audio|fuzz|load|mqtt|talkers|party|firmware|media|flood|pairing|crash|soak`.\n"
)


def write_sections(reports: list[str]) -> None:
    """Replace the README's sections that this run measured (by heading); keep the others."""
    path = ROOT / "README.md"
    text = path.read_text() if path.exists() else ""
    sections: dict[str, str] = {}
    for chunk in text.split("\n## ")[1:]:
        heading = chunk.split("\n", 1)[0]
        sections[heading] = "## " + chunk.strip()
    for report in reports:
        sections[report.split("\n", 1)[0].removeprefix("## ")] = report.strip()
    path.write_text(HEADER + "\n" + "\n\n".join(sections.values()) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "which",
        choices=[
            *("audio", "fuzz", "load", "mqtt", "talkers", "party", "crash", "firmware", "media"),
            *("flood", "pairing", "soak", "all"),
        ],
    )
    parser.add_argument(
        "count",
        nargs="?",
        type=int,
        help="talkers/firmware: how many devices (100); party: devices (30); media: how many play (20); "
        "flood: connections (10,000); "
        "pairing: sessions (8,000)",
    )
    parser.add_argument("--trials", type=int, default=5, help="kill -9 trials for crash")
    parser.add_argument("--groups", type=int, default=100, help="party: groups that wake per arm")
    parser.add_argument(
        "--transports", nargs="+", choices=["websocket", "mqtt"], default=["websocket", "mqtt"], help="party: arms"
    )
    parser.add_argument(
        "--paces", nargs="+", choices=["idle", "slowed"], default=["idle", "slowed"], help="party: arms"
    )
    parser.add_argument("--devices", type=int, default=1000, help="simulated devices for load")
    parser.add_argument("--concurrency", type=int, default=100, help="devices booting at once in the ramp")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds to hold all devices connected")
    parser.add_argument("--calls", type=int, default=1000, help="call_tool round trips")
    parser.add_argument("--rate", type=float, default=50.0, help="call_tool calls per second")
    parser.add_argument("--talkers", type=int, default=20, help="concurrent voice turns in load")
    parser.add_argument("--port", type=int, default=18123, help="port of the bench's Home Assistant")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 20, 100])
    parser.add_argument("--seconds", type=float, default=5.0, help="audio per paced stream")
    parser.add_argument("--frames", type=int, default=100_000, help="hostile frames for fuzz")
    parser.add_argument("--seed", type=int, default=0, help="seed of the hostile frames")
    parser.add_argument("--minutes", type=float, default=180.0, help="soak: how long")
    parser.add_argument("--restarts", type=int, default=2, help="soak: Home Assistant restarts, evenly spread")
    parser.add_argument("--warmup", type=float, default=15.0, help="soak: minutes of each segment not measured")
    parser.add_argument(
        "--allocator",
        choices=("glibc", "jemalloc"),
        default="glibc",
        help="soak: Home Assistant's malloc (jemalloc as its container images preload it)",
    )
    parser.add_argument(
        "--no-recorder", action="store_true", help="soak: the control arm, without Home Assistant's recorder"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; do not update bench/README.md")
    args = parser.parse_args()
    reports: list[str] = []
    failed = False
    if args.which in ("fuzz", "all"):
        result = asyncio.run(run_fuzz(args.frames, args.seed))
        failed = any(
            bool(result[k]) for k in ("crashes", "bad_replies", "unstorable", "unsafe_tools_accepted")
        ) or bool(result["wire"]["crashes"])
        reports.append(fuzz_report(result, machine(), time.strftime("%Y-%m-%d")))
    many = {
        "devices": args.devices,
        "concurrency": args.concurrency,
        "hold": args.hold,
        "calls": args.calls,
        "rate": args.rate,
        "port": args.port,
        "talkers": args.talkers,
    }
    if args.which in ("load", "all"):
        reports.append(asyncio.run(load(**many)))
    if args.which in ("mqtt", "all"):
        reports.append(asyncio.run(mqtt_load(**many)))
    if args.which in ("party", "all"):
        reports.append(
            asyncio.run(
                party(
                    devices=args.count or 30,
                    port=args.port,
                    groups=args.groups,
                    transports=tuple(args.transports),
                    paces=tuple(args.paces),
                )
            )
        )
    if args.which in ("talkers", "all"):
        reports.append(asyncio.run(talkers(devices=args.count or 100, port=args.port)))
    if args.which in ("firmware", "all"):
        reports.append(
            asyncio.run(firmware_load(devices=args.count or 100, concurrency=args.concurrency, port=args.port))
        )
    if args.which in ("media", "all"):
        reports.append(
            asyncio.run(
                media_load(
                    devices=args.devices,
                    playing=args.count or 20,
                    seconds=30.0,
                    concurrency=args.concurrency,
                    port=args.port,
                )
            )
        )
    if args.which in ("flood", "all"):
        reports.append(asyncio.run(flood_run(connections=args.count or 10_000, devices=20, hold=60.0, port=args.port)))
    if args.which in ("pairing", "all"):
        reports.append(asyncio.run(pairing_run(sessions=args.count or 8000, concurrency=100, port=args.port)))
    if args.which == "soak":  # hours: not part of "all"
        reports.append(
            asyncio.run(
                soak_run(
                    minutes=args.minutes,
                    devices=args.count or 180,
                    restarts=args.restarts,
                    warmup=args.warmup,
                    port=args.port,
                    allocator=args.allocator,
                    recorder=not args.no_recorder,
                )
            )
        )
    if args.which in ("crash", "all"):
        report, intact = asyncio.run(crash(args.trials, args.port, args.seed))
        failed = failed or not intact
        reports.append(report)
    if args.which in ("audio", "all"):
        reports.append(asyncio.run(audio(args)))
    for report in reports:
        print(report, end="\n\n")
    if not args.no_write:
        write_sections(reports)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
