"""What a device says of itself at its OTA check: to the device registry and its firmware facts.

Stock firmware posts its board, chip, version, partition table and running slot at every boot
(docs/protocol.md §6). A real board changes what it reports once an upgrade; one in hostile
hands could change it at every request, and each change is a registry write (a recorder event),
a firmware check and a save. So changes are rate-limited per device (``XiaozhiDevice.report_changes``).
"""

from homeassistant.core import callback
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.typing import UNDEFINED

from .device import XiaozhiDevice
from .pairing import DeviceReport
from .protocol.firmware import BoardFacts


def reported_facts(report: DeviceReport) -> BoardFacts | None:
    """What an OTA check says of the board and its firmware (None: not stock firmware)."""
    return BoardFacts.from_dict(
        {
            "board": report.board,
            "chip": report.chip,
            "version": report.firmware,
            "project": report.project,
            "board_name": report.board_name,
            "manufacturer": report.manufacturer,
            "app_slot": report.app_slot,
            "assets_size": report.assets_size,
        }
    )


@callback
def async_apply_report(device: XiaozhiDevice, report: DeviceReport, address: str | None = None) -> bool:
    """What the device said at its OTA check goes to the device registry and its facts.

    True when its firmware facts changed (a new version, say): what it can install is
    looked up again.
    """
    if address:
        device.async_seen_at(address)
    registry = dr.async_get(device.hass)
    known = registry.async_get(device.device_id)
    changes = {
        key: value
        for key, value, was in (
            ("model", report.board, getattr(known, "model", None)),
            ("sw_version", report.firmware, getattr(known, "sw_version", None)),
            ("hw_version", report.chip, getattr(known, "hw_version", None)),
        )
        if value and value != was
    }
    facts = reported_facts(report)
    if (changes or facts != device.facts) and not device.report_changes.allow(device.hass.loop.time()):
        device.log.report("reports_change_too_often", "what it reports at its OTA check changes too often; ignored")
        return False
    if changes:
        registry.async_update_device(
            device.device_id,
            model=changes.get("model", UNDEFINED),
            sw_version=changes.get("sw_version", UNDEFINED),
            hw_version=changes.get("hw_version", UNDEFINED),
        )
    if facts is None or facts == device.facts:
        return False
    device.async_set_facts(facts)
    return True
