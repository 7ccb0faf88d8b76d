"""What a device says of itself at its OTA check: to the device registry and its firmware facts.

Stock firmware posts its board, chip, version, partition table and running slot at every boot
(docs/protocol.md §6). A real board changes what it reports once an upgrade; one in hostile
hands could change it at every request, and each change is a registry write (a recorder event),
a firmware check and a save. So changes are rate-limited per device (``XiaozhiDevice.report_changes``).
"""

from dataclasses import dataclass
from typing import Any

from homeassistant.core import callback
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.typing import UNDEFINED

from ..device import XiaozhiDevice
from ..protocol.assets import assets_partition_size
from ..protocol.firmware import BoardFacts
from ..protocol.partitions import update_slot_size
from .identities import Identity


def _text(value: Any, limit: int = 64) -> str | None:
    return value.strip()[:limit] or None if isinstance(value, str) else None


@dataclass(slots=True)
class DeviceReport:
    """What a device says about itself in its OTA request (every field optional)."""

    board: str | None = None
    firmware: str | None = None
    chip: str | None = None
    client_id: str | None = None
    language: str | None = None
    serial: str | None = None
    board_name: str | None = None
    """``board.name``: the build's name, which the firmware project's release files carry."""
    manufacturer: str | None = None
    project: str | None = None
    """``application.name``: the project the running image was built from (``xiaozhi``)."""
    app_slot: int | None = None
    """Bytes of the app partition its next update goes to (from ``partition_table`` and ``ota``)."""
    assets_size: int | None = None
    """Bytes of its ``assets`` partition (from ``partition_table``)."""
    follows_answer: bool = False
    """Stock firmware: it posts its ``partition_table`` and running ``ota`` label, and takes its
    transport from the answer. Clients that post only ``application`` and ``board`` (py-xiaozhi)
    pick their transport themselves (admission/transport_choice.py)."""

    @property
    def identity(self) -> Identity:
        """The identity this request presents."""
        return Identity(self.client_id, self.serial)

    @classmethod
    def from_request(cls, body: dict[str, Any], headers: Any) -> DeviceReport:
        """Pick the known fields out of an OTA request, ignoring anything of the wrong type.

        ``Client-Id`` is a header (the body's ``uuid`` holds the same value on stock firmware);
        ``Serial-Number`` is sent by boards with a factory serial (``Activation-Version: 2``).
        """
        board: dict[str, Any] = body["board"] if isinstance(body.get("board"), dict) else {}
        application: dict[str, Any] = body["application"] if isinstance(body.get("application"), dict) else {}
        ota: dict[str, Any] = body["ota"] if isinstance(body.get("ota"), dict) else {}
        return cls(
            board=_text(board.get("type")) or _text(board.get("name")),
            firmware=_text(application.get("version")),
            chip=_text(body.get("chip_model_name")),
            client_id=_text(headers.get("Client-Id")) or _text(body.get("uuid")),
            language=_text(headers.get("Accept-Language")) or _text(body.get("language")),
            serial=_text(headers.get("Serial-Number")),
            board_name=_text(board.get("name")),
            manufacturer=_text(board.get("manufacturer")),
            project=_text(application.get("name")),
            app_slot=update_slot_size(body.get("partition_table"), ota.get("label")),
            assets_size=assets_partition_size(body.get("partition_table")),
            follows_answer=isinstance(body.get("partition_table"), list) and isinstance(ota.get("label"), str),
        )


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
