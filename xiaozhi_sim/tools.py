"""The tools stock firmware registers, with their real schemas and return texts (§10)."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
import json
from typing import Any

from .mcp_server import McpServer, Property, Tool, ToolError, ToolValue


@dataclass
class DeviceState:
    """What ``self.get_device_status`` reports, changed by the setters."""

    volume: int = 70
    brightness: int = 80
    theme: str = "light"
    battery_level: int = 85
    charging: bool = False
    ssid: str = "MyWiFi"
    rssi: int = -55
    chip_temperature: float = 41.5
    lamp_on: bool = False
    ir_codes: dict[str, str] = field(default_factory=lambda: {"tv_power": "20DF10EF", "ac_off": "8808440C"})

    def status(self) -> dict[str, Any]:
        """The status JSON, keys in the firmware's order."""
        signal = "strong" if self.rssi >= -60 else "medium" if self.rssi >= -70 else "weak"
        return {
            "audio_speaker": {"volume": self.volume},
            "screen": {"brightness": self.brightness, "theme": self.theme},
            "battery": {"level": self.battery_level, "charging": self.charging},
            "network": {"type": "wifi", "ssid": self.ssid, "signal": signal},
            "chip": {"temperature": self.chip_temperature},
        }


def _const(value: ToolValue) -> Any:
    async def callback(_args: dict[str, Any]) -> ToolValue:
        return value

    return callback


def add_common_tools(
    server: McpServer, state: DeviceState, system_info: dict[str, Any], *, camera: bool, identify_uploads: bool = True
) -> None:
    """``AddCommonTools``: the AI-visible tools every board has."""

    async def get_status(_args: dict[str, Any]) -> ToolValue:
        return state.status()

    async def set_volume(args: dict[str, Any]) -> ToolValue:
        state.volume = args["volume"]
        return True

    async def set_brightness(args: dict[str, Any]) -> ToolValue:
        state.brightness = args["brightness"]
        return True

    async def set_theme(args: dict[str, Any]) -> ToolValue:
        if args["theme"] not in ("light", "dark"):
            return False
        state.theme = args["theme"]
        return True

    server.add_tool(
        Tool(
            "self.get_device_status",
            "Provides the real-time information of the device, including the current status of the audio speaker, "
            "screen, battery, network, etc.\nUse this tool for: \n1. Answering questions about current condition "
            "(e.g. what is the current volume of the audio speaker?)\n2. As the first step to control the device "
            "(e.g. turn up / down the volume of the audio speaker, etc.)",
            [],
            get_status,
        )
    )
    server.add_tool(
        Tool(
            "self.audio_speaker.set_volume",
            "Set the volume of the audio speaker. If the current volume is unknown, you must call "
            "`self.get_device_status` tool first and then call this tool.",
            [Property("volume", "integer", minimum=0, maximum=100)],
            set_volume,
        )
    )
    server.add_tool(
        Tool(
            "self.screen.set_brightness",
            "Set the brightness of the screen.",
            [Property("brightness", "integer", minimum=0, maximum=100)],
            set_brightness,
        )
    )
    server.add_tool(
        Tool(
            "self.screen.set_theme",
            "Set the theme of the screen. The theme can be `light` or `dark`.",
            [Property("theme", "string")],
            set_theme,
        )
    )
    if camera:

        async def take_photo(args: dict[str, Any]) -> ToolValue:
            if not server.vision_url or server.vision_token is None:
                raise ToolError("Image explain URL or token is not set")
            from .camera import upload_photo  # noqa: PLC0415  (aiohttp only when a camera is used)

            return await upload_photo(server, system_info, args["question"], identify=identify_uploads)

        server.add_tool(
            Tool(
                "self.camera.take_photo",
                "Take a photo and explain it. Use this tool after the user asks you to see something.\n"
                "Args:\n  `question`: The question that you want to ask about the photo.\n"
                "Return:\n  A JSON object that provides the photo information.",
                [Property("question", "string")],
                take_photo,
            )
        )


def add_lamp_tools(server: McpServer, state: DeviceState) -> None:
    """``LampController`` (some boards)."""

    async def get_state(_args: dict[str, Any]) -> ToolValue:
        return {"power": state.lamp_on}

    async def turn_on(_args: dict[str, Any]) -> ToolValue:
        state.lamp_on = True
        return True

    async def turn_off(_args: dict[str, Any]) -> ToolValue:
        state.lamp_on = False
        return True

    server.add_tool(Tool("self.lamp.get_state", "Get the power state of the lamp", [], get_state))
    server.add_tool(Tool("self.lamp.turn_on", "Turn on the lamp", [], turn_on))
    server.add_tool(Tool("self.lamp.turn_off", "Turn off the lamp", [], turn_off))


