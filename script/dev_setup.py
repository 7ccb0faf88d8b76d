"""Prepare config/ for script/develop: the Xiaozhi Local hub and two paired simulated devices.

Uses Home Assistant's own ConfigEntry class to write ``.storage/core.config_entries``, so the
dev HA starts with the integration set up (no clicks beyond HA's onboarding). Idempotent: a
second run keeps the existing entry and tokens, also once Home Assistant has moved the tokens out
of the entry into the integration's token journal (entry version 2). The HTTP port is written where HA keeps it
(``.storage/http``, not YAML: a YAML port is only a trial that HA reverts after 5 minutes).

Prints one line ``MAC CLIENT_ID`` per simulated device: the first is always connected
(MQTT+UDP, the hub's default), the second connects per conversation (WebSocket, its own choice).
Each simulator boots with its Client-Id, the identity its device paired with. A demo firmware
image (2.5.0 for the simulated board, which runs 2.4.2) goes into ``xiaozhi_firmware/``, so the
device's Firmware entity has an update to install.

Usage: ``dev_setup.py CONFIG_DIR [HTTP_PORT]``.
"""

import fcntl
import json
from pathlib import Path
import secrets
import shutil
import sys
from types import MappingProxyType
from typing import Any

from homeassistant.components.http.config import (
    HTTP_STORAGE_SCHEMA,
    STORAGE_KEY as HTTP_STORAGE_KEY,
    STORAGE_MINOR_VERSION as HTTP_STORAGE_MINOR_VERSION,
    STORAGE_VERSION as HTTP_STORAGE_VERSION,
)
from homeassistant.config_entries import (
    SOURCE_USER,
    STORAGE_KEY,
    STORAGE_VERSION,
    STORAGE_VERSION_MINOR,
    ConfigEntry,
    ConfigSubentry,
    ConfigSubentryData,
)
from homeassistant.util import dt as dt_util

DOMAIN = "xiaozhi_local"
SIM_MAC = "cc:ba:97:04:92:94"
SIM_CLIENT_ID = "5e1f0000-0000-4000-8000-00000000c0de"
WS_MAC = "cc:ba:97:04:92:96"
WS_CLIENT_ID = "5e1f0000-0000-4000-8000-00000000c0df"
HA_PORT = 8123
MQTT_PORT = 1885


def dev_options(port: int) -> dict[str, object]:
    """Hub options: the simulators reach HA on loopback, whatever address HA finds for itself.

    Another HTTP port gets MQTT/UDP ports moved by as much, so two dev setups can run side by side.
    """
    return {
        "accept_without_code": False,
        "websocket_url": f"ws://127.0.0.1:{port}/api/xiaozhi_local/v1/",
        "mqtt": True,
        "mqtt_port": MQTT_PORT + port - HA_PORT,
        "udp_port": MQTT_PORT + port - HA_PORT,
    }


def keep_port(config_dir: Path, port: int) -> None:
    """Write the HTTP port as HA keeps it (its ``http`` store), other stored settings unchanged."""
    path = config_dir / ".storage" / HTTP_STORAGE_KEY
    store: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    data = store.get("data") or {}
    stable = dict(data.get("stable") or HTTP_STORAGE_SCHEMA({}))
    if stable.get("server_port") == port and path.exists():
        return
    stable.update(server_port=port, created_at=dt_util.utcnow().isoformat(), error=None, error_message=None)
    store = {
        "version": HTTP_STORAGE_VERSION,
        "minor_version": HTTP_STORAGE_MINOR_VERSION,
        "key": HTTP_STORAGE_KEY,
        "data": {"stable": stable, "pending": None, "yaml_migration_done": True},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(store, indent=2))


def seed_entry(
    config_dir: Path,
    devices: list[tuple[str, str, str, str]],
    options: dict[str, object],
    extra: dict[str, dict[str, str]] | None = None,
) -> dict[str, object]:
    """The hub entry (created with ``devices`` as ``(mac, token, title, client_id)`` when missing).

    ``extra`` adds subentry data per MAC. A device missing from an existing entry is added; one
    seeded by an earlier version without a Client-Id gets it. Returns the entry as stored.
    """
    extra = extra or {}
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
                    data={"mac": mac, "token": token, "client_id": client_id, **extra.get(mac, {})},
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
    known = {sub["data"].get("mac") for sub in hub.get("subentries", [])}
    for mac, token, title, client_id in devices:
        if mac not in known:
            sub = ConfigSubentry(
                data=MappingProxyType({"mac": mac, "token": token, "client_id": client_id, **extra.get(mac, {})}),
                subentry_type="device",
                title=title,
                unique_id=mac,
            )
            hub.setdefault("subentries", []).append(json.loads(json.dumps(sub.as_dict(), default=str)))
            changed = True
    # The addresses follow the port of this run; the user's other choices stay.
    current = hub.setdefault("options", {})
    wanted = {**options, **{k: v for k, v in current.items() if k not in ("websocket_url", "mqtt_port", "udp_port")}}
    if current != wanted:
        hub["options"] = wanted
        changed = True
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


