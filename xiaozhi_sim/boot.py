"""What the device does at boot and when it installs.

The OTA check, the assets partition, an upgrade, and the power cycle after ``esp_restart``
(``Application::CheckNewVersion``, ``CheckAssetsVersion``, ``UpgradeFirmware``). Functions of
the device: its state stays on it.
"""

import asyncio
from collections.abc import Callable
import logging
from typing import TYPE_CHECKING, Any

import aiohttp

from .assets import AssetsFailed
from .firmware import FlashedImage, UpgradeFailed, download_and_flash, firmware_offer
from .mcp_server import is_v25
from .ota import OtaClient, OtaTiming

if TYPE_CHECKING:
    from .device import SimulatedDevice

_LOGGER = logging.getLogger(__name__)


async def check_ota(
    device: SimulatedDevice,
    ota_url: str,
    timing: OtaTiming | None = None,
    on_code: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """The boot-time OTA check (with activation); what it answered last is stored in NVS.

    ``CheckNewVersion``: an answer whose ``firmware`` is newer (or ``force`` 1) is installed
    at once; after a successful flash the device restarts, so the check runs again with the
    new version. A failed upgrade lets the boot go on with the old one.
    """
    await check_assets(device)
    while True:
        client = OtaClient(device, ota_url, timing, on_code)
        device.ota = client
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            answer = await client.run(session)
        offer = firmware_offer(answer, device.options.firmware_version)
        if offer is None or not await install(device, offer.url, offer.version, rebooting=False):
            device.boots += 1
            device.booted.set()
            return answer


async def check_assets(device: SimulatedDevice) -> None:
    """At boot, before the OTA check: a stored download URL is erased, then fetched and applied."""
    url = device.nvs.get("assets", {}).pop("download_url", None)
    if not isinstance(url, str) or not url:
        return
    device.save_nvs()
    device.device_state = "upgrading"
    try:
        await device.assets.download(url)
    except AssetsFailed as err:
        _LOGGER.warning("Assets download failed: %s", err)
    device.device_state = "idle"


async def install(device: SimulatedDevice, url: str, version: str, *, rebooting: bool) -> bool:
    """``UpgradeFirmware``: close the audio channel, wait, download, flash; True when it runs it."""
    record: dict[str, Any] = {"url": url, "version": version, "read": 0, "size": 0, "result": None}
    device.upgrades.append(record)
    device.upgrade_started.set()
    device.upgraded.clear()
    await device.link.close_audio_channel()
    await asyncio.sleep(device.options.upgrade_delay)
    if device.device_state != "listening":  # the state machine refuses listening → upgrading
        device.device_state = "upgrading"  # ... and nothing resets it if the upgrade fails

    def progress(read: int, size: int) -> None:
        record["read"], record["size"] = read, size

    try:
        flashed = await download_and_flash(
            url,
            device.options.chip,
            on_progress=progress,
            fail_flash=device.options.fail_flash,
            partition=device.options.app_partition,
            read_delay=device.options.download_delay,
            frozen=device.power_cut,
        )
    except UpgradeFailed as err:
        _LOGGER.warning("Firmware upgrade failed: %s", err)
        record["result"] = str(err)
        device.upgraded.set()
        return False
    record["result"] = "ok"
    _run_image(device, flashed)
    device.upgraded.set()
    if rebooting:
        device.schedule_reboot()
    return True


def _run_image(device: SimulatedDevice, flashed: FlashedImage) -> None:
    """The new image boots: its version is the one reported from now on (kept in "flash")."""
    version = flashed.version
    device.options.firmware_version = version
    device.system_info["application"]["version"] = version
    device.mcp.firmware_version = version
    device.decode_queue = 20 if is_v25(version) else 40
    device.nvs.setdefault("ota", {})["running"] = version
    device.save_nvs()
    device.device_state = "idle"


async def stop_power_cycle(device: SimulatedDevice) -> None:
    """Switched off for good (the test's end): a reboot under way does not boot it again."""
    cycle = device.power_cycle
    if cycle is not None and cycle is not asyncio.current_task() and not cycle.done():
        cycle.cancel()
        await asyncio.gather(cycle, return_exceptions=True)


def restart_later(device: SimulatedDevice) -> None:
    """With ``reboots``: power off, then boot again by itself (as ``esp_restart`` does)."""
    if not device.options.reboots or device.boot_again is None:
        return
    if device.power_cycle is not None and not device.power_cycle.done():
        return

    async def cycle() -> None:
        await asyncio.sleep(0.2)  # the channel is closed first
        await device.drop()
        device.device_state = "idle"
        device.booted.clear()
        assert device.boot_again is not None
        try:
            await device.boot_again()
        except Exception as err:  # noqa: BLE001 - a device that cannot boot keeps trying in reality
            _LOGGER.warning("Boot after the reboot failed: %s", err)

    device.power_cycle = asyncio.create_task(cycle(), name=f"xiaozhi_sim reboot {device.options.mac}")
