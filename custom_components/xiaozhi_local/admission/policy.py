"""Who gets in: pairing by code, tokens, and devices paired without a code.

A device that is not paired asks to join at its OTA check and gets a code to speak
(``async_request_pairing``); the user types it into a discovered-device card (config_flow.py),
which pairs it (``async_pair``). A paired device proves itself at its OTA check by its MAC and
identity (``async_proven``) and at every connection by its token (``async_authenticate``), in
constant time, with refusals counted for the repair and for HA's IP ban (admission/gate.py says which count).
With the hub option "Accept new devices without a code" (trials, load testers), a new device is
paired at first contact, at most so many an hour.
"""

from collections.abc import Callable, Mapping
import hashlib
import hmac
import logging
from types import MappingProxyType
from typing import Any

from homeassistant.config_entries import SOURCE_INTEGRATION_DISCOVERY, ConfigEntry, ConfigSubentry
from homeassistant.const import CONF_CLIENT_ID, CONF_MAC, CONF_TOKEN
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import discovery_flow

from ..const import (
    CONF_ACCEPT_WITHOUT_CODE,
    CONF_NEW_PER_HOUR,
    CONF_OPEN,
    DEFAULT_NEW_PER_HOUR,
    DOMAIN,
    SUBENTRY_DEVICE,
)
from ..device import XiaozhiDevice
from ..limits import SlidingWindow
from ..protocol.logs import OnceLogger
from ..protocol.messages import normalize_mac
from ..repairs import async_token_accepted, async_wrong_token
from .gate import Refused
from .identities import Identity, IdentityJournal
from .pairing import PairingManager, PendingDevice, new_token
from .reports import DeviceReport, async_apply_report

_LOGGER = logging.getLogger(__name__)

_DUMMY_TOKEN = "x" * 43  # compared against when the device is unknown, so timing tells nothing


