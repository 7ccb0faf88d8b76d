"""The pairing state, with a fake clock (no waiting)."""

import pytest

from custom_components.xiaozhi_local.pairing import (
    CODE_TTL,
    LOCKOUT,
    MAX_FAILURES,
    CheckResult,
    DeviceReport,
    PairingManager,
    activation_message,
    new_token,
)


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
    assert pairing.get("aa:bb:cc:dd:ee:01") is None
    assert dropped == ["aa:bb:cc:dd:ee:01"]
    fresh, new = pairing.request("aa:bb:cc:dd:ee:01", DeviceReport())
    assert new
    assert fresh.created == clock.now


def test_codes_are_unique_among_pending(pairing: PairingManager) -> None:
    codes = {pairing.request(f"aa:bb:cc:dd:ee:{i:02x}", DeviceReport())[0].code for i in range(64)}
    assert len(codes) == 64


def test_check_and_lockout(pairing: PairingManager, clock: Clock) -> None:
    mac = "aa:bb:cc:dd:ee:01"
    pending, _ = pairing.request(mac, DeviceReport())
    wrong = "000000" if pending.code != "000000" else "111111"
    for _ in range(MAX_FAILURES - 1):
        assert pairing.check(mac, wrong) is CheckResult.WRONG
    assert pairing.check(mac, wrong) is CheckResult.LOCKED
    assert pairing.check(mac, pending.code) is CheckResult.LOCKED  # even the right code, for a while
    assert pairing.claim(pending.code) == (CheckResult.WRONG, None)  # a locked code cannot be claimed either
    clock.now += LOCKOUT
    assert pairing.check(mac, f"{pending.code[:3]} {pending.code[3:]}") is CheckResult.OK
    assert pairing.check("aa:bb:cc:dd:ee:99", pending.code) is CheckResult.UNKNOWN


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


def test_flood_is_bounded(pairing: PairingManager, clock: Clock, dropped: list[str]) -> None:
    real, _ = pairing.request("aa:bb:cc:00:00:00", DeviceReport())
    for i in range(1, 1000):
        clock.now += 0.001
        pairing.request(f"aa:bb:cc:dd:{i // 256:02x}:{i % 256:02x}", DeviceReport())
        if i % 10 == 0:
            assert pairing.touch("aa:bb:cc:00:00:00")  # a real device keeps polling /activate
    assert len(pairing) == pairing.max_pending
    assert pairing.get("aa:bb:cc:00:00:00") is real  # the least recently seen made room, not it
    assert len(dropped) == 1000 - pairing.max_pending
    assert not pairing.touch("aa:bb:cc:dd:00:01")


def test_remove(pairing: PairingManager, dropped: list[str]) -> None:
    pairing.request("aa:bb:cc:dd:ee:01", DeviceReport())
    pairing.remove("aa:bb:cc:dd:ee:01")
    pairing.remove("aa:bb:cc:dd:ee:01")
    assert len(pairing) == 0
    assert dropped == []  # paired, not dropped


def test_report_from_odd_bodies() -> None:
    full = DeviceReport.from_body(
        {
            "board": {"type": "bread-compact-wifi", "name": "x"},
            "application": {"version": "2.4.2"},
            "chip_model_name": "esp32s3",
            "language": "zh-CN",
        },
        client_id="uuid",
        language=None,
    )
    assert full == DeviceReport("bread-compact-wifi", "2.4.2", "esp32s3", "uuid", "zh-CN")
    odd = DeviceReport.from_body(
        {"board": "nope", "application": [], "chip_model_name": 5, "language": {"x": 1}},
        client_id=None,
        language="en-US",
    )
    assert odd == DeviceReport(None, None, None, None, "en-US")
    assert DeviceReport.from_body({"board": {"name": " " + "n" * 100}}, client_id="", language="").board == "n" * 64


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
