"""The soak's report: slopes per segment after its warm-up, and where memory went."""

from collections import Counter
import re
import subprocess
import time
from typing import TYPE_CHECKING, Any

from .load import pct

if TYPE_CHECKING:
    from .soak import Soak

MB = 1024 * 1024


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except OSError, subprocess.CalledProcessError:
        return "unknown"


def _allocator(samples: list[dict[str, Any]]) -> str:
    name = samples[-1].get("allocator", "glibc") if samples else "unknown"
    if name == "jemalloc":
        return "jemalloc, preloaded with the settings of Home Assistant's container images"
    return f"{name} (a Home Assistant installed in a venv; its container images preload jemalloc)"


def _segment_rows(samples: list[dict[str, Any]], warmup: float) -> list[str]:
    from .soak import slope  # noqa: PLC0415

    rows = []
    for segment in sorted({s["segment"] for s in samples}):
        mine = [s for s in samples if s["segment"] == segment]
        start = mine[0]["minute"]
        warm = [s for s in mine if s["minute"] - start >= warmup]
        if len(warm) < 2:
            span_text = f"{mine[0]['minute']:.0f}–{mine[-1]['minute']:.0f}"
            rows.append(f"| {segment} | {span_text} | too short after warm-up | | | | | |")
            continue

        def per_hour(key: str, points: list[dict[str, Any]] = warm) -> float:
            return slope([(s["minute"] / 60, float(s[key] or 0)) for s in points])

        hours = (warm[-1]["minute"] - warm[0]["minute"]) / 60
        lags = [s["lag_p99_ms"] or 0.0 for s in warm]
        ours = sum(s["writes_ours"] for s in warm) / max(hours, 1e-9)
        every = sum(s["writes_all"] for s in warm) / max(hours, 1e-9)

        def span(key: str, warm: list[dict[str, Any]] = warm) -> str:
            return f"{min(s[key] for s in warm)}–{max(s[key] for s in warm)} ({per_hour(key):+.1f}/h)"

        in_use = (
            f"; {warm[0].get('allocator', 'glibc')} in use {warm[0]['in_use_mb']:.0f} → "
            f"{warm[-1]['in_use_mb']:.0f} MB, "
            f"{per_hour('in_use_mb'):+.1f} MB/h"
            if "in_use_mb" in warm[0]
            else ""
        )
        rows.append(
            f"| {segment} | {start:.0f}–{mine[-1]['minute']:.0f} (measured from {warm[0]['minute']:.0f}) | "
            f"{warm[0]['rss_mb']:.0f} → {warm[-1]['rss_mb']:.0f} MB, **{per_hour('rss_mb'):+.1f} MB/h**"
            f"{in_use} | "
            f"{span('threads')} | {span('tasks')} | {span('fds')} | "
            f"{pct(lags, 50):.1f} / {max(lags):.1f} ms | "
            f"{per_hour('recorder_mb'):+.1f} MB/h; {ours:,.0f} of {every:,.0f} state writes/h ours |"
        )
    return rows


