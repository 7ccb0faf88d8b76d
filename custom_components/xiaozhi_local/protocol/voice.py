"""The voice vocabulary between a xiaozhi device and its server: typed builders and parsers.

Device → server: ``listen`` (``start`` with a mode, ``stop``, ``detect`` with text) and ``abort``.
Server → device: ``stt`` (what was heard), ``llm`` (an emotion, with its emoji in ``text``),
``tts`` (``start``, ``sentence_start`` with text, ``stop``) and ``alert``. See
docs/protocol.md §4. Pure: no Home Assistant, nothing raises on bad input.
"""

from dataclasses import dataclass
from typing import Any, Final, Literal

type ListenMode = Literal["auto", "manual", "realtime"]
LISTEN_MODES: Final[tuple[ListenMode, ...]] = ("auto", "manual", "realtime")

EMOJI: Final = {
    "neutral": "😶",
    "happy": "🙂",
    "laughing": "😆",
    "funny": "😂",
    "sad": "😔",
    "angry": "😠",
    "crying": "😭",
    "loving": "😍",
    "embarrassed": "😳",
    "surprised": "😯",
    "shocked": "😱",
    "thinking": "🤔",
    "winking": "😉",
    "cool": "😎",
    "relaxed": "😌",
    "delicious": "🤤",
    "kissy": "😘",
    "confident": "😏",
    "sleepy": "😴",
    "silly": "😜",
    "confused": "🙄",
}
"""The firmware's emotions and the emoji its servers send with each (xiaozhi-sdk logs an error without)."""

EMOTION_THINKING: Final = "thinking"
EMOTION_ANSWER: Final = "neutral"
EMOTION_DONE: Final = "happy"
EMOTION_CONFUSED: Final = "confused"
EMOTION_ERROR: Final = "sad"

WAKE_PHRASES: Final = frozenset(
    {
        "你好小智",
        "你好小志",
        "小爱同学",
        "你好小鑫",
        "你好喵喵",
        "hi esp",
        "hi,esp",
        "alexa",
        "hey xiaozhi",
        "hi xiaozhi",
        "hi lexin",
        "nihao xiaozhi",
        "jarvis",
        "hey jarvis",
        "hey wanda",
        "computer",
    }
)
"""Phrases esp-sr wake words report in ``listen detect`` (any other text is a typed utterance)."""


def is_wake_phrase(text: str) -> bool:
    """Whether ``listen detect`` text names a wake word (SenseCAP wraps it in ``<detect>``)."""
    cleaned = text.replace("<detect>", "").replace("</detect>", "").strip().lower().strip("!！.。,， ")
    return cleaned in WAKE_PHRASES


def speech_seconds(text: str) -> float:
    """A rough duration of spoken text, to show each sentence about when it is heard."""
    return sum(0.22 if ord(ch) >= 0x2E80 else 0.065 for ch in text)


# -- device → server -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listen:
    """A ``listen`` message: ``state`` start/stop/detect; ``mode`` for start; ``text`` for detect."""

    state: Literal["start", "stop", "detect"]
    mode: ListenMode = "auto"
    text: str = ""


class VoiceError(ValueError):
    """A voice message that cannot be used; ``kind`` groups them for once-per-kind logging."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def parse_listen(data: dict[str, Any]) -> Listen:
    """A ``listen`` message's fields. An unknown mode is ``auto``. Raises VoiceError."""
    state = data.get("state")
    if state == "start":
        mode = data.get("mode")
        return Listen("start", mode if mode in LISTEN_MODES else "auto")
    if state == "stop":
        return Listen("stop")
    if state == "detect":
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise VoiceError("bad_detect", "listen detect without text")
        return Listen("detect", text=text.strip())
    raise VoiceError("bad_listen", f"listen with unknown state {str(state)[:40]!r}")


# -- server → device -------------------------------------------------------------------------


def stt(text: str) -> dict[str, Any]:
    """What was heard (or typed): clients draw the user's line from it."""
    return {"type": "stt", "text": text}


def llm(emotion: str) -> dict[str, Any]:
    """The assistant's mood, with its emoji (``text``) as the firmware's servers send it."""
    return {"type": "llm", "text": EMOJI.get(emotion, EMOJI["neutral"]), "emotion": emotion}


def tts_start() -> dict[str, Any]:
    """Speech follows: the device enters speaking (and resets its audio queue)."""
    return {"type": "tts", "state": "start"}


def tts_sentence(text: str) -> dict[str, Any]:
    """The sentence being heard now (shown on screen)."""
    return {"type": "tts", "state": "sentence_start", "text": text}


def tts_stop() -> dict[str, Any]:
    """Speech is over: auto and realtime devices listen again, manual ones go idle."""
    return {"type": "tts", "state": "stop"}


def notify(audio_url: str, subtitles: list[dict[str, Any]]) -> dict[str, Any]:
    """Firmware 2.5: play this Ogg Opus URL now, if idle (``subtitles``: ``start_ms`` and ``text``)."""
    return {"type": "notify", "audio_url": audio_url, "subtitles": subtitles}


def alert(message: str, *, status: str = "Error", emotion: str = EMOTION_ERROR) -> dict[str, Any]:
    """A message the device shows (and sounds) at once."""
    return {"type": "alert", "status": status, "message": message, "emotion": emotion}


def _duration(seconds: int, chinese: bool) -> str:
    """``1 h 30 min`` / ``1小时30分钟``."""
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    units = ("小时", "分钟", "秒") if chinese else ("h", "min", "s")
    space = "" if chinese else " "
    parts = [f"{value}{space}{unit}" for value, unit in zip((hours, minutes, secs), units, strict=True) if value]
    return space.join(parts) or f"0{space}{units[2]}"


def timer_finished(name: str | None, seconds: int, language: str) -> dict[str, Any]:
    """The ``alert`` a finished timer rings with: its name or length, in the timer's language."""
    chinese = language.lower().startswith("zh")
    what = name or _duration(seconds, chinese)
    if chinese:
        return alert(f"计时结束：{what}", status="计时器", emotion="happy")
    return alert(f"Timer done: {what}", status="Timer", emotion="happy")
