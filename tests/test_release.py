"""What HACS and hassfest look at: the manifest, hacs.json, the version, the brand images, the action files.

The manifest rules are hassfest's for custom integrations, checked against the installed Home
Assistant (the authority on which integrations exist and which versions it pins).
"""

import ast
from importlib.metadata import version as installed_version
import json
from pathlib import Path
import re
from typing import Any

from awesomeversion import AwesomeVersion, AwesomeVersionStrategy
import homeassistant.components
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.setup import async_setup_component
from homeassistant.util.yaml import load_yaml_dict
from PIL import Image
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

from custom_components.xiaozhi_local.const import DOMAIN

ROOT = Path(__file__).parents[1]
COMPONENT = ROOT / "custom_components" / "xiaozhi_local"
MANIFEST: dict[str, Any] = json.loads((COMPONENT / "manifest.json").read_text())
HA_COMPONENTS = Path(homeassistant.components.__path__[0])


def imported_components() -> set[str]:
    """Every ``homeassistant.components.<x>`` the integration imports."""
    found: set[str] = set()
    for path in COMPONENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "homeassistant.components":
                    found |= {alias.name for alias in node.names}
                elif node.module.startswith("homeassistant.components."):
                    found.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                found |= {
                    alias.name.split(".")[2]
                    for alias in node.names
                    if alias.name.startswith("homeassistant.components.")
                }
    return found


def test_manifest_keys_and_version() -> None:
    assert MANIFEST["domain"] == DOMAIN == COMPONENT.name
    order = list(MANIFEST)
    assert order[:2] == ["domain", "name"]
    assert order[2:] == sorted(order[2:])
    # HA refuses to load a custom integration whose version none of these strategies read.
    parsed = AwesomeVersion(
        MANIFEST["version"],
        ensure_strategy=[AwesomeVersionStrategy.SEMVER, AwesomeVersionStrategy.CALVER, AwesomeVersionStrategy.PEP440],
    )
    assert parsed.strategy == AwesomeVersionStrategy.SEMVER
    assert MANIFEST["config_flow"] is (COMPONENT / "config_flow.py").exists()
    assert all(re.fullmatch(r"@[\w-]+", owner) for owner in MANIFEST["codeowners"])
    assert MANIFEST["documentation"].startswith("https://")
    assert MANIFEST["issue_tracker"].startswith("https://")


def test_every_imported_integration_is_declared() -> None:
    """hassfest: an integration you import must be set up first (dependencies) or may be (after_dependencies).

    Entity platforms we provide, ``diagnostics`` and ``logbook`` (each loads our platform itself)
    need no entry.
    """
    declared = set(MANIFEST["dependencies"]) | set(MANIFEST.get("after_dependencies", []))
    exempt = {platform.value for platform in Platform} | {"diagnostics", "logbook"}
    assert imported_components() - exempt <= declared
    for domain in declared:  # each is a real integration of this Home Assistant
        assert (HA_COMPONENTS / domain / "manifest.json").exists(), domain
    assert not set(MANIFEST["dependencies"]) & set(MANIFEST.get("after_dependencies", []))


def test_requirements_match_home_assistant_pins() -> None:
    """A pin that differs from HA's own would make HA install a second version (or refuse)."""
    constraints = {
        name.lower(): pinned
        for line in (HA_COMPONENTS.parent / "package_constraints.txt").read_text().splitlines()
        if (match := re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip()))
        for name, pinned in (match.groups(),)
    }
    assert MANIFEST["requirements"]
    for requirement in MANIFEST["requirements"]:
        name, pinned = requirement.split("==")
        assert constraints.get(name.lower(), pinned) == pinned, requirement
        assert installed_version(name) == pinned, requirement


def test_hacs_json_and_changelog() -> None:
    hacs = json.loads((ROOT / "hacs.json").read_text())
    assert hacs["name"] == MANIFEST["name"]
    assert hacs["render_readme"] is True
    # The minimum is the Home Assistant the test suite runs: the one version we know works.
    assert hacs["homeassistant"] == installed_version("homeassistant")
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == MANIFEST["version"]  # HACS releases tag v<version>


