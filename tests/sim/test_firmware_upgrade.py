"""The simulator upgrades as ``Ota::Upgrade`` does (docs/protocol.md §6), against a plain server.

Each rule of the firmware is reproduced by one case: a server that breaks it is refused the way
the device refuses it, so the integration's tests can trust what the simulator accepts.
"""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
import pytest

from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.firmware import UpgradeFailed, build_image, download_and_flash, firmware_offer, verify


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    image = build_image("2.5.0", size=20_000)

    async def plain(request: web.Request) -> web.StreamResponse:
        return web.Response(body=image)

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(image)
        await response.write_eof()
        return response

    async def empty(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"")

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/image.bin")

    async def missing(request: web.Request) -> web.StreamResponse:
        return web.Response(status=404)

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_length = len(image)
        await response.prepare(request)
        await response.write(image[:5000])
        assert request.transport is not None
        request.transport.close()
        return response

    async def not_image(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"<html>" + bytes(20_000))

    async def other_chip(request: web.Request) -> web.StreamResponse:
        return web.Response(body=build_image("2.5.0", chip="esp32c3"))

    app = web.Application()
    for path, handler in (
        ("/image.bin", plain),
        ("/chunked.bin", chunked),
        ("/empty.bin", empty),
        ("/redirect.bin", redirect),
        ("/missing.bin", missing),
        ("/cut.bin", cut),
        ("/html.bin", not_image),
        ("/c3.bin", other_chip),
    ):
        app.router.add_get(path, handler)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield test_server
    await test_server.close()


async def test_a_whole_image_with_a_content_length_is_flashed(server: TestServer) -> None:
    pages: list[tuple[int, int]] = []
    flashed = await download_and_flash(
        str(server.make_url("/image.bin")), "esp32s3", on_progress=lambda r, t: pages.append((r, t))
    )
    assert flashed.version == "2.5.0"
    assert flashed.project == "xiaozhi"
    # 4 KiB pages, as the firmware reads; the last read is the end of the body.
    reads = [read for read, _total in pages]
    assert all(b - a <= 4096 for a, b in zip([0, *reads], reads, strict=False))
    assert reads[-1] == reads[-2] == pages[0][1]


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/chunked.bin", "Failed to get content length"),
        ("/empty.bin", "Failed to get content length"),
        ("/redirect.bin", "status code: 302"),
        ("/missing.bin", "status code: 404"),
        ("/cut.bin", "Failed to read HTTP data"),
        ("/html.bin", "ESP_ERR_OTA_VALIDATE_FAILED"),
        ("/c3.bin", "mismatch chip ID"),
    ],
)
async def test_what_the_firmware_refuses(server: TestServer, path: str, error: str) -> None:
    with pytest.raises(UpgradeFailed, match=error):
        await download_and_flash(str(server.make_url(path)), "esp32s3")


async def test_a_failing_flash(server: TestServer) -> None:
    with pytest.raises(UpgradeFailed, match="Failed to end OTA"):
        await download_and_flash(str(server.make_url("/image.bin")), "esp32s3", fail_flash=True)


def test_the_ota_answer_is_read_as_check_version_reads_it() -> None:
    assert firmware_offer({}, "2.4.2") is None
    assert firmware_offer({"firmware": "2.5.0"}, "2.4.2") is None
    assert firmware_offer({"firmware": {"version": "2.5.0"}}, "2.4.2") is None  # no url
    assert firmware_offer({"firmware": {"version": 2, "url": "http://x"}}, "2.4.2") is None
    assert firmware_offer({"firmware": {"version": "2.4.2", "url": "http://x"}}, "2.4.2") is None
    offer = firmware_offer({"firmware": {"version": "2.5.0", "url": "http://x"}}, "2.4.2")
    assert offer is not None
    assert not offer.force
    forced = firmware_offer({"firmware": {"version": "2.3.0", "url": "http://x", "force": 1}}, "2.4.2")
    assert forced is not None
    assert forced.force
    assert firmware_offer({"firmware": {"version": "2.3.0", "url": "http://x", "force": True}}, "2.4.2") is None
    with pytest.raises(ValueError, match="invalid literal"):  # std::stoi throws, uncaught: the device would crash
        firmware_offer({"firmware": {"version": "v2.5", "url": "http://x"}}, "2.4.2")


async def test_the_tool_answers_only_after_a_failed_upgrade(server: TestServer) -> None:
    """``self.upgrade_firmware`` schedules the upgrade before its reply: success reboots first."""
    device = SimulatedDevice(SimulatorOptions(url="ws://unused", upgrade_delay=0))
    reply: Any = await device.mcp.handle(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "self.upgrade_firmware", "arguments": {"url": str(server.make_url("/missing.bin"))}},
        }
    )
    assert reply["result"]["content"][0]["text"] == "true"
    assert device.upgrades[0]["result"] == "Failed to get firmware, status code: 404"
    assert device.device_state == "upgrading"  # started from idle: nothing resets it
    with pytest.raises(RuntimeError, match="upgrading"):
        await device.connect()  # it ignores the wake word until it restarts
    device.schedule_reboot()
    assert device.device_state == "idle"


async def test_a_successful_upgrade_runs_the_new_image_from_then_on(server: TestServer, tmp_path: Path) -> None:
    nvs = str(tmp_path / "nvs.json")
    device = SimulatedDevice(SimulatorOptions(url="ws://unused", upgrade_delay=0, nvs_path=nvs))
    assert await device.upgrade(str(server.make_url("/image.bin")))
    assert device.rebooted
    assert device.options.firmware_version == "2.5.0"
    assert device.system_info["application"]["version"] == "2.5.0"
    assert device.mcp.firmware_version == "2.5.0"
    assert device.decode_queue == 20  # 2.5's queue
    # Flash keeps it: the same device started again runs 2.5.0.
    again = SimulatedDevice(SimulatorOptions(url="ws://unused", nvs_path=nvs))
    assert again.options.firmware_version == "2.5.0"


def test_the_simulators_images_verify() -> None:
    image = build_image("1.2.3", chip="esp32c3", hash_appended=False)
    assert verify(image, "esp32c3").version == "1.2.3"
    with pytest.raises(UpgradeFailed):
        verify(image[:-1], "esp32c3")
