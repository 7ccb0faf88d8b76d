"""How near a device was to whoever said the wake word: its wake audio's speech over its own noise.

Each device scores its own recording (the ~2 s of wake word audio the firmware sends before
``listen detect``): the level of its loudest 20 ms frames over the level of its quietest, in dB.
A microphone's gain raises both alike, so it does not decide; the nearer device hears the voice
further above the room's noise.

No recording, however made, scores something special. One that no live microphone makes has no
score (it competes as a device without wake audio, and loses to any that has one): a noise floor
below ``NOISE_FLOOR_DB`` (digital silence, a clip made quieter than a room through a board's
microphone and gain) or clipped samples in more than ``MAX_CLIPPED`` of it. A score is at most
``MAX_SCORE``. A steady tone has no speech over its own level: it scores about 0.
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
NOISE_FLOOR_DB: Final = -70.0
"""The quietest noise floor of a live recording (dBFS): a microphone's own noise times a board's
gain lies above it (the wake audio measured here: -50 dBFS rooms); below is made, not heard."""
MAX_CLIPPED: Final = 0.02
"""The share of samples at full scale past which a recording is a made one (a shout clips a few)."""
NEAR_FULL_SCALE: Final = 32000
"""A sample this loud counts as at full scale (-0.2 dBFS: Opus does not give clipping back exactly)."""
MAX_SCORE: Final = 50.0
"""The highest score (dB): the nearest real wakes measured score 30 to 40."""


def _samples(pcm: bytes) -> array[int]:
    samples = array("h")
    samples.frombytes(pcm[: len(pcm) - len(pcm) % 2])
    if sys.byteorder == "big":
        samples.byteswap()
    return samples


def frame_levels(pcm: bytes) -> list[float]:
    """The level (dBFS) of each whole 20 ms frame of 16-bit mono PCM."""
    samples = _samples(pcm)
    levels = []
    for start in range(0, len(samples) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        energy = sum(s * s for s in samples[start : start + FRAME_SAMPLES]) / FRAME_SAMPLES
        levels.append(10 * math.log10(energy / 32768**2) if energy > 0 else FLOOR_DB)
    return levels


def clipped_share(pcm: bytes) -> float:
    """The share of 16-bit samples at (or within 0.2 dB of) full scale, either sign."""
    samples = _samples(pcm)
    full = sum(1 for sample in samples if sample >= NEAR_FULL_SCALE or sample <= -NEAR_FULL_SCALE)
    return full / len(samples) if samples else 0.0


def speech_over_noise(pcm: bytes) -> float | None:
    """The recording's speech level over its noise floor (dB), at most ``MAX_SCORE``.

    None when it is too short to tell, or no live microphone made it (see the module).
    """
    levels = sorted(frame_levels(pcm))
    if len(levels) < MIN_FRAMES:
        return None
    speech = levels[min(len(levels) - 1, int(SPEECH_QUANTILE * len(levels)))]
    noise = levels[int(NOISE_QUANTILE * len(levels))]
    if noise < NOISE_FLOOR_DB or clipped_share(pcm) > MAX_CLIPPED:
        return None
    return round(min(MAX_SCORE, max(0.0, speech - noise)), 1)


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
