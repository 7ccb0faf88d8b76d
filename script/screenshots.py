"""Drive script/screenshots: onboard the fresh Home Assistant, then let screenshots.mjs take the pictures.

``python script/screenshots.py WORKDIR OUTDIR``: WORKDIR holds ``develop.log`` (script/develop's
output, where the unknown simulated device prints the code it speaks) and ``config/``.
Onboarding goes through HA's own onboarding API, as the browser would; the tokens it returns
are handed to the browser as the frontend stores them.
"""

import asyncio
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import time
from typing import Any

import aiohttp

BASE = "http://127.0.0.1:8123"
CLIENT_ID = f"{BASE}/"
HERE = Path(__file__).parent


async def wait_for(what: str, check: Any, timeout: float = 180) -> Any:
    """``await check()`` every second until it returns something true; that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if result := await check():
                return result
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(1)
    raise TimeoutError(f"{what} within {timeout} s")


async def onboard(http: aiohttp.ClientSession) -> dict[str, Any]:
    """The owner account, the core config and analytics steps; returns the frontend's token record."""
    async with http.post(
        f"{BASE}/api/onboarding/users",
        json={"client_id": CLIENT_ID, "name": "Demo", "username": "demo", "password": "demo-demo", "language": "en"},
    ) as resp:
        resp.raise_for_status()
        code = (await resp.json())["auth_code"]
    async with http.post(
        f"{BASE}/auth/token", data={"grant_type": "authorization_code", "code": code, "client_id": CLIENT_ID}
    ) as resp:
        resp.raise_for_status()
        tokens: dict[str, Any] = await resp.json()
    headers = {"Authorization": f"Bearer {tokens['access_token']}"}
    for step, body in (("core_config", {}), ("analytics", {})):
        async with http.post(f"{BASE}/api/onboarding/{step}", json=body, headers=headers) as resp:
            resp.raise_for_status()
    async with http.post(
        f"{BASE}/api/onboarding/integration",
        json={"client_id": CLIENT_ID, "redirect_uri": f"{BASE}/?auth_callback=1"},
        headers=headers,
    ) as resp:
        resp.raise_for_status()
    return {
        **tokens,
        "hassUrl": BASE,
        "clientId": CLIENT_ID,
        "expires": int(time.time() * 1000) + tokens["expires_in"] * 1000,
    }


async def device_id(http: aiohttp.ClientSession, token: str, mac: str) -> str:
    """The HA device id of ``mac``, from the device registry over the WebSocket API."""
    async with http.ws_connect(f"{BASE}/api/websocket") as ws:
        await ws.receive_json()
        await ws.send_json({"type": "auth", "access_token": token})
        await ws.receive_json()
        await ws.send_json({"id": 1, "type": "config/device_registry/list"})
        devices = (await ws.receive_json())["result"]
    return next((d["id"] for d in devices for kind, value in d["connections"] if kind == "mac" and value == mac), "")


async def in_use(http: aiohttp.ClientSession, token: str, device: str, config: Path) -> None:
    """The paired device in the living room, answering on its speaker with the room made quieter.

    One typed question (as its terminal sends it) is answered: its Response time has a value.
    """
    headers = {"Authorization": f"Bearer {token}"}

    async def call(domain: str, service: str, data: dict[str, Any]) -> None:
        async with http.post(f"{BASE}/api/services/{domain}/{service}", json=data, headers=headers) as resp:
            resp.raise_for_status()

    async def state(entity_id: str) -> str | None:
        async with http.get(f"{BASE}/api/states/{entity_id}", headers=headers) as resp:
            return str((await resp.json())["state"]) if resp.status == 200 else None

    async with http.ws_connect(f"{BASE}/api/websocket") as ws:
        await ws.receive_json()
        await ws.send_json({"type": "auth", "access_token": token})
        await ws.receive_json()
        update = {"id": 1, "type": "config/device_registry/update", "device_id": device, "area_id": "living_room"}
        await ws.send_json(update)
        if not (await ws.receive_json()).get("success"):
            raise RuntimeError("the device could not be put in the living room")
    async with http.get(f"{BASE}/api/states/media_player.living_room_speaker", headers=headers) as resp:
        resp.raise_for_status()
        shown = (await resp.json())["attributes"]["friendly_name"]  # the select offers players by name
    await call("select", "select_option", {"entity_id": "select.simulated_xiaozhi_reply_speaker", "option": shown})
    await call("switch", "turn_on", {"entity_id": "switch.simulated_xiaozhi_quieter_room_while_talking"})
    fifo = config / ".sim" / "questions"
    await asyncio.to_thread(fifo.write_text, "turn on the demo light\n")

    async def answered() -> bool:
        value = await state("sensor.simulated_xiaozhi_response_time")
        return value not in (None, "unknown", "unavailable")

    await wait_for("the typed question is answered", answered, 60)
    # Both simulated devices say the wake word at once (the paired one nearer): it alone answers.
    # Said once the first is idle again (its conversation over), as a wake word is.

    async def idle() -> bool:
        return await state("assist_satellite.simulated_xiaozhi") == "idle"

    await wait_for("the conversation ends", idle, 90)
    ws_fifo = config / ".sim" / "questions-ws"
    await asyncio.gather(*(asyncio.to_thread(path.write_text, "wake\n") for path in (fifo, ws_fifo)))

    async def chosen() -> bool:
        async with http.get(f"{BASE}/api/logbook", headers=headers) as resp:
            entries = await resp.json()
        return any("as the nearest" in str(entry.get("message")) for entry in entries)

    await wait_for("the nearest device is chosen", chosen, 60)


async def prepare(work: Path) -> tuple[dict[str, Any], str, str]:
    """Wait for HA and the devices, onboard; the frontend's tokens, the spoken code, the paired device's id."""
    log = work / "develop.log"

    async def spoken_code() -> str | None:
        found = re.findall(r"activation code (\d{6})", log.read_text() if log.exists() else "")
        return found[-1] if found else None

    async with aiohttp.ClientSession() as http:

        async def onboarding_open() -> bool:
            async with http.get(f"{BASE}/api/onboarding") as resp:
                return resp.status == 200

        await wait_for("Home Assistant answers", onboarding_open)
        code = await wait_for("the unknown device speaks a code", spoken_code)
        tokens = await onboard(http)
        paired = await wait_for(
            "the paired device connects", lambda: device_id(http, tokens["access_token"], "cc:ba:97:04:92:94")
        )
        await in_use(http, tokens["access_token"], paired, work / "config")
    return tokens, code, paired


def main(work: Path, out: Path) -> None:
    """Onboard, then take the screenshots into ``out``."""
    tokens, code, paired = asyncio.run(prepare(work))
    out.mkdir(exist_ok=True)
    (work / "tokens.json").write_text(json.dumps(tokens))
    subprocess.run(
        ["node", str(HERE / "screenshots.mjs"), BASE, str(work / "tokens.json"), str(out), code, paired],
        check=True,
        env=os.environ,
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
