"""The layers hold: the satellite talks to a device through ``DeviceLink``'s interface only, a channel
to its link through the link's inbound side, no import circle, no module too big (docs/architecture.md)."""

import ast
from pathlib import Path
import re
import shutil
import subprocess
import sys

COMPONENT = Path(__file__).parents[1] / "custom_components" / "xiaozhi_local"

LINK_INTERFACE = {
    # calls
    "async_send_json",
    "async_send_audio",
    "async_send_ai_message",
    "async_call_tool",
    "async_end_conversation",
    "async_close",
    "async_reads",
    "touch",
    "arm_idle",
    # reads
    "audio_open",
    "listen_mode",
    "streams_microphone",
    "audio_in_order",
    "takes_ai_messages",
    "transport_name",
    "client",
    "log",
    "device",
    "gone",
}


def link_uses(path: Path) -> dict[str, int]:
    """Attributes read, called or set on a link: the name ``link`` or ``….link``."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        is_link = (isinstance(owner, ast.Name) and owner.id == "link") or (
            isinstance(owner, ast.Attribute) and owner.attr == "link"
        )
        if is_link:
            found.setdefault(node.attr, node.lineno)
    return found


def test_the_satellite_and_the_speaker_use_only_the_link_interface() -> None:
    for path in (*sorted((COMPONENT / "satellite").glob("*.py")), COMPONENT / "sound" / "speaker.py"):
        uses = link_uses(path)
        outside = {name: line for name, line in uses.items() if name not in LINK_INTERFACE}
        assert not outside, f"{path.name} uses link internals {outside} (name: line); add to DeviceLink instead"
    assert link_uses(COMPONENT / "satellite" / "listening.py")  # the check sees real uses


CHANNEL_SIDE = {
    # what comes in
    "async_receive_text",
    "receive_binary",
    "deliver_audio",
    "ended",
    "hello_received",
    "requests_unanswered",
    # what a transport's own conversations report (MQTT)
    "conversation_opened",
    "conversation_closed",
    "channel_changed",
    # what it may do or read
    "async_close",
    "async_send_json",
    "create_task",
    "session",
    "device",
    "log",
}
"""What a channel may use of the link it carries (``channel.py``): the link's inbound side."""


def test_channels_use_only_the_links_inbound_side() -> None:
    """Transports compose: a channel moves bytes and hands them to the link, never into its internals."""
    for path in (COMPONENT / "transport" / name for name in ("channel.py", "websocket.py", "mqtt_channel.py")):
        uses: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (
                (isinstance(node.value, ast.Name) and node.value.id == "link")
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "link")
            ):
                uses.setdefault(node.attr, node.lineno)
        outside = {name: line for name, line in uses.items() if name not in CHANNEL_SIDE}
        assert not outside, f"{path.name} uses link internals {outside} (name: line)"
        assert not any(name.startswith("_") for name in uses), path.name
        if path.name != "channel.py":
            assert "ended" in uses, f"{path.name} never tells its link that it ended"
    text = (COMPONENT / "link.py").read_text()
    assert "class DeviceLink:" in text  # composed, not subclassed per transport


def imports_in(node: ast.AST, package: list[str], modules: set[str], *, annotations: bool = False) -> set[str]:
    """The integration's modules that the code under ``node`` imports when it runs.

    Imports at module level and inside functions (a lazy import still runs), not those under
    ``if TYPE_CHECKING:`` unless ``annotations``. ``from . import x`` names the submodule ``x``;
    ``from .x import y`` the module ``x`` (or ``x.y`` when that is a submodule).
    """
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not annotations:
            continue
        if isinstance(child, ast.ImportFrom) and child.level:
            base = package[: len(package) - child.level + 1] if child.level > 1 else package
            target = ".".join([*base, *([child.module] if child.module else [])])
            subs = {f"{target}.{alias.name}".lstrip(".") for alias in child.names} & modules
            found |= subs
            if len(subs) < len(child.names):
                found.add(target)
        found |= imports_in(child, package, modules, annotations=annotations)
    return found


