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
