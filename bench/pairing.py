"""``python -m bench pairing [N]``: N pairing-only sessions (8,000), 100 at a time, against a real Home Assistant.

Anyone can post to the OTA URL and get a pending token; with it, a WebSocket session that only says
the pairing code (``admission/pairing_session.py``: the hello, the code as a sentence and as speech, closed).
Round five of the outside attacks opened 8,000 of them from one token, 100 at a time: Home
Assistant went from 16 to 1,600 threads, 706 still there a minute later, because every speech took
an Opus encoder whose resampler started native threads that only a cyclic collection freed.

Measures Home Assistant's threads and RSS at rest, at the peak, and a minute after the last session
(no garbage collection forced), how many sessions were told their code, how many were refused
(at most 8 run at once), and a paired device's OTA answer during the flood.
"""

import asyncio
from pathlib import Path
import secrets
import tempfile
import time
from typing import Any

import aiohttp

from .load import Run, client_id_of, ms, prepare

HELLO = {
    "type": "hello",
    "version": 1,
    "transport": "websocket",
    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
}
SETTLE_S = 60.0
STRANGER_MAC = "aa:bb:cc:dd:ee:01"


def _threads_rss(pid: int) -> tuple[int, int]:
    """Threads and RSS (kB) of the process ``pid``."""
    threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )
    return threads, rss


async def _pending_token(http: aiohttp.ClientSession, base: str) -> str:
    """What anyone gets from the OTA URL: a code to speak and the token it would give."""
    headers = {"Device-Id": STRANGER_MAC, "Client-Id": "stranger-0001", "Content-Type": "application/json"}
    async with http.post(f"{base}/api/xiaozhi_local/ota/", json={"version": 2}, headers=headers) as resp:
        answer: dict[str, Any] = await resp.json()
    return str(answer["websocket"]["token"])


async def _session(http: aiohttp.ClientSession, url: str, token: str) -> str:
    """One session: ``told`` (speech came), ``silent`` (closed without speech), ``refused``, ``error``."""
    headers = {"Authorization": f"Bearer {token}", "Device-Id": STRANGER_MAC, "Client-Id": "stranger-0001"}
    try:
        async with http.ws_connect(url, headers=headers, timeout=aiohttp.ClientWSTimeout(ws_close=5)) as ws:
            await ws.send_json(HELLO)
            audio = False
            async with asyncio.timeout(30):
                async for message in ws:
                    audio = audio or message.type == aiohttp.WSMsgType.BINARY
            return "told" if audio else "silent"
    except aiohttp.WSServerHandshakeError as err:
        return "refused" if err.status in (401, 503) else "error"
    except aiohttp.ClientError, TimeoutError:
        return "error"


async def pairing_run(*, sessions: int, concurrency: int, port: int) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-pairing-"))
    paired = [("cc:ba:97:00:00:01", secrets.token_urlsafe(32))]
    prepare(workdir / "config", paired, port)
    run = Run(port, workdir / "config")
    outcomes: dict[str, int] = {}
    try:
        await run.start()
        await asyncio.sleep(5)  # let startup settle
        assert run.process is not None
        assert run.http is not None
        pid = run.process.pid
        rest = _threads_rss(pid)
        token = await _pending_token(run.http, run.base)
        url = f"ws://127.0.0.1:{port}/api/xiaozhi_local/v1/"
        peak = rest
        ota: list[float] = []
        queue = iter(range(sessions))

        async def worker() -> None:
            for _ in queue:
                outcome = await _session(run.http, url, token)  # type: ignore[arg-type]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

        async def sample() -> None:
            """Every second: threads and RSS, and a paired device's OTA answer (a session of its own:
            the flood's 100 hold every connection of the shared pool)."""
            async with aiohttp.ClientSession() as own:
                await sample_with(own)

        async def sample_with(own: aiohttp.ClientSession) -> None:
            nonlocal peak
            while True:
                now = _threads_rss(pid)
                peak = (max(peak[0], now[0]), max(peak[1], now[1]))
                started = time.monotonic()
                headers = {
                    "Device-Id": paired[0][0],
                    "Client-Id": client_id_of(paired[0][0]),
                    "Content-Type": "application/json",
                }
                async with own.post(f"{run.base}/api/xiaozhi_local/ota/", json={}, headers=headers) as resp:
                    await resp.read()
                ota.append(time.monotonic() - started)
                await asyncio.sleep(1)

        headers = {
            "Device-Id": paired[0][0],
            "Client-Id": client_id_of(paired[0][0]),
            "Content-Type": "application/json",
        }
        async with run.http.post(f"{run.base}/api/xiaozhi_local/ota/", json={}, headers=headers) as resp:
            await resp.read()  # the first answer reads what it reads once, before the flood
        await run.probe(reset=True)
        sampler = asyncio.create_task(sample())
        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        took = time.monotonic() - started
        sampler.cancel()
        lag = (await run.probe())["lag_ms"]
        after_end = _threads_rss(pid)
        await asyncio.sleep(SETTLE_S)
        settled = _threads_rss(pid)
        async with run.http.get(f"{run.base}/api/bench_probe", params={"memory": "1"}) as resp:
            memory = (await resp.json())["memory"]
    finally:
        await run.stop()
    lines = [
        "## Pairing-only sessions from one pending token (`python -m bench pairing`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process; "
        f"{sessions:,} WebSocket sessions with the token anyone gets from the OTA URL, {concurrency} at a time, "
        "each saying hello and reading until Home Assistant closes it; loopback.",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| Sessions told their code (speech) / closed without speech / refused (503: 8 run at once) / errors, "
        f"in {took:.0f} s | {outcomes.get('told', 0):,} / {outcomes.get('silent', 0):,} / "
        f"{outcomes.get('refused', 0):,} / {outcomes.get('error', 0):,} | |",
        f"| Home Assistant's threads: at rest / peak / at the end / {SETTLE_S:.0f} s later | {rest[0]} / {peak[0]} / "
        f"{after_end[0]} / {settled[0]} | within a few of rest |",
        f"| RSS: at rest / peak / {SETTLE_S:.0f} s later | {rest[1] // 1024} / {peak[1] // 1024} / "
        f"{settled[1] // 1024} MB | |",
        f"| Then: after a full garbage collection ({memory['gc_objects']:,} objects) / after glibc's "
        f"malloc_trim | {memory['after_gc_kb'] // 1024} / {memory['after_trim_kb'] // 1024} MB | |",
        f"| A paired device's OTA answer during the flood (p50 / max) | {ms(ota, 50)} / {ms(ota, 100)} ms | |",
        f"| HA event-loop lag during the flood (p50 / p99 / max) | {lag['p50']:.1f} / {lag['p99']:.1f} / "
        f"{lag['max']:.1f} ms | p99 < 50 ms |",
    ]
    return "\n".join(lines)
