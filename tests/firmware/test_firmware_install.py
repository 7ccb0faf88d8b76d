"""A firmware install on the stock firmware's own upgrade code: a good image, and one it refuses."""

import asyncio
import json
from pathlib import Path
import socket
from subprocess import DEVNULL
import sys
from typing import Any

from homeassistant.const import STATE_UNAVAILABLE
from homeassistant.core import Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.event import async_track_state_change_event
import pytest

from custom_components.xiaozhi_local.const import CONF_WEBSOCKET_URL
from custom_components.xiaozhi_local.hub import XiaozhiHub

from ..helpers import wait_entity
from ..test_firmware_update import firmware_folder
from ..voice import Voice
from .conftest import FwFactory, device_of
from .fwhost import FWHOST_DIR, FwHost, mkimage
from .test_device import entity_of, in_conversation

BOARD = "bread-compact-wifi"
VERSION = "9.9.9"


@pytest.fixture
def firmware_dir(hass: HomeAssistant, tmp_path: Path) -> Path:
    """Home Assistant's configuration folder in tmp, with the local firmware folder."""
    return firmware_folder(hass, tmp_path)


class States:
    """Every state the update entity showed."""

    def __init__(self, hass: HomeAssistant, entity_id: str) -> None:
        self.seen: list[str] = []
        self.unsubscribe = async_track_state_change_event(hass, entity_id, self._changed)

    @callback
    def _changed(self, event: Event[EventStateChangedData]) -> None:
        if (state := event.data["new_state"]) is not None:
            self.seen.append(state.state)


async def offered_on(hass: HomeAssistant, entity_id: str) -> None:
    """Until the entity offers ``VERSION`` (a refresh reads the local folder now)."""
    await hass.services.async_call("homeassistant", "update_entity", {"entity_id": entity_id}, blocking=True)
    await wait_entity(hass, entity_id, lambda s: s.attributes.get("latest_version") == VERSION, timeout=30)


async def start_install(hass: HomeAssistant, fw: FwHost, entity_id: str, transport: str) -> asyncio.Task[Any]:
    """``update.install``, as the dialog calls it; a WebSocket device takes it at its next conversation."""
    install = hass.async_create_task(
        hass.services.async_call("update", "install", {"entity_id": entity_id}, blocking=True)
    )
    if transport == "websocket":  # away between conversations: its next one ends in a restart
        await in_conversation(fw)
    return install


async def test_an_image_installs_and_the_entity_comes_back_after_the_reboot(
    hass: HomeAssistant, firmware_dir: Path, ready: Voice, hub: XiaozhiHub, paired: FwFactory, transport: str
) -> None:
    """A ``mkimage.py`` image: downloaded, flashed, booted, reported; the entity is unavailable
    across the reboot and available again after (what Home Assistant's voice wizard waits for)."""
    mkimage(firmware_dir / f"{BOARD}_{VERSION}.bin", VERSION)
    fw = await paired()
    if transport == "websocket":  # its first conversation makes its entities
        await fw.wait_state("idle", 60, since=await in_conversation(fw))
    entity_id = await entity_of(hass, hub, fw, "update")
    await offered_on(hass, entity_id)
    states = States(hass, entity_id)
    install = await start_install(hass, fw, entity_id, transport)
    async with asyncio.timeout(180):
        await install
    await fw.wait_log(rf"image valid: project xiaozhi, version {VERSION}", 10)
    assert "REBOOT" in fw.out()
    state = hass.states.get(entity_id)
    assert state is not None
    assert state.attributes["installed_version"] == VERSION
    assert state.state == "off"
    assert STATE_UNAVAILABLE in states.seen
    assert states.seen[-1] != STATE_UNAVAILABLE
    states.unsubscribe()
    assert device_of(hub, fw).facts is not None


@pytest.mark.parametrize("transport", ["mqtt"], indirect=True)
async def test_an_image_spoilt_on_its_way_is_refused_by_the_device(
    hass: HomeAssistant, firmware_dir: Path, ready: Voice, hub: XiaozhiHub, paired: FwFactory, tmp_path: Path
) -> None:
    """One byte flipped on the way (fwhost's cutproxy): the firmware downloads it all, refuses the
    image and keeps running its version; the install fails with the reason, nothing is left running."""
    mkimage(firmware_dir / f"{BOARD}_{VERSION}.bin", VERSION)
    control = tmp_path / "cut.json"
    control.write_text(json.dumps({"corrupt": 100_000}))
    port = hub.entry.options[CONF_WEBSOCKET_URL].split(":")[2].split("/")[0]
    with socket.socket() as free:  # a free port for the proxy (the devices' host stays 127.0.0.1)
        free.bind(("127.0.0.1", 0))
        proxy_port = free.getsockname()[1]
    args = ["--listen", f"127.0.0.1:{proxy_port}", "--to", f"127.0.0.1:{port}", "--control", str(control)]
    proxy = await asyncio.create_subprocess_exec(
        sys.executable, str(FWHOST_DIR / "cutproxy.py"), *args, stdout=DEVNULL, stderr=DEVNULL
    )
    try:
        hass.config_entries.async_update_entry(
            hub.entry,
            options=hub.entry.options | {CONF_WEBSOCKET_URL: f"ws://127.0.0.1:{proxy_port}/api/xiaozhi_local/v1/"},
        )
        await hass.async_block_till_done()
        fw = await paired()
        entity_id = await entity_of(hass, hub, fw, "update")
        await offered_on(hass, entity_id)
        with pytest.raises(HomeAssistantError) as raised:
            async with asyncio.timeout(180):
                await hass.services.async_call("update", "install", {"entity_id": entity_id}, blocking=True)
        assert raised.value.translation_key in ("update_refused", "update_interrupted"), raised.value
        state = hass.states.get(entity_id)
        assert state is not None
        assert state.attributes["installed_version"] == "2.4.2"
        assert state.attributes["in_progress"] is False
        assert "image valid" not in fw.log()
        assert not hub.firmware.jobs
    finally:
        proxy.kill()
        await proxy.wait()
