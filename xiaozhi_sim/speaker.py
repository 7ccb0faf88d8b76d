"""The device's speaker.

Downlink audio through the firmware's decode queue, ``tts`` states, and firmware 2.5's
``notify`` (an Ogg Opus URL fetched and played while idle). Functions of the device: its state
stays on it.
"""

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import av.error
from websockets.exceptions import ConnectionClosed

from .mcp_server import is_v25
from .voice import SpeakerDecoder, decode_ogg_opus, unframe

if TYPE_CHECKING:
    from .device import SimulatedDevice

_LOGGER = logging.getLogger(__name__)


def on_audio(device: SimulatedDevice, data: bytes) -> None:
    """One downlink Opus packet, as the firmware's decode queue takes it."""
    if device.device_state != "speaking" and not device.profile.plays_in_any_state:
        device.dropped_audio += 1  # "Binary audio is accepted only in the speaking state"
        return  # (py-xiaozhi plays whatever arrives, in any state)
    # The decode queue: 40 packets on 2.4, 20 on 2.5, played at real time; a full queue drops.
    now = time.monotonic()
    if device.playing_since is None or device.queued - _played(device, now) <= 0:
        device.playing_since, device.queued = now, 0  # the speaker caught up: playback restarts
    if device.queued - _played(device, now) >= device.decode_queue:
        device.queue_dropped += 1
        return
    device.queued += 1
    packet = unframe(device.options.protocol_version, data)
    device.audio.append(packet)
    device.audio_at.append(time.monotonic())
    device.logged.set()  # wakes wait_audio as well
    if device.decoder is not None:
        with contextlib.suppress(av.error.FFmpegError):  # logged and dropped by the firmware
            device.speaker_pcm += device.decoder.decode(packet)


def _played(device: SimulatedDevice, now: float) -> int:
    """Packets the speaker has played since playback (re)started (60 ms each)."""
    assert device.playing_since is not None
    return int((now - device.playing_since) / 0.06)


async def on_tts(device: SimulatedDevice, msg: dict[str, Any]) -> None:
    """``tts`` start (speaking: the decode queue starts empty) and stop (listen again, or idle)."""
    state = msg.get("state")
    keeps_listening = device.profile.listens_while_speaking
    if state == "start":
        # py-xiaozhi in realtime mode keeps listening while it plays the answer (its AEC).
        device.device_state = "listening" if keeps_listening and device.listening_mode == "realtime" else "speaking"
        rate = ((device.server_hello or {}).get("audio_params") or {}).get("sample_rate", 24000)
        # the decoder queue is reset on entering speaking
        device.decoder = SpeakerDecoder(int(rate)) if device.options.decode_speaker else None
        device.playing_since, device.queued = None, 0
    elif state == "stop" and (device.device_state == "speaking" or keeps_listening):
        if device.listening_mode == "manual":
            device.device_state = "idle"
        else:
            device.device_state = "listening"
            if device.listening_mode == "auto" and device.relisten:
                with contextlib.suppress(ConnectionClosed, ConnectionError):  # closed right after
                    await device.send_json(
                        {"session_id": device.session_id, "type": "listen", "state": "start", "mode": "auto"}
                    )


def on_notify(device: SimulatedDevice, msg: dict[str, Any]) -> None:
    """Firmware 2.5: while idle, fetch ``audio_url`` (mono Ogg Opus, no redirects) and play it."""
    url = msg.get("audio_url")
    if not is_v25(device.options.firmware_version) or device.device_state != "idle" or not isinstance(url, str):
        return  # older firmware: "Unknown message type"; busy: ignored
    device.notify_tasks.append(asyncio.create_task(_play_notify(device, url)))


async def _play_notify(device: SimulatedDevice, url: str) -> None:
    device.device_state = "notifying"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, allow_redirects=False) as response,
        ):
            device.notify_status.append(response.status)
            if response.status == 200:
                device.notify_pcm += decode_ogg_opus(await response.read())
    except aiohttp.ClientError as err:  # the stream was cut: the firmware stops playing
        _LOGGER.debug("notify stream ended: %s", err)
    finally:
        if device.device_state == "notifying":
            device.device_state = "idle"
