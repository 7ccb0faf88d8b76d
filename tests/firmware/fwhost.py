"""The stock firmware's own code as a test device: fwhost, built once, run as real processes.

``../shared/fwhost`` (beside the checkout; ``XIAOZHI_FWHOST`` names another folder) holds the stock
xiaozhi-esp32 firmware's protocol, OTA, MCP and assets code compiled for Linux. It is a test device
only: nothing of it is copied into the project. It is built out of tree into the cache, once per
content of its folder (its files' hash), and each ``FwHost`` is one process in a run folder of its
own (its flash: ``nvs.json`` and the partitions beside it), driven through its stdin and read
through its two logs (``fw.log``: every message both ways; ``out.log``: the activation code,
``READY``, ``REBOOT``).

Waits are conditions on those logs, with deadlines: never a fixed sleep.
"""

import asyncio
from collections.abc import Callable
import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path
import re
import shutil
import signal
import subprocess
import time
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FWHOST_DIR = Path(os.environ.get("XIAOZHI_FWHOST", ROOT.parent / "shared" / "fwhost"))
_XDG_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
CACHE = Path(os.environ.get("XIAOZHI_CACHE") or _XDG_CACHE / "xiaozhi_local")
BUILD_PACKAGES = ("g++", "make", "libmosquitto-dev", "libmbedtls-dev", "libcjson-dev", "libopus-dev")
POLL = 0.05
"""Seconds between two reads of a log while a condition is awaited (a condition, not a pause)."""


def available() -> str | None:
    """None when fwhost can be used here, else why not (one line)."""
    if not (FWHOST_DIR / "Makefile").is_file():
        return f"fwhost is not beside this checkout ({FWHOST_DIR}): the firmware suite is skipped"
    return None


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(FWHOST_DIR.rglob("*")):
        relative = path.relative_to(FWHOST_DIR)
        if not path.is_file() or relative.parts[0] in ("build", "out") or path.name in ("fwhost", "fwhost-sn"):
            continue
        digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _install_packages() -> None:
    """Debian's build dependencies, when missing and we may (CI's machine starts without them)."""
    missing = [
        name
        for name in BUILD_PACKAGES
        if subprocess.run(["dpkg", "-s", name], capture_output=True, check=False).returncode != 0
    ]
    if not missing or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        capture_output=True,
        check=True,
        env=env,
    )