def test_actions_have_fields_icons_and_translations() -> None:
    services = load_yaml_dict(str(COMPONENT / "services.yaml"))
    icons = json.loads((COMPONENT / "icons.json").read_text())
    strings = json.loads((COMPONENT / "strings.json").read_text())
    assert set(services) == set(icons["services"]) == set(strings["services"])
    for name, spec in services.items():
        assert set(spec.get("fields", {})) == set(strings["services"][name].get("fields", {})), name


def test_brand_images() -> None:
    sizes = {"icon.png": (256, 256), "icon@2x.png": (512, 512)}
    for name, size in sizes.items():
        with Image.open(COMPONENT / "brand" / name) as image:
            assert image.format == "PNG"
            assert image.size == size
            assert image.mode == "RGBA"
            assert image.getchannel("A").getpixel((0, 0)) == 0  # transparent corners: no box around it
    for name, height in (("logo.png", 128), ("logo@2x.png", 256)):
        with Image.open(COMPONENT / "brand" / name) as image:
            assert image.format == "PNG"
            assert image.height == height
            assert image.width > image.height  # landscape: the icon and the name


async def test_home_assistant_serves_the_brand(hass: HomeAssistant, hass_client: ClientSessionGenerator) -> None:
    """HA's brands endpoint finds the images in the integration's ``brand/`` folder (no CDN)."""
    assert await async_setup_component(hass, "brands", {})
    client = await hass_client()
    for name in ("icon.png", "logo.png", "dark_icon.png"):  # dark falls back to the icon
        resp = await client.get(f"/api/brands/integration/{DOMAIN}/{name}")
        assert resp.status == 200, name
        assert resp.content_type == "image/png"
        body = await resp.read()
        expected = "icon.png" if name == "dark_icon.png" else name
        assert body == (COMPONENT / "brand" / expected).read_bytes()


def test_readmes_cover_what_a_user_needs() -> None:
    """The sections HA's documentation rules ask for, in both languages, and every picture they show exists."""
    sections = {
        "README.md": (
            "What you can do with it", "Supported devices and clients", "Try it without a device", "Installation",
            "Connect your device", "Always connected",
            "Hub options", "Entities", "Setting up voice", "Announcements and questions",
            "Conversation agents can use the device", "Action: `xiaozhi_local.call_tool`",
            "Event: `xiaozhi_local_notification`", "Diagnostics and repairs", "Known limitations",
            "Troubleshooting", "Removal",
        ),
        "README.zh-Hans.md": (
            "可以用它做什么", "支持的设备和客户端", "无需设备即可试用", "安装", "连接设备", "始终连接",
            "集成选项", "实体", "设置语音", "播报与提问",
            "对话代理使用设备工具", "动作：`xiaozhi_local.call_tool`", "事件：`xiaozhi_local_notification`",
            "诊断信息与修复", "已知限制", "故障排除", "移除",
        ),
    }  # fmt: skip
    pictures: dict[str, set[str]] = {}
    for name, wanted in sections.items():
        text = (ROOT / name).read_text()
        headings = set(re.findall(r"^#{2,3} (.+)$", text, re.MULTILINE))
        assert set(wanted) <= headings, set(wanted) - headings
        pictures[name] = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text))
        for picture in pictures[name]:
            with Image.open(ROOT / picture) as image:
                assert image.format == "PNG"
                assert image.width >= 1000  # a real screenshot, not a placeholder
    assert pictures["README.md"] == pictures["README.zh-Hans.md"]
    assert len(pictures["README.md"]) >= 4


def test_license_and_public_ci() -> None:
    """An OSI licence, and a CI workflow that runs the project's CI plus hassfest and the HACS check."""
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    for step in ("bash .ci/run", "home-assistant/actions/hassfest", "hacs/action", "category: integration"):
        assert step in workflow, step
