"""Speech-to-text, text-to-speech and a conversation agent for tests, registered like real ones.

The STT really listens: it measures how much speech (loud enough PCM) reached it and puts that
in the transcript, so a test proves the device's audio went through Opus and the decoder.
The TTS answers a WAV tone whose length follows the text; HA converts it with real ffmpeg.
"""

from array import array
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal
import wave

from homeassistant.components import conversation, stt, tts
from homeassistant.components.assist_pipeline import async_get_pipeline, async_update_pipeline
from homeassistant.components.tts import TTSAudioRequest, TTSAudioResponse
from homeassistant.core import HomeAssistant
from homeassistant.helpers import intent, llm

from bench.bench_probe.engines import PcmSpeechToText, mp3_of, tone_wav

from .integrations import async_setup_test_integration

FIXTURES = Path(__file__).parent / "fixtures"
TEST_DOMAIN = "voicetest"


def speech_pcm() -> bytes:
    """3 s of real speech (espeak-ng), 16 kHz s16 mono."""
    with wave.open(str(FIXTURES / "speech_16k.wav")) as wav:
        return bytes(wav.readframes(wav.getnframes()))


def loud_seconds(pcm: bytes, rate: int = 16000) -> float:
    """Seconds of 10 ms blocks whose mean amplitude is clearly above silence."""
    samples = array("h", pcm[: len(pcm) - len(pcm) % 2])
    block = rate // 100
    loud = sum(
        1 for i in range(0, len(samples) - block, block) if sum(abs(s) for s in samples[i : i + block]) / block > 500
    )
    return loud / 100


def speech_seconds(text: str) -> float:
    """How long the test TTS speaks a text."""
    return round(0.5 + 0.05 * len(text), 2)


class TestSTT(PcmSpeechToText):
    """Hears what it was given."""

    _attr_name = "Test STT"
    _attr_unique_id = "test_stt"

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.text: str | None = None  # what it hears in any speech; None: "heard N seconds"

    async def async_process_audio_stream(
        self, metadata: stt.SpeechMetadata, stream: AsyncIterable[bytes]
    ) -> stt.SpeechResult:
        pcm = b"".join([chunk async for chunk in stream])
        self.received.append(pcm)
        heard = loud_seconds(pcm)
        if heard < 0.3:
            return stt.SpeechResult(None, stt.SpeechResultState.ERROR)
        return stt.SpeechResult(self.text or f"heard {heard:.1f} seconds", stt.SpeechResultState.SUCCESS)


class TestTTS(tts.TextToSpeechEntity):
    """Speaks a tone as long as the text needs: WAV at 22.05 kHz as Piper does, or (``mp3``) MP3."""

    _attr_name = "Test TTS"
    _attr_unique_id = "test_tts"
    _attr_default_language = "en-US"
    _attr_supported_languages = ["en-US"]  # noqa: RUF012

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.mp3 = False

    def _audio(self, text: str) -> tuple[str, bytes]:
        wav_bytes = tone_wav(speech_seconds(text))
        return ("mp3", mp3_of(wav_bytes)) if self.mp3 else ("wav", wav_bytes)

    async def async_get_tts_audio(self, message: str, language: str, options: dict[str, Any]) -> tts.TtsAudioType:
        self.messages.append(message)
        return self._audio(message)

    async def async_stream_tts_audio(self, request: TTSAudioRequest) -> TTSAudioResponse:
        async def audio() -> AsyncGenerator[bytes]:
            text = "".join([chunk async for chunk in request.message_gen])
            self.messages.append(text)
            _extension, data = self._audio(text)
            for start in range(0, len(data), 4096):  # in pieces, as a streaming engine sends
                yield data[start : start + 4096]

        return TTSAudioResponse("mp3" if self.mp3 else "wav", audio())


class TestAgent(conversation.ConversationEntity):
    """Answers with a fixed reply; can ask to continue, stream, or fail."""

    _attr_name = "Test agent"
    _attr_unique_id = "test_agent"
    _attr_supported_features = conversation.ConversationEntityFeature.CONTROL

    def __init__(self) -> None:
        self.inputs: list[conversation.ConversationInput] = []
        self.reply = "The kitchen light is on. Anything else?"
        self.continue_conversation = False
        self.fail = False
        self.tool_plan: list[tuple[str, dict[str, Any]]] = []  # tools to call, as an LLM would
        self.tool_results: list[Any] = []
        self.tool_names: list[str] = []  # what the Assist API offered
        self.thinking: str | None = None  # reasoning to stream before the reply (streaming only)
        self.action: Callable[[conversation.ConversationInput], Awaitable[None]] | None = None  # as a tool does

    @property
    def supported_languages(self) -> Literal["*"]:
        return "*"

    async def _async_handle_message(
        self, user_input: conversation.ConversationInput, chat_log: conversation.ChatLog
    ) -> conversation.ConversationResult:
        self.inputs.append(user_input)
        if self.fail:
            raise ValueError("the agent broke")
        if self.action is not None:
            await self.action(user_input)
        if self.tool_plan:
            await chat_log.async_provide_llm_data(user_input.as_llm_context(TEST_DOMAIN), llm.LLM_API_ASSIST)
            assert chat_log.llm_api is not None
            self.tool_names = [tool.name for tool in chat_log.llm_api.tools]
            for name, args in self.tool_plan:
                self.tool_results.append(await chat_log.llm_api.async_call_tool(llm.ToolInput(name, args)))
        if self._attr_supports_streaming:

            async def deltas() -> AsyncGenerator[conversation.AssistantContentDeltaDict]:
                yield {"role": "assistant"}
                if self.thinking:
                    yield {"thinking_content": self.thinking}
                for word in self.reply.split(" "):
                    yield {"content": word + " "}

            async for _ in chat_log.async_add_delta_content_stream(self.entity_id, deltas()):
                pass
        response = intent.IntentResponse(language=user_input.language)
        response.async_set_speech(self.reply)
        return conversation.ConversationResult(
            response=response,
            conversation_id=chat_log.conversation_id,
            continue_conversation=self.continue_conversation,
        )


class Voice:
    """The three providers, set up as the pipeline's engines."""

    def __init__(self) -> None:
        self.stt = TestSTT()
        self.tts = TestTTS()
        self.agent = TestAgent()

    async def async_setup(self, hass: HomeAssistant) -> None:
        """Register them under a test domain (call before the integration is set up)."""

        await async_setup_test_integration(
            hass, TEST_DOMAIN, {"stt": [self.stt], "tts": [self.tts], "conversation": [self.agent]}
        )

    async def async_use(self, hass: HomeAssistant) -> None:
        """Make them the preferred pipeline's engines (after assist_pipeline is set up)."""
        await async_update_pipeline(
            hass,
            async_get_pipeline(hass),
            stt_engine=self.stt.entity_id,
            stt_language="en-US",
            tts_engine=self.tts.entity_id,
            tts_language="en-US",
            tts_voice=None,
            conversation_engine=self.agent.entity_id,
            conversation_language="en",
            language="en",
        )
