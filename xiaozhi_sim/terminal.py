"""The demo's terminal (``script/develop``): what a typed line makes a device do, and what it prints."""

import asyncio
import contextlib
import os
from typing import Any

from .device import SimulatedDevice
from .voice import UPLINK_RATE, MicEncoder, spoken

ASKING: set[str] = set()
"""Devices whose typed question waits for its answer (printed whole by ``type_questions``)."""
IDLE: set[asyncio.Task[None]] = set()
""""Idle again" lines still to print (kept here: the loop holds tasks weakly)."""


def print_heard(device: SimulatedDevice) -> None:
    """Say in the terminal what Home Assistant makes the device show or say unasked.

    Announcements, timers and alerts: what a user of ``script/develop`` would otherwise hear
    nothing of (the answers to typed questions are printed by ``type_questions``).
    """
    mac = device.options.mac

    def heard(msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "alert":
            print(f"{mac} shows an alert: {msg.get('status')}: {msg.get('message')}", flush=True)
        elif kind == "notify":
            text = " ".join(str(s.get("text", "")) for s in msg.get("subtitles") or () if isinstance(s, dict))
            print(f'{mac} plays an announcement: "{text}"', flush=True)
        elif kind == "tts" and msg.get("state") == "sentence_start" and mac not in ASKING:
            print(f'{mac} says: "{msg.get("text")}"', flush=True)
        elif kind == "system" and msg.get("command") == "reboot":
            print(f"{mac} is told to restart", flush=True)

    device.on_message = heard


async def _wake(device: SimulatedDevice) -> None:
    """The wake word: open the conversation channel, as the firmware does, if it is not open."""
    if device.link is device.mqtt:
        if not device.mqtt.audio_channel_open:
            await device.connect()  # hello v3, the UDP channel
            # Woken, the firmware streams its microphone at once: its first datagram is what
            # tells Home Assistant where the answer's audio goes.
            for packet in MicEncoder(device.frame_ms).packets(bytes(UPLINK_RATE * 2 * device.frame_ms // 1000 * 3)):
                device.mqtt.udp.send_datagram(packet)
    elif not device.is_connected:
        await device.connect()  # a WebSocket per conversation
        print(f"connected as {device.options.mac}, session {device.session_id}", flush=True)


async def type_questions(device: SimulatedDevice, path: str, *, per_conversation: bool = False) -> None:
    """Each line of the pipe: wake, type it (``listen detect``), print what is heard back.

    ``wake`` says the wake word (its audio at ``--wake-level-db``) and a question, as a voice does.
    """
    # Opened for reading and writing: never blocks, and never sees end-of-file between writers.
    pipe = os.fdopen(os.open(path, os.O_RDWR | os.O_NONBLOCK), "rb", buffering=0)
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), pipe
    )
    try:
        await _answer_questions(device, reader, per_conversation=per_conversation)
    finally:
        transport.close()  # a restarted device opens it anew


async def _answer_questions(device: SimulatedDevice, reader: asyncio.StreamReader, *, per_conversation: bool) -> None:
    while True:
        line = (await reader.readline()).decode(errors="replace").strip()
        if not line:
            continue
        try:
            if line == "wake" and device.is_connected:
                # The firmware hears its wake word only when idle (listening, it takes what it hears as
                # the open conversation's next words): the demo's word is said to idle devices, as if
                # each conversation still open had been ended by its button.
                await device.link.close_audio_channel()
            await _wake(device)
            marker, heard = len(device.log), len(device.speaker_pcm)
            # After the answer it listens on, as the firmware does in auto mode, until Home Assistant
            # ends the conversation (silence): goodbye over MQTT, the socket closed over WebSocket.
            device.relisten = True
            ASKING.add(device.options.mac)
            if line == "wake":
                await device.say(  # the wake word it has (a MultiNet or WakeNet pack chosen in HA)
                    await asyncio.to_thread(spoken, "What time is it?"),
                    wake_word=device.wake_word or "你好小智",
                    silence_after=1.0,
                )
                if not await _answered_or_ended(device, marker):
                    print(f"{device.options.mac}: another device answers; idle again", flush=True)
                    continue
            else:
                await device.type_text(line)
                await device.wait_message(
                    lambda m: m.get("type") == "tts" and m.get("state") == "stop", 60, after=marker
                )
        except Exception as err:  # noqa: BLE001 - say so, and take the next line
            print(f"no answer: {type(err).__name__}: {err}", flush=True)
            continue
        finally:
            ASKING.discard(device.options.mac)
        said = " ".join(m["text"] for m in device.log[marker:] if m.get("state") == "sentence_start")
        seconds = (len(device.speaker_pcm) - heard) / 2 / 24000
        print(f'you typed: "{line}"; Home Assistant said: "{said}" ({seconds:.1f} s of speech)', flush=True)
        if per_conversation:  # Home Assistant ends the conversation: the socket closes, it is idle
            IDLE.add(asyncio.create_task(_say_idle(device)))  # the next line is read meanwhile


async def _say_idle(device: SimulatedDevice) -> None:
    """Once the conversation is over (Home Assistant ended it, or the next ``wake`` did)."""
    try:
        await device.wait_closed()
        print(f"{device.options.mac} is idle again (disconnected)", flush=True)
    finally:
        IDLE.discard(asyncio.current_task())


async def _answered_or_ended(device: SimulatedDevice, marker: int) -> bool:
    """Until the answer has played (True), or the conversation was ended without one (False)."""
    async with asyncio.timeout(60):
        while True:
            if any(m.get("type") == "tts" and m.get("state") == "stop" for m in device.log[marker:]):
                return True
            if not device.is_connected:
                return False
            device.logged.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):  # the channel's end is no message
                    await device.logged.wait()
