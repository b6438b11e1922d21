import pytest

from indexer.metrics import Metrics


def freshness(m: Metrics, table: str) -> float | None:
    return m.registry.get_sample_value("indexer_freshness_seconds", {"table": table})


def test_freshness_is_computed_when_scraped() -> None:
    now = [1000.0]
    m = Metrics(clock=lambda: now[0])
    assert freshness(m, "db.t") is None  # nothing written yet: no sample, not a fake 0
    m.written_up_to("db.t", 999_700)
    assert freshness(m, "db.t") == pytest.approx(0.3)
    now[0] = 1010.0  # idle for 10 s: the pipeline is 10 s behind what it last wrote
    assert freshness(m, "db.t") == pytest.approx(10.3)
    m.written_up_to("db.t", 1_009_900)
    m.written_up_to("db.t", 1_000_000)  # an older change written later does not go back
    assert freshness(m, "db.t") == pytest.approx(0.1)


def test_freshness_never_negative() -> None:
    m = Metrics(clock=lambda: 100.0)
    m.written_up_to("db.t", 105_000)  # source clock ahead of ours
    assert freshness(m, "db.t") == 0.0


def test_canary_age_grows_from_the_start_until_a_beat_is_indexed() -> None:
    now = [1000.0]
    m = Metrics(clock=lambda: now[0])

    def age() -> float | None:
        return m.registry.get_sample_value("indexer_canary_age_seconds")

    m.canary_from(990_000)  # the daemon started 10 s ago, no beat yet
    assert age() == pytest.approx(10.0)
    m.canary_indexed(999_000)  # written 1 s ago, confirmed now
    assert age() == pytest.approx(1.0)
    assert m.registry.get_sample_value("indexer_canary_latency_seconds_sum") == pytest.approx(1)
    m.canary_indexed(995_000)  # a late duplicate does not make the canary younger or older
    now[0] = 1030.0
    assert age() == pytest.approx(31.0)
    assert m.registry.get_sample_value("indexer_canary_latency_seconds_count") == 2
