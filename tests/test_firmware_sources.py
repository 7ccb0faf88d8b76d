"""The firmware sources on their own: the local folder, release lists, fetching and unpacking."""

from collections.abc import AsyncIterator
import io
import os
from pathlib import Path
from typing import Any
import zipfile

from aiohttp import web
from aiohttp.test_utils import TestServer
from homeassistant.core import HomeAssistant
import pytest

from custom_components.xiaozhi_local.firmware.files import (
    LocalFolder,
    Offer,
    Source,
    SourceUnavailable,
    cache_name,
    split_name,
)
from custom_components.xiaozhi_local.firmware.remote import (
    ProjectReleases,
    VendorChannel,
    _releases,
)
from custom_components.xiaozhi_local.firmware.unpack import async_fetch, unpack
from custom_components.xiaozhi_local.protocol.firmware import BoardFacts, FirmwareError
from xiaozhi_sim.firmware import build_image, flash_image

FACTS = BoardFacts("bread-compact-wifi", "esp32s3", "2.4.2")


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("bread-compact-wifi_2.5.0.bin", ("bread-compact-wifi", "2.5.0")),
        ("a_b_2.5.0.bin", ("a_b", "2.5.0")),
        ("bread_v2.5.bin", None),  # the firmware could not read that version
        ("_2.5.0.bin", None),
        ("bread-2.5.0.bin", None),
        ("bread_2.5.0.zip", None),
    ],
)
def test_file_names(name: str, split: tuple[str, str] | None) -> None:
    assert split_name(name) == split


def test_the_folder_is_read_again_only_where_it_changed(tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path / "missing")
    assert folder.scan() == []  # no folder: no local firmware
    folder = LocalFolder(tmp_path)
    first = tmp_path / "bread-compact-wifi_2.5.0.bin"
    first.write_bytes(build_image("2.5.0"))
    (tmp_path / "notes.txt").write_text("ignored")
    (files,) = [folder.scan()]
    assert [f.name for f in files] == [first.name]
    image = files[0].image
    assert image is not None
    assert folder.current(first, image.sha256) is image  # unchanged: not read again
    first.write_bytes(build_image("2.5.0")[:100])  # replaced by a broken copy
    os.utime(first, ns=(1, 1))
    with pytest.raises(FirmwareError):
        folder.current(first, image.sha256)
    assert folder.scan()[0].error is not None
    assert first.name in folder.refused
    first.unlink()  # gone: forgotten
    assert folder.scan() == []
    assert folder.refused == {}


def test_a_changed_file_with_another_image_is_not_the_one_offered(tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path)
    path = tmp_path / "bread-compact-wifi_2.5.0.bin"
    path.write_bytes(build_image("2.5.0", size=5000))
    image = folder.scan()[0].image
    assert image is not None
    path.write_bytes(build_image("2.5.0", size=6000))  # another build, same name and version
    with pytest.raises(FirmwareError, match="changed since it was offered"):
        folder.current(path, image.sha256)


def release(version: str, *names: str, **extra: Any) -> dict[str, Any]:
    return {
        "tag_name": f"v{version}",
        "name": version,
        "draft": False,
        "prerelease": False,
        "assets": [{"name": n, "browser_download_url": f"https://example.invalid/{n}"} for n in names],
        **extra,
    }


def test_release_lists_are_read_defensively() -> None:
    with pytest.raises(SourceUnavailable):
        _releases({"message": "API rate limit exceeded"})
    releases = _releases(
        [
            release("2.5.0", "v2.5.0_bread-compact-wifi.zip", "v2.5.0_other.zip", "README.md"),
            release("2.6.0", "v2.6.0_a.zip", "v2.5.9_b.zip"),  # two versions in one release: skipped
            release("2.7.0", "v2.7.0_a.zip", draft=True),
            release("2.8.0", "v2.8.0_a.zip", prerelease=True),
            release("2.9.0", "v2.9.0_a.zip", body=["not", "text"], html_url="javascript:alert(1)"),
            release("3.0.0"),  # no zips
            {"draft": False, "assets": "nonsense"},
            7,
        ]
    )
    assert [r["version"] for r in releases] == ["2.5.0", "2.9.0"]
    assert set(releases[0]["assets"]) == {("2.5.0", "bread-compact-wifi"), ("2.5.0", "other")}
    assert releases[1]["notes"] is None
    assert releases[1]["page"] is None


