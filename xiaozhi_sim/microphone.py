"""The device's microphone.

Spoken turns (as the firmware streams them, or as the load tester does), typed text and aborts.
Functions of the device: its state stays on it.
"""

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from websockets.exceptions import ConnectionClosed

from .voice import UPLINK_RATE, frame, mic_packets, wake_clip

if TYPE_CHECKING:
    from .device import SimulatedDevice


async def say(
    device: SimulatedDevice,
    pcm: bytes,
    *,
    mode: str = "auto",
    wake_word: str | None = None,
    silence_after: float = 3.0,
    start: bool = True,
    realtime: bool = False,
) -> None:
    """A spoken turn: (``listen detect``), ``listen start``, the microphone's packets, then silence.

    Auto mode keeps streaming silence, as the firmware streams continuously, until the server
    ends the turn (``stt`` or ``tts start``) or ``silence_after`` seconds of it were sent.
    Manual mode sends ``listen stop`` after the speech (push-to-talk released). ``start=False``
    streams into a turn the device already started (after ``tts stop`` in auto mode).
    ``realtime`` sends one packet per frame duration, as a microphone does (else 2 ms apart).
    """
    if device.profile.speaks_like_load_tester:
        await _say_as_load_tester(device, pcm)
        return
    device.listening_mode = mode
    if wake_word is not None and device.options.wake_level_db is not None:
        # The wake word's own audio first, in a burst (``EncodeWakeWordData``, then the queue is sent).
        clip = wake_clip(device.options.wake_level_db, device.options.noise_db)
        for packet in mic_packets(clip, device.frame_ms):
            await device.send_raw(frame(device.options.protocol_version, packet))
    if wake_word is not None:
        await device.send_json(
            {"session_id": device.session_id, "type": "listen", "state": "detect", "text": wake_word}
        )
    if start:
        await device.send_json({"session_id": device.session_id, "type": "listen", "state": "start", "mode": mode})
    device.device_state = "listening"
    marker = len(device.log)
    silence = bytes(int(UPLINK_RATE * 2 * silence_after)) if mode != "manual" else b""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        for index, packet in enumerate(mic_packets(pcm + silence, device.frame_ms)):
            if any(m.get("type") in ("stt", "tts") for m in device.log[marker:]) or device.closed.is_set():
                break  # the server ended the turn (or the conversation)
            await device.send_raw(frame(device.options.protocol_version, packet))
            if realtime:  # on the microphone's clock: a late wake-up does not delay what follows
                await asyncio.sleep(max(0.0, began + (index + 1) * device.frame_ms / 1000 - loop.time()))
            else:  # faster than real time, but never a flood
                await asyncio.sleep(0.002)
        if mode == "manual":
            await device.send_json({"session_id": device.session_id, "type": "listen", "state": "stop"})
            device.device_state = "idle"
    except ConnectionClosed:
        device.device_state = "idle"  # the server closed the socket: the firmware goes idle


async def _say_as_load_tester(device: SimulatedDevice, pcm: bytes) -> None:
    """xiaozhi-concurrent's turn, without ``listen stop``.

    Manual ``listen start``, the speech, then silence frames (at most 100: 6 s of audio) until
    ``stt`` or ``tts start`` arrives.
    """
    device.listening_mode = "manual"
    await device.send_json({"type": "listen", "state": "start", "mode": "manual"})
    device.device_state = "listening"
    marker = len(device.log)
    silence = mic_packets(bytes(UPLINK_RATE * 2 * 60 // 1000), 60)[0]

    def answered() -> bool:
        return any(m.get("type") == "stt" or m.get("state") == "start" for m in device.log[marker:])

    with contextlib.suppress(ConnectionClosed):
        for packet in mic_packets(pcm, 60):
            await device.send_raw(frame(device.options.protocol_version, packet))
            await asyncio.sleep(0.002)
        for _ in range(100):
            if answered() or device.closed.is_set():
                return
            await device.send_raw(frame(device.options.protocol_version, silence))
            await asyncio.sleep(0.002)


async def type_text(device: SimulatedDevice, text: str) -> None:
    """Typed input, as a browser page sends it: ``listen detect`` with the text."""
    await device.send_json(
        {"session_id": device.session_id, "type": "listen", "state": "detect", "mode": "manual", "text": text}
    )


async def abort(device: SimulatedDevice, reason: str | None = None) -> None:
    """Button (no reason) or wake word (``wake_word_detected``) while speaking."""
    msg: dict[str, Any] = {"session_id": device.session_id, "type": "abort"}
    if reason is not None:
        msg["reason"] = reason
    await device.send_json(msg)