def runtime_imports(*, annotations: bool = False) -> dict[str, set[str]]:
    """Each module of the integration (dotted, relative to it; ``""`` is the package) → what it imports."""
    paths = {
        ".".join(path.relative_to(COMPONENT).with_suffix("").parts).removesuffix("__init__").rstrip("."): path
        for path in COMPONENT.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" and name else name.split(".")[:-1]
        graph[name] = imports_in(ast.parse(path.read_text()), package, set(paths), annotations=annotations) & set(
            paths
        ) - {name}
    return graph


def test_no_import_circle_inside_the_integration() -> None:
    """Parts get what they need passed in (``admission.gate.DeviceGate``, the views' HassKeys): none imports
    a module that imports it back, however indirectly, so each can be read and tested alone."""
    graph = runtime_imports()
    assert {"hub", "transport.mqtt", "sound.announcements", "firmware.installer", "firmware.server"} <= set(graph)
    assert "transport.mqtt" in graph["hub"]  # the walk sees imports (it would find no circle in nothing)

    def reaches(start: str, goal: str) -> list[str] | None:
        seen: set[str] = set()
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == goal:
                    return [*path, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    circles = [circle for name in graph if (circle := reaches(name, name))]
    assert not circles, " → ".join(circles[0])


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while (top := stack.pop()) != node:
                component.add(top)
            component.add(node)
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_annotations_tie_only_the_device_core() -> None:
    """Counting the imports made for type annotations too, modules depend on each other in a
    circle only at the core: a device, its link, its conversation. The policy modules, the
    readings and the channels get narrow interfaces (``transport.Hub``, ``readings.Readable``,
    ``channel.LinkSide``, ``mqtt_channel.UdpRoutes``) instead of the hub, the device or the link."""
    graph = runtime_imports(annotations=True)
    assert "link" in graph["conversations"]  # the walk sees annotation-only imports
    assert cycles(graph) in ([], [{"device", "link", "conversations"}]), cycles(graph)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]  # the check finds one


MAX_MODULE_LINES = 450
"""A module past this many lines at Home Assistant's 88 columns does more than one job (split it by
job, see docs/architecture.md). The repository is formatted at 120; the count is taken at 88, so the
cap means what it means in Home Assistant core."""


def lines_at_88(tmp_path: Path, roots: dict[str, Path]) -> dict[str, int]:
    """Lines of each module under ``roots`` once ruff formats it at 88 columns (in a copy)."""
    for name, root in roots.items():
        shutil.copytree(root, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--no-cache", "--quiet", "--line-length", "88", str(tmp_path)],
        check=True,
        cwd=tmp_path,
    )
    return {str(path.relative_to(tmp_path)): len(path.read_text().splitlines()) for path in tmp_path.rglob("*.py")}


def test_no_module_is_over_450_lines_at_88_columns(tmp_path: Path) -> None:
    sizes = lines_at_88(tmp_path, {"xiaozhi_local": COMPONENT, "xiaozhi_sim": COMPONENT.parents[1] / "xiaozhi_sim"})
    assert len(sizes) > 60  # the walk found both packages
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "one.py").write_text("x = [" + ", ".join(f"'{i:040}'" for i in range(3)) + "]\n")
    assert lines_at_88(tmp_path / "formatted", {"w": wide})["w/one.py"] > 1  # the count is taken at 88 columns