def zipped(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def spoiled_zip() -> bytes:
    """A zip whose member's data no longer matches its CRC."""
    data = bytearray(zipped({"merged-binary.bin": flash_image(build_image("2.5.0"))}))
    data[0x20000 + 100] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        pytest.param(zipped({"a.bin": b"x", "b.bin": b"y"}), "no merged-binary.bin", id="two-images"),
        pytest.param(zipped({"readme.txt": b"x"}), "no merged-binary.bin", id="no-image"),
        pytest.param(zipped({"merged-binary.bin": b"\xe9" + bytes(100)}), "too short", id="short"),
        pytest.param(spoiled_zip(), "damaged", id="bad-crc"),
        pytest.param(build_image("2.5.0", chip="esp32c3"), "esp32c3", id="other-chip"),
        pytest.param(build_image("2.6.0"), "not 2.5.0", id="other-version"),
    ],
)
def test_downloads_that_are_not_the_offered_image_are_refused(tmp_path: Path, content: bytes, error: str) -> None:
    download = tmp_path / "download"
    download.write_bytes(content)
    with pytest.raises(FirmwareError, match=error):
        unpack(download, tmp_path / "final.bin", FACTS, "2.5.0")
    assert not (tmp_path / "final.bin").exists()


def test_a_zip_with_one_image_of_another_name_and_a_plain_image_are_taken(tmp_path: Path) -> None:
    app = build_image("2.5.0")
    for content in (zipped({"xiaozhi.bin": app}), app, zipped({"x/merged-binary.bin": flash_image(app)})):
        download = tmp_path / "download"
        download.write_bytes(content)
        final = tmp_path / "final.bin"
        found = unpack(download, final, FACTS, "2.5.0")
        assert final.read_bytes() == app
        assert found.image.size == len(app)
        final.unlink()


@pytest.fixture
async def files() -> AsyncIterator[tuple[TestServer, dict[str, Any]]]:
    served: dict[str, Any] = {"requests": 0}

    async def file(request: web.Request) -> web.StreamResponse:
        served["requests"] += 1
        data = served.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        if isinstance(data, int):  # a size only: a body that says it is that large
            response = web.StreamResponse()
            response.content_length = data
            await response.prepare(request)
            return response
        return web.Response(body=data)

    async def endless(request: web.Request) -> web.StreamResponse:
        served["requests"] += 1
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(70):
            await response.write(bytes(1024 * 1024))
        return response

    app = web.Application()
    app.router.add_get("/endless.zip", endless)
    app.router.add_get("/{name}", file)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server, served
    await server.close()


async def test_a_fetched_image_is_kept_and_reused_while_it_checks(
    hass: HomeAssistant, tmp_path: Path, files: tuple[TestServer, dict[str, Any]]
) -> None:
    server, served = files
    served["v.bin"] = build_image("2.5.0")
    offer = Offer("2.5.0", Source.VENDOR, url=str(server.make_url("/v.bin")))
    first = await async_fetch(hass, offer, FACTS, tmp_path)
    assert served["requests"] == 1
    again = await async_fetch(hass, offer, FACTS, tmp_path)
    assert again.path == first.path
    assert served["requests"] == 1  # the kept copy
    first.path.write_bytes(b"spoiled")  # a damaged copy is fetched again
    await async_fetch(hass, offer, FACTS, tmp_path)
    assert served["requests"] == 2
    assert await hass.async_add_executor_job(lambda: [p.name for p in tmp_path.iterdir()]) == [first.path.name]


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/missing.bin", "HTTP 404"),
        ("/huge.bin", "larger than 64 MB"),
        ("/endless.zip", "larger than 64 MB"),
    ],
)
async def test_a_download_that_cannot_be_had_is_unavailable(
    hass: HomeAssistant, tmp_path: Path, files: tuple[TestServer, dict[str, Any]], path: str, error: str
) -> None:
    server, served = files
    served["huge.bin"] = 100 * 1024 * 1024
    offer = Offer("2.5.0", Source.RELEASES, url=str(server.make_url(path)))
    with pytest.raises(SourceUnavailable, match=error):
        await async_fetch(hass, offer, FACTS, tmp_path)
    assert await hass.async_add_executor_job(lambda: [p for p in tmp_path.iterdir() if p.is_file()]) == []


