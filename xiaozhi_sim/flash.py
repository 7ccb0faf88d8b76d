"""The device's flash (NVS): settings kept across boots, in a file when ``nvs_path`` is set.

Namespaces as the firmware's: ``board`` (its ``uuid``, the Client-Id made once), ``websocket`` and
``mqtt`` (what OTA answers stored), ``ota`` (the image running), ``assets`` (a download URL).
"""

import contextlib
import json
from pathlib import Path
from typing import Any

from .options import SimulatorOptions
from .ota import OtaError
from .profiles import PROFILES

type Nvs = dict[str, dict[str, Any]]


def load(options: SimulatorOptions) -> Nvs:
    """What flash holds; its Client-Id and token are the device's (a new Client-Id is kept for good)."""
    nvs: Nvs = {}
    if options.nvs_path is None:
        return nvs
    with contextlib.suppress(OSError, ValueError):
        stored = json.loads(Path(options.nvs_path).read_text())
        if isinstance(stored, dict):
            nvs = {k: v for k, v in stored.items() if isinstance(v, dict)}
    uuid_ = nvs.get("board", {}).get("uuid")
    if isinstance(uuid_, str) and uuid_:
        options.client_id = uuid_
    websocket = nvs.get("websocket", {})
    if isinstance(websocket.get("token"), str) and not options.token:
        options.token = websocket["token"]
    nvs.setdefault("board", {})["uuid"] = options.client_id
    save(options, nvs)
    return nvs


def save(options: SimulatorOptions, nvs: Nvs) -> None:
    """Write flash (after an OTA answer stored something)."""
    if options.nvs_path is not None:
        path = Path(options.nvs_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nvs, indent=2))


def use_websocket_settings(options: SimulatorOptions, nvs: Nvs) -> None:
    """Take the WebSocket URL, token and version the OTA answers stored."""
    websocket = nvs.get("websocket", {})
    if not isinstance(websocket.get("url"), str):
        raise OtaError("no WebSocket URL stored")
    options.url = websocket["url"]
    options.token = str(websocket.get("token", ""))
    if not options.token and (default := PROFILES[options.flavor].default_token) is not None:
        options.token = default
    options.protocol_version = int(websocket.get("version", 1))
