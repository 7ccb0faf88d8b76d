"""How near a device was to whoever said the wake word: its wake audio's speech over its own noise.

Each device scores its own recording (the ~2 s of wake word audio the firmware sends before
``listen detect``): the level of its loudest 20 ms frames over the level of its quietest, in dB.
A microphone's gain raises both alike, so it does not decide; the nearer device hears the voice
further above the room's noise.
"""

from array import array
from collections.abc import Iterable
import math
import sys
from typing import Final

from .opus import OpusDecoder
from .pcm import AudioError

FRAME_SAMPLES: Final = 320
"""20 ms at 16 kHz: the frames whose levels are compared."""
MIN_FRAMES: Final = 10
"""At least 0.2 s of audio: less is no recording to score."""
SPEECH_QUANTILE: Final = 0.9
NOISE_QUANTILE: Final = 0.1
FLOOR_DB: Final = -100.0
"""The level of digital silence (a frame of zeros), so a silent floor stays a number."""


def frame_levels(pcm: bytes) -> list[float]:
    """The level (dBFS) of each whole 20 ms frame of 16-bit mono PCM."""
    samples = array("h")
    samples.frombytes(pcm[: len(pcm) - len(pcm) % 2])
    if sys.byteorder == "big":
        samples.byteswap()
    levels = []
    for start in range(0, len(samples) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        energy = sum(s * s for s in samples[start : start + FRAME_SAMPLES]) / FRAME_SAMPLES
        levels.append(10 * math.log10(energy / 32768**2) if energy > 0 else FLOOR_DB)
    return levels


def speech_over_noise(pcm: bytes) -> float | None:
    """The recording's speech level over its noise floor (dB); None when it is too short to tell."""
    levels = sorted(frame_levels(pcm))
    if len(levels) < MIN_FRAMES:
        return None
    speech = levels[min(len(levels) - 1, int(SPEECH_QUANTILE * len(levels)))]
    noise = levels[int(NOISE_QUANTILE * len(levels))]
    return round(max(speech, FLOOR_DB) - max(noise, FLOOR_DB), 1)


def wake_score(packets: Iterable[bytes]) -> float | None:
    """Score Opus wake audio (16 kHz mono packets); None when none of it decodes or it is too short.

    Runs the decoder: call it off the event loop. Packets that are not Opus are skipped.
    """
    decoder = OpusDecoder()
    pcm = bytearray()
    for packet in packets:
        try:
            pcm += decoder.decode(packet)
        except AudioError:
            continue
    return speech_over_noise(bytes(pcm))
