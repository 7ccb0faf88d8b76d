"""One-time download URLs and the image bytes served through them.

The firmware sends no header that could identify it when it fetches its image, so a URL is the
secret: made for one install, valid for one fetch until a deadline, and only from the address the
device last reached Home Assistant from. However many devices fetch the same image at once, it is
read from disk once and kept in memory only while a download of it runs.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
import logging
import secrets

from homeassistant.core import HomeAssistant, callback

from .files import ImageFile
from .jobs import InstallJob

_LOGGER = logging.getLogger(__name__)


@dataclass(eq=False)
class Download:
    """A one-time URL for one device's binary (only the address the device last came from may fetch it)."""

    job: InstallJob
    expires: float


class Downloads:
    """The hub's valid download URLs, and one copy of each image being served."""

    def __init__(self, hass: HomeAssistant, url_of: Callable[[str], str]) -> None:
        """``url_of``: the URL devices fetch a token's download from."""
        self.hass = hass
        self._url_of = url_of
        self._downloads: dict[str, Download] = {}
        self._data: dict[str, tuple[bytes, int]] = {}  # one copy of each image being served, by SHA-256
        self.images_read = 0  # times an image was read from disk to be served (diagnostics, tests)
        self._reading: dict[str, asyncio.Lock] = {}

    @callback
    def url_for(self, job: InstallJob, deadline: float) -> str:
        """The job's one-time URL (made once; valid until the download starts or ``deadline``)."""
        if job.url is None:
            token = secrets.token_urlsafe(24)
            self._downloads[token] = Download(job, deadline)
            job.url = self._url_of(token)
        return job.url

    @callback
    def disarm(self, job: InstallJob) -> None:
        """No URL of the job's is valid any more."""
        for token in [t for t, d in self._downloads.items() if d.job is job]:
            del self._downloads[token]

    def take(self, token: str, address: str | None) -> InstallJob | None:
        """The job whose one-time URL this is, for the device it was made for; None otherwise."""
        download = self._downloads.get(token)
        if download is None:
            return None
        if download.expires <= self.hass.loop.time():
            del self._downloads[token]
            return None
        # Where the device last reached us from: its connection, or the OTA check of the boot that
        # fetches now (read at the fetch: an install that waited for a reboot sees the new address).
        expected = download.job.device.address
        if expected is not None and address != expected:
            _LOGGER.warning(
                "Refused a firmware download of %s from %s: the URL was made for the device at %s",
                download.job.device.name,
                address,
                expected,
            )
            return None
        del self._downloads[token]
        return download.job

    async def async_data(self, job: InstallJob) -> bytes:
        """The image's bytes: one copy however many devices fetch it (released after the last)."""
        key = job.image.image.sha256
        async with self._reading.setdefault(key, asyncio.Lock()):  # downloads starting together read it once
            if key not in self._data:
                self._data[key] = (await self.hass.async_add_executor_job(_read_image, job.image), 0)
                self.images_read += 1
            data, users = self._data[key]
            self._data[key] = (data, users + 1)
        return data

    @callback
    def release_data(self, job: InstallJob) -> None:
        """A download of the image ended."""
        key = job.image.image.sha256
        data, users = self._data[key]
        if users <= 1:
            del self._data[key]
            if (lock := self._reading.get(key)) is not None and not lock.locked():
                del self._reading[key]
        else:
            self._data[key] = (data, users - 1)


def _read_image(image: ImageFile) -> bytes:
    """Blocking: the app image's bytes (a flash image's app partition, or the whole file)."""
    with image.path.open("rb") as stream:
        stream.seek(image.image.offset)
        data = stream.read(image.image.size)
    if len(data) != image.image.size:
        raise OSError(f"{image.path} is shorter than when it was checked")
    return data
