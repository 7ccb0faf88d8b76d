"""script/dev_setup.py: the config directory script/develop and the bench start from."""

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from homeassistant.components.http.config import HTTPConfigStore
from homeassistant.core import HomeAssistant
import pytest

ROOT = Path(__file__).parent.parent


def dev_setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_setup", ROOT / "script" / "dev_setup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_port_is_kept_where_home_assistant_keeps_it(
    hass: HomeAssistant, hass_storage: dict[str, Any], tmp_path: Path
) -> None:
    """No YAML trial (reverted after 5 minutes): the stable HTTP config HA loads has the port."""
    module = dev_setup()
    module.keep_port(tmp_path, 8200)
    written = json.loads((tmp_path / ".storage" / "http").read_text())
    hass_storage["http"] = written  # what HA's Store reads from .storage/http
    store = HTTPConfigStore(hass)
    await store.async_load()
    assert store.stable["server_port"] == 8200
    assert store.pending is None
    assert store.yaml_migration_done


def test_two_devices_one_per_transport(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = dev_setup()
    module.main(tmp_path, 8124)
    entries = json.loads((tmp_path / ".storage" / "core.config_entries").read_text())["data"]["entries"]
    hub = next(e for e in entries if e["domain"] == "xiaozhi_local")
    assert hub["options"]["websocket_url"] == "ws://127.0.0.1:8124/api/xiaozhi_local/v1/"
    assert hub["options"]["mqtt_port"] == 1886  # moved with the HTTP port: two setups side by side
    transports = {sub["data"]["mac"]: sub["data"].get("transport") for sub in hub["subentries"]}
    assert transports == {module.SIM_MAC: None, module.WS_MAC: "websocket"}
    # A second run keeps the tokens and follows a new port.
    tokens = {sub["data"]["mac"]: sub["data"]["token"] for sub in hub["subentries"]}
    module.main(tmp_path, 8123)
    entries = json.loads((tmp_path / ".storage" / "core.config_entries").read_text())["data"]["entries"]
    hub = next(e for e in entries if e["domain"] == "xiaozhi_local")
    assert {sub["data"]["mac"]: sub["data"]["token"] for sub in hub["subentries"]} == tokens
    assert hub["options"]["mqtt_port"] == 1885


def test_the_demo_has_a_firmware_update_for_its_board(tmp_path: Path) -> None:
    """The always-connected simulated board runs 2.4.2; the demo offers it a checked 2.5.0 image."""
    import io

    from custom_components.xiaozhi_local.firmware.files import split_name
    from custom_components.xiaozhi_local.protocol.firmware import read_app_image

    module = dev_setup()
    module.main(tmp_path, 8123)
    (path,) = (tmp_path / "xiaozhi_firmware").iterdir()
    assert split_name(path.name) == ("bread-compact-wifi", "2.5.0")
    image = read_app_image(io.BytesIO(path.read_bytes()))
    assert (image.version, image.chip) == ("2.5.0", "esp32s3")
    before = path.stat().st_mtime_ns
    module.main(tmp_path, 8123)  # kept, not written again
    assert path.stat().st_mtime_ns == before


def test_a_config_in_use_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A second script/develop on the same config: told how to run beside it, nothing rewritten."""
    import fcntl

    module = dev_setup()
    assert not module.in_use(tmp_path)
    with (tmp_path / ".ha_run.lock").open("a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running HA holds
        assert module.in_use(tmp_path)
        with pytest.raises(SystemExit) as refused:
            module.main(tmp_path, 8124)
        assert "XIAOZHI_CONFIG=" in str(refused.value)
        assert not (tmp_path / ".storage").exists()
    assert not module.in_use(tmp_path)  # released: it runs
    module.main(tmp_path, 8124)
    assert (tmp_path / ".storage").exists()


def test_a_second_start_after_the_tokens_moved_to_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """script/develop, Ctrl+C, script/develop: the first start left the entry without tokens."""
    module = dev_setup()
    module.main(tmp_path, 8123)
    first = capsys.readouterr().out.split()
    path = tmp_path / ".storage" / "core.config_entries"
    store = json.loads(path.read_text())
    hub = next(e for e in store["data"]["entries"] if e["domain"] == "xiaozhi_local")
    # What Home Assistant's first start leaves: entry version 2, the tokens in the journal only.
    hub["version"] = 2
    for sub in hub["subentries"]:
        del sub["data"]["token"]
    path.write_text(json.dumps(store))
    module.main(tmp_path, 8123)
    assert (
        capsys.readouterr().out.split()
        == first
        == [module.SIM_MAC, module.SIM_CLIENT_ID, module.WS_MAC, module.WS_CLIENT_ID]
    )
    hub = next(e for e in json.loads(path.read_text())["data"]["entries"] if e["domain"] == "xiaozhi_local")
    assert hub["version"] == 2
    assert all("token" not in sub["data"] for sub in hub["subentries"])  # nothing put back


async def test_the_demo_config_loads_what_the_ui_makes(hass: HomeAssistant, tmp_path: Path) -> None:
    """HA's default shape: automations, scripts and scenes made in the UI are loaded from their files."""
    from homeassistant.config import load_yaml_config_file

    module = dev_setup()
    module.main(tmp_path, 8123)
    config = await hass.async_add_executor_job(load_yaml_config_file, str(tmp_path / "configuration.yaml"))
    # Each key is there (an empty file loads as an empty mapping): what the UI writes is loaded.
    assert {key: config[key] for key in ("automation", "script", "scene")} == {
        "automation": {},
        "script": {},
        "scene": {},
    }
    (tmp_path / "automations.yaml").write_text("- id: '1'\n  alias: Made in the UI\n  triggers: []\n  actions: []\n")
    module.main(tmp_path, 8123)  # kept: what the UI wrote stays
    config = await hass.async_add_executor_job(load_yaml_config_file, str(tmp_path / "configuration.yaml"))
    assert config["automation"][0]["alias"] == "Made in the UI"
