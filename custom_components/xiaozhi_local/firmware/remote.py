"""Firmware from the network: the vendor's OTA channel and the project's releases, and fetching one.

Both are options, off by default, and go through Home Assistant's shared HTTP session. What comes
back is checked (``protocol.firmware``) before it is offered or cached; see ``files.py`` for the
offers and the local folder.
"""

from dataclasses import dataclass, field
import hashlib
import logging
import re
import time
from typing import Any, Final
import uuid

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from ..protocol.firmware import BoardFacts, is_newer, parse_version
from ..protocol.messages import loads
from .files import Offer, Source, SourceUnavailable

_LOGGER = logging.getLogger(__name__)

CHECK_EVERY: Final = 6 * 3600.0
"""Seconds a remote source's answer is kept (per board and version for the vendor)."""
REFRESH_AT_MOST: Final = 60.0
"""An asked-for refresh reaches a remote source at most this often per question."""
REQUEST_TIMEOUT: Final = 20.0
MAX_ANSWER: Final = 1024 * 1024
"""Bytes of a vendor answer or a release list read at most."""
MAX_NOTES: Final = 20_000
# -- remote sources ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Cached:
    expires: float
    asked: float
    value: Any
    failures: int = 0


@dataclass(slots=True)
class _Memo:
    """Answers of a remote source by question, kept ``CHECK_EVERY`` seconds; refreshes spaced."""

    entries: dict[Any, _Cached] = field(default_factory=dict)

    def fresh(self, key: Any, *, refresh: bool) -> tuple[bool, Any]:
        """(True, value) when the kept answer may be used; (False, last value) to ask again."""
        entry = self.entries.get(key)
        if entry is None:
            return False, None
        now = time.monotonic()
        if now < entry.expires and not (refresh and now - entry.asked >= REFRESH_AT_MOST):
            return True, entry.value
        return False, entry.value

    def keep(self, key: Any, value: Any) -> None:
        now = time.monotonic()
        self.entries[key] = _Cached(now + CHECK_EVERY, now, value)

    def failed(self, key: Any) -> int:
        """Note a failure (the last answer stays); asks again after a while. The streak's length."""
        now = time.monotonic()
        entry = self.entries.get(key) or _Cached(0.0, 0.0, None)
        entry.failures += 1
        entry.asked = now
        entry.expires = now + min(CHECK_EVERY, 300.0 * 2 ** min(entry.failures, 6))
        self.entries[key] = entry
        return entry.failures

    def succeeded(self, key: Any) -> int:
        """The failures before this success (0: none)."""
        entry = self.entries.get(key)
        return entry.failures if entry is not None else 0


async def _read_json(response: aiohttp.ClientResponse) -> Any:
    if response.status != 200:
        raise SourceUnavailable(f"HTTP {response.status}")
    data = bytearray()
    async for chunk in response.content.iter_chunked(65536):
        data += chunk
        if len(data) > MAX_ANSWER:
            raise SourceUnavailable("answer too large")
    try:
        return loads(bytes(data))
    except ValueError, RecursionError:
        raise SourceUnavailable("answer is not JSON") from None


def _http_url(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith(("http://", "https://")) and len(value) < 2048 else None


class VendorChannel:
    """The device's vendor OTA service, asked on the device's behalf without its identity.

    The request is the firmware's own OTA check with what choosing firmware needs: the board
    (type, name, manufacturer), the chip, and the running firmware's project and version. The
    device's MAC, Client-Id, serial number, Wi-Fi name, addresses and hardware details are never
    sent: the ``Device-Id``/``Client-Id`` the service requires are made up once per Home
    Assistant and board (stable, so the service sees one asker, not a new device each time).
    Of the answer only ``firmware`` is used (never ``activation``, ``websocket`` or ``mqtt``).
    """

    def __init__(self, hass: HomeAssistant, url: str, seed: str) -> None:
        self.hass = hass
        self.url = url
        self._seed = seed
        self._memo = _Memo()

    def stand_in_identity(self, facts: BoardFacts) -> tuple[str, str]:
        """A made-up (MAC, Client-Id) for this Home Assistant and board: no device's own."""
        digest = hashlib.sha256(f"{self._seed}:{facts.board}:{facts.board_name}".encode()).digest()
        mac = ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))  # locally administered
        return mac, str(uuid.UUID(bytes=digest[8:24], version=4))

    def request(self, facts: BoardFacts, language: str) -> tuple[dict[str, str], dict[str, Any]]:
        """The headers and body sent (tests and the README describe exactly this)."""
        mac, client_id = self.stand_in_identity(facts)
        name = facts.board_name or facts.board
        headers = {
            "Activation-Version": "1",
            "Device-Id": mac,
            "Client-Id": client_id,
            "User-Agent": f"{name}/{facts.version}",
            "Accept-Language": language,
            "Content-Type": "application/json",
        }
        body = {
            "mac_address": mac,
            "uuid": client_id,
            "chip_model_name": facts.chip,
            "application": {"name": facts.project, "version": facts.version},
            "board": {"type": facts.board, "name": name, "manufacturer": facts.manufacturer},
        }
        return headers, body

    async def async_offers(self, facts: BoardFacts, *, refresh: bool = False) -> list[Offer]:
        """The vendor's firmware for this board, if newer; SourceUnavailable when it cannot say."""
        key = (facts.board, facts.board_name, facts.chip, facts.project, facts.version)
        usable, value = self._memo.fresh(key, refresh=refresh)
        if usable:
            return list(value or ())
        language = "zh-CN" if self.hass.config.language.lower().startswith("zh") else "en-US"
        headers, body = self.request(facts, language)
        try:
            async with async_get_clientsession(self.hass).post(
                self.url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
            ) as response:
                answer = await _read_json(response)
            offers = self._offers(answer, facts)
        except (SourceUnavailable, aiohttp.ClientError, TimeoutError) as err:
            failures = self._memo.failed(key)
            if failures == 1:
                _LOGGER.warning(
                    "The vendor's firmware channel %s did not answer for %s: %s", self.url, facts.board, err
                )
            raise SourceUnavailable(str(err) or type(err).__name__) from None
        if self._memo.succeeded(key):
            _LOGGER.info("The vendor's firmware channel answers again for %s", facts.board)
        self._memo.keep(key, offers)
        return offers

    def _offers(self, answer: Any, facts: BoardFacts) -> list[Offer]:
        if not isinstance(answer, dict):
            raise SourceUnavailable("the answer is not a JSON object")
        firmware = answer.get("firmware")
        if firmware is None:
            return []  # nothing for this board
        if not isinstance(firmware, dict):
            raise SourceUnavailable("its firmware is not an object")
        version, url = firmware.get("version"), _http_url(firmware.get("url"))
        if not isinstance(version, str) or parse_version(version) is None or url is None:
            raise SourceUnavailable(f"its firmware has no usable version and URL: {str(firmware)[:200]}")
        if not is_newer(facts.version, version):
            return []  # the device's own version, or older: the vendor says it is up to date
        return [Offer(version[:32], Source.VENDOR, url=url)]


