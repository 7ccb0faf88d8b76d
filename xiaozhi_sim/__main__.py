"""``python -m xiaozhi_sim --url ws://… --token … --mac …``: a simulated device for any server."""

import argparse
import asyncio
import logging
import sys

from .device import SimulatedDevice
from .errors import DeviceCrashed
from .mqtt import RECONNECT_INTERVAL
from .mqtt_wire import MqttRefused
from .options import FLAVORS, SimulatorOptions
from .register_client import RegisterClientOptions, RegisterToolsClient
from .terminal import print_heard, type_questions


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
