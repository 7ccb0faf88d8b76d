"""The rate limits (pure): the shapes the hub, connections, devices, pairing and MQTT bound things with."""

from custom_components.xiaozhi_local.limits import SlidingWindow, Strikes, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=3.0)
    assert [bucket.allow(10.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.allow(10.4)  # 0.8 of a token
    assert bucket.allow(10.5)
    assert [bucket.allow(100.0) for _ in range(4)] == [True, True, True, False]  # refills to the burst, no more
    assert not bucket.allow(99.0)  # a clock that steps back adds nothing


def test_sliding_window_slides() -> None:
    clock = Clock()
    limit = SlidingWindow(3, 3600.0, clock=clock)
    assert [limit.allow() for _ in range(4)] == [True, True, True, False]
    clock.now += 3599
    assert not limit.allow()
    clock.now += 1
    assert limit.allow()


def test_sliding_window_counts_past_its_limit_bounded() -> None:
    clock = Clock()
    window = SlidingWindow(5, 60.0, clock=clock)
    assert [window.count() for _ in range(7)] == [1, 2, 3, 4, 5, 5, 5]  # memory stays at the limit
    clock.now += 60
    assert window.count() == 1


def test_strikes_per_key_over_a_period_and_bounded_in_keys() -> None:
    clock = Clock()
    strikes = Strikes(600.0, max_keys=2, clock=clock)
    assert [strikes.add("a") for _ in range(3)] == [1, 2, 3]
    clock.now += 1
    assert strikes.add("b") == 1
    clock.now += 1
    assert strikes.add("c") == 1  # a third key: the oldest ("a") is forgotten
    assert len(strikes) == 2
    assert strikes.add("a") == 1
    clock.now += 601
    assert strikes.add("b") == 1  # its period is over: counted anew
