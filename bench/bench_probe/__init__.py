"""``bench_probe``: a bench-only custom component, copied into the bench's HA config (never shipped).

It measures Home Assistant from the inside, where the bench cannot: event-loop lag, tasks, file
descriptors, resident memory and Xiaozhi Local's sessions, served at ``GET /api/bench_probe``.
It also writes an access token for the bench's WebSocket API calls to ``<config>/bench_token``.
With a config entry (the bench seeds one) it adds an instant STT, TTS and agent (``voice.py``) and
makes them the preferred pipeline's engines; the probe then also serves their timestamps.
"""

import asyncio
from collections import Counter
import contextlib
import ctypes
from datetime import timedelta
import gc
import os
from pathlib import Path
import sys
import threading
import time
import tracemalloc
from typing import Any

from aiohttp import web
from homeassistant.auth.const import GROUP_ID_ADMIN
from homeassistant.components import websocket_api
from homeassistant.components.assist_pipeline import async_get_pipeline, async_update_pipeline
from homeassistant.components.websocket_api.connection import ActiveConnection
from homeassistant.components.websocket_api.decorators import async_response, websocket_command
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import Platform
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import config_validation as cv, entity_registry as er, llm
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from homeassistant.helpers.typing import ConfigType
import probatio as vol

from .hog import LoopHog
from .voice import voice_log

DOMAIN = "bench_probe"
CONFIG_SCHEMA = cv.empty_config_schema(DOMAIN)
INTERVAL = 0.02
PLATFORMS = [Platform.CONVERSATION, Platform.STT, Platform.TTS]