RELEASE_ASSET: Final = re.compile(r"^v(?P<version>[0-9][0-9A-Za-z.+-]*)_(?P<name>[a-z0-9.-]+)\.zip$")


class ProjectReleases:
    """The firmware project's GitHub releases: a zip per board and version.

    One listing serves every device (kept ``CHECK_EVERY`` seconds); drafts and pre-releases
    are left out. A release is offered to a device when it has the zip of its board.
    """

    def __init__(self, hass: HomeAssistant, url: str) -> None:
        self.hass = hass
        self.url = url
        self._memo = _Memo()

    async def async_offers(self, facts: BoardFacts, *, refresh: bool = False) -> list[Offer]:
        """The newer releases that have this board's zip; SourceUnavailable when unreadable."""
        releases = await self._async_releases(refresh=refresh)
        offers = []
        for release in releases:
            url = release["assets"].get((release["version"], facts.release_name))
            if url is not None and is_newer(facts.version, release["version"]):
                offers.append(
                    Offer(
                        release["version"],
                        Source.RELEASES,
                        summary=release["title"],
                        notes=release["notes"],
                        release_url=release["page"],
                        url=url,
                    )
                )
        return offers

    async def async_zip_url(self, facts: BoardFacts) -> str | None:
        """The zip of the release the device runs (its assets pack is the board's default one)."""
        for release in await self._async_releases(refresh=False):
            if release["version"] == facts.version:
                url = release["assets"].get((release["version"], facts.release_name))
                return url if isinstance(url, str) else None
        return None

    async def _async_releases(self, *, refresh: bool) -> list[dict[str, Any]]:
        """The release list (kept ``CHECK_EVERY`` seconds); SourceUnavailable when unreadable."""
        usable, releases = self._memo.fresh(self.url, refresh=refresh)
        if not usable:
            try:
                async with async_get_clientsession(self.hass).get(
                    self.url,
                    params={"per_page": "20"},
                    headers={"Accept": "application/vnd.github+json"},
                    timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
                ) as response:
                    releases = _releases(await _read_json(response))
            except (SourceUnavailable, aiohttp.ClientError, TimeoutError) as err:
                if self._memo.failed(self.url) == 1:
                    _LOGGER.warning("The firmware releases at %s could not be read: %s", self.url, err)
                raise SourceUnavailable(str(err) or type(err).__name__) from None
            if self._memo.succeeded(self.url):
                _LOGGER.info("The firmware releases at %s can be read again", self.url)
            self._memo.keep(self.url, releases)
        return list(releases or ())


def _releases(answer: Any) -> list[dict[str, Any]]:
    """The usable releases of a GitHub release list (anything malformed is skipped)."""
    if not isinstance(answer, list):
        raise SourceUnavailable("the release list is not a JSON array")
    releases = []
    for release in answer[:50]:
        if not isinstance(release, dict) or release.get("draft") is not False or release.get("prerelease"):
            continue
        assets: dict[tuple[str, str], str] = {}
        for asset in release.get("assets") or ():
            if not isinstance(asset, dict) or not isinstance(asset.get("name"), str):
                continue
            match = RELEASE_ASSET.match(asset["name"])
            url = _http_url(asset.get("browser_download_url"))
            if match is not None and url is not None and parse_version(match["version"]) is not None:
                assets[(match["version"], match["name"])] = url
        versions = {version for version, _name in assets}
        if len(versions) != 1:
            continue  # a release's zips all carry its one version
        title, notes, page = release.get("name"), release.get("body"), _http_url(release.get("html_url"))
        releases.append(
            {
                "version": versions.pop(),
                "title": title[:255] if isinstance(title, str) else None,
                "notes": notes[:MAX_NOTES] if isinstance(notes, str) else None,
                "page": page,
                "assets": assets,
            }
        )
    return releases