def device_writes(path: Path) -> list[str]:
    """Assignments to a device's attributes in ``path`` (``device.x = …``, ``self.device.x += …``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if not isinstance(element, ast.Attribute):
                    continue
                owner = element.value
                if (isinstance(owner, ast.Name) and owner.id == "device") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "device"
                ):
                    found.append(f"{path.name}:{element.lineno} {ast.unparse(element)}")
    return found


def test_only_the_device_writes_its_attributes(tmp_path: Path) -> None:
    """Other modules tell the device (a method) instead of setting its state: the device says what
    changes, and whoever listens hears it once (``device.restarts`` is the device's own object)."""
    writes = [w for path in sorted(COMPONENT.rglob("*.py")) if path.name != "device.py" for w in device_writes(path)]
    assert writes == []
    assert device_writes(COMPONENT / "device.py") == []  # it writes ``self.x``, not ``device.x``
    sample = tmp_path / "sample.py"
    sample.write_text("def f(device):\n    device.voice = None\n")
    assert device_writes(sample) == ["sample.py:2 device.voice"]  # the check finds one


def test_tests_reach_the_internals_through_one_module() -> None:
    """Only ``tests/internals.py`` reads a config entry's ``runtime_data``, a link's ``.session`` or
    the satellite's helpers: when the internals move, that module changes, not every test."""
    tests = Path(__file__).parent
    back_doors = ("runtime_data", ".session.", "._runner", "._listening", "._text.", "._playback")
    readers = sorted(
        str(path.relative_to(tests))
        for path in tests.rglob("*.py")
        if path.name not in ("internals.py", "test_layers.py") and any(door in path.read_text() for door in back_doors)
    )
    assert readers == []
    assert "runtime_data" in (tests / "internals.py").read_text()  # the back door is where it is said to be


def busy_reads(path: Path) -> list[str]:
    """Reads of a ``busy`` attribute in ``path`` (``voice.busy``, ``self.x.busy``), not its definition."""
    return [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "busy"
    ]


def test_busy_is_answered_by_the_device_only(tmp_path: Path) -> None:
    """ "Is it busy" has one answer: the device's ``exchanging`` and ``idle`` (device.py), made of its
    conversation and its voice's ``busy``. Nobody else reads ``busy``, so nobody answers it again."""
    tests = Path(__file__).parent
    sources = [*COMPONENT.rglob("*.py"), *tests.rglob("*.py")]
    readers = [r for path in sorted(sources) if path.name != "device.py" for r in busy_reads(path)]
    assert readers == []
    assert busy_reads(COMPONENT / "device.py")  # the one place, where it is said to be
    sample = tmp_path / "sample.py"
    sample.write_text("def f(device):\n    return device.voice.busy\n")
    assert busy_reads(sample) == ["sample.py:2"]


def flavor_names_compared(source: str, names: set[str]) -> list[int]:
    """Lines that compare something with a client family's name (``== "py-xiaozhi"``, ``in (…)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            constants = {c.value for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant)}
            if constants & names:
                found.append(node.lineno)
    return found


def test_client_families_are_data_in_the_simulator() -> None:
    """The simulator reads a family's traits (``profiles.py``), never its name: no module compares
    anything with a family's name (``flavor == "py-xiaozhi"``); a new client is a row of traits."""
    from xiaozhi_sim.options import FLAVORS
    from xiaozhi_sim.profiles import PROFILES

    names: set[str] = set(FLAVORS)
    simulator = Path(__file__).parents[1] / "xiaozhi_sim"
    compared = {path.name: flavor_names_compared(path.read_text(), names) for path in simulator.glob("*.py")}
    assert {name: lines for name, lines in compared.items() if lines} == {}
    assert flavor_names_compared('if options.flavor in ("browser", "x"):\n    pass\n', names) == [1]  # it sees one
    assert set(PROFILES) == names


def test_the_satellite_is_one_entity_that_owns_its_helpers() -> None:
    """No chain of entity mixins: the helpers in ``satellite/`` are plain classes (none is an
    entity), and nothing silences Home Assistant's one-entity-class-per-platform rule."""
    for path in sorted((COMPONENT / "satellite").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base) for base in node.bases}
                assert not any("Entity" in base or "Mixin" in base for base in bases), (
                    f"{path.name}: {node.name}({', '.join(sorted(bases))}) is a part of the entity again"
                )
    disables = [
        str(path.relative_to(COMPONENT))
        for path in COMPONENT.rglob("*.py")
        if "enforce-class-module" in path.read_text()
    ]
    assert disables == []


ROOMS = (
    *("protocol", "sound", "admission", "transport", "store", "tools", "firmware", "wake_words"),
    *("home", "satellite"),
)
"""The rooms (subpackages) bottom to top: each imports only those below it (docs/architecture.md)."""


def test_rooms_import_one_way() -> None:
    graph = runtime_imports()
    rooms = {name.split(".")[0] for name in graph if "." in name}
    assert rooms == set(ROOMS)  # a new room takes its place in the order
    upward = sorted(
        f"{module} → {imported}"
        for module, imports in graph.items()
        for imported in imports
        if "." in module and "." in imported and ROOMS.index(imported.split(".")[0]) > ROOMS.index(module.split(".")[0])
    )
    assert upward == []


def test_what_spans_the_home_lives_in_its_rooms() -> None:
    """The satellite's room holds one device's helpers: nothing HA-wide is made there (no ``Store``, no
    ``hass.data`` key). The nearest round and the volumes owed are the home's; every file is the store's."""
    for path in (COMPONENT / "satellite").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\bStore\(", text), path.name
        assert "HassKey(" not in text, path.name
    files = sorted(
        path.relative_to(COMPONENT).as_posix()
        for path in COMPONENT.rglob("*.py")
        if re.search(r"\bStore\(", path.read_text())  # Home Assistant's helpers.storage.Store
    )
    assert files, "the walk found no store"
    assert [name for name in files if not name.startswith("store/")] == []
    assert {path.name for path in (COMPONENT / "home").glob("*.py")} >= {"nearest.py", "wake_rate.py", "volumes.py"}


def test_the_satellite_marks_what_it_overrides() -> None:
    """Every method of Home Assistant's satellite entity (or Entity) that ours overrides says so (``@override``)."""
    from homeassistant.components.assist_satellite import AssistSatelliteEntity

    tree = ast.parse((COMPONENT / "assist_satellite.py").read_text())
    satellite = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "XiaozhiAssistSatellite")
    methods = [n for n in satellite.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inherited = [m.name for m in methods if m.name != "__init__" and hasattr(AssistSatelliteEntity, m.name)]
    assert len(inherited) >= 10  # the walk sees them
    unmarked = [
        m.name
        for m in methods
        if m.name in inherited and not any(isinstance(d, ast.Name) and d.id == "override" for d in m.decorator_list)
    ]
    assert unmarked == []
