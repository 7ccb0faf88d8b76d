"""The pairing state, with a fake clock (no waiting)."""

import pytest

from custom_components.xiaozhi_local.admission.identities import Identity
from custom_components.xiaozhi_local.admission.pairing import (
    CODE_TTL,
    LOCKOUT,
    MAX_FAILURES,
    MAX_PER_SOURCE,
    CheckResult,
    PairingManager,
    activation_message,
    new_token,
)
from custom_components.xiaozhi_local.admission.reports import DeviceReport


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dropped() -> list[str]:
    return []


@pytest.fixture
def pairing(clock: Clock, dropped: list[str]) -> PairingManager:
    return PairingManager(clock=clock, on_drop=dropped.append)


NOBODY = Identity()


def test_code_is_stable_until_it_expires(pairing: PairingManager, clock: Clock, dropped: list[str]) -> None:
    first, new = pairing.request("aa:bb:cc:dd:ee:01", DeviceReport(board="b1"))
    assert new
    assert len(first.code) == 6
    assert first.code.isdigit()
    assert len(first.challenge) == 32
    clock.now += CODE_TTL - 1
    again, new = pairing.request("aa:bb:cc:dd:ee:01", DeviceReport(board="b2"))
    assert not new
    assert again.code == first.code
    assert again.report.board == "b2"
    clock.now += 1
    assert pairing.find("aa:bb:cc:dd:ee:01", NOBODY) is None
    assert dropped == ["aa:bb:cc:dd:ee:01"]
    fresh, new = pairing.request("aa:bb:cc:dd:ee:01", DeviceReport())
    assert new
    assert fresh.created == clock.now


def test_codes_are_unique_among_pending(pairing: PairingManager) -> None:
    codes = {pairing.request(f"aa:bb:cc:dd:ee:{i:02x}", DeviceReport(), source=str(i))[0].code for i in range(64)}
    assert len(codes) == 64


def test_each_identity_of_a_mac_gets_its_own_code(pairing: PairingManager, dropped: list[str]) -> None:
    """A stranger naming a waiting device's MAC gets another code: the user's code binds the real one."""
    mac = "aa:bb:cc:dd:ee:01"
    real, _ = pairing.request(mac, DeviceReport(client_id="real"))
    stranger, new = pairing.request(mac, DeviceReport(client_id="stranger"))
    assert new
    assert stranger.code != real.code
    assert pairing.find(mac, Identity("real")) is real
    assert {p.report.client_id for p in pairing.for_mac(mac)} == {"real", "stranger"}
    assert pairing.check(mac, real.code) == (CheckResult.OK, real)
    assert pairing.claim(stranger.code) == (CheckResult.OK, stranger)
    assert not pairing.touch(mac, Identity("someone else"))
    pairing.remove(mac)
    assert pairing.for_mac(mac) == []
    assert dropped == []


def test_check_and_lockout(pairing: PairingManager, clock: Clock) -> None:
    mac = "aa:bb:cc:dd:ee:01"
    pending, _ = pairing.request(mac, DeviceReport())
    wrong = "000000" if pending.code != "000000" else "111111"
    for _ in range(MAX_FAILURES - 1):
        assert pairing.check(mac, wrong) == (CheckResult.WRONG, None)
    assert pairing.check(mac, wrong) == (CheckResult.LOCKED, None)
    assert pairing.check(mac, pending.code) == (CheckResult.LOCKED, None)  # even the right code, for a while
    assert pairing.claim(pending.code) == (CheckResult.WRONG, None)  # a locked code cannot be claimed either
    clock.now += LOCKOUT
    assert pairing.check(mac, f"{pending.code[:3]} {pending.code[3:]}") == (CheckResult.OK, pending)
    assert pairing.check("aa:bb:cc:dd:ee:99", pending.code) == (CheckResult.UNKNOWN, None)


def test_claim_by_code_and_hub_wide_lockout(pairing: PairingManager, clock: Clock) -> None:
    pending, _ = pairing.request("aa:bb:cc:dd:ee:01", DeviceReport())
    assert pairing.claim(pending.code) == (CheckResult.OK, pending)
    wrong = "000000" if pending.code != "000000" else "111111"
    for _ in range(MAX_FAILURES - 1):
        assert pairing.claim(wrong) == (CheckResult.WRONG, None)
    assert pairing.claim(wrong) == (CheckResult.LOCKED, None)
    assert pairing.claim(pending.code) == (CheckResult.LOCKED, None)
    clock.now += LOCKOUT
    assert pairing.claim(pending.code) == (CheckResult.OK, pending)


