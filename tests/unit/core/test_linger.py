import pytest

from indexer.core.linger import Linger


def steady(linger: Linger, rate: float, seconds: float) -> None:
    """Batches closing as the wait says, at a steady rate of events per second."""
    now = 100.0
    linger.closed(1, now)
    while seconds > 0:
        # a batch starts with an event and closes after the wait: at least one event apart
        interval = max(linger.wait_ms() / 1000, 1 / rate)
        now += interval
        seconds -= interval
        linger.closed(max(1, round(rate * interval)), now)


def test_a_slow_stream_waits_the_minimum() -> None:
    linger = Linger(20, 200, 1000)
    assert linger.wait_ms() == 20  # nothing seen yet
    steady(linger, 5, 10)
    assert linger.wait_ms() == 20  # 200 ms would gather one more event at most


@pytest.mark.parametrize(("rate", "expected_ms"), [(500, 200), (1000, 200), (5000, 200),
                                                   (10_000, 100), (40_000, 25),
                                                   (200_000, 20)])
def test_a_steady_stream_waits_to_gather_the_target(rate: float, expected_ms: int) -> None:
    linger = Linger(20, 200, 1000)
    steady(linger, rate, 20)
    assert linger.wait_ms() == pytest.approx(expected_ms, rel=0.1)


def test_the_wait_follows_the_rate_down_within_a_few_batches() -> None:
    linger = Linger(20, 200, 1000)
    steady(linger, 40_000, 5)
    assert linger.wait_ms() < 30
    now = 1000.0
    linger.closed(10, now)
    for _ in range(8):  # the stream slows to 100 events/s
        now += linger.wait_ms() / 1000 + 0.1
        linger.closed(10, now)
    assert linger.wait_ms() == 200


def test_equal_bounds_are_a_fixed_wait() -> None:
    linger = Linger(50, 50, 1000)
    steady(linger, 5000, 5)
    assert linger.wait_ms() == 50
    assert Linger(50, 10, 1000).max_ms == 50  # never below the minimum
