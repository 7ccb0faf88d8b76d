"""The satellite talks to a device through ``DeviceLink``'s interface only (docs/architecture.md)."""

import ast
from pathlib import Path

COMPONENT = Path(__file__).parents[1] / "custom_components" / "xiaozhi_local"

LINK_INTERFACE = {
    # calls
    "async_send_json",
    "async_send_audio",
    "async_send_ai_message",
    "async_call_tool",
    "async_end_conversation",
    "async_close",
    "touch",
    "arm_idle",
    # reads
    "audio_open",
    "conversation_open",
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
    """Attributes read, called or set on a link: names ``connection``/``link`` or ``….connection``."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        is_link = (isinstance(owner, ast.Name) and owner.id in ("connection", "link")) or (
            isinstance(owner, ast.Attribute) and owner.attr == "connection"
        )
        if is_link:
            found.setdefault(node.attr, node.lineno)
    return found


def test_the_satellite_and_the_speaker_use_only_the_link_interface() -> None:
    for path in [*sorted((COMPONENT / "satellite").glob("*.py")), COMPONENT / "speaker.py"]:
        uses = link_uses(path)
        outside = {name: line for name, line in uses.items() if name not in LINK_INTERFACE}
        assert not outside, f"{path.name} uses link internals {outside} (name: line); add to DeviceLink instead"
    assert link_uses(COMPONENT / "satellite" / "listening.py")  # the check sees real uses
