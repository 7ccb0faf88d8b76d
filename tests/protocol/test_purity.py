"""The protocol package imports no Home Assistant, directly or through its imports."""

import ast
from pathlib import Path
import subprocess
import sys

PROTOCOL = Path(__file__).parents[2] / "custom_components" / "xiaozhi_local" / "protocol"


def test_no_homeassistant_import_in_source() -> None:
    for path in PROTOCOL.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "homeassistant" for n in names), path


def test_importing_protocol_loads_no_homeassistant() -> None:
    # A fresh interpreter: importing the protocol modules (not the integration package) pulls no HA in.
    modules = sorted(path.stem for path in PROTOCOL.glob("*.py") if path.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(PROTOCOL.parent)!r})\n"
        f"for name in {modules!r}: importlib.import_module('protocol.' + name)\n"
        "print(any(m.split('.')[0] == 'homeassistant' for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_package_lists_every_module_and_carries_the_version() -> None:
    import json

    from custom_components.xiaozhi_local import protocol

    modules = {path.stem for path in PROTOCOL.glob("*.py") if path.stem != "__init__"}
    assert set(protocol.__all__) == modules
    manifest = json.loads((PROTOCOL.parent / "manifest.json").read_text())
    assert protocol.__version__ == manifest["version"]
