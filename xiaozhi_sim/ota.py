"""The firmware's boot-time OTA check and activation (``main/ota.cc``, ``CheckNewVersion``; §2).

- ``POST`` the system info with the firmware's headers; a failure (no connection, status ≠ 200,
  invalid JSON) is retried after 10, 20, 40 … s, at most 10 times;
- every string or number member of ``websocket``/``mqtt`` is written to "NVS"; keys the answer
  leaves out are *kept* (the reason a server must always send url, token and version);
- ``activation``: show and speak the code; with a ``challenge``, ``POST <ota>/activate`` up to 10
  times (202 → again in 3 s, other → in 10 s, 200 → done), then check again; without a
  challenge wait 10 × 10 s and check again.

All delays are options, so tests run the same logic in milliseconds.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from .device import SimulatedDevice


class OtaError(Exception):
    """The OTA check failed for good (the firmware gives up and uses what NVS holds)."""


@dataclass
class OtaTiming:
    """The firmware's delays and counts (defaults are the real ones)."""

    check_retry_base: float = 10.0
    check_attempts: int = 10
    activate_pending_delay: float = 3.0
    activate_error_delay: float = 10.0
    activate_attempts: int = 10
    no_challenge_wait: float = 100.0
    max_checks: int = 1000  # a bound for tests; the firmware checks for as long as it runs


@dataclass
class OtaLog:
    """What the device did, for tests and the CLI."""

    checks: int = 0
    activations: list[int] = field(default_factory=list)  # status of every /activate POST
    responses: list[dict[str, Any]] = field(default_factory=list)
    shown: list[tuple[str, str]] = field(default_factory=list)  # (message, code) shown and spoken


class OtaClient:
    """Runs the boot-time check for one simulated device."""

    def __init__(
        self,
        device: SimulatedDevice,
        ota_url: str,
        timing: OtaTiming | None = None,
        on_code: Callable[[str, str], None] | None = None,
    ) -> None:
        self.device = device
        self.on_code = on_code
        self.ota_url = ota_url
        self.timing = timing or OtaTiming()
        self.log = OtaLog()
        self.codes: asyncio.Queue[str] = asyncio.Queue()  # every code the device speaks

    @property
    def activate_url(self) -> str:
        """``activate`` appended, with a ``/`` added when missing."""
        return self.ota_url + ("" if self.ota_url.endswith("/") else "/") + "activate"

    def headers(self) -> dict[str, str]:
        """The firmware's OTA request headers; a board with a serial number does activation version 2."""
        opts = self.device.options
        headers = {
            "Activation-Version": "2" if opts.serial_number else "1",
            "Device-Id": opts.mac,
            "Client-Id": opts.client_id,
            "User-Agent": f"{opts.board}/{opts.firmware_version}",
            "Accept-Language": opts.language,
            "Content-Type": "application/json",
        }
        if opts.serial_number:
            headers["Serial-Number"] = opts.serial_number
        return headers

    def activate_body(self, challenge: str) -> str:
        """``{}``; with a serial number, the HMAC-SHA256 of the challenge with the board's eFuse key."""
        serial = self.device.options.serial_number
        if not serial:
            return "{}"
        key = hashlib.sha256(f"efuse-key-{serial}".encode()).digest()  # the simulator's stand-in for KEY0
        digest = hmac.new(key, challenge.encode(), hashlib.sha256).hexdigest()
        return json.dumps({"algorithm": "hmac-sha256", "serial_number": serial, "challenge": challenge, "hmac": digest})

    async def run(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        """Check until the answer carries no activation; returns that answer."""
        failures = 0
        while self.log.checks < self.timing.max_checks:
            try:
                answer = await self._check(session)
            except OtaError:
                failures += 1
                if failures >= self.timing.check_attempts:
                    raise
                await asyncio.sleep(self.timing.check_retry_base * 2 ** (failures - 1))
                continue
            failures = 0
            activation = answer.get("activation")
            if not isinstance(activation, dict) or not isinstance(activation.get("code"), str):
                return answer
            code, message = activation["code"], activation.get("message", "")
            message = message if isinstance(message, str) else ""
            spoken = "".join(ch for ch in code if ch.isdigit())  # only the digits are spoken
            self.log.shown.append((message, spoken))
            self.codes.put_nowait(spoken)
            if self.on_code is not None:
                self.on_code(spoken, message)
            if isinstance(activation.get("challenge"), str):
                activated = await self._activate(session, activation["challenge"])
                if activated and self.device.profile.keeps_activation_answer:
                    # They do not ask OTA again after activating: they keep this answer's settings.
                    return answer
            else:
                await asyncio.sleep(self.timing.no_challenge_wait)
        raise OtaError("too many checks")

    async def _check(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        self.log.checks += 1
        info = self.device.system_info
        if self.device.profile.desktop:  # its application and board, no flash
            info = {"application": info["application"], "board": info["board"]}
        body = json.dumps(info, separators=(",", ":"))
        try:
            async with session.post(self.ota_url, data=body, headers=self.headers()) as resp:
                if resp.status != 200:
                    raise OtaError(f"status {resp.status}")
                answer = json.loads(await resp.text())
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise OtaError(str(err)) from None
        if not isinstance(answer, dict):
            raise OtaError("answer is not an object")
        self.log.responses.append(answer)
        for namespace in ("websocket", "mqtt"):
            if isinstance(answer.get(namespace), dict):
                store = self.device.nvs.setdefault(namespace, {})
                for key, value in answer[namespace].items():
                    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                        store[key] = value
        self.device.save_nvs()
        return answer

    async def _activate(self, session: aiohttp.ClientSession, challenge: str) -> bool:
        """Poll ``/activate`` (as ``Ota::Activate`` does); True once it answered 200."""
        for _ in range(self.timing.activate_attempts):
            try:
                async with session.post(
                    self.activate_url, data=self.activate_body(challenge), headers=self.headers()
                ) as resp:
                    status = resp.status
            except aiohttp.ClientError, TimeoutError:
                status = 0
            self.log.activations.append(status)
            if status == 200:
                return True
            await asyncio.sleep(
                self.timing.activate_pending_delay if status == 202 else self.timing.activate_error_delay
            )
        return False
