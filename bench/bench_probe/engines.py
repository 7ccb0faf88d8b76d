"""Speech engines' common parts, for the tests' engines and the bench probe's alike.

The probe is copied into the bench's Home Assistant as a custom component, so what both use
lives here, inside it; the tests import it from the repository.
"""

from array import array
import io
import math
import subprocess
import wave

from homeassistant.components import stt


class PcmSpeechToText(stt.SpeechToTextEntity):
    """An STT engine that takes what Assist satellites send: 16 kHz, 16-bit mono PCM in WAV."""

    @property
    def supported_languages(self) -> list[str]:
        return ["en-US"]

    @property
    def supported_formats(self) -> list[stt.AudioFormats]:
        return [stt.AudioFormats.WAV]

    @property
    def supported_codecs(self) -> list[stt.AudioCodecs]:
        return [stt.AudioCodecs.PCM]

    @property
    def supported_bit_rates(self) -> list[stt.AudioBitRates]:
        return [stt.AudioBitRates.BITRATE_16]

    @property
    def supported_sample_rates(self) -> list[stt.AudioSampleRates]:
        return [stt.AudioSampleRates.SAMPLERATE_16000]

    @property
    def supported_channels(self) -> list[stt.AudioChannels]:
        return [stt.AudioChannels.CHANNEL_MONO]


def wav_of(samples: array[int], rate: int) -> bytes:
    """s16 mono samples as a WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return out.getvalue()


def tone_wav(seconds: float, rate: int = 22050) -> bytes:
    """A 440 Hz tone as WAV at 22.05 kHz, as Piper returns speech (speech-like enough for Opus)."""
    return wav_of(
        array("h", (int(9000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(int(seconds * rate)))), rate
    )


def mp3_of(wav_bytes: bytes) -> bytes:
    """The same audio as MP3 (ffmpeg's libmp3lame), as cloud engines return it."""
    done = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "wav", "-i", "pipe:", "-f", "mp3", "pipe:"],
        input=wav_bytes,
        capture_output=True,
        check=True,
    )
    return done.stdout
