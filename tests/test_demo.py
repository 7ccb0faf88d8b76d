"""The development setup's demo (config/xiaozhi_demo): its voice (espeak-ng, English and Chinese) and its ears."""

from collections.abc import AsyncIterator
import importlib.util
from pathlib import Path
import shutil
from types import ModuleType

import pytest

from custom_components.xiaozhi_local.protocol.wav import WavStream

DEMO = Path(__file__).parent.parent / "config" / "xiaozhi_demo"

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def demo_tts() -> ModuleType:
    spec = importlib.util.spec_from_file_location("xiaozhi_demo_tts", DEMO / "tts.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("text", "language"), [("Turned on the light", "en-US"), ("灯已打开", "zh-CN")])
async def test_the_demo_voice_speaks_wav_the_satellite_plays(text: str, language: str) -> None:
    entity = demo_tts().DemoTTS()
    extension, wav = await entity.async_get_tts_audio(text, language, {})
    assert extension == "wav"
    stream = WavStream()
    pcm = stream.feed(wav)
    assert stream.format is not None
    assert stream.format.is_s16_mono  # played without ffmpeg (resampled in-process)
    assert 0.5 < len(pcm) / 2 / stream.format.sample_rate < 5


def demo_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"xiaozhi_demo_{name}", DEMO / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_demo_ears_hear_speech_as_their_question_and_silence_as_nothing() -> None:
    """What the simulator says after ``wake`` (espeak-ng), in the 10 ms chunks HA hands over."""
    from homeassistant.components import stt

    from xiaozhi_sim.voice import spoken

    ears = demo_module("stt").DemoEars()

    async def chunks(pcm: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(pcm), 320):
            yield pcm[start : start + 320]

    metadata = stt.SpeechMetadata(
        language="en-US",
        format=stt.AudioFormats.WAV,
        codec=stt.AudioCodecs.PCM,
        bit_rate=stt.AudioBitRates.BITRATE_16,
        sample_rate=stt.AudioSampleRates.SAMPLERATE_16000,
        channel=stt.AudioChannels.CHANNEL_MONO,
    )
    heard = await ears.async_process_audio_stream(metadata, chunks(spoken("What time is it?")))
    assert (heard.result, heard.text) == (stt.SpeechResultState.SUCCESS, "What time is it?")
    silence = await ears.async_process_audio_stream(metadata, chunks(bytes(32000)))
    assert silence.result == stt.SpeechResultState.ERROR


def test_the_demo_speaker_plays_a_streamed_wav_for_its_real_length() -> None:
    """Home Assistant's TTS streams its WAV with a header that says "as long as possible"."""
    import struct

    pcm = bytes(16000 * 2 * 3)  # 3 s at 16 kHz, mono, 16-bit
    header = (
        b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    )
    streamed = header + b"data" + struct.pack("<I", 0xFFFFFFFF - 36) + pcm
    assert demo_module("media_player").wav_seconds(streamed) == pytest.approx(3.0)
