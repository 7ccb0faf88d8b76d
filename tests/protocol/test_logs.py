"""Each kind of problem warned about once (per device), or again after a while (the hub's)."""

import logging

import pytest

from custom_components.xiaozhi_local.protocol.logs import OnceLogger


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records]


def test_a_device_problem_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    log = OnceLogger("cc:ba:97:04:92:94")
    for _ in range(3):
        log.report("bad_frame", "a frame")
    log.report("not_json", "text")
    assert levels(caplog) == [
        (logging.WARNING, "Device cc:ba:97:04:92:94: a frame (bad_frame)"),
        (logging.DEBUG, "Device cc:ba:97:04:92:94: a frame (bad_frame)"),
        (logging.DEBUG, "Device cc:ba:97:04:92:94: a frame (bad_frame)"),
        (logging.WARNING, "Device cc:ba:97:04:92:94: text (not_json)"),
    ]
    assert log.counts == {"bad_frame": 3, "not_json": 1}


def test_the_hub_warns_again_after_a_while(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    now = [0.0]
    log = OnceLogger("", again_after=3600.0, clock=lambda: now[0])
    for at in (0.0, 3599.0, 3600.0):
        now[0] = at
        log.report("auto_pair_limit", "Refused x")
    assert [level for level, _ in levels(caplog)] == [logging.WARNING, logging.DEBUG, logging.WARNING]
    assert levels(caplog)[0][1] == "Refused x (auto_pair_limit)"