async def test_an_unreachable_download_is_unavailable(hass: HomeAssistant, tmp_path: Path) -> None:
    offer = Offer("2.5.0", Source.RELEASES, url="http://127.0.0.1:9/x.zip")
    with pytest.raises(SourceUnavailable, match="could not download"):
        await async_fetch(hass, offer, FACTS, tmp_path)


async def test_remote_sources_say_so_when_they_answer_again(
    hass: HomeAssistant, files: tuple[TestServer, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    server, served = files
    releases = ProjectReleases(hass, str(server.make_url("/releases.json")))
    with pytest.raises(SourceUnavailable, match="HTTP 404"):
        await releases.async_offers(FACTS)
    served["releases.json"] = b"[]"
    assert await releases.async_offers(FACTS, refresh=True) == []  # asked again at once? no: spaced
    for entry in releases._memo.entries.values():
        entry.expires = 0.0
    assert await releases.async_offers(FACTS) == []
    assert "can be read again" in caplog.text
    vendor = VendorChannel(hass, str(server.make_url("/missing")), "seed")
    mac, client_id = vendor.stand_in_identity(FACTS)
    assert mac.startswith("02:")  # locally administered: no vendor's, no device's
    assert vendor.stand_in_identity(FACTS) == (mac, client_id)  # stable for a board
    assert vendor.stand_in_identity(BoardFacts("other", "esp32s3", "2.4.2"))[0] != mac
    assert VendorChannel(hass, "http://x", "other seed").stand_in_identity(FACTS)[0] != mac


async def test_names_from_a_device_never_become_paths(
    hass: HomeAssistant, tmp_path: Path, files: tuple[TestServer, dict[str, Any]]
) -> None:
    """A device in hostile hands reports ``board.name`` ``../pwn`` (and a source a version with a
    slash): the fetched image is kept inside the cache all the same, never beside it."""
    server, served = files
    served["v.bin"] = build_image("2.6.0")
    cache = tmp_path / "cache"
    facts = BoardFacts("bread-compact-wifi", "esp32s3", "2.4.2", board_name="../../xiaozhi_firmware/pwn")
    offer = Offer("2.6.0", Source.VENDOR, url=str(server.make_url("/v.bin")))
    fetched = await async_fetch(hass, offer, facts, cache)
    assert fetched.path.parent == cache
    assert "/" not in fetched.path.name
    assert not fetched.path.name.startswith(".")
    kept = await hass.async_add_executor_job(lambda: sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")))
    assert kept == ["cache", f"cache/{fetched.path.name}"]
    assert cache_name("a/b", "1.0") != cache_name("a_b", "1.0")  # cleaned alike, kept apart


def test_links_out_of_the_folder_and_forged_names_are_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A symbolic link may lead anywhere on the machine; a newline in a name would forge a log line."""
    folder_path = tmp_path / "xiaozhi_firmware"
    folder_path.mkdir()
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(build_image("2.5.0"))
    (folder_path / "bread-compact-wifi_2.5.0.bin").symlink_to(outside)
    (folder_path / "bread-compact-wifi_2.6.0\nERROR forged.bin").write_bytes(build_image("2.6.0"))
    folder = LocalFolder(folder_path)
    assert folder.scan() == []
    assert "symbolic link" in folder.refused["bread-compact-wifi_2.5.0.bin"]
    assert "control characters" in folder.refused["bread-compact-wifi_2.6.0\nERROR forged.bin"]
    assert all("\nERROR forged" not in record.getMessage() for record in caplog.records)


async def test_a_slow_loris_download_fails_with_a_reason(
    hass: HomeAssistant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that sends a byte now and then, never quite stalling: the whole download's time
    runs out, and the reason says so (it was empty: a bare TimeoutError has no message)."""
    import asyncio

    from custom_components.xiaozhi_local.firmware import unpack as unpack_module
    from custom_components.xiaozhi_local.firmware.files import SourceUnavailable

    async def drip(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000000"})
        await response.prepare(request)
        for _ in range(1000):
            await response.write(b"x")
            await asyncio.sleep(0.05)
        return response

    app = web.Application()
    app.router.add_get("/image.bin", drip)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    monkeypatch.setattr(unpack_module, "DOWNLOAD_TIMEOUT", 0.5)
    try:
        with pytest.raises(SourceUnavailable) as err:
            await unpack_module.async_download(hass, str(server.make_url("/image.bin")), tmp_path / "image.bin")
    finally:
        await server.close()
    assert str(err.value).endswith(": timed out"), str(err.value)
