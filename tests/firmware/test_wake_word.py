"""A wake word chosen in Home Assistant, on the firmware's own assets code (fwhost).

The board's default pack and an esp-sr model folder lie in ``xiaozhi_wake_words``; the device
stores the pack's URL, restarts, downloads the pack at boot with the firmware's ``Assets::Download``,
checks it, loads its models with esp-sr's own loader, and then wakes on the new word.
"""

from pathlib import Path
import time

from homeassistant.core import HomeAssistant
from homeassistant.setup import async_setup_component
import pytest

from custom_components.xiaozhi_local.hub import XiaozhiHub

from ..helpers import wait_entity
from ..test_wake_word import wake_folder
from ..voice import Voice
from .conftest import FwFactory
from .test_device import entity_of, in_conversation

BOARD = "bread-compact-wifi"


@pytest.fixture
def wake_dir(hass: HomeAssistant, tmp_path: Path) -> Path:
    """The configuration folder's wake word folder: the board's pack and the "Hi ESP" model."""
    return wake_folder(hass, tmp_path)


@pytest.fixture(autouse=True)
async def websocket_api(hass: HomeAssistant) -> None:
    """Home Assistant's websocket API, set up before the test server starts."""
    assert await async_setup_component(hass, "websocket_api", {})


async def test_a_wake_word_from_the_model_folder_reaches_the_firmware(
    hass: HomeAssistant, wake_dir: Path, ready: Voice, hub: XiaozhiHub, paired: FwFactory, transport: str
) -> None:
    """Choose "Hi ESP": the firmware fetches the pack at its restart, esp-sr's loader finds the
    model, the next wake is "Hi,ESP" and the select shows the change done."""
    fw = await paired()
    mark = fw.mark()
    if transport == "websocket":  # chosen while it talks (it is reachable only then)
        await in_conversation(fw)
    select = await entity_of(hass, hub, fw, "select", "wake_word")
    await hass.services.async_call("select", "select_option", {"entity_id": select, "option": "Hi ESP"}, blocking=True)
    # Over WebSocket its restart is owed until its conversation ends (by the silence timeout).
    await fw.wait_log(r"HostWakeWord: .*WakeNet model wn9_hiesp, wake words: Hi,ESP", 90, since=mark)
    await fw.wait(lambda f: f.out().count("READY") >= 2, 60, "READY after the restart")
    assert "REBOOT" in fw.out()
    assert "download_url" not in fw.nvs().get("assets", {})  # erased at the boot that fetched it
    # Its next wake says the new word (the pack's, as the firmware takes it).
    at = int(time.time() * 1000) + 200
    wake_mark = fw.mark()
    fw.command(f"wake noise=-50 at={at}")
    detect = await fw.wait(
        lambda f: next((m for m in f.sent(wake_mark) if m.get("state") == "detect"), None), 30, "listen detect"
    )
    assert detect["text"] == "Hi,ESP"
    state = await wait_entity(hass, select, lambda s: s.attributes.get("phase") == "done", timeout=30)
    assert state.state == "Hi ESP"
