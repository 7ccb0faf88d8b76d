"""Prepare config/ for script/develop: the Xiaozhi Local hub and one paired simulated device.

Uses Home Assistant's own ConfigEntry class to write ``.storage/core.config_entries``, so the
dev HA starts with the integration set up (no clicks beyond HA's onboarding). Idempotent: a
second run keeps the existing entry and token. Prints ``MAC TOKEN CLIENT_ID`` of the simulated
device: the simulator boots with that Client-Id, the identity the device paired with.
"""

import json
from pathlib import Path
import secrets
import sys
from types import MappingProxyType
from typing import Any

from homeassistant.config_entries import (
    SOURCE_USER,
    STORAGE_KEY,
    STORAGE_VERSION,
    STORAGE_VERSION_MINOR,
    ConfigEntry,
    ConfigSubentryData,
)

DOMAIN = "xiaozhi_local"
SIM_MAC = "cc:ba:97:04:92:94"
SIM_CLIENT_ID = "5e1f0000-0000-4000-8000-00000000c0de"
# On one machine the simulators reach HA on loopback, whatever address HA finds for itself.
DEV_OPTIONS = {"accept_without_code": False, "websocket_url": "ws://127.0.0.1:8123/api/xiaozhi_local/v1/"}


def seed_entry(
    config_dir: Path, devices: list[tuple[str, str, str, str]], options: dict[str, object]
) -> dict[str, object]:
    """The hub entry (created with ``devices`` as ``(mac, token, title, client_id)`` when missing).

    A device seeded by an earlier version without a Client-Id gets it. Returns the entry as stored.
    """
    path = config_dir / ".storage" / STORAGE_KEY
    store: dict[str, Any] = (
        json.loads(path.read_text())
        if path.exists()
        else {
            "version": STORAGE_VERSION,
            "minor_version": STORAGE_VERSION_MINOR,
            "key": STORAGE_KEY,
            "data": {"entries": []},
        }
    )
    entries = store["data"]["entries"]
    hub = next((e for e in entries if e["domain"] == DOMAIN), None)
    if hub is None:
        entry = ConfigEntry(
            data={},
            discovery_keys=MappingProxyType({}),
            domain=DOMAIN,
            minor_version=1,
            options=options,
            source=SOURCE_USER,
            subentries_data=[
                ConfigSubentryData(
                    data={"mac": mac, "token": token, "client_id": client_id},
                    subentry_type="device",
                    title=title,
                    unique_id=mac,
                )
                for mac, token, title, client_id in devices
            ],
            title="Xiaozhi Local",
            unique_id=None,
            version=1,
        )
        hub = json.loads(json.dumps(entry.as_dict(), default=str))
        entries.append(hub)
    changed = False
    for sub in hub.get("subentries", []):
        wanted = next((d for d in devices if d[0] == sub["data"].get("mac")), None)
        if wanted is not None and not sub["data"].get("client_id"):
            sub["data"]["client_id"] = wanted[3]
            changed = True
    if changed or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(store, indent=2))
    stored: dict[str, object] = hub
    return stored


def main(config_dir: Path) -> None:
    """Seed the entry if missing and print the simulated device's MAC and token."""
    hub = seed_entry(
        config_dir, [(SIM_MAC, secrets.token_urlsafe(32), "Simulated xiaozhi", SIM_CLIENT_ID)], DEV_OPTIONS
    )
    subentries = hub.get("subentries", [])
    assert isinstance(subentries, list)
    device = next((s for s in subentries if s["data"].get("mac") == SIM_MAC), None)
    if device is None:
        sys.exit(
            f"The existing Xiaozhi Local entry has no device {SIM_MAC}; add it in the UI or remove config/.storage"
        )
    print(SIM_MAC, device["data"]["token"], device["data"].get("client_id", SIM_CLIENT_ID))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
