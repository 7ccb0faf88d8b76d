"""The development setup's demo voice (config/xiaozhi_demo): espeak-ng, local, English and Chinese."""

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