class Lag:
    """How late a 20 ms timer fires, sampled for as long as HA runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(INTERVAL)
            self.samples.append(max(0.0, loop.time() - start - INTERVAL))
            if len(self.samples) > 200_000:
                del self.samples[:100_000]


class Profile:
    """``BENCH_PROFILE=1``: where HA's event-loop thread spends its time, sampled every 2 ms.

    Each sample counts once for every distinct function on the stack (inclusive time), named
    ``package/module.py:function``: what share of the samples was inside the Opus decoder, the
    VAD, a WebSocket write. A thread of its own, so it sees what the loop is doing while busy.
    """

    def __init__(self, thread_id: int) -> None:
        self.thread_id = thread_id
        self.samples = 0
        self.counts: Counter[str] = Counter()

    def run(self) -> None:
        while True:
            time.sleep(0.002)
            frame = sys._current_frames().get(self.thread_id)  # a profiler
            seen: set[str] = set()
            while frame is not None:
                path = frame.f_code.co_filename
                seen.add(f"{'/'.join(Path(path).parts[-2:])}:{frame.f_code.co_name}")
                frame = frame.f_back
            self.samples += 1
            self.counts.update(seen)

    def top(self, count: int = 60) -> dict[str, float]:
        """Share (%) of the samples since the last reset, per function, largest first."""
        if not self.samples:
            return {}
        return {name: n * 100 / self.samples for name, n in self.counts.most_common(count)}

    def reset(self) -> None:
        self.samples = 0
        self.counts.clear()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _memory() -> dict[str, int]:
    """Where resident memory lives: RSS now, after a full garbage collection, after glibc gives back
    its free pages (``malloc_trim``). What the collection frees was garbage kept by cycles; what the
    trim frees was free memory the allocator kept; what is left is in use."""
    import gc  # noqa: PLC0415

    before = _rss_kb()
    freed = gc.collect()
    collected = _rss_kb()
    _give_back()
    return {"rss_kb": before, "gc_objects": freed, "after_gc_kb": collected, "after_trim_kb": _rss_kb()}


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): what its allocator holds, in bytes."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"
        )
    ]  # fmt: skip


def _jemalloc_stats() -> dict[str, int]:
    """jemalloc's own counts (``mallctl``), empty when it is not the process's allocator."""
    mallctl = getattr(ctypes.CDLL(None), "mallctl", None)
    if mallctl is None:
        return {}
    epoch = ctypes.c_uint64(1)  # a write refreshes the statistics
    mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(ctypes.sizeof(epoch)))
    stats: dict[str, int] = {}
    for name in ("allocated", "active", "resident", "mapped", "retained"):
        value, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
        if mallctl(f"stats.{name}".encode(), ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0)):
            return {}
        stats[name] = value.value
    return stats


def _give_back() -> None:
    """The allocator returns its free pages to the kernel: glibc's ``malloc_trim``, or jemalloc's
    purge of every arena (``arena.4096.purge``, 4096 being ``MALLCTL_ARENAS_ALL``)."""
    if (mallctl := getattr(ctypes.CDLL(None), "mallctl", None)) is not None:
        mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _mappings() -> dict[str, int]:
    """Resident memory by kind of mapping (``/proc/self/smaps``, kB): the brk heap, anonymous
    mappings (pymalloc's 1 MiB arenas, jemalloc's extents, thread stacks, large blocks), files
    (libraries and the rest), and how many anonymous mappings there are."""
    out: Counter[str] = Counter()
    kind = "anonymous"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/smaps").read_text().splitlines():
            head = line.split(maxsplit=5)
            if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
                name = head[5] if len(head) > 5 else ""
                kind = (
                    "heap" if name == "[heap]"
                    else "stack" if name.startswith("[stack")
                    else "anonymous" if not name or name.startswith("[anon")
                    else "library" if ".so" in name
                    else "other" if name.startswith("[")
                    else "file"
                )  # fmt: skip
                out[f"maps_{kind}_n"] += 1
            elif line.startswith("Rss:"):
                out[f"maps_{kind}_kb"] += int(line.split()[1])
    return dict(out)


def _pymalloc() -> dict[str, int]:
    """pymalloc's own figures (``sys._debugmallocstats``, which writes to stderr: read through a
    pipe for the moment it writes): arenas held and the bytes in used and in free blocks."""
    out: dict[str, int] = {}
    read, write = os.pipe()
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        os.dup2(write, 2)
        sys._debugmallocstats()  # CPython's only count of its arenas
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read) as stream:
        text = stream.read()
    wanted = {
        "# arenas allocated current": "pymalloc_arenas",
        "# bytes in allocated blocks": "pymalloc_used_b",
        "# bytes in available blocks": "pymalloc_free_b",
        "Total": "pymalloc_total_b",
    }
    for line in text.splitlines():
        key, _, value = line.rpartition("=")
        key = key.strip()
        if key in wanted and wanted[key] not in out:  # the first "Total": the arenas' own
            with contextlib.suppress(ValueError):
                out[wanted[key]] = int(value.strip().replace(",", ""))
    return out


def _native() -> dict[str, int | str]:
    """Native memory: the kernel's view (``smaps_rollup``, kB), glibc's (``mallinfo2``, bytes) and
    SQLite's own count of what it allocated (the recorder's page cache lives there)."""
    out: dict[str, int | str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
            key, _, value = line.partition(":")
            if key in ("Rss", "Anonymous", "Private_Dirty", "Shared_Clean", "Private_Clean", "Swap"):
                out[f"smaps_{key.lower()}_kb"] = int(value.split()[0])
    if jemalloc := _jemalloc_stats():  # preloaded, as Home Assistant's container images do
        out["allocator"] = "jemalloc"
        out["alloc_in_use_b"] = jemalloc["allocated"]
        out["alloc_held_b"] = jemalloc["resident"] - jemalloc["allocated"]  # dirty pages, metadata
        out["alloc_mapped_b"] = jemalloc["mapped"]
        out["alloc_retained_b"] = jemalloc["retained"]  # address space kept, not resident
    else:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6")
            libc.mallinfo2.restype = _MallInfo2
            info = libc.mallinfo2()
            out["allocator"] = "glibc"
            out["malloc_arena_b"] = info.arena  # from the heap (brk)
            out["malloc_mmap_b"] = info.hblkhd  # large blocks, mapped one by one
            out["malloc_in_use_b"] = info.uordblks
            out["malloc_free_b"] = info.fordblks  # held by glibc, free for the next allocation
            out["alloc_in_use_b"] = info.uordblks + info.hblkhd
            out["alloc_held_b"] = info.fordblks
            out["alloc_mapped_b"] = info.hblkhd
    out.update(_mappings())
    with contextlib.suppress(OSError):
        out.update(_pymalloc())
    with contextlib.suppress(OSError, AttributeError, ImportError):
        import _sqlite3  # noqa: PLC0415

        lib = ctypes.CDLL(_sqlite3.__file__)  # its symbols, and those of the libsqlite3 it links
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        lib.sqlite3_memory_highwater.restype = ctypes.c_int64
        lib.sqlite3_memory_highwater.argtypes = [ctypes.c_int]
        out["sqlite_used_b"] = lib.sqlite3_memory_used()
        out["sqlite_highwater_b"] = lib.sqlite3_memory_highwater(0)
    return out


class Heap:
    """Python's heap by file (``tracemalloc``, on when ``BENCH_TRACEMALLOC`` is set) against a
    baseline the bench takes after its warm-up; and objects alive by kind."""

    def __init__(self) -> None:
        self.baseline: dict[str, int] = {}
        self.baseline_lines: dict[str, int] = {}
        self.snapshot: tracemalloc.Snapshot | None = None

    def by_line(self) -> dict[str, int]:
        """Bytes alive by the line that allocated them (``file:line``, the file's last 3 parts)."""
        if not tracemalloc.is_tracing():
            return {}
        self.snapshot = snapshot = tracemalloc.take_snapshot()
        stats = snapshot.statistics("lineno")
        return {f"{'/'.join(Path(s.traceback[0].filename).parts[-3:])}:{s.traceback[0].lineno}": s.size for s in stats}

    def callers_of(self, lines: list[str]) -> list[dict[str, Any]]:
        """With more than one frame traced: who called the lines that grew (the largest groups)."""
        if self.snapshot is None or tracemalloc.get_traceback_limit() < 2:
            return []
        found = []
        for stat in self.snapshot.statistics("traceback"):
            frames = [f"{'/'.join(Path(f.filename).parts[-3:])}:{f.lineno}" for f in stat.traceback]
            if frames and frames[-1] in lines:  # oldest first: the allocating line is the last
                found.append({"size": stat.size, "count": stat.count, "frames": frames})
                if len(found) >= 8:
                    break
        return found

    def attribute(self, baseline: bool) -> dict[str, Any]:
        collected = gc.collect()  # what is alive, not garbage the collector has not reached yet
        lines = self.by_line()
        files: Counter[str] = Counter()
        for line, size in lines.items():
            files[line.rpartition(":")[0]] += size
        if baseline or not self.baseline:
            self.baseline, self.baseline_lines = dict(files), lines
        growth = {name: size - self.baseline.get(name, 0) for name, size in files.items()}
        line_growth = {name: size - self.baseline_lines.get(name, 0) for name, size in lines.items()}
        callers = self.callers_of(sorted(line_growth, key=lambda name: -line_growth[name])[:4])
        self.snapshot = None  # tens of MB: not kept until the next checkpoint
        kinds: Counter[str] = Counter()
        for obj in gc.get_objects():
            module = type(obj).__dict__.get("__module__") or type(obj).__module__
            if isinstance(module, str) and module.startswith(("av.", "custom_components.xiaozhi_local")):
                kinds[f"{module}.{type(obj).__qualname__}"] += 1
        return {
            "native": _native(),
            "traced_b": tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None,
            "tracemalloc_own_b": tracemalloc.get_tracemalloc_memory() if tracemalloc.is_tracing() else None,
            "heap_top": dict(sorted(files.items(), key=lambda kv: -kv[1])[:15]),
            "heap_growth": dict(sorted(growth.items(), key=lambda kv: -abs(kv[1]))[:15]),
            "line_growth": dict(sorted(line_growth.items(), key=lambda kv: -abs(kv[1]))[:15]),
            "callers": callers,
            "allocated_blocks": sys.getallocatedblocks(),
            "gc_objects": len(gc.get_objects()),
            "collected": collected,
            "av_objects": sum(n for kind, n in kinds.items() if kind.startswith("av.")),
            "objects": dict(kinds.most_common(20)),
        }


def _process() -> tuple[int, int]:
    return _rss_kb(), len(os.listdir("/proc/self/fd"))


def threads_cpu() -> dict[str, float]:
    """CPU seconds (user + system) per thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]  # the kernel keeps 15 characters of it
        if task.name == str(os.getpid()):
            name = "event loop"  # the main thread
        elif name.startswith("xiaozhi_local"):
            name = "xiaozhi_local codec"
        fields = stat[stat.rindex(")") + 2 :].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def children_cpu() -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds (user + system) of HA's child processes per name (ffmpeg), those reaped included;
    and how many of each there are now."""
    tick = os.sysconf("SC_CLK_TCK")
    times = os.times()
    out: dict[str, float] = {"reaped": times[2] + times[3]}
    count: dict[str, int] = {}
    me = str(os.getpid())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[1] == me:
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
            count[name] = count.get(name, 0) + 1
    return out, count


class ProbeView(HomeAssistantView):
    """``GET /api/bench_probe[?reset=1]``."""

    url = "/api/bench_probe"
    name = "api:bench_probe"
    requires_auth = False

    def __init__(self, lag: Lag, profile: Profile | None) -> None:
        self.lag = lag
        self.profile = profile
        self.heap = Heap()
        self.hog = LoopHog()

    async def get(self, request: web.Request) -> web.Response:
        hass = request.app[KEY_HASS]
        samples = self.lag.samples
        rss_kb, fds = await hass.async_add_executor_job(_process)
        per_thread = await hass.async_add_executor_job(threads_cpu)
        children, alive = await hass.async_add_executor_job(children_cpu)
        data: dict[str, Any] = {
            "rss_kb": rss_kb,
            "tasks": len(asyncio.all_tasks()),
            "cpu_s": sum(os.times()[:2]),  # user + system, all of HA's threads
            "threads_cpu_s": per_thread,
            "children_cpu_s": children,
            "children": alive,
            "fds": fds,
            "lag_ms": {
                "count": len(samples),
                "p50": _pct(samples, 50) * 1000,
                "p99": _pct(samples, 99) * 1000,
                "max": max(samples, default=0.0) * 1000,
            },
        }
        entries = hass.config_entries.async_entries("xiaozhi_local")
        hub = getattr(entries[0], "runtime_data", None) if entries else None
        if hub is not None:
            devices = hub.devices.values()
            data["devices"] = len(hub.devices)
            data["connected"] = sum(1 for d in devices if d.link is not None)
            data["ready"] = sum(1 for d in devices if d.link is not None and d.link.settled.is_set())
            data["connections"] = len(hub.links)
            data["mqtt_pending"] = hub.mqtt.pending_count if hub.mqtt is not None else None
            registered = er.async_entries_for_config_entry(er.async_get(hass), entries[0].entry_id)
            data["entities"] = len(registered)
            data["available"] = sum(
                1 for e in registered if (state := hass.states.get(e.entity_id)) and state.state != "unavailable"
            )
            data["nearest"] = list(hub.nearest.recent)
            data["nearest_rounds"] = hub.nearest.rounds
            # What each device's Response time sensor shows now (end of speech → first frame, ms).
            data["response_ms"] = {d.mac: d.response_times.last.response_ms for d in devices if d.response_times.last}
        data["voice"] = voice_log(hass).as_list()
        if self.profile is not None:
            data["profile"] = self.profile.top()
        if request.query.get("memory"):
            data["memory"] = await hass.async_add_executor_job(_memory)
        if request.query.get("native"):  # cheap: the kernel's, glibc's and SQLite's counts
            data["native"] = await hass.async_add_executor_job(_native)
        if attribution := request.query.get("attribution"):  # on the loop: nothing moves meanwhile
            data["attribution"] = self.heap.attribute(baseline=attribution == "baseline")
            # The snapshot and the object walk allocate tens of MB and free them; glibc would keep
            # that memory and every later RSS would carry the measurement. Give it back.
            _give_back()
        if (hog := request.query.get("hog")) is not None:  # before the reset: lag from here on
            self.hog.set(hog)
        if request.query.get("reset"):
            samples.clear()
            if self.profile is not None:
                self.profile.reset()
        return web.json_response(data)


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Start sampling, serve the view, write a token."""
    if os.environ.get("BENCH_TRACEMALLOC") and not tracemalloc.is_tracing():
        # One frame says where memory was allocated; more (BENCH_TRACEMALLOC_FRAMES) say who called.
        tracemalloc.start(int(os.environ.get("BENCH_TRACEMALLOC_FRAMES", "1")))
    lag = Lag()
    hass.async_create_background_task(lag.run(), "bench_probe lag")
    profile = None
    if os.environ.get("BENCH_PROFILE"):
        profile = Profile(threading.get_ident())
        threading.Thread(target=profile.run, name="bench_probe profile", daemon=True).start()
    hass.http.register_view(ProbeView(lag, profile))
    websocket_api.async_register_command(hass, websocket_llm_tools)
    user = await hass.auth.async_create_system_user("bench", group_ids=[GROUP_ID_ADMIN])
    # HA's access tokens last 30 minutes by default: a soak runs for hours on one.
    refresh = await hass.auth.async_create_refresh_token(user, access_token_expiration=timedelta(days=7))
    token = hass.auth.async_create_access_token(refresh)
    path = Path(hass.config.path("bench_token"))
    await hass.async_add_executor_job(path.write_text, token)
    return True


@websocket_command(
    {
        vol.Required("type"): "bench_probe/llm_tools",
        vol.Required("apis"): [str],
        vol.Optional("device_id"): str,
    }
)
@async_response
async def websocket_llm_tools(hass: HomeAssistant, connection: ActiveConnection, msg: dict[str, Any]) -> None:
    """The tool names an agent with these LLM APIs gets (the smoke run checks ours on the newest HA)."""
    context = llm.LLMContext(
        platform=DOMAIN,
        context=Context(user_id=connection.user.id),
        language="en",
        assistant="conversation",
        device_id=msg.get("device_id"),
    )
    instance = await llm.async_get_api(hass, msg["apis"], context)
    connection.send_result(msg["id"], {"tools": [tool.name for tool in instance.tools]})


async def async_setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """The voice providers, as the preferred pipeline's engines."""
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    registry = er.async_get(hass)
    engines = {
        platform: registry.async_get_entity_id(platform, DOMAIN, f"bench_{name}")
        for platform, name in (("stt", "stt"), ("tts", "tts"), ("conversation", "agent"))
    }
    await async_update_pipeline(
        hass,
        async_get_pipeline(hass),
        stt_engine=engines["stt"],
        stt_language="en-US",
        tts_engine=engines["tts"],
        tts_language="en-US",
        tts_voice=None,
        conversation_engine=engines["conversation"] or "conversation.home_assistant",
        conversation_language="en",
        language="en",
    )
    return True
