"""Translations and manifest: every language has every key, every key the code uses exists."""

import json
import os
from pathlib import Path
import re
import shutil
import subprocess
from typing import Any

import pytest

COMPONENT = Path(__file__).parents[1] / "custom_components" / "xiaozhi_local"
STRINGS = json.loads((COMPONENT / "strings.json").read_text())


def keys(tree: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        out |= keys(value, path) if isinstance(value, dict) else {path}
    return out


def placeholders(tree: dict[str, Any]) -> dict[str, set[str]]:
    flat: dict[str, set[str]] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}"
            if isinstance(value, dict):
                walk(value, path)
            else:
                flat[path] = set(re.findall(r"\{(\w+)\}", value))

    walk(tree, "")
    return flat


def test_english_is_strings_json() -> None:
    assert json.loads((COMPONENT / "translations" / "en.json").read_text()) == STRINGS


@pytest.mark.parametrize("language", ["en", "zh-Hans"])
def test_every_key_and_placeholder_in_every_language(language: str) -> None:
    translation = json.loads((COMPONENT / "translations" / f"{language}.json").read_text())
    assert keys(translation) == keys(STRINGS)
    assert placeholders(translation) == placeholders(STRINGS)


def test_translation_keys_used_in_code_exist() -> None:
    code = "\n".join(p.read_text() for p in sorted(COMPONENT.rglob("*.py")))  # satellite/ too
    used = set(re.findall(r'translation_domain=DOMAIN,\s*translation_key="(\w+)"', code))
    used |= set(re.findall(r'_error\(\s*"(\w+)"', code))
    # Texts shown as they are (errors.async_translate): what an install waits for, release notes.
    used |= set(re.findall(r'"(update_(?:waiting|notes)_\w+)"', code))
    assert used
    assert used <= set(STRINGS["exceptions"])
    assert set(STRINGS["exceptions"]) <= used  # no dead strings
    all_errors = (
        set(STRINGS["config"]["error"])
        | set(STRINGS["options"]["error"])
        | set(STRINGS["config_subentries"]["device"]["error"])
    )
    assert set(re.findall(r'errors\[\w+\] = "(\w+)"', code)) <= all_errors
    all_aborts = set(STRINGS["config"]["abort"]) | set(STRINGS["config_subentries"]["device"]["abort"])
    assert set(re.findall(r'async_abort\(reason="(\w+)"', code)) <= all_aborts


def test_code_check_results_are_translated() -> None:
    from custom_components.xiaozhi_local.admission.pairing import CheckResult

    shown = {CheckResult.WRONG.value, CheckResult.LOCKED.value}  # used as form errors
    assert shown <= set(STRINGS["config"]["error"])
    assert shown <= set(STRINGS["config_subentries"]["device"]["error"])


def test_manifest_key_order() -> None:
    manifest = json.loads((COMPONENT / "manifest.json").read_text())
    order = list(manifest)
    assert order[:2] == ["domain", "name"]
    assert order[2:] == sorted(order[2:])
    for key in ("codeowners", "documentation", "issue_tracker", "version", "iot_class", "config_flow"):
        assert key in manifest
    assert manifest["integration_type"] == "hub"
    assert manifest["iot_class"] == "local_push"


def test_entity_names_and_states_are_translated() -> None:
    from custom_components.xiaozhi_local import binary_sensor, button, event, light, number, select, sensor

    rows = [
        *(("number", d) for d in number.NUMBERS),
        *(("select", d) for d in select.SELECTS),
        *(("sensor", d) for d in sensor.SENSORS),
        *(("binary_sensor", d) for d in binary_sensor.BINARY_SENSORS),
        *(("light", d) for d in light.LIGHTS),
        *(("button", d) for d in button.BUTTONS),
        ("binary_sensor", binary_sensor.CONNECTED),
        ("button", button.IR_BUTTON),
        ("button", button.TOOL_BUTTON),
        ("event", event.NOTIFICATION),
    ]
    entity_strings = STRINGS["entity"]
    for platform, description in rows:
        if description.translation_key is None:
            assert description.device_class is not None, description.key  # named by its device class
            continue
        names = entity_strings[platform][description.translation_key]
        assert names["name"], description.key
        options = getattr(description, "options", None)
        if options:
            assert set(names["state"]) == set(options), description.key
    event_states = entity_strings["event"]["notification"]["state_attributes"]["event_type"]["state"]
    assert set(event_states) == set(event.NOTIFICATION.event_types or [])


QUALITY_RULES = {
    # Bronze
    "action-setup", "appropriate-polling", "brands", "common-modules", "config-flow-test-coverage",
    "config-flow", "dependency-transparency", "docs-actions", "docs-high-level-description",
    "docs-installation-instructions", "docs-removal-instructions", "entity-event-setup", "entity-unique-id",
    "has-entity-name", "runtime-data", "test-before-configure", "test-before-setup", "unique-config-entry",
    # Silver
    "action-exceptions", "config-entry-unloading", "docs-configuration-parameters",
    "docs-installation-parameters", "entity-unavailable", "integration-owner", "log-when-unavailable",
    "parallel-updates", "reauthentication-flow", "test-coverage",
    # Gold
    "devices", "diagnostics", "discovery-update-info", "discovery", "docs-data-update", "docs-examples",
    "docs-known-limitations", "docs-supported-devices", "docs-supported-functions", "docs-troubleshooting",
    "docs-use-cases", "dynamic-devices", "entity-category", "entity-device-class",
    "entity-disabled-by-default", "entity-translations", "exception-translations", "icon-translations",
    "reconfiguration-flow", "repair-issues", "stale-devices",
    # Platinum
    "async-dependency", "inject-websession", "strict-typing",
}  # fmt: skip


def test_quality_scale_has_a_status_for_every_rule() -> None:
    """Every rule: done, todo, or exempt with the reason."""
    from homeassistant.util.yaml import load_yaml_dict

    rules = load_yaml_dict(str(COMPONENT / "quality_scale.yaml"))["rules"]
    assert set(rules) == QUALITY_RULES
    for rule, status in rules.items():
        if isinstance(status, dict):
            assert status["status"] in ("done", "todo", "exempt"), rule
            assert status.get("comment"), rule
        else:
            assert status in ("done", "todo"), rule
    # What the code proves is done, marked so.
    assert rules["diagnostics"] == rules["repair-issues"] == rules["test-coverage"] == "done"


NODE_MODULES = Path(
    os.environ.get("XIAOZHI_NODE_MODULES")
    or Path(
        os.environ.get("XIAOZHI_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xiaozhi_local"
    )
    / "node"
    / "node_modules"
)


@pytest.mark.parametrize("language", ["en", "zh-Hans"])
def test_every_string_formats_as_the_frontend_formats_it(language: str) -> None:
    """HA's frontend reads translations as ICU messages: ``<token>`` is a tag, ``'`` quotes, ``{`` opens.

    An English "Bearer <token>" rendered as "Translation error: UNCLOSED_TAG". ``script/bootstrap``
    installs the frontend's formatter (intl-messageformat, from npm) when Node.js is there.
    """
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "intl-messageformat").is_dir():
        pytest.skip("Node.js and intl-messageformat (script/bootstrap installs it) are needed")
    result = subprocess.run(
        [
            node,
            str(Path(__file__).parent / "frontend" / "format_strings.js"),
            str(COMPONENT / "translations" / f"{language}.json"),
            language,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
        timeout=60,
    )
    assert json.loads(result.stdout) == []
