"""The text shown on the device while it speaks: sentence by sentence."""

import re

_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;…])\s*|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences to show one by one (``tts sentence_start``), Chinese and Latin punctuation alike."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]
