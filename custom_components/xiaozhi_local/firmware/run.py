"""One install run: from a moment the device can take it until it is back on the new version.

The installer (``installer.py``) keeps the table of jobs, errors and listeners; a run tells the
device (its tool ``self.upgrade_firmware``, or its next OTA answer after a restart), waits for its
download, and judges what it comes back with (docs/protocol.md §6).
"""

import asyncio
from collections.abc import Callable
import contextlib
import logging
from typing import Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError

from ..const import DISCOVERY_TIMEOUT
from ..errors import translated_error
from ..protocol.mcp import McpConnectionError, McpError, McpRemoteError, McpTimeoutError
from ..restarts import Reason
from .downloads import Downloads
from .jobs import InstallJob, Phase

_LOGGER = logging.getLogger(__name__)

UPGRADE_TOOL: Final = "self.upgrade_firmware"
BUSY_TIMEOUT: Final = 600.0
"""Seconds an install waits for a running conversation turn to end."""
FETCH_TIMEOUT: Final = 60.0
"""Seconds a device asked through its tool has to start the download (it waits about 4 s)."""
BOOT_FETCH_TIMEOUT: Final = 180.0
"""Seconds a restarted device has to boot, check OTA and start the download."""
OFFLINE_WAIT: Final = 24 * 3600.0
"""Seconds an install waits for a device that is away (per conversation) or off to appear."""
CONNECT_GRACE: Final = 2.0
"""Seconds given to a device that just connected to start the turn its wake word began."""
REFUSE_GRACE: Final = 30.0
"""Seconds after its download a device still on the same connection has refused the image
(a successful flash reboots it within a few seconds)."""
RETURN_TIMEOUT: Final = 240.0
"""Seconds after its download a device has to come back reporting a version."""


@callback
def disarm(downloads: Downloads, job: InstallJob) -> None:
    """No URL of the job's is valid any more, no OTA answer carries it."""
    job.via_ota = False
    downloads.disarm(job)


class InstallRun:
    """One job's run; the installer starts it and ends the job whatever it raises."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        downloads: Downloads,
        notify: Callable[[str], None],
        job: InstallJob,
    ) -> None:
        """``notify``: the installer's, told of every phase the entity shows."""
        self.hass = hass
        self.entry = entry
        self.downloads = downloads
        self.notify = notify
        self.job = job

    async def async_run(self) -> None:
        """Until the device runs the job's version; raises a translated error with the reason."""
        job, device = self.job, self.job.device
        await self._async_tell()
        await job.async_wait(job.finished, None, self._not_fetched)
        if job.interrupted is not None:
            await self._async_recover()
            raise translated_error(
                "update_interrupted", device=device.name, version=job.version, reason=job.interrupted
            )
        job.phase = Phase.REBOOTING
        disarm(self.downloads, job)
        self.notify(device.mac)
        link = device.link
        try:
            async with asyncio.timeout(REFUSE_GRACE):
                version = await asyncio.shield(job.returned)
        except TimeoutError:
            if link is not None and device.link is link:  # it never rebooted: the flash failed
                await self._async_recover()
                raise translated_error("update_refused", device=device.name, version=job.version) from None
            try:
                async with asyncio.timeout(RETURN_TIMEOUT - REFUSE_GRACE):
                    version = await job.returned
            except TimeoutError:
                raise translated_error("update_no_return", device=device.name, version=job.version) from None
        if version != job.version:
            raise translated_error("update_kept_version", device=device.name, version=job.version, running=version)

    async def _async_tell(self) -> None:
        """Wait for a moment the device can take it, tell it, and wait until its download starts."""
        job, device = self.job, self.job.device
        deadline = self.hass.loop.time() + OFFLINE_WAIT
        while not job.started.is_set():
            await self._async_until_idle()
            url = self.downloads.url_for(job, deadline)
            if device.connected and UPGRADE_TOOL in device.tools and not job.via_ota:
                job.phase = Phase.STARTING
                self.notify(device.mac)
                self._call_tool(url)
                await job.async_wait(job.started, FETCH_TIMEOUT, self._not_fetched)
                return
            job.via_ota = True  # the next OTA answer carries it
            if device.connected:
                job.phase = Phase.STARTING
                self.notify(device.mac)
                await device.async_restart_quietly()
                await job.async_wait(job.started, BOOT_FETCH_TIMEOUT, self._not_fetched)
                return
            # Away (per conversation), or off (always connected): until it boots (its OTA answer
            # carries the firmware) or connects (then it is told).
            job.phase = Phase.WAITING
            self.notify(device.mac)
            remaining = deadline - self.hass.loop.time()
            await job.async_wait(job.started, remaining, self._not_fetched, until=lambda: device.connected)
            if job.started.is_set():
                return
            # It connected before it was restarted: a conversation. Its tools first; a moment for
            # the turn its wake word starts (it follows the hello at once); its tool once it is idle.
            with contextlib.suppress(McpError):
                await device.async_wait_ready(DISCOVERY_TIMEOUT)
            with contextlib.suppress(HomeAssistantError):
                await job.async_wait(None, CONNECT_GRACE, HomeAssistantError, until=lambda: device.exchanging)
            link = device.link
            if link is not None and link.conversation_is_connection and device.exchanging:
                # Over WebSocket Home Assistant ends a conversation by closing the socket, before a
                # tool could be called: the end restarts the device instead, and the OTA answer of
                # its boot carries the firmware (as a transport switch does, link.py).
                device.restarts.owe(Reason.FIRMWARE)
                try:
                    await job.async_wait(
                        job.started,
                        deadline - self.hass.loop.time(),
                        self._not_fetched,
                        until=lambda: not device.connected,
                    )
                finally:
                    device.restarts.settle(Reason.FIRMWARE)
                continue  # restarted (its boot fetches it), or gone by itself (its next boot or talk)
            job.via_ota = False

    async def _async_until_idle(self) -> None:
        """Until no conversation turn, reply or announcement runs on the device."""
        job, device = self.job, self.job.device
        if not device.exchanging:
            return
        job.phase = Phase.WAITING
        self.notify(device.mac)
        await job.async_wait(
            None,
            BUSY_TIMEOUT,
            lambda: translated_error("update_busy", device=device.name),
            until=lambda: not device.exchanging,
        )

    def _not_fetched(self) -> HomeAssistantError:
        return translated_error("update_not_fetched", device=self.job.device.name, version=self.job.version)

    def _call_tool(self, url: str) -> None:
        """Ask the device to upgrade now; it answers before it starts (and not at all on success)."""
        job, device = self.job, self.job.device

        async def call() -> None:
            try:
                result = await device.async_call_tool(UPGRADE_TOOL, {"url": url}, 10.0)
            except McpRemoteError as err:
                job.interrupted = err.message
            except McpConnectionError, McpTimeoutError:
                return  # it went away to upgrade, or its answer is late: the download tells
            except McpError as err:
                job.interrupted = str(err)
            else:
                if result.is_error or result.text.strip() == "false":
                    job.interrupted = result.text[:200] or "the device refused"
                else:
                    return
            job.changed.set()

        job.tool_call = self.entry.async_create_background_task(
            self.hass, call(), f"xiaozhi_local upgrade {device.mac}"
        )

    async def _async_recover(self) -> None:
        """A failed flash can leave the firmware in its "upgrading" state: restart it if it is here."""
        if (device := self.job.device).connected:
            _LOGGER.info("Restarting %s after its failed upgrade", device.name)
            await device.async_restart_quietly()
