"""What a device reported and what waits for it, as kept across restarts (the hub's store).

Everything here is read back from disk, so it is parsed defensively: a value of the wrong type
(a hand-edited store, an older version's) is dropped, never trusted.
"""

from dataclasses import dataclass, field
from typing import Any, Self

from ..protocol.firmware import BoardFacts
from ..protocol.mcp import McpTool, canonical_tools, parse_tool
from ..protocol.messages import loads

REPORT_SAVE_DELAY = 10.0
"""Seconds before what the device reported is saved (many reports make one write)."""


@dataclass(frozen=True, slots=True)
class PendingSetting:
    """A setting the user made while the device was away: applied when it connects."""

    tool: str
    arguments: dict[str, Any]
    value: Any
    """What the entity shows until then."""

    @classmethod
    def from_dict(cls, data: Any) -> Self | None:
        """A kept setting, or None when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
            return None
        arguments = data.get("arguments")
        return cls(data["tool"], arguments if isinstance(arguments, dict) else {}, data.get("value"))

    def as_dict(self) -> dict[str, Any]:
        """As stored."""
        return {"tool": self.tool, "arguments": self.arguments, "value": self.value}


@dataclass(slots=True)
class DeviceCache:
    """A device's kept state: its tools, query results, waiting settings, firmware and transport facts."""

    tools: dict[str, McpTool] = field(default_factory=dict)
    queries: dict[str, Any] = field(default_factory=dict)
    pending: dict[str, PendingSetting] = field(default_factory=dict)
    facts: BoardFacts | None = None
    told_transport: str | None = None
    picks_transport: bool = False
    wake_word: str | None = None
    """The wake word chosen in Home Assistant (wake_words/change.py), once verified; None: as built."""
    wake_phrase: str | None = None
    """What the device sends as ``listen detect`` text for it."""

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """What was stored (nothing, or anything malformed, gives an empty cache)."""
        if not isinstance(data, dict):
            return cls()
        tools: dict[str, McpTool] = {}
        for raw in data.get("tools") or ():
            try:
                tool = parse_tool(raw)
            except ValueError:
                continue
            tools[tool.name] = tool
        queries = data.get("queries")
        pending = data.get("pending")
        told = data.get("transport")
        wake_word, wake_phrase = data.get("wake_word"), data.get("wake_phrase")
        return cls(
            tools=canonical_tools(tools),
            queries=dict(queries) if isinstance(queries, dict) else {},
            pending={
                key: setting
                for key, raw in (pending.items() if isinstance(pending, dict) else ())
                if (setting := PendingSetting.from_dict(raw)) is not None
            },
            facts=BoardFacts.from_dict(data.get("firmware")),
            told_transport=told if isinstance(told, str) else None,
            picks_transport=bool(data.get("picks_transport")),
            wake_word=wake_word[:64] if isinstance(wake_word, str) else None,
            wake_phrase=wake_phrase[:64] if isinstance(wake_phrase, str) else None,
        )

    def as_dict(self) -> dict[str, Any]:
        """As stored."""
        return {
            "tools": [tool.as_dict() for tool in self.tools.values()],
            "queries": self.queries,
            "pending": {key: setting.as_dict() for key, setting in self.pending.items()},
            "firmware": self.facts.as_dict() if self.facts is not None else None,
            "transport": self.told_transport,
            "picks_transport": self.picks_transport,
            "wake_word": self.wake_word,
            "wake_phrase": self.wake_phrase,
        }


def query_number(text: str) -> int | float | None:
    """A query tool's bare number (py-xiaozhi's ``get_volume`` answers ``70``), or None."""
    try:
        value = loads(text)
    except ValueError, RecursionError:
        return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
