"""A wake word pack, and the word a device wakes on.

The pack is made from the board's default pack (blocking, for the executor); the word a device
reports is compared with the one it should wake on.
"""

from typing import Final

from ..protocol.assets import AssetsError, parse_pack
from ..protocol.wake_pack import check_pack, pack_engine, pack_wake_word, with_wake_phrase, with_wakenet

ENGINE_WAKENET: Final = "wakenet"
ENGINE_MULTINET: Final = "multinet"
AS_BUILT: Final = "as_built"
"""The option that restores the pack the firmware was built with."""
PHRASE_SEPARATOR: Final = "|"
"""Between the phrase a MultiNet board listens for, the text it shows, and (optionally) its threshold in
percent (smaller hears more readily): ``ni hao xiao ming|你好小明|20``."""


def same_word(heard: str | None, expected: str) -> bool:
    """Whether a reported wake word is the expected one (case, spaces and punctuation aside; ``or`` alternatives)."""
    if heard is None:
        return False
    return bool(_spellings(heard) & _spellings(expected))


def _spellings(word: str) -> set[str]:
    """``Hi,Lily or Hi,莉莉`` → ``hilily``, ``hi莉莉`` and the whole; ``小滨小滨,小冰小冰`` → each half too."""
    parts = [word, *word.split(" or ")]
    if not any(ch.isascii() and ch.isalpha() for ch in word):
        parts += word.split(",")
    return {key for part in parts if (key := "".join(ch for ch in part.casefold() if ch.isalnum()))}


def engine_of(base: bytes) -> str | None:
    """Blocking: the engine the board's pack is built for (None: a pack that cannot be read)."""
    try:
        return pack_engine(parse_pack(base))
    except AssetsError:
        return None


def make_pack(
    base: bytes, option: str, name: str | None, files: dict[str, bytes] | None, partition: int
) -> tuple[bytes, str | None, str | None]:
    """Blocking: the new pack, the word it wakes on, and the word the base pack wakes on.

    AssetsError when the device would refuse it (format, checksum, partition size, model).
    """
    before = pack_wake_word(parse_pack(base)).word  # what the device wakes on now (a broken base: refused)
    if option == AS_BUILT:
        pack = base
    elif name is None:
        command, _, rest = option.partition(PHRASE_SEPARATOR)
        text, _, percent = rest.partition(PHRASE_SEPARATOR)
        threshold = None
        if percent.strip():
            if not percent.strip().isdigit():
                raise AssetsError("bad_phrase", "the threshold must be a whole percent from 1 to 99")
            threshold = int(percent.strip()) / 100
        pack = with_wake_phrase(base, command, text.strip() or command, threshold)
    else:
        assert files is not None
        pack = with_wakenet(base, name, files)
    return pack, check_pack(pack, partition).word, before
