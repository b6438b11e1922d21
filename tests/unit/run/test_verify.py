"""Continuous verification's pure parts: slicing a pass, pacing it, believing a difference,
where the quick pass resumes, and what its record says to `indexer check`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from indexer.config import build_config
from indexer.core.layout import Column, TableLayout
from indexer.core.verification import record_problems
from indexer.errors import ConfigError
from indexer.jobs.chunk_check import Difference, Plan, compare_hashes
from indexer.jobs.table_reads import RowReads
from indexer.run.verify import (
    believed,
    next_since,
    pause_s,
    resumable,
    slices,
    summary,
)
from indexer.settings import VerifySettings

LAYOUT = TableLayout("db", "t", (Column("id", "int", "int(11)", 0, 1),))
TABLE = build_config({"tables": [{"name": "db.t"}]}, Path()).tables[0]
READS = RowReads(build_config({"tables": [{"name": "db.t"}]}, Path()), TABLE, LAYOUT, [])


def test_slices_cover_every_chunk_once_with_open_ends() -> None:
    plan = Plan(READS, width=2000, low=1, high=100_000)  # chunks 0..50
    found = slices(plan, per_slice=16)
    assert found == [(None, 15), (16, 31), (32, 47), (48, None)]
    assert slices(Plan(READS, width=10, low=5, high=9), per_slice=16) == [(None, None)]
    # Buckets of crc32(id) and empty tables: one slice, one scan.
    assert slices(Plan(READS, width=0)) == [(None, None)]
    assert slices(Plan(READS, width=2000)) == [(None, None)]


def test_negative_keys_slice_on_floor_division_like_the_sql() -> None:
    plan = Plan(READS, width=100, low=-250, high=120)  # chunks -3..1
    assert slices(plan, per_slice=2) == [(None, -2), (-1, 0), (1, None)]


def test_pauses_spread_a_pass_over_the_period_and_bound_the_load() -> None:
    # 20 steps in an hour: 180 s apart, a 2 s step is far under 5%.
    assert pause_s(2.0, 180.0, 0.05) == 178.0
    # A step of 20 s needs 380 s of rest at 5%, more than the spread asks.
    assert pause_s(20.0, 180.0, 0.05) == pytest.approx(380.0)
    assert pause_s(1.0, 0.5, 1.0) == 0.0


def test_a_difference_is_believed_only_when_both_looks_agree_and_the_row_stood_still() -> None:
    first = {"1": Difference("missing", 11), "2": Difference("stale", 22),
             "3": Difference("extra", None), "4": Difference("stale", 44)}
    second = {"1": Difference("missing", 11),  # same: believed
              "2": Difference("stale", 23),  # the row changed between looks: on its way
              "3": Difference("extra", None),  # same: believed
              "5": Difference("stale", 55)}  # new in the second look: next time
    assert believed(first, second) == {"1": Difference("missing", 11),
                                       "3": Difference("extra", None)}


def test_hashes_compare_into_missing_extra_and_stale() -> None:
    found = compare_hashes({"1": 10, "2": 20, "3": 30}, {"2": 20, "3": 31, "4": 40})
    assert found == {"1": Difference("missing", 10), "3": Difference("stale", 30),
                     "4": Difference("extra", None)}
    line = summary(found)
    assert line.startswith("missing 1, extra 1, stale 1: 1 (missing), 3 (stale), 4 (extra)")


def test_the_quick_pass_resumes_one_interval_back_or_where_a_cut_pass_stopped() -> None:
    assert next_since(None, "2026-12-01 10:00:30.500000", False, 60) == (
        "2026-12-01 09:59:30.500000")
    assert next_since("a", None, False, 60) == "a"  # nothing read: the same start again
    # Cut at its row limit: the rest next, from where it stopped.
    assert next_since("2026-12-01 09:00:00", "2026-12-01 09:10:00", True, 60) == (
        "2026-12-01 09:10:00")
    # Cut without moving (more rows share one time than a pass takes): from the newest again.
    assert next_since("2026-12-01 09:10:00", "2026-12-01 09:10:00", True, 60) is None


def test_the_record_tells_check_about_rows_not_repaired_and_passes_overdue() -> None:
    settings = VerifySettings(period_s=600)
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
    assert record_problems(TABLE, None, settings, now) == []
    clean = {"unrepaired_count": 0, "last_pass_at": "2026-12-01T11:55:00+00:00"}
    assert record_problems(TABLE, clean, settings, now) == []
    drift = {**clean, "unrepaired_count": 3, "found_at": "2026-12-01T11:56:00+00:00",
             "unrepaired": {"7": "missing", "8": "stale", "9": "extra"}, "repair": False}
    (line,) = record_problems(TABLE, drift, settings, now)
    assert line.startswith("db.t: 3 rows differ from MySQL (found 2026-12-01T11:56:00+00:00; "
                           "e.g. 7 (missing), 8 (stale), 9 (extra))")
    assert "`indexer reconcile --repair t`" in line and "verify.repair = true" in line
    overdue = {**clean, "last_pass_at": "2026-12-01T11:30:00+00:00"}
    (line,) = record_problems(TABLE, overdue, settings, now)
    assert "no whole verification pass since 2026-12-01T11:30:00+00:00" in line
    assert record_problems(TABLE, overdue, VerifySettings(enabled=False), now) == []


@pytest.mark.parametrize(("section", "message"), [
    ({"period_s": 0}, "verify.period_s must be more than 0"),
    ({"max_load_share": 0}, "verify.max_load_share must be more than 0 and at most 1"),
    ({"max_load_share": 1.5}, "verify.max_load_share must be more than 0 and at most 1"),
    ({"settle_s": -1}, "verify.settle_s must be 0 or more"),
    ({"repair": "perhaps"}, "verify.repair: expected true or false"),
])
def test_bad_verify_settings_are_refused_naming_the_setting(section: dict[str, object],
                                                           message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({"tables": [{"name": "db.t"}], "verify": section}, Path())


def test_a_tables_changed_column_is_a_plain_identifier_or_off() -> None:
    def table(value: str) -> object:
        return build_config({"tables": [{"name": "db.t", "changed_column": value}]},
                            Path()).tables[0].changed_column

    assert table("updated_at") == "updated_at"
    assert table("") == ""
    with pytest.raises(ConfigError, match=r"tables\[db.t\].changed_column"):
        table("updated at")


def test_a_pass_cut_short_is_taken_up_where_it_stopped_unless_it_is_old() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
    cut = {"pass_started_at": "2026-12-01T11:50:00+00:00", "next_key": 64_000}
    assert resumable(cut, 600, now) == 64_000
    assert resumable(cut, 60, now) == 64_000  # ten periods: a storm of restarts goes on
    assert resumable(cut, 59, now) is None  # started more than ten periods ago: anew
    assert resumable({"pass_started_at": "2026-12-01T11:50:00+00:00"}, 600, now) is None
    assert resumable({}, 600, now) is None
