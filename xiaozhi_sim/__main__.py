"""``python -m xiaozhi_sim --url ws://… --token … --mac …``: a simulated device for any server."""

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from typing import Any

from .device import SimulatedDevice
from .errors import DeviceCrashed
from .mqtt import RECONNECT_INTERVAL
from .mqtt_wire import MqttRefused
from .options import FLAVORS, SimulatorOptions
from .register_client import RegisterClientOptions, RegisterToolsClient
from .voice import UPLINK_RATE, MicEncoder, spoken


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m xiaozhi_sim", description=__doc__)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="WebSocket URL, e.g. ws://127.0.0.1:8123/api/xiaozhi_local/v1/")
    target.add_argument(
        "--ota", help="boot through the OTA URL as the firmware does (pairing code, then the URL and token it gets)"
    )
    parser.add_argument("--language", default="en-US", help="Accept-Language of the OTA request")
    parser.add_argument("--token", default="", help="the device token (empty: no Authorization header)")
    parser.add_argument("--mac", default="cc:ba:97:04:92:94", help="Device-Id (lower-case MAC)")
    parser.add_argument("--client-id", help="Client-Id when the flash (--nvs) holds none yet (default: a new UUID)")
    parser.add_argument(
        "--nvs", metavar="FILE", help="the device's flash: keeps its Client-Id and OTA settings across runs"
    )
    parser.add_argument("--serial-number", help="a factory serial number: OTA activation version 2")
    parser.add_argument("--board", default="bread-compact-wifi", help="board name (serverInfo.name)")
    parser.add_argument("--firmware", default="2.4.2", help="firmware version (serverInfo.version)")
    parser.add_argument("--protocol-version", type=int, choices=(1, 2, 3), default=1)
    parser.add_argument("--camera", action="store_true", help="a camera board (self.camera.take_photo)")
    parser.add_argument("--ir", action="store_true", help="the py-xiaozhi IR tools (self.ir.*)")
    parser.add_argument("--lamp", action="store_true", help="the lamp tools (self.lamp.*)")
    parser.add_argument("--press-to-talk", action="store_true", help="the self.set_press_to_talk tool")
    parser.add_argument("--extra-tools", type=int, default=0, metavar="N", help="N more board tools")
    parser.add_argument(
        "--flavor",
        choices=(*FLAVORS, "register"),
        default="firmware",
        help="which client to be: stock firmware, py-xiaozhi, a browser page, or a mcp/registerTools client",
    )
    parser.add_argument("--reconnect", action="store_true", help="reconnect when the server closes (dev servers)")
    parser.add_argument(
        "--mqtt-reconnect",
        type=float,
        default=RECONNECT_INTERVAL,
        metavar="S",
        help="over MQTT: seconds before reconnecting after a disconnect (the firmware waits 60)",
    )
    parser.add_argument(
        "--type-from",
        metavar="FIFO",
        help="each line written to this named pipe wakes the device and is typed as a question (listen detect)",
    )
    parser.add_argument(
        "--wake-level-db",
        type=float,
        help="the wake word's loudness in its own audio (dBFS; a line 'wake' on --type-from says it)",
    )
    parser.add_argument(
        "--per-conversation",
        action="store_true",
        help="WebSocket as stock firmware uses it: connect only when woken (by --type-from), not at boot",
    )
    parser.add_argument(
        "--download-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds added to each 4 KiB page of a firmware download (0.02: about 200 KB/s, a board on Wi-Fi)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def _print_code(code: str, message: str) -> None:
    print(f"activation code {code}: {message}", flush=True)


ASKING: set[str] = set()
IDLE: set[asyncio.Task[None]] = set()  # "idle again" lines still to print (kept: tasks are weakly held)
"""Devices whose typed question waits for its answer (printed whole by ``type_questions``)."""


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


async def run_register_client(args: argparse.Namespace) -> int:
    """A ``mcp/registerTools`` client: connect, register the demo tools, stay until closed."""
    if not args.url:
        print("--flavor register needs --url and --token", file=sys.stderr)
        return 1
    client = RegisterToolsClient(RegisterClientOptions(url=args.url, token=args.token, mac=args.mac.lower()))
    answer = await client.connect()
    print(f"registered: {answer.get('result') or answer.get('error')}", flush=True)
    await client.wait_closed()
    print("disconnected", flush=True)
    return 0


async def run(args: argparse.Namespace) -> int:
    """Connect and stay until the server closes (or forever with --reconnect)."""
    if args.flavor == "register":
        return await run_register_client(args)
    options = SimulatorOptions(
        url=args.url or "",
        language=args.language,
        token=args.token,
        mac=args.mac.lower(),
        board=args.board,
        firmware_version=args.firmware,
        protocol_version=args.protocol_version,
        camera=args.camera,
        ir=args.ir,
        lamp=args.lamp,
        press_to_talk=args.press_to_talk,
        extra_tools=args.extra_tools,
        flavor=args.flavor,
        serial_number=args.serial_number,
        nvs_path=args.nvs,
        download_delay=args.download_delay,
        wake_level_db=args.wake_level_db,
    )
    if args.client_id:
        options.client_id = args.client_id
    device = SimulatedDevice(options)  # one device: its NVS survives reconnects, as in flash
    print_heard(device)
    if args.per_conversation or (args.type_from and args.ota):
        # Stock firmware on WebSocket connects per conversation (a device switched to WebSocket too).
        return await run_per_conversation(args, device)
    needs_boot = bool(args.ota)
    delay = 1.0
    while True:
        try:
            if needs_boot:
                answer = await device.check_ota(args.ota, on_code=_print_code)
                if "mqtt" in answer:  # the firmware then speaks MQTT+UDP (``InitializeProtocol``)
                    return await run_mqtt(args, options, answer["mqtt"])
                device.use_websocket_settings()
            await device.connect()
        except DeviceCrashed as err:
            print(f"device crashed: {err}", file=sys.stderr)
            return 2
        except Exception as err:  # noqa: BLE001 - report, and maybe retry like a rebooted device
            print(f"connection failed: {type(err).__name__}: {err}", file=sys.stderr)
            if not args.reconnect:
                return 1
            needs_boot = bool(args.ota)  # power-cycle: the OTA check runs again
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            continue
        needs_boot = False
        delay = 1.0
        print(f"connected as {options.mac}, session {device.session_id}", flush=True)
        await device.wait_closed()
        print("disconnected", flush=True)
        if device.rebooted:
            needs_boot = bool(args.ota)
        if not args.reconnect:
            return 0
        await asyncio.sleep(delay)


async def run_per_conversation(args: argparse.Namespace, device: SimulatedDevice) -> int:
    """Boot (OTA), then stay idle without a socket; each typed question opens one, as a wake word does.

    Restarted (told to, or after a firmware upgrade) it boots again: the OTA check, where an
    answer with ``firmware`` is installed, and it is on the version it then runs.
    """
    typing: asyncio.Task[None] | None = None
    try:
        while True:
            device.restarts.clear()
            if args.ota:
                answer = await device.check_ota(args.ota, on_code=_print_code)
                if "mqtt" in answer:
                    break  # told to use MQTT+UDP: that device takes over (and the questions)
                device.use_websocket_settings()
            if typing is None and args.type_from:
                typing = asyncio.create_task(type_questions(device, args.type_from, per_conversation=True))
            version = device.options.firmware_version
            print(f"{device.options.mac} is idle on {version}; it connects when woken", flush=True)
            await device.restarts.wait()
            await asyncio.sleep(0.5)  # (its socket drops first)
            await device.drop()
            print(f"{device.options.mac} restarts", flush=True)
    finally:
        await _stop(typing)
    await device.drop()
    return await run_mqtt(args, device.options, answer["mqtt"])


async def _stop(task: asyncio.Task[None] | None) -> None:
    """End a device's question reader before another device (after a restart) takes the pipe."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


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


async def run_mqtt(args: argparse.Namespace, options: SimulatorOptions, mqtt: dict[str, object]) -> int:
    """Online from boot over MQTT, as the firmware is; reconnects while idle; audio only per conversation."""
    device = SimulatedDevice(options, mqtt, speaks_mqtt=True)
    print_heard(device)
    typing = asyncio.create_task(type_questions(device, args.type_from)) if args.type_from else None
    try:
        code = await _stay_online(args, device)
    finally:
        await _stop(typing)
    if code is None:  # restarted: boots again (the OTA check), as a new device on its flash
        await device.drop()
        return await run(args)
    return code


async def _stay_online(args: argparse.Namespace, device: SimulatedDevice) -> int | None:
    """Online until it ends: its exit code, or None when it restarted."""
    options = device.options
    while True:
        try:
            await device.mqtt.start()
        except MqttRefused as err:
            print(f"MQTT refused: {err}", file=sys.stderr)
            return 1
        except (OSError, RuntimeError) as err:
            print(f"MQTT connection failed: {err}", file=sys.stderr)
            if not args.reconnect:
                return 1
        else:
            print(f"connected as {options.mac} over MQTT (always online)", flush=True)
            await device.mqtt.wait_offline()
            print("disconnected", flush=True)
            if device.rebooted:
                print("rebooting", flush=True)
                return None  # power-cycle: the OTA check runs again
            if not args.reconnect:
                return 0
        await asyncio.sleep(args.mqtt_reconnect)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
