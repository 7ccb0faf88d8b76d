"""MultiNet wake phrases a device can hear: English words for English models, pinyin for Chinese ones."""

import pytest

from custom_components.xiaozhi_local.protocol.assets import AssetsError
from custom_components.xiaozhi_local.protocol.phrases import PINYIN, is_pinyin, language_of, phrase_problem
from custom_components.xiaozhi_local.protocol.wake_pack import with_wake_phrase
from xiaozhi_sim.assets import default_pack


@pytest.mark.parametrize(
    ("command", "model"),
    [
        ("hey willow", "mn7_en"),
        ("hi jarvis", "mn7_en"),
        ("ok computer", "mn6_en"),
        ("ni hao xiao zhi", "mn6_cn"),
        ("ni3 hao3 xiao3 zhi4", "mn7_cn"),
        ("xiao tu dou", "mn7_cn_ac"),
        ("lv se", "mn5q8_cn"),
    ],
)
def test_phrases_the_model_can_hear(command: str, model: str) -> None:
    assert phrase_problem(command, model) is None


@pytest.mark.parametrize(
    ("command", "model", "reason"),
    [
        ("hai xiao ming", "mn7_en", "is pinyin"),  # the round's report: never heard by an English model
        ("hi esp", "mn7_cn", "'hi' is not a pinyin syllable"),
        ("hey 小明", "mn7_en", "not an English word"),
        ("ni hao 2", "mn6_cn", "not a pinyin syllable"),
        ("xiao6 zhi", "mn6_cn", "not a pinyin syllable"),
    ],
)
def test_phrases_the_model_would_never_hear_say_why(command: str, model: str, reason: str) -> None:
    problem = phrase_problem(command, model)
    assert problem is not None
    assert reason in problem


def test_the_syllable_table() -> None:
    assert len(PINYIN) > 400
    assert is_pinyin("lü")
    assert is_pinyin("Zhuang4")
    assert not is_pinyin("esp")
    assert language_of("mn7_en") == "en"
    assert language_of("mn6_cn_ac") == "cn"
    assert language_of("mn9") is None


@pytest.mark.parametrize(
    ("phrase", "text", "reason"),
    [
        ("hi esp", "Hi ESP", "not a pinyin syllable"),  # the board's model is mn6_cn
        ("ni hao", "你好\u202e", "control, direction or emoji"),
        ("ni hao", "你好\r\nx", "control, direction or emoji"),
        ("ni\x00hao", "你好", "control, direction or emoji"),
        ("ni hao", "你好😀", "control, direction or emoji"),
    ],
)
def test_a_phrase_the_board_cannot_use_never_makes_a_pack(phrase: str, text: str, reason: str) -> None:
    with pytest.raises(AssetsError, match=reason):
        with_wake_phrase(default_pack("你好小智", multinet=True), phrase, text)
