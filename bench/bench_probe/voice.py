"""Instant speech-to-text, text-to-speech and conversation agent for the voice load, with timestamps.

They do next to no work, so a turn's latency is Home Assistant's pipeline plus Xiaozhi Local.
Each records ``time.monotonic()`` (system-wide on Linux, so comparable with the bench process):
the STT when the audio stream ended, the agent which device a turn came from, the TTS when it
was asked for speech. The STT numbers the turns; the agent's reply names the device's MAC, so
the TTS can tell whose speech it makes.
"""

from collections.abc import AsyncIterable
from dataclasses import dataclass, field
import os
import re
import time
from typing import Any, Literal

from homeassistant.components import conversation, stt, tts
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr, intent

from .engines import PcmSpeechToText, mp3_of, tone_wav

REPLY_SECONDS = 2.0


@dataclass
class Turn:
    """One voice turn as the providers saw it (monotonic seconds)."""

    stt_end: float
    audio_s: float = 0.0  # seconds of audio the STT got: with its end, how far behind HA's pipeline runs
    mac: str = ""
    agent_at: float = 0.0
    tts_at: float = 0.0


@dataclass
class VoiceLog:
    """What the providers saw, served by the probe."""

    turns: list[Turn] = field(default_factory=list)

    def as_list(self) -> list[dict[str, Any]]:
        return [vars(turn) for turn in self.turns]


class BenchSTT(PcmSpeechToText):
    """Reads the stream to its end and answers ``turn <n>``."""

    _attr_name = "Bench STT"
    _attr_unique_id = "bench_stt"

    def __init__(self, log: VoiceLog) -> None:
        self.log = log

    async def async_process_audio_stream(
        self, metadata: stt.SpeechMetadata, stream: AsyncIterable[bytes]
    ) -> stt.SpeechResult:
        size = 0
        async for chunk in stream:
            size += len(chunk)
        self.log.turns.append(Turn(stt_end=time.monotonic(), audio_s=size / 2 / 16000))
        return stt.SpeechResult(f"turn {len(self.log.turns) - 1}", stt.SpeechResultState.SUCCESS)


TTS_FORMAT = os.environ.get("BENCH_TTS", "wav")
"""``wav`` (22.05 kHz s16, as Piper returns) or ``mp3``: what the bench's engine returns."""


class BenchTTS(tts.TextToSpeechEntity):
    """The same two-second tone for every reply: WAV at 22.05 kHz, or (``BENCH_TTS=mp3``) MP3."""

    _attr_name = "Bench TTS"
    _attr_unique_id = "bench_tts"
    _attr_default_language = "en-US"
    _attr_supported_languages = ["en-US"]  # noqa: RUF012

    def __init__(self, log: VoiceLog) -> None:
        self.log = log
        wav_bytes = tone_wav(REPLY_SECONDS)
        self.audio = (TTS_FORMAT, mp3_of(wav_bytes) if TTS_FORMAT == "mp3" else wav_bytes)

    async def async_get_tts_audio(self, message: str, language: str, options: dict[str, Any]) -> tts.TtsAudioType:
        now = time.monotonic()
        if (found := re.search(r"turn (\d+)", message)) is not None and int(found[1]) < len(self.log.turns):
            self.log.turns[int(found[1])].tts_at = now
        return self.audio


class BenchAgent(conversation.ConversationEntity):
    """Notes the turn's device and answers at once."""

    _attr_name = "Bench agent"
    _attr_unique_id = "bench_agent"

    def __init__(self, log: VoiceLog) -> None:
        self.log = log

    @property
    def supported_languages(self) -> Literal["*"]:
        return "*"

    async def _async_handle_message(
        self, user_input: conversation.ConversationInput, chat_log: conversation.ChatLog
    ) -> conversation.ConversationResult:
        now = time.monotonic()
        found = re.search(r"turn (\d+)", user_input.text)
        if found is not None and int(found[1]) < len(self.log.turns):
            turn = self.log.turns[int(found[1])]
            turn.agent_at = now
            device = dr.async_get(self.hass).async_get(user_input.device_id or "")
            connections = device.connections if isinstance(device, dr.DeviceEntry) else set()
            macs = [value for kind, value in connections if kind == dr.CONNECTION_NETWORK_MAC]
            turn.mac = macs[0] if macs else ""
        response = intent.IntentResponse(language=user_input.language)
        response.async_set_speech(f"Done, {found[0] if found else 'turn'}.")
        return conversation.ConversationResult(response=response, conversation_id=chat_log.conversation_id)


def voice_log(hass: HomeAssistant) -> VoiceLog:
    """The one log of this HA, created on first use."""
    log: VoiceLog = hass.data.setdefault("bench_probe_voice", VoiceLog())
    return log