class Admission:
    """Pairing and authentication for one hub: it reads the hub's devices and asks it to sync."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        devices: Mapping[str, XiaozhiDevice],
        identities: IdentityJournal,
        sync: Callable[[], None],
    ) -> None:
        """``devices``: the hub's, by MAC; ``sync``: make them match the subentries (after a pairing)."""
        self.hass = hass
        self._entry = entry
        self._devices = devices
        self._identities = identities
        self._sync = sync
        self.pairing = PairingManager(on_drop=self.async_schedule_abort)
        self._auto_pairing = SlidingWindow(int(entry.options.get(CONF_NEW_PER_HOUR, DEFAULT_NEW_PER_HOUR)), 3600.0)
        self._log = OnceLogger("", _LOGGER, again_after=3600.0, clock=hass.loop.time)  # hub-wide warnings

    @callback
    def async_joined(self, device: XiaozhiDevice) -> None:
        """``device`` was added or took a new identity: the waiting request of that identity is done.

        The identity that heard the code is paired now, however it was done (card, "Add device").
        """
        for pending in self.pairing.for_mac(device.mac):
            if (pending.report.client_id or None) == device.identity.client_id:
                _LOGGER.info("Device %s paired as %s", device.mac, device.name)
                async_apply_report(device, pending.report)
                self.pairing.remove(device.mac)
                self.async_schedule_abort(device.mac)
                return

    @property
    def accept_without_code(self) -> bool:
        """Hub option: pair unknown devices at first contact (trials only)."""
        return bool(self._entry.options.get(CONF_ACCEPT_WITHOUT_CODE, False))

    @callback
    def async_proven(self, mac: str, report: DeviceReport) -> XiaozhiDevice | None:
        """The paired device whose MAC and identity this OTA request presents, if it proves both.

        With "Accept new devices without a code", an unknown MAC is paired here, at most
        as many an hour as its option says; a paired MAC with another identity never is.
        """
        device = self._devices.get(mac)
        if device is None and self.accept_without_code:
            if self._allow_new_device():
                _LOGGER.info("Pairing %s without a code (the hub accepts new devices without one)", mac)
                return self.async_pair(mac, None, report.identity)
            self._log_pairing_cap(mac)
        if device is not None and report.identity.proves(device.identity):
            return device
        return None

    def _allow_new_device(self) -> bool:
        """One more new device without a code this hour (the hub option's number, as it is now)."""
        self._auto_pairing.limit = int(self._entry.options.get(CONF_NEW_PER_HOUR, DEFAULT_NEW_PER_HOUR))
        return self._auto_pairing.allow()

    def _log_pairing_cap(self, who: str) -> None:
        self._log_once(
            "auto_pair_limit",
            "Refused %s: the hub accepts new devices without a code, but %d joined within the last hour "
            "(raise 'New devices without a code per hour' in the hub options, or pair it with its code)",
            who,
            self._auto_pairing.limit,
        )

    @callback
    def async_open_device(self, device_id: str, client_id: str | None) -> XiaozhiDevice | Refused | None:
        """A client with a device id and no token, while the hub accepts devices without a code.

        Load testers written for other xiaozhi servers connect with ``?device-id=<any string>``
        only. Such a client is paired at first contact (within the hourly cap) and let in without
        a token from then on, but only while the option is on, and never as a device that was
        paired the usual way. ``Refused.CAPPED`` when the hour's new devices are used up.
        """
        if not self.accept_without_code:
            return None
        mac = normalize_mac(device_id) or pseudo_mac(device_id)
        if (device := self._devices.get(mac)) is not None:
            return device if device.open else None
        if not self._allow_new_device():
            self._log_pairing_cap(device_id[:64])
            return Refused.CAPPED
        _LOGGER.info(
            "Pairing %s (%s) without a code or token (the hub accepts new devices without one)", device_id[:64], mac
        )
        return self.async_pair(mac, device_id[:64], Identity(client_id), open_=True)

    @callback
    def async_request_pairing(self, mac: str, report: DeviceReport, source: str = "") -> PendingDevice:
        """A device asks to join (or a paired MAC with another identity): its code, and a card when new."""
        pending, new = self.pairing.request(mac, report, source)
        if new:
            if (device := self._devices.get(mac)) is not None:
                # Anyone can name a paired MAC with a new Client-Id: warned once, counted (diagnostics).
                device.log.report(
                    "asks_to_pair_again",
                    f"a device with its address ({device.name}) asks to pair again with a new identity; "
                    "it was given a code and no token",
                )
            else:
                _LOGGER.info("Device %s (%s) asks to join; its code is on its screen", mac, report.board)
            discovery_flow.async_create_flow(
                self.hass,
                DOMAIN,
                context={"source": SOURCE_INTEGRATION_DISCOVERY},
                data={CONF_MAC: mac, "board": report.board or ""},
            )
        return pending

    @callback
    def async_pair(
        self,
        mac: str,
        title: str | None,
        identity: Identity,
        *,
        open_: bool = False,
        token: str | None = None,
    ) -> XiaozhiDevice:
        """Make ``mac`` with ``identity`` a paired device: a new subentry with its own token.

        ``token``: the one its waiting record was handed with the code (it may hold it already).
        A paired MAC takes the new identity instead. If it had one before, this is another
        device (or a reset one): it gets a new token, and whoever holds the old one is out.
        """
        data: dict[str, Any] = {CONF_MAC: mac, CONF_TOKEN: token or new_token(), **identity.as_data()}
        if open_:
            data[CONF_OPEN] = True
        if (device := self._devices.get(mac)) is not None:
            subentry = self._entry.subentries[device.subentry_id]
            if not device.identity.client_id and token is None:
                data[CONF_TOKEN] = device.token  # its first identity: the token the user configured stays
            _LOGGER.info("Device %s (%s) now has a new identity", device.name, mac)
            self.hass.config_entries.async_update_subentry(
                self._entry, subentry, data=data, title=title or subentry.title
            )
        else:
            self.hass.config_entries.async_add_subentry(
                self._entry,
                ConfigSubentry(
                    data=MappingProxyType(data),
                    subentry_type=SUBENTRY_DEVICE,
                    title=title or default_title(mac),
                    unique_id=mac,
                ),
            )
        self._sync()
        return self._devices[mac]

    @callback
    def async_bind_identity(self, device: XiaozhiDevice, client_id: str | None) -> None:
        """A device paired by MAC alone connected with its token: its ``Client-Id`` is its identity now.

        From then on its OTA requests prove themselves (py-xiaozhi fetches its token there).
        """
        if device.identity.client_id or not client_id or len(client_id) > 64:
            return
        subentry = self._entry.subentries[device.subentry_id]
        _LOGGER.info("Device %s (%s) is known by its client id from now on", device.name, device.mac)
        self.hass.config_entries.async_update_subentry(
            self._entry, subentry, data={**subentry.data, CONF_CLIENT_ID: client_id}
        )
        self._sync()

    @callback
    def _log_once(self, kind: str, message: str, *args: Any) -> None:
        """A hub-wide warning, logged once an hour at most per kind (the repeats at debug)."""
        self._log.report(kind, message % args if args else message)

    @callback
    def async_schedule_abort(self, mac: str) -> None:
        """Close the device's discovered-device cards once the running flow step has returned.

        The device was paired, or its code expired or made room for another; the step that is
        running now may belong to one of those cards.
        """
        self.hass.loop.call_soon(self._async_abort_pairing_flows, mac)

    @callback
    def _async_abort_pairing_flows(self, mac: str) -> None:
        """Abort the discovered-device cards of ``mac`` (paired, expired or evicted)."""
        for flow in self.hass.config_entries.flow.async_progress_by_handler(DOMAIN, match_context={"unique_id": mac}):
            self.hass.config_entries.flow.async_abort(flow["flow_id"])

    @callback
    def async_authenticate(self, mac: str, token: str) -> XiaozhiDevice | Refused:
        """The device whose MAC and token these are, or why not; constant-time token comparison."""
        device = self._devices.get(mac)
        expected = device.token if device is not None else _DUMMY_TOKEN
        matches = hmac.compare_digest(expected.encode(), token.encode())
        if not token:
            refusal = Refused.NO_TOKEN
        elif self._identities.was_issued(mac, token):
            refusal = Refused.EARLIER
        elif self.pairing.with_token(mac, token) is not None:
            refusal = Refused.PENDING
        else:
            refusal = Refused.GUESS
        if device is None or (refusal is Refused.PENDING and not matches):
            return refusal  # an identity still waiting for its code (a paired MAC's new one too)
        if not matches or not token:
            # Only a token Home Assistant gave this device before counts towards the repair: the
            # device (or its owner's client) kept it. A guess or no token is anyone naming the MAC,
            # and while the device is connected with its right token, nobody's but a stranger's.
            owners = refusal is Refused.EARLIER and device.link is None
            refused = device.count_refused_token() if owners else device.refused_tokens
            # The bookkeeping after the answer: refusing a paired MAC's wrong token costs what
            # refusing an unknown MAC does, so its timing tells nobody what is paired.
            self.hass.loop.call_soon(self._async_token_refused, device, refusal, refused)
            return refusal
        if device.accept_token():
            async_token_accepted(self.hass, mac)
        return device

    @callback
    def _async_token_refused(self, device: XiaozhiDevice, refusal: Refused, in_a_row: int) -> None:
        """Logged once per kind (diagnostics count them all), and the repair told."""
        why = {Refused.EARLIER: "a token it had before", Refused.NO_TOKEN: "no token"}.get(refusal, "a wrong token")
        device.log.report(f"token_{refusal}", f"refused a connection with {why}")
        if refusal is not Refused.EARLIER or device.link is not None:
            # A stranger can name a paired MAC with any token, and while the device is connected
            # with its right one, whoever presents another is not the device: the repair's advice
            # (a new token) would cut the real one off. Counted in the diagnostics only.
            return
        async_wrong_token(self.hass, device.mac, device.name, in_a_row)


def pseudo_mac(device_id: str) -> str:
    """A stable, locally administered MAC for a device id that is no MAC (``load-tester-001``)."""
    digest = hashlib.sha256(device_id.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def default_title(mac: str) -> str:
    """A paired device's name when the user gave none."""
    return f"Xiaozhi {mac}"