def build() -> Path:
    """The fwhost binary for this content of the folder: built into the cache once (locked)."""
    out = CACHE / f"fwhost-{_source_hash()}"
    binary = out / "fwhost"
    if binary.is_file():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "fwhost.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary
        _install_packages()
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        made = subprocess.run(
            ["make", "-C", str(FWHOST_DIR), f"O={staging}", f"-j{os.cpu_count() or 2}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise RuntimeError(f"fwhost did not build:\n{made.stdout[-3000:]}\n{made.stderr[-3000:]}")
        shutil.rmtree(staging / "build", ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    return binary


def mkimage(path: Path, version: str, variant: str | None = None) -> Path:
    """An ESP-IDF app image from fwhost's ``mkimage.py`` (``variant``: one of its broken ones)."""
    args = ["python3", str(FWHOST_DIR / "mkimage.py"), str(path), "--version", version]
    if variant:
        args += ["--variant", variant]
    subprocess.run(args, capture_output=True, check=True)
    return path


class FwHost:
    """One stock device: a fwhost process and its flash (``rundir``), kept across its restarts."""

    def __init__(self, binary: Path, rundir: Path, mac: str, ota_url: str) -> None:
        self.binary = binary
        self.rundir = rundir
        self.mac = mac
        self.ota_url = ota_url
        self.process: subprocess.Popen[bytes] | None = None
        self.fw_log = rundir / "fw.log"
        self.out_log = rundir / "out.log"
        self._read: dict[Path, bytearray] = {}
        """What was read of each log so far: a poll reads only what was added since."""
        rundir.mkdir(parents=True, exist_ok=True)

    # -- the process ------------------------------------------------------------------------------

    def start(self) -> None:
        """Power on (the flash is what the last run left)."""
        assert self.process is None or self.process.poll() is not None
        args = ["--ota", self.ota_url, "--nvs", "nvs.json", "--mac", self.mac, "--tts-out", "tts.wav"]
        with self.out_log.open("ab") as out, self.fw_log.open("ab") as err:
            self.process = subprocess.Popen(
                [str(self.binary), *args],
                cwd=self.rundir,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=os.environ | {"FWHOST_MAX_BOOTS": "50"},
            )

    def command(self, line: str) -> None:
        """One line on the device's stdin (``talk``, ``ptt``, ``stop``, ``chat``, ``wake …``)."""
        assert self.process is not None
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def power_cut(self) -> None:
        """The power goes: the process stops where it is, its sockets stay open (nothing is sent)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def stop(self) -> None:
        """Gone for good (the kernel closes its sockets); the flash stays for a next ``start``."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=10)
        if process.stdin is not None:
            process.stdin.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    # -- what it logged ---------------------------------------------------------------------------

    def _text(self, path: Path) -> str:
        """The file's text so far; only the bytes added since the last call are read."""
        seen = self._read.setdefault(path, bytearray())
        with contextlib.suppress(FileNotFoundError), path.open("rb") as file:
            file.seek(len(seen))
            seen += file.read()
        return seen.decode(errors="replace")

    def log(self) -> str:
        """The firmware's log so far."""
        return self._text(self.fw_log)

    def out(self) -> str:
        """``ACTIVATION_CODE``, ``READY``, ``REBOOT`` lines so far."""
        return self._text(self.out_log)

    def mark(self) -> int:
        """Where the log ends now: a later wait can look only at what comes after."""
        return len(self.log())

    def received(self, since: int = 0) -> list[dict[str, Any]]:
        """JSON messages the device received (MQTT ``RECV`` or WebSocket ``RECV TEXT``) since ``since``."""
        return _messages(self.log()[since:], (r"host_mqtt: RECV \S+ ", r"tap: RECV TEXT "))

    def sent(self, since: int = 0) -> list[dict[str, Any]]:
        """JSON messages the device sent since ``since``."""
        return _messages(self.log()[since:], (r"host_mqtt: PUBLISH \S+ ", r"tap: SEND TEXT "))

    async def wait(self, predicate: Callable[[FwHost], Any], timeout: float, what: str) -> Any:
        """Until ``predicate(self)`` is true (its value is returned); ``what`` names it on a timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if value := predicate(self):
                return value
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"fwhost {self.mac} exited ({self.process.returncode}) waiting for {what}")
            if time.monotonic() > deadline:
                tail = "\n".join(self.log().splitlines()[-40:])
                raise AssertionError(f"fwhost {self.mac}: no {what} within {timeout} s; its log ends:\n{tail}")
            await asyncio.sleep(POLL)

    async def wait_log(self, pattern: str, timeout: float, since: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in the log after ``since``."""
        match: re.Match[str] = await self.wait(lambda fw: re.search(pattern, fw.log()[since:]), timeout, pattern)
        return match

    async def wait_received(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str, since: int = 0
    ) -> dict[str, Any]:
        """The first message the device received after ``since`` that ``predicate`` accepts."""

        def found(fw: FwHost) -> dict[str, Any] | None:
            return next((m for m in fw.received(since) if predicate(m)), None)

        message: dict[str, Any] = await self.wait(found, timeout, what)
        return message

    async def activation_code(self, timeout: float = 30) -> str:
        """The six digits the device speaks (and shows) to be paired."""
        match = await self.wait(lambda fw: re.search(r"ACTIVATION_CODE (\d{6})", fw.out()), timeout, "activation code")
        return str(match.group(1))

    def state_changes(self, since: int = 0) -> list[str]:
        """The state machine's ``old -> new`` moves since ``since``."""
        return re.findall(r"STATE: (\w+ -> \w+)", self.log()[since:])

    async def wait_state(self, state: str, timeout: float, since: int = 0) -> None:
        """Until the device has entered ``state`` after ``since``."""
        await self.wait(lambda fw: any(s.endswith(f"-> {state}") for s in fw.state_changes(since)), timeout, state)

    def nvs(self) -> dict[str, Any]:
        """What the device's flash holds (its NVS, as a JSON file)."""
        path = self.rundir / "nvs.json"
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        return data


def _messages(text: str, prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    pattern = re.compile("(?:" + "|".join(prefixes) + r")(\{.*)$", re.MULTILINE)
    for match in pattern.finditer(text):
        with contextlib.suppress(ValueError):
            message = json.loads(match.group(1))
            if isinstance(message, dict):
                found.append(message)
    return found
