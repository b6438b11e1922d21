"""What the binlog source asks of the server, and how it names its replica."""

from __future__ import annotations

from indexer.source.binlog.lock import lock_name
from indexer.source.binlog.replication import bytes_behind, settings_problems
from indexer.source.binlog.source import replica_id

READY = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
         "binlog_row_metadata": "FULL", "log_bin_compress": "OFF"}


def test_a_server_set_up_for_it_passes() -> None:
    assert settings_problems(READY) == []
    # MySQL 8 names, with their defaults
    assert settings_problems({**READY, "binlog_transaction_compression": "OFF",
                              "binlog_row_value_options": ""}) == []


def test_each_missing_setting_is_named_with_what_to_set() -> None:
    problems = settings_problems({**READY, "binlog_format": "MIXED",
                                  "binlog_row_image": "MINIMAL", "binlog_row_metadata": "MINIMAL"})
    assert len(problems) == 3
    assert any("binlog_format = ROW" in p for p in problems)
    assert any("binlog_row_image = FULL" in p for p in problems)
    assert any("binlog_row_metadata = FULL" in p for p in problems)


def test_a_server_too_old_for_column_names_is_told_which_versions_have_them() -> None:
    old = {k: v for k, v in READY.items() if k != "binlog_row_metadata"}
    (problem,) = settings_problems(old)
    assert "MySQL 8.0.14+" in problem and "MariaDB 10.5+" in problem


def test_compressed_events_are_refused() -> None:
    assert settings_problems({**READY, "log_bin_compress": "ON"})
    assert settings_problems({**READY, "binlog_transaction_compression": "ON"})
    assert settings_problems({**READY, "binlog_row_value_options": "PARTIAL_JSON"})


def test_replica_ids_are_one_per_deployment_unless_configured() -> None:
    assert replica_id("indexer", 0) == replica_id("indexer", 0)
    assert replica_id("indexer", 0) != replica_id("search-sync", 0)
    assert 1 << 30 <= replica_id("indexer", 0) < 1 << 31
    assert replica_id("indexer", 77) == 77


def test_lock_names_fit_mysql_and_stay_one_per_deployment() -> None:
    assert lock_name("indexer") == "indexer-binlog:indexer"
    long = lock_name("x" * 100)
    assert len(long) <= 64 and long == lock_name("x" * 100) != lock_name("y" * 100)


def test_bytes_behind_count_the_rest_of_the_file_and_every_later_one() -> None:
    files = [("mysql-bin.000007", 1000), ("mysql-bin.000008", 500), ("mysql-bin.000009", 300)]
    assert bytes_behind(files, "mysql-bin.000008", 200) == 300 + 300
    assert bytes_behind(files, "mysql-bin.000009", 300) == 0
    assert bytes_behind(files, "mysql-bin.000003", 4) is None  # purged