def _attribution_rows(attributions: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """A row per checkpoint, and per segment what grew from its baseline to its last checkpoint."""
    rows = []
    growth = []
    for a in attributions:
        native = a.get("native", {})
        rows.append(
            f"| {a['minute']:.0f} | {a['segment']}{' (baseline)' if a['baseline'] else ''} | {a['rss_mb']:.0f} | "
            f"{native.get('smaps_anonymous_kb', 0) / 1024:.0f} | {(a.get('traced_b') or 0) / MB:.1f} "
            f"(+{(a.get('tracemalloc_own_b') or 0) / MB:.1f}) | {native.get('alloc_in_use_b', 0) / MB:.0f} | "
            f"{native.get('alloc_held_b', 0) / MB:.0f} | {native.get('alloc_mapped_b', 0) / MB:.0f} | "
            f"{native.get('sqlite_used_b', 0) / MB:.1f} | {a['gc_objects']:,} | {a['av_objects']} |"
        )
    for segment in sorted({a["segment"] for a in attributions}):
        mine = [a for a in attributions if a["segment"] == segment]
        base = next((a for a in mine if a["baseline"]), None)
        if base is None or mine[-1] is base:
            continue
        end = mine[-1]
        native, native0 = end.get("native", {}), base.get("native", {})

        def delta(key: str, end_native: dict[str, Any] = native, base_native: dict[str, Any] = native0) -> float:
            return float(end_native.get(key, 0) - base_native.get(key, 0)) / MB

        rss = end["rss_mb"] - base["rss_mb"]
        python = ((end.get("traced_b") or 0) - (base.get("traced_b") or 0)) / MB
        tracer = ((end.get("tracemalloc_own_b") or 0) - (base.get("tracemalloc_own_b") or 0)) / MB
        sqlite = delta("sqlite_used_b")
        free = delta("alloc_held_b")
        in_use = delta("alloc_in_use_b")
        allocator = native.get("allocator", "the allocator")
        top = ", ".join(
            f"`{name}` {size / 1024:+.0f} KB" for name, size in list(end.get("heap_growth", {}).items())[:6] if size
        )
        lines = ", ".join(
            f"`{name}` {size / 1024:+.0f} KB" for name, size in list(end.get("line_growth", {}).items())[:4] if size
        )
        holders = "; ".join(
            f"{c['size'] / 1024:.0f} KB from {' ← '.join(reversed(c['frames'][-4:]))}"
            for c in end.get("callers", [])[:3]
        )
        objects = Counter(end.get("objects", {}))
        objects.subtract(base.get("objects", {}))
        moved = ", ".join(f"{name.rsplit('.', 1)[-1]} {n:+d}" for name, n in objects.most_common(4) if n)
        maps = ", ".join(
            f"{kind} {(native.get(f'maps_{kind}_kb', 0) - native0.get(f'maps_{kind}_kb', 0)) / 1024:+.1f} MB"
            for kind in ("anonymous", "heap", "library", "file", "stack")
            if f"maps_{kind}_kb" in native
        )
        arenas = (
            f"; pymalloc arenas {native0.get('pymalloc_arenas', 0)} → {native['pymalloc_arenas']} "
            f"(blocks in use {delta('pymalloc_used_b'):+.1f} MB, free in its arenas {delta('pymalloc_free_b'):+.1f} MB)"
            if "pymalloc_arenas" in native
            else ""
        )
        growth.append(
            f"- Segment {segment}, minute {base['minute']:.0f} → {end['minute']:.0f}: RSS {rss:+.1f} MB"
            f"{f' (by mapping: {maps}{arenas})' if maps else ''}. "
            f"{allocator}: in use {in_use:+.1f} MB (of which Python's traced heap {python:+.1f} MB, tracemalloc's own "
            f"{tracer:+.1f} MB, SQLite {sqlite:+.1f} MB), free but held {free:+.1f} MB. "
            f"Heap by file: {top or 'no change'}{f'; by line: {lines}' if lines else ''}. "
            f"{f'Who allocated it: {holders}. ' if holders else ''}"
            f"Objects of ours and PyAV's: {moved or 'no change'}."
        )
    return rows, growth


def report(
    *,
    samples: list[dict[str, Any]],
    attributions: list[dict[str, Any]],
    comebacks: list[float],
    soak: Soak,
    warnings: list[str],
    minutes: float,
    devices: int,
    warmup: float,
    stem: str,
) -> tuple[str, str]:
    """The report's text (``bench/results``) and the README's section."""
    from .__main__ import machine  # noqa: PLC0415
    from .soak import RATES  # noqa: PLC0415

    activity_rows = [
        f"| {name} | {rate:.2g} | {soak.ok[name]:,} | {soak.failed[name]:,} | "
        f"{'; '.join(soak.errors.get(name, [])).replace('|', '/')} |"
        for name, rate in RATES.items()
    ]
    distinct = Counter(re.sub(r"^\S+ \S+ ", "", line)[:160] for line in warnings)
    attribution_rows, growth = _attribution_rows(attributions)
    segment_rows = _segment_rows(samples, warmup)
    head = (
        f"Machine: {machine()}. Measured {time.strftime('%Y-%m-%d')} on commit `{_commit()}`, "
        f"{minutes:.0f} minutes, {devices} devices ({devices - max(1, devices // 10)} on MQTT+UDP, "
        f"{max(1, devices // 10)} on WebSocket), Home Assistant restarted {len(comebacks)} times "
        f"(the fleet back in {', '.join(f'{s:.0f} s' for s in comebacks) or '—'}); warm-up {warmup:.0f} minutes "
        f"per segment. Home Assistant in its own process with the recorder "
        f"{'off (the control arm)' if stem.endswith('-no-recorder') else 'on'} and `tracemalloc` tracing one "
        f"frame (its own memory is counted apart); allocator: {_allocator(samples)}."
    )
    segment_table = [
        "| Segment | Minutes | RSS after warm-up | Threads | Tasks | fds | Loop lag p99 per minute (median / worst) "
        "| Recorder |",
        "|---|---|---|---|---|---|---|---|",
        *segment_rows,
    ]
    text = "\n".join(
        [
            "# Soak: a home's month in a few hours (`python -m bench soak`)",
            "",
            head,
            "",
            "## The work (fleet-wide, per minute)",
            "",
            "| Activity | Rate | Done | Failed | First failures |",
            "|---|---|---|---|---|",
            *activity_rows,
            "",
            "## Each segment after its warm-up",
            "",
            *segment_table,
            "",
            "## Where memory lives",
            "",
            "| Minute | Segment | RSS MB | Anonymous MB | Python traced MB (+tracemalloc's own) | Allocator: in use MB "
            "| free, held MB | mapped MB | SQLite MB | GC objects | PyAV objects |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *attribution_rows,
            "",
            *growth,
            "",
            f"## Warnings and errors of ours in Home Assistant's log: {len(warnings)}",
            "",
            *(f"- {n} × {line}" for line, n in distinct.most_common(10)),
            "",
            f"Per-minute samples: `{stem}.json` beside this file.",
        ]
    )
    section = "\n".join(
        [
            "## A home's month in a few hours (`python -m bench soak`)",
            "",
            head,
            "",
            *segment_table,
            "",
            *growth,
            "",
            f"Done / failed: {sum(soak.ok.values()):,} / {sum(soak.failed.values()):,}; warnings of ours in the log: "
            f"{len(warnings)}. The whole report, with the attribution per checkpoint: "
            f"`bench/results/{stem}.md`. Run it with "
            "`script/bench soak [devices] --minutes 180 --restarts 2 --warmup 15 [--allocator jemalloc]`.",
        ]
    )
    return text, section
