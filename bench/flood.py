"""``python -m bench flood [N]``: N half-open connections (10,000) against a real Home Assistant's MQTT port.

A hostile LAN's flood: TCP connections that never send CONNECT, from 256 sources, kept up for
the whole hold (each one Home Assistant closes is opened again at once). Meanwhile every paired
device drops its MQTT session and connects again, one after another: how long each waits for its
CONNACK, and whether all are back. Home Assistant's event-loop lag and the OTA answer time say
whether it stays responsive.

Sources: 128 IPv4 addresses of 127.0.1.0/24 and 128 IPv6 hosts (one /64 each) of a unique-local
/48 routed to the loopback interface as local addresses ("AnyIP", which needs root; the bench
adds the route and takes it away). Without root the IPv6 share comes from ``::1`` alone.
"""

import asyncio
import os
from pathlib import Path
import secrets
import shutil
import socket
import subprocess
import tempfile
import time

import aiohttp

from xiaozhi_sim import SimulatedDevice

from .load import Run, bench_options, mac_of, ms, prepare
from .mqtt import boot_all

IPV6_RANGE = "fd58:7a1f:10c0::/48"
IPV6_FREEBIND = 78  # socket option: bind an address of a local route, as AnyIP needs
GOAL_S = 5.0


def anyip(add: bool) -> bool:
    """Route ``IPV6_RANGE`` to loopback as local (add) or take it away; False if not allowed."""
    action = "add" if add else "del"
    result = subprocess.run(
        ["ip", "-6", "route", action, "local", IPV6_RANGE, "dev", "lo"],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def sources(ipv6_hosts: bool) -> list[tuple[socket.AddressFamily, str]]:
    """256 source addresses: half IPv4, half IPv6 (one per /64 where the range is routed)."""
    found = [(socket.AF_INET, f"127.0.1.{i}") for i in range(128)]
    if ipv6_hosts:
        prefix = IPV6_RANGE.split("::", maxsplit=1)[0]
        found += [(socket.AF_INET6, f"{prefix}:{i:x}::1") for i in range(128)]
    else:
        found += [(socket.AF_INET6, "::1")] * 128
    return found


class Flood:
    """Half-open connections kept at ``target``: one that Home Assistant closes is opened again."""

    def __init__(self, port: int, target: int, addresses: list[tuple[socket.AddressFamily, str]]) -> None:
        self.port = port
        self.target = target
        self.addresses = addresses
        self.open = 0
        self.opened = 0
        self.closed_by_ha = 0
        self.failed = 0
        self.running = True
        self.all_opened = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _connect(
        self, family: socket.AddressFamily, address: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        if family == socket.AF_INET6 and address != "::1":
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
        sock.bind((address, 0))
        target = "::1" if family == socket.AF_INET6 else "127.0.0.1"
        await asyncio.get_running_loop().sock_connect(sock, (target, self.port))
        return await asyncio.open_connection(sock=sock)  # the writer must live: it closes when collected

    async def _hold(self, index: int, gate: asyncio.Semaphore) -> None:
        family, address = self.addresses[index % len(self.addresses)]
        while self.running:
            try:
                async with gate:
                    reader, writer = await self._connect(family, address)
            except OSError:
                self.failed += 1
                await asyncio.sleep(0.5)
                continue
            self.opened += 1
            self.open += 1
            if self.opened >= self.target:
                self.all_opened.set()
            try:
                await reader.read(1)  # never sends anything: this returns when HA closes it
                self.closed_by_ha += 1
            except OSError:
                self.closed_by_ha += 1
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(0.05)

    def start(self, concurrency: int = 256) -> None:
        gate = asyncio.Semaphore(concurrency)
        self._tasks = [asyncio.create_task(self._hold(i, gate)) for i in range(self.target)]

    async def stop(self) -> None:
        self.running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def ota_times(base: str, count: int) -> list[float]:
    """Seconds for ``count`` OTA answers of a paired device's check, one after another."""
    times: list[float] = []
    mac = mac_of(0)
    headers = {"Device-Id": mac, "Client-Id": bench_options(mac).client_id, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        for _ in range(count):
            started = time.monotonic()
            async with http.post(f"{base}/api/xiaozhi_local/ota/", data="{}", headers=headers) as resp:
                await resp.read()
            times.append(time.monotonic() - started)
            await asyncio.sleep(0.1)
    return times


async def reconnect_each(sims: list[SimulatedDevice]) -> tuple[list[float], int]:
    """Each device drops its session and connects again: seconds to its CONNACK; devices refused."""
    waits: list[float] = []
    refused = 0
    for sim in sims:
        await sim.mqtt.drop_mqtt()
        await asyncio.wait_for(sim.mqtt.offline.wait(), 10)
        started = time.monotonic()
        try:
            await asyncio.wait_for(sim.mqtt.start(), 30)
        except Exception:  # noqa: BLE001 - refused, reset or timed out: counted, the run goes on
            refused += 1
            continue
        waits.append(time.monotonic() - started)
    return waits, refused


async def flood_run(*, connections: int, devices: int, hold: float, port: int) -> str:
    """The whole run; returns the README section."""
    from .__main__ import machine  # noqa: PLC0415 - shared with the other benches

    workdir = Path(tempfile.mkdtemp(prefix="xiaozhi-bench-flood-"))
    pairs = [(mac_of(i), secrets.token_urlsafe(32)) for i in range(devices)]
    mqtt_port = port + 1
    prepare(workdir / "config", pairs, port, mqtt_port=mqtt_port)
    run = Run(port, workdir / "config")
    sims = [SimulatedDevice(bench_options(mac), speaks_mqtt=True) for mac, _ in pairs]
    ipv6_hosts = anyip(add=True)
    flood = Flood(mqtt_port, connections, sources(ipv6_hosts))
    try:
        await run.start()
        await asyncio.sleep(5)  # let startup settle
        await boot_all(run, sims, [], concurrency=devices)
        quiet_waits, _ = await reconnect_each(sims[:5])
        quiet_ota = await ota_times(run.base, 20)
        await run.probe(reset=True)
        started = time.monotonic()
        flood.start()
        await asyncio.wait_for(flood.all_opened.wait(), 120)
        ramp_s = time.monotonic() - started
        under_flood = await run.probe()
        waits, refused = await reconnect_each(sims)
        ota = await ota_times(run.base, 20)
        remaining = hold - (time.monotonic() - started)
        if remaining > 0:
            await asyncio.sleep(remaining)
        held = await run.probe(reset=True)
        back = await run.wait("ready", lambda ready: ready >= devices, 60)
    finally:
        await flood.stop()
        await asyncio.gather(*(sim.drop() for sim in sims), return_exceptions=True)
        await run.stop()
        if ipv6_hosts:
            anyip(add=False)
    v6 = f"128 IPv6 /64s of {IPV6_RANGE}" if ipv6_hosts else "::1 (no root: one IPv6 source)"
    lines = [
        "## A flood of half-open MQTT connections (`python -m bench flood`)",
        "",
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')}. Home Assistant in its own process; "
        f"{connections:,} TCP connections to its MQTT port that never send CONNECT, from 128 IPv4 addresses "
        f"and {v6}, each reopened as soon as Home Assistant closes it; {devices} paired stock devices on "
        "MQTT+UDP, loopback.",
        "",
        "| Figure | Result | Goal |",
        "|---|---|---|",
        f"| Flood connections opened / closed by HA / failed to open, in {hold:.0f} s | {flood.opened:,} / "
        f"{flood.closed_by_ha:,} / {flood.failed:,} (the first {connections:,} in {ramp_s:.1f} s) | |",
        f"| Half-open connections HA held, its open files (sampled under the flood) | "
        f"{under_flood.get('mqtt_pending', '?')}, {under_flood.get('fds', '?')} | bounded |",
        f"| A paired device reconnecting during the flood: CONNACK after (p50 / max), refused | "
        f"{ms(waits, 50)} / {ms(waits, 100)} ms, {refused} of {devices} | < {GOAL_S:.0f} s, none |",
        f"| The same without the flood (p50 / max) | {ms(quiet_waits, 50)} / {ms(quiet_waits, 100)} ms | |",
        f"| OTA answer to a paired device during the flood / without (p50) | {ms(ota, 50)} / "
        f"{ms(quiet_ota, 50)} ms | |",
        f"| HA event-loop lag during the flood (p50 / p99 / max) | {held['lag_ms']['p50']:.1f} / "
        f"{held['lag_ms']['p99']:.1f} / {held['lag_ms']['max']:.1f} ms | p99 < 50 ms |",
        f"| All {devices} devices ready again, the flood still on | {back:.1f} s after the last CONNACK | |",
        "",
        "The per-source bound (128) and the global one (1,024) hold the flood; past the global bound a "
        "new connection takes the place of the busiest source's oldest (or, with every source even, the "
        "oldest silent one), so a device's own address always finds room. Most of the flood waits in the "
        "kernel's accept queue; reopening each closed one at once makes it a flood of new connections "
        "too (thousands a second), which is what the lag figure carries.",
    ]
    if os.environ.get("BENCH_KEEP") is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)
