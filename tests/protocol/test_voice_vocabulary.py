"""The voice vocabulary: builders, the listen parser, wake phrases."""

from typing import Any

import pytest

from custom_components.xiaozhi_local.protocol import voice


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"state": "start", "mode": "manual"}, voice.Listen("start", "manual")),
        ({"state": "start", "mode": "realtime"}, voice.Listen("start", "realtime")),
        ({"state": "start"}, voice.Listen("start", "auto")),
        ({"state": "start", "mode": ["x"]}, voice.Listen("start", "auto")),
        ({"state": "stop"}, voice.Listen("stop")),
        ({"state": "detect", "text": " 你好小智 "}, voice.Listen("detect", text="你好小智")),
    ],
)
def test_parse_listen(data: dict[str, Any], expected: voice.Listen) -> None:
    assert voice.parse_listen(data) == expected


@pytest.mark.parametrize(
    ("data", "kind"),
    [({"state": "detect"}, "bad_detect"), ({"state": "detect", "text": "  "}, "bad_detect"), ({}, "bad_listen")],
)
def test_parse_listen_refuses(data: dict[str, Any], kind: str) -> None:
    with pytest.raises(voice.VoiceError) as err:
        voice.parse_listen(data)
    assert err.value.kind == kind


def test_builders() -> None:
    assert voice.llm("thinking") == {"type": "llm", "text": "🤔", "emotion": "thinking"}
    assert voice.llm("no such mood")["text"] == voice.EMOJI["neutral"]
    assert voice.stt("hi") == {"type": "stt", "text": "hi"}
    assert voice.tts_sentence("A.") == {"type": "tts", "state": "sentence_start", "text": "A."}
    assert voice.alert("no STT")["status"] == "Error"


@pytest.mark.parametrize(("text", "wake"), [("你好小智", True), ("<detect>Hi ESP</detect>", True), ("turn on", False)])
def test_wake_phrases(text: str, wake: bool) -> None:
    assert voice.is_wake_phrase(text) is wake
