"""What an assets pack makes the device wake on, and a pack changed to wake on something else.

A WakeNet board wakes on the model in the pack's ``srmodels`` (its ``_MODEL_INFO_`` names the word);
a MultiNet board on the phrases of ``index.json``'s ``multinet_model.commands`` whose action is
``wake`` (docs/protocol.md §16). Built on ``assets.py``'s reading and writing of the formats.
"""

from collections.abc import Mapping
from dataclasses import dataclass
import json
from typing import Any, Final

from .assets import (
    INDEX,
    MULTINET_PREFIX,
    WAKENET_PREFIX,
    AssetFile,
    AssetsError,
    Bytes,
    Models,
    build_models,
    build_pack,
    check_wakenet_model,
    parse_models,
    parse_pack,
    printable,
    read_index,
    wake_word_of,
)
from .phrases import phrase_problem


@dataclass(frozen=True, slots=True)
class PackWakeWord:
    """What a pack makes the device wake on: the WakeNet model and its word, or None."""

    model: str | None
    word: str | None
    srmodels: str | None
    """The file of the pack that holds the models (``index.json``'s ``srmodels``)."""


WAKE_ACTION: Final = "wake"
"""``multinet_model.commands[].action`` of a wake phrase (``CustomWakeWord``)."""


def wake_phrases(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The wake phrases of ``index.json``'s ``multinet_model`` (``command``, ``text``, ``action: wake``)."""
    multinet = index.get("multinet_model")
    commands = multinet.get("commands") if isinstance(multinet, dict) else None
    return [
        command
        for command in (commands if isinstance(commands, list) else [])
        if isinstance(command, dict)
        and command.get("action") == WAKE_ACTION
        and isinstance(command.get("command"), str)
        and isinstance(command.get("text"), str)
    ]


def pack_wake_word(files: dict[str, AssetFile]) -> PackWakeWord:
    """What a pack makes the device wake on.

    A WakeNet board loads the first model whose name starts ``wn`` and reports its word; a board
    built with the MultiNet "custom wake word" loads the ``mn`` model and reports the ``text`` of
    the phrase it heard (``index.json``'s ``multinet_model``). A pack with a WakeNet model is
    taken as a WakeNet one (the firmware's build decides; the pack is all a server sees).
    """
    index = read_index(files)
    srmodels = index.get("srmodels")
    if not isinstance(srmodels, str):
        return PackWakeWord(None, None, None)
    if srmodels not in files:
        raise AssetsError("no_models", f"index.json names {srmodels}, which the pack lacks")
    models = parse_models(files[srmodels].data)
    for name, model in models.items():
        if name.startswith(WAKENET_PREFIX):
            return PackWakeWord(name, wake_word_of(model), srmodels)
    multinet = next((name for name in models if name.startswith(MULTINET_PREFIX)), None)
    phrases = wake_phrases(index)
    if multinet is not None and phrases:
        return PackWakeWord(multinet, phrases[0]["text"], srmodels)
    return PackWakeWord(multinet, None, srmodels)


def pack_engine(files: dict[str, AssetFile]) -> str | None:
    """``wakenet`` or ``multinet``: which wake word engine a (board's default) pack is built for."""
    found = pack_wake_word(files)
    if found.model is None:
        return None
    return "wakenet" if found.model.startswith(WAKENET_PREFIX) else "multinet"


def with_wake_phrase(pack: Bytes, command: str, text: str, threshold: float | None = None) -> bytes:
    """``pack`` (of a MultiNet board) with its wake phrase replaced: ``command`` heard, ``text`` shown and sent.

    ``command`` is what MultiNet listens for: English words, or pinyin separated by spaces for
    Chinese. ``threshold`` (0.01 to 0.99, smaller hears more readily) replaces the pack's when
    given (``CustomWakeWord`` reads ``multinet_model.threshold``); its other commands and its
    language are kept.
    """
    if threshold is not None and not 0.01 <= threshold <= 0.99:
        raise AssetsError("bad_phrase", "the threshold must be a whole percent from 1 to 99")
    command, text = " ".join(command.split()), text.strip()
    if not command or not text or len(command) > 64 or len(text.encode()) > 64:
        raise AssetsError("bad_phrase", "a wake phrase and its text must each be 1 to 64 characters")
    if not printable(command) or not printable(text):
        raise AssetsError("bad_phrase", "a wake phrase and its text may hold no control, direction or emoji characters")
    files = parse_pack(pack)
    found = pack_wake_word(files)
    if found.model is None or not found.model.startswith(MULTINET_PREFIX):
        raise AssetsError("not_multinet", "the board's pack has no MultiNet model: it wakes on a WakeNet model")
    if (problem := phrase_problem(command, found.model)) is not None:
        raise AssetsError("bad_phrase", problem)
    index = read_index(files)
    raw = index.get("multinet_model")
    multinet = dict(raw) if isinstance(raw, dict) else {}
    others = [c for c in multinet.get("commands") or [] if isinstance(c, dict) and c.get("action") != WAKE_ACTION]
    multinet["commands"] = [{"command": command, "text": text, "action": WAKE_ACTION}, *others]
    if threshold is not None:
        multinet["threshold"] = round(threshold, 2)
    index["multinet_model"] = multinet
    files[INDEX] = AssetFile(INDEX, json.dumps(index, ensure_ascii=False, indent=4).encode())
    return build_pack(list(files.values()))


def with_wakenet(pack: Bytes, name: str, model: Mapping[str, Bytes]) -> bytes:
    """``pack`` with its WakeNet model replaced by ``model`` (everything else kept as it was)."""
    if not name.startswith(WAKENET_PREFIX):
        raise AssetsError("bad_model", f"{name} is not a WakeNet model (its name must start with {WAKENET_PREFIX})")
    check_wakenet_model(model)  # a model the firmware can load and name
    files = parse_pack(pack)
    index = read_index(files)
    srmodels = index.get("srmodels")
    models: Models = {}
    if isinstance(srmodels, str) and srmodels in files:
        models = {
            key: value
            for key, value in parse_models(files[srmodels].data).items()
            if not key.startswith(WAKENET_PREFIX)
        }
    else:
        srmodels = "srmodels.bin"
        index["srmodels"] = srmodels
    models = {name: dict(model), **models}  # the wake word engine takes the first WakeNet model
    files[srmodels] = AssetFile(srmodels, build_models(models))
    files[INDEX] = AssetFile(INDEX, json.dumps(index, ensure_ascii=False, indent=4).encode())
    return build_pack(list(files.values()))


def check_pack(pack: Bytes, partition_size: int, *, word: str | None = None) -> PackWakeWord:
    """Raise AssetsError unless the device would take ``pack`` (and wake on ``word``, when given)."""
    if partition_size <= 0:
        raise AssetsError("no_partition", "the device reports no assets partition")
    files = parse_pack(pack, partition_size)
    found = pack_wake_word(files)
    if word is not None and found.word != word:
        raise AssetsError("wrong_word", f"the pack wakes on {found.word!r}, not {word!r}")
    return found
