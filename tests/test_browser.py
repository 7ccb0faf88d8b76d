"""A real browser (headless Chromium) talks to the endpoints as the xinnan server's test page does.

The page is opened from a file, as users open that page, so every request it makes is
cross-origin: the OTA request with its ``Device-Id`` and ``Client-Id`` headers needs a CORS
preflight that Chromium itself sends and judges.
"""

import asyncio
import json
import os
from pathlib import Path
import shutil
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import OTA_PATH

from .conftest import CLIENT_ID, MAC, TOKEN

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=15000",
)


async def browse(tmp_path: Path, script: str) -> str:
    """Open a page (from a file) that runs ``script``; the DOM once it is done."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        if os.environ.get("XIAOZHI_REQUIRE_BROWSER"):  # CI: a missing browser fails, it is not a skip
            pytest.fail("no Chromium or Chrome on PATH, and CI requires the browser test")
        pytest.skip("Chromium is not installed (script/bootstrap installs it as root)")
    page = tmp_path / "page.html"
    page.write_text(f"<!doctype html><html><body><p id='out'>waiting</p><script>{script}</script></body></html>")
    proc = await asyncio.create_subprocess_exec(
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        page.as_uri(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return out.decode()


async def test_a_browser_page_makes_its_ota_request(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], tmp_path: Path
) -> None:
    url = str(client.make_url(OTA_PATH))
    headers = {"Content-Type": "application/json", "Device-Id": MAC, "Client-Id": CLIENT_ID}
    dom = await browse(
        tmp_path,
        f"fetch({json.dumps(url)}, {{method: 'POST', headers: {json.dumps(headers)}, "
        f"body: JSON.stringify({{mac_address: {json.dumps(MAC)}, uuid: ''}})}})"
        ".then(r => r.json()).then(j => { document.getElementById('out').textContent = 'OK ' + JSON.stringify(j); })"
        ".catch(e => { document.getElementById('out').textContent = 'FAILED ' + e; });",
    )
    assert "OK " in dom, dom[-500:]
    answer = json.loads(dom.split("OK ", 1)[1].split("</p>", 1)[0].replace("&quot;", '"'))
    assert answer["websocket"]["token"] == TOKEN  # the page is the paired client: its identity proves it