def add_press_to_talk_tool(server: McpServer) -> None:
    """``press_to_talk_mcp_tool.cc``: an AI-visible tool that refuses modes it does not know."""

    async def set_mode(args: dict[str, Any]) -> ToolValue:
        if args["mode"] not in ("press_to_talk", "click_to_talk"):
            raise ToolError(f"Invalid mode: {args['mode']}")
        return True

    server.add_tool(
        Tool(
            "self.set_press_to_talk",
            "Switch between press to talk mode (长按说话) and click to talk mode (单击说话).\n"
            "The mode can be `press_to_talk` or `click_to_talk`.",
            [Property("mode", "string")],
            set_mode,
        )
    )


def add_py_xiaozhi_volume_tools(server: McpServer, state: DeviceState) -> None:
    """py-xiaozhi's volume tools (``src/mcp/tools/volume/register.py``): no status object, a bare integer."""

    async def set_volume(args: dict[str, Any]) -> ToolValue:
        state.volume = args["volume"]
        return True

    async def get_volume(_args: dict[str, Any]) -> ToolValue:
        return state.volume

    async def get_volume_status(_args: dict[str, Any]) -> ToolValue:
        return {"volume": state.volume, "muted": state.volume == 0, "available": True}

    server.add_tool(
        Tool(
            "self.audio_speaker.set_volume",
            "Set the system speaker volume to an absolute value (0-100).",
            [Property("volume", "integer", minimum=0, maximum=100)],
            set_volume,
        )
    )
    server.add_tool(
        Tool("self.audio_speaker.get_volume", "Get the current system speaker volume level.", [], get_volume)
    )
    server.add_tool(
        Tool("self.audio_speaker.get_volume_status", "Get detailed speaker volume status.", [], get_volume_status)
    )


SDK_NAMES = {
    "self.get_device_status": "get_device_status",
    "self.audio_speaker.set_volume": "set_volume",
    "self.screen.set_brightness": "set_brightness",
    "self.screen.set_theme": "set_theme",
    "self.camera.take_photo": "take_photo",
}
"""xiaozhi-sdk names its built-in tools without ``self.`` (``xiaozhi_sdk/utils/mcp_tool.py``)."""


def rename_for_sdk(server: McpServer) -> None:
    """The firmware's tools under xiaozhi-sdk's names."""
    for tool in server.tools:
        tool.name = SDK_NAMES.get(tool.name, tool.name)


def add_ir_tools(server: McpServer, state: DeviceState) -> None:
    """The py-xiaozhi IR tools (seeds/002): failures come back as ``isError`` results."""

    async def list_codes(_args: dict[str, Any]) -> ToolValue:
        return {"codes": sorted(state.ir_codes)}

    async def send_named(args: dict[str, Any]) -> ToolValue:
        if args["name"] not in state.ir_codes:
            raise ToolError(f"未找到红外编码: {args['name']}")
        return "发送成功（无回复）"

    async def send_hex(args: dict[str, Any]) -> ToolValue:
        try:
            bytes.fromhex(args["hex"])
        except ValueError:
            raise ToolError(f"无效的十六进制字符串: {args['hex']}") from None
        return "发送成功（无回复）"

    async def learn_external(args: dict[str, Any]) -> ToolValue:
        raise ToolError("无法打开串口 /dev/ttyS1: Permission denied")

    for tool in (
        Tool("self.ir.list_codes", "列出已保存的红外编码", [], list_codes),
        Tool("self.ir.send_named", "发送已保存的红外编码", [Property("name", "string")], send_named),
        Tool("self.ir.send_hex", "发送十六进制红外编码", [Property("hex", "string")], send_hex),
        Tool("self.ir.learn_external", "学习外部遥控器的红外编码并保存", [Property("name", "string")], learn_external),
    ):
        tool.errors_as_results = True
        server.add_tool(tool)


def add_extra_tools(server: McpServer, count: int) -> None:
    """``count`` board-style tools, for large lists and load tests."""
    for index in range(count):
        server.add_tool(
            Tool(
                f"self.extra.tool_{index:03d}",
                f"Extra tool number {index}. Moves the board's accessory {index} to the given position; "
                "call self.get_device_status first to learn where it is now.",
                [
                    Property("position", "integer", default=0, minimum=0, maximum=100),
                    Property("fast", "boolean", default=False),
                ],
                _const(True),
            )
        )


