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
    code = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(PROTOCOL.parent)!r})\n"
        "import protocol.session, protocol.mcp, protocol.messages, protocol.schema\n"
        "print(any(m.split('.')[0] == 'homeassistant' for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
