"""A firmware binary from the network: downloaded whole, unpacked, checked, kept in the cache.

A release zip holds the board's ``merged-binary.bin`` (or one ``.bin``); the vendor's channel
hands out the app image itself. Either way the app image is cut out and checked for the device
(``protocol.firmware``) before it is kept, and a kept copy is checked again before it is reused.
"""

import logging
from pathlib import Path
import secrets
import shutil
from typing import Final
import zipfile
import zlib

import aiohttp
from homeassistant.core import HomeAssistant

from ..protocol.firmware import BoardFacts, FirmwareError
from .fetch import async_chunks, async_open
from .files import ImageFile, Offer, cache_name, check_file
from .remote import REQUEST_TIMEOUT

_LOGGER = logging.getLogger(__name__)

MAX_DOWNLOAD: Final = 64 * 1024 * 1024
"""Bytes of a firmware download (a release zip) read at most."""
DOWNLOAD_TIMEOUT: Final = 600.0
MAX_UNZIPPED: Final = 32 * 1024 * 1024
ZIP_ERRORS: Final = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, zlib.error, EOFError)
"""What reading a zip raises: damage, Deflate64 and other methods Python lacks, encryption, corrupt deflate."""


def zip_error(err: BaseException) -> str:
    """A short reason for a zip that cannot be read (for the entity: no traceback, at most 200 characters)."""
    if isinstance(err, NotImplementedError):
        return f"it uses a compression Python cannot read ({err})"[:200]
    if isinstance(err, RuntimeError) and "encrypted" in str(err):
        return "its files are encrypted"
    return f"it is damaged ({str(err) or type(err).__name__})"[:200]


async def async_fetch(hass: HomeAssistant, offer: Offer, facts: BoardFacts, cache: Path) -> ImageFile:
    """The offer's binary, downloaded, unpacked (a release zip) and checked, kept in ``cache``.

    Raises FirmwareError (not an image for this device) or SourceUnavailable (not downloadable).
    A file kept from an earlier fetch is checked again and reused.
    """
    assert offer.url is not None
    final = cache / cache_name(facts.release_name, offer.version)
    if await hass.async_add_executor_job(final.exists):
        try:
            image = await hass.async_add_executor_job(check_file, final, offer.version)
            facts.check(image, offer.version)
            return ImageFile(final, image)
        except (FirmwareError, OSError) as err:
            _LOGGER.info("Fetching %s again: the kept copy is unusable (%s)", final.name, err)
    await hass.async_add_executor_job(lambda: cache.mkdir(parents=True, exist_ok=True))
    download = cache / f".download-{secrets.token_hex(8)}"
    try:
        await async_download(hass, offer.url, download)
        return await hass.async_add_executor_job(unpack, download, final, facts, offer.version)
    finally:
        await hass.async_add_executor_job(lambda: download.unlink(missing_ok=True))


async def async_download(hass: HomeAssistant, url: str, target: Path) -> None:
    """``url`` into ``target``, whole and bounded (fetch.py); SourceUnavailable when it cannot be had."""
    timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT, sock_read=REQUEST_TIMEOUT)
    async with async_open(hass, url, limit=MAX_DOWNLOAD, timeout=timeout) as response:
        stream = await hass.async_add_executor_job(target.open, "wb")
        try:
            async for chunk in async_chunks(response, limit=MAX_DOWNLOAD):
                await hass.async_add_executor_job(stream.write, chunk)
        finally:
            await hass.async_add_executor_job(stream.close)


def unpack(download: Path, final: Path, facts: BoardFacts, version: str) -> ImageFile:
    """Blocking: the app image of a download (a zip's ``.bin``, or the file itself), checked."""
    source = download
    unzipped = download.with_suffix(".bin")
    try:
        if zipfile.is_zipfile(download):
            with zipfile.ZipFile(download) as archive:
                members = [m for m in archive.infolist() if m.filename.endswith(".bin") and not m.is_dir()]
                member = next((m for m in members if m.filename.endswith("merged-binary.bin")), None)
                if member is None and len(members) == 1:
                    member = members[0]
                if member is None:
                    raise FirmwareError("the release zip holds no merged-binary.bin")
                if member.file_size > MAX_UNZIPPED:
                    raise FirmwareError("the release zip's image is too large")
                with archive.open(member) as packed, unzipped.open("wb") as out:
                    shutil.copyfileobj(packed, out, 256 * 1024)
            source = unzipped
        image = check_file(source)
        facts.check(image, version)
        temporary = final.with_suffix(".part")
        with source.open("rb") as stream, temporary.open("wb") as out:
            stream.seek(image.offset)
            remaining = image.size
            while remaining:
                chunk = stream.read(min(remaining, 256 * 1024))
                if not chunk:
                    raise FirmwareError("the file ends inside the image (truncated)")
                out.write(chunk)
                remaining -= len(chunk)
        temporary.replace(final)
        return ImageFile(final, check_file(final, version))
    except ZIP_ERRORS as err:
        raise FirmwareError(f"the release zip cannot be unpacked: {zip_error(err)}") from None
    finally:
        unzipped.unlink(missing_ok=True)