def add_user_only_tools(
    server: McpServer,
    system_info: dict[str, Any],
    reboot: Callable[[], None],
    upgrade: Callable[[str], Awaitable[bool]],
    set_assets_url: Callable[[str], None] = lambda _url: None,
) -> None:
    """``AddUserOnlyTools``: listed only with ``withUserTools``; annotated ``audience: ["user"]``."""

    async def do_set_assets_url(args: dict[str, Any]) -> ToolValue:
        set_assets_url(str(args["url"]))  # NVS assets/download_url: fetched at the next boot
        return True

    async def do_reboot(_args: dict[str, Any]) -> ToolValue:
        reboot()
        return True

    async def do_upgrade(args: dict[str, Any]) -> ToolValue:
        # ``app.Schedule(UpgradeFirmware(url))``, then ``return true``: the reply is sent through the
        # same main task, after the upgrade. On success the device reboots first: no reply at all.
        if await upgrade(str(args["url"])):
            await asyncio.Event().wait()
        return True

    url_description = "The URL of the firmware binary file to download and install"
    for tool in (
        Tool("self.get_system_info", "Get the system information", [], _const(system_info)),
        Tool("self.reboot", "Reboot the system", [], do_reboot),
        Tool(
            "self.upgrade_firmware",
            "Upgrade firmware from a specific URL. "
            "This will download and install the firmware, then reboot the device.",
            # The firmware bug: the description text is the default, so url is not required.
            [Property("url", "string", default=url_description)],
            do_upgrade,
        ),
        Tool(
            "self.screen.get_info",
            "Information about the screen, including width, height, etc.",
            [],
            _const({"width": 240, "height": 240, "monochrome": False}),
        ),
        Tool(
            "self.assets.set_download_url",
            "Set the download url for the assets",
            [Property("url", "string")],
            do_set_assets_url,
        ),
    ):
        tool.user_only = True
        server.add_tool(tool)


APP_PARTITION = 0x3F0000
"""Each app slot of the firmware's 16 MB layout (``partitions/v2/16m.csv``)."""


def partition_table(app_size: int = APP_PARTITION, assets_size: int = 0x800000) -> list[dict[str, Any]]:
    """``Board::GetSystemInfoJson``'s ``partition_table``: the firmware's 16 MB layout (two app slots)."""
    rows = [
        ("nvs", 1, 2, 0x9000, 0x4000),
        ("otadata", 1, 0, 0xD000, 0x2000),
        ("phy_init", 1, 1, 0xF000, 0x1000),
        ("ota_0", 0, 0x10, 0x20000, app_size),
        ("ota_1", 0, 0x11, 0x20000 + app_size, app_size),
        ("assets", 1, 0x82, 0x800000, assets_size),
    ]
    return [
        {"label": label, "type": kind, "subtype": subtype, "address": address, "size": size}
        for label, kind, subtype, address, size in rows
    ]


def system_info(
    mac: str,
    uuid: str,
    board: str,
    version: str,
    chip: str = "esp32s3",
    *,
    app_size: int = APP_PARTITION,
    assets_size: int = 0x800000,
) -> dict[str, Any]:
    """The OTA body / ``self.get_system_info`` JSON (abridged, real keys)."""
    return {
        "version": 2,
        "language": "en-US",
        "flash_size": 16777216,
        "minimum_free_heap_size": "8288524",
        "mac_address": mac,
        "uuid": uuid,
        "chip_model_name": chip,
        "chip_info": {"model": 9, "cores": 2, "revision": 2, "features": 18},
        "application": {
            "name": "xiaozhi",
            "version": version,
            "compile_time": "Aug 20 2026T10:00:00Z",
            "idf_version": "v6.0",
            "elf_sha256": "0" * 64,
        },
        "partition_table": partition_table(app_size, assets_size),
        "ota": {"label": "ota_0"},
        "display": {"monochrome": False, "width": 240, "height": 240},
        "board": {
            "type": board,
            "name": board,
            "manufacturer": "",
            "ssid": "MyWiFi",
            "rssi": -55,
            "channel": 6,
            "ip": "192.168.1.50",
            "mac": mac,
        },
    }


def dumps(obj: Any) -> str:
    """Compact JSON as the firmware writes it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