def seed_plain_entry(config_dir: Path, domain: str, title: str) -> None:
    """An entry without data for a helper integration (entity platforms need one), once."""
    path = config_dir / ".storage" / STORAGE_KEY
    store = json.loads(path.read_text())
    if any(e["domain"] == domain for e in store["data"]["entries"]):
        return
    entry = ConfigEntry(
        data={},
        discovery_keys=MappingProxyType({}),
        domain=domain,
        minor_version=1,
        options={},
        source=SOURCE_USER,
        subentries_data=[],
        title=title,
        unique_id=None,
        version=1,
    )
    store["data"]["entries"].append(json.loads(json.dumps(entry.as_dict(), default=str)))
    path.write_text(json.dumps(store, indent=2))


def link_components(config_dir: Path) -> None:
    """The integration and the dev-only demo voice (config/xiaozhi_demo), linked into the config.

    Both live in the config's ``custom_components``: Home Assistant reads that directory only
    while it imports the package, so a second ``custom_components`` on the path would hide it.
    """
    root = Path(__file__).resolve().parent.parent
    for name, source in (
        ("xiaozhi_local", root / "custom_components" / "xiaozhi_local"),
        ("xiaozhi_demo", root / "config" / "xiaozhi_demo"),
    ):
        target = config_dir / "custom_components" / name
        if not target.exists() and not target.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)
    seed_plain_entry(config_dir, "xiaozhi_demo", "Xiaozhi demo voice")


DEMO_FIRMWARE = ("bread-compact-wifi", "2.5.0")
"""The simulated always-connected board, and the version of the demo image offered to it."""


def demo_firmware(config_dir: Path) -> None:
    """A firmware image for the simulated board in the local firmware folder (once)."""
    sys.path.insert(0, str(Path(__file__).parents[1]))  # this script's own process: xiaozhi_sim
    from xiaozhi_sim.firmware import build_image  # noqa: PLC0415

    board, version = DEMO_FIRMWARE
    path = config_dir / "xiaozhi_firmware" / f"{board}_{version}.bin"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(build_image(version, size=1_500_000))


def demo_wake_words(config_dir: Path) -> None:
    """The wake word folder: the simulated board's default pack and a stand-in "Hi ESP" model (once).

    The model's ``_MODEL_INFO_`` is esp-sr's; its data is not (the simulator only reads the word).
    """
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from xiaozhi_sim.assets import default_pack  # noqa: PLC0415

    folder = config_dir / "xiaozhi_wake_words"
    model = folder / "wn9_hiesp"
    if not model.exists():
        model.mkdir(parents=True)
        (folder / f"{DEMO_FIRMWARE[0]}.bin").write_bytes(default_pack())
        (model / "_MODEL_INFO_").write_text("wakeNet9_v1h24_Hi,ESP_3_0.63_0.635")
        (model / "wn9_data").write_bytes(bytes(range(256)) * 256)
        (model / "wn9_index").write_bytes(bytes(64))


UI_FILES = {"automations.yaml": "[]\n", "scripts.yaml": "", "scenes.yaml": "[]\n"}
"""What a new Home Assistant's configuration includes, where the UI keeps what it makes."""


def default_files(config_dir: Path) -> None:
    """The demo's configuration (once; the user's changes stay), and the files the UI writes to."""
    config = config_dir / "configuration.yaml"
    if not config.exists():
        shutil.copyfile(Path(__file__).resolve().parents[1] / "config" / "configuration.yaml", config)
    for name, empty in UI_FILES.items():
        if not (config_dir / name).exists():
            (config_dir / name).write_text(empty)


def in_use(config_dir: Path) -> bool:
    """Whether a Home Assistant runs with this config directory now (it holds ``.ha_run.lock``)."""
    lock = config_dir / ".ha_run.lock"
    if not lock.exists():
        return False
    with lock.open("a+") as held:
        try:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    return False


def main(config_dir: Path, port: int = HA_PORT) -> None:
    """Seed the entry (and the port); print each simulated device's MAC and Client-Id.

    No token: the simulators get theirs from the OTA answer, as a paired board does (and after
    the first start the entry holds none: the token journal does).

    Refuses, before it writes anything, a config directory that a running Home Assistant uses.
    """
    if in_use(config_dir):
        sys.exit(
            f"A Home Assistant already runs with {config_dir} (script/develop in another terminal?).\n"
            "To run a second one beside it, give it a config directory of its own:\n"
            f"  XIAOZHI_CONFIG=/tmp/xiaozhi-second script/develop --port {port if port != HA_PORT else 8124}"
        )
    config_dir.mkdir(parents=True, exist_ok=True)
    default_files(config_dir)
    keep_port(config_dir, port)
    demo_firmware(config_dir)
    demo_wake_words(config_dir)
    hub = seed_entry(
        config_dir,
        [
            (SIM_MAC, secrets.token_urlsafe(32), "Simulated xiaozhi", SIM_CLIENT_ID),
            (WS_MAC, secrets.token_urlsafe(32), "Simulated xiaozhi (WebSocket)", WS_CLIENT_ID),
        ],
        dev_options(port),
        {WS_MAC: {"transport": "websocket"}},
    )
    link_components(config_dir)
    subentries = hub.get("subentries", [])
    assert isinstance(subentries, list)
    for mac, client_id in ((SIM_MAC, SIM_CLIENT_ID), (WS_MAC, WS_CLIENT_ID)):
        device = next((s for s in subentries if s["data"].get("mac") == mac), None)
        if device is None:
            sys.exit(f"The Xiaozhi Local entry has no device {mac}; add it in the UI or remove config/.storage")
        print(mac, device["data"].get("client_id", client_id))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else HA_PORT)