def test_flood_from_one_address_only_pushes_out_its_own(
    pairing: PairingManager, clock: Clock, dropped: list[str]
) -> None:
    """22 random MACs a second from one address: the device the user is pairing stays."""
    real, _ = pairing.request("aa:bb:cc:00:00:00", DeviceReport(client_id="real"), source="192.0.2.10")
    for i in range(1, 1000):
        clock.now += 0.045
        pairing.request(f"aa:bb:cc:dd:{i // 256:02x}:{i % 256:02x}", DeviceReport(), source="192.0.2.66")
    assert len(pairing) == 1 + MAX_PER_SOURCE
    assert pairing.find("aa:bb:cc:00:00:00", Identity("real")) is real  # not even touched meanwhile
    assert len(dropped) == 999 - MAX_PER_SOURCE
    assert "aa:bb:cc:00:00:00" not in dropped


def test_flood_from_many_addresses_is_bounded(pairing: PairingManager, clock: Clock, dropped: list[str]) -> None:
    """Past ``max_pending``, whoever holds the most makes room: a lone real device is never it."""
    real, _ = pairing.request("aa:bb:cc:00:00:00", DeviceReport(client_id="real"), source="192.0.2.10")
    for i in range(1, 1000):
        clock.now += 0.001
        pairing.request(f"aa:bb:cc:dd:{i // 256:02x}:{i % 256:02x}", DeviceReport(), source=f"10.0.{i % 40}.1")
    assert len(pairing) == pairing.max_pending
    assert pairing.find("aa:bb:cc:00:00:00", Identity("real")) is real
    assert len(dropped) == 1000 - pairing.max_pending
    assert not pairing.touch("aa:bb:cc:dd:00:01", NOBODY)


def test_remove(pairing: PairingManager, dropped: list[str]) -> None:
    pairing.request("aa:bb:cc:dd:ee:01", DeviceReport())
    pairing.remove("aa:bb:cc:dd:ee:01")
    pairing.remove("aa:bb:cc:dd:ee:01")
    assert len(pairing) == 0
    assert dropped == []  # paired, not dropped


def test_report_from_odd_requests() -> None:
    full = DeviceReport.from_request(
        {
            "board": {"type": "bread-compact-wifi", "name": "x", "manufacturer": "m"},
            "application": {"name": "xiaozhi", "version": "2.4.2"},
            "chip_model_name": "esp32s3",
            "language": "zh-CN",
            "uuid": "body-uuid",
        },
        {"Client-Id": "uuid", "Serial-Number": "SN1"},
    )
    assert full == DeviceReport("bread-compact-wifi", "2.4.2", "esp32s3", "uuid", "zh-CN", "SN1", "x", "m", "xiaozhi")
    odd = DeviceReport.from_request(
        {"board": "nope", "application": [], "chip_model_name": 5, "language": {"x": 1}, "uuid": 7},
        {"Accept-Language": "en-US"},
    )
    assert odd == DeviceReport(None, None, None, None, "en-US")
    assert DeviceReport.from_request({"uuid": "from-body"}, {}).client_id == "from-body"
    assert DeviceReport.from_request({"board": {"name": " " + "n" * 100}}, {}).board == "n" * 64


@pytest.mark.parametrize(
    ("presented", "recorded", "proves"),
    [
        (Identity("a"), Identity("a"), True),
        (Identity("a", "SN"), Identity("a"), True),  # a serial number recorded nowhere is not asked for
        (Identity("a", "SN"), Identity("a", "SN"), True),
        (Identity("a"), Identity("a", "SN"), False),  # activation v2: the serial number must come too
        (Identity("a", "SN2"), Identity("a", "SN"), False),
        (Identity("b"), Identity("a"), False),
        (Identity(None), Identity("a"), False),
        (Identity("a"), Identity(None), False),  # nothing recorded proves nothing
        (Identity(None), Identity(None), False),
    ],
)
def test_identity_proof(presented: Identity, recorded: Identity, proves: bool) -> None:
    assert presented.proves(recorded) is proves


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("zh-CN", "请在 Home Assistant 中输入 123456"),
        ("en-US", "Enter 123456 in Home Assistant"),
        (None, "Enter 123456"),
    ],
)
def test_activation_message(language: str | None, text: str) -> None:
    assert activation_message("123456", language).startswith(text)


def test_tokens() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(t) >= 43 and " " not in t for t in tokens)
