"""The canary's verdicts: where the newest beat stopped says what broke."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from indexer.config import build_config
from indexer.core import canary
from indexer.core.canary import Beat, Sighting
from indexer.errors import ConfigError
from indexer.settings import CanarySettings

NOW = 1_700_000_000_000
SETTINGS = CanarySettings(interval_s=5, max_age_s=30)
CONFIG = build_config({"tables": [{"name": "shop.products"}]}, Path())
TABLE = CONFIG.canary_table
assert TABLE is not None


def beat(seq: int, age_s: float) -> Beat:
    return Beat("g", seq, int(NOW - age_s * 1000), "indexer@host:1")


def verdict(written: Beat | None, in_kafka: Beat | None, indexed: Beat | None,
            heartbeat_age_s: float | None = 3.0) -> list[str]:
    assert TABLE is not None
    return canary.problems(SETTINGS, TABLE, "g", Sighting(written, in_kafka, indexed,
                                                          heartbeat_age_s), NOW)


def test_every_beat_indexed_is_healthy() -> None:
    assert verdict(beat(10, 2), beat(10, 2), beat(10, 2)) == []


def test_beats_on_their_way_within_the_bound_are_healthy() -> None:
    # The last beat indexed is 20 s old, the ones after it are in flight: not yet a problem.
    assert verdict(beat(14, 1), beat(13, 6), beat(10, 20)) == []


def test_beats_written_but_not_in_kafka_while_heartbeats_arrive_is_upstream_loss() -> None:
    (line,) = verdict(beat(30, 1), beat(20, 50), beat(20, 50), heartbeat_age_s=4)
    assert "the connector reads the binlog but emits no row changes" in line
    assert "changes are being lost upstream" in line
    assert "heartbeats still arrive (newest 4 s old)" in line
    assert "indexer reconcile --repair --all" in line
    assert "for 45 s" not in line and "last 45 s" in line  # the first beat lost: 50 - 5 s ago


def test_no_heartbeats_either_is_a_stopped_connector_not_a_loss() -> None:
    (line,) = verdict(beat(30, 1), beat(20, 50), beat(20, 50), heartbeat_age_s=120)
    assert "changes are being lost upstream" not in line
    assert "the connector is stopped, failed or cannot reach MySQL or Kafka" in line
    (line,) = verdict(beat(30, 1), None, None, heartbeat_age_s=None)
    assert "no heartbeat either" in line


def test_beats_in_kafka_but_not_indexed_is_the_daemon_behind() -> None:
    (line,) = verdict(beat(30, 1), beat(30, 1), beat(20, 50))
    assert "beats reach Kafka" in line and "`indexer run` is behind or stuck" in line
    assert "lost upstream" not in line


def test_on_the_binlog_source_a_beat_not_indexed_is_the_reader_and_no_kafka_is_named() -> None:
    assert TABLE is not None
    (line,) = canary.problems(SETTINGS, TABLE, "g", Sighting(
        beat(30, 1), None, beat(20, 50), None, kafka_read=True, direct=True), NOW)
    assert "not reading the binlog, or is behind" in line and "Kafka" not in line
    assert canary.problems(SETTINGS, TABLE, "g", Sighting(
        beat(30, 1), None, beat(30, 1), None, direct=True), NOW) == []


def test_no_beat_written_lately_is_a_missing_writer() -> None:
    lines = verdict(beat(30, 90), beat(30, 90), beat(30, 90))
    assert len(lines) == 1 and "no daemon of the group writes beats" in lines[0]
    assert verdict(None, None, None)[0].endswith("(CREATE, INSERT, UPDATE)?")


def test_a_first_beat_is_not_late_the_moment_it_is_written() -> None:
    assert verdict(beat(1, 2), None, None) == []
    # Nine beats written, none arrived: the first was written ~42 s ago.
    (line,) = verdict(beat(9, 2), None, None)
    assert "lost upstream" in line and "last 42 s" in line


def test_a_beat_comes_from_a_canary_document_and_its_row() -> None:
    body = orjson.dumps({"group_id": "g", "seq": 3, "beat_ms": 5, "writer": "w",
                         "_indexer": {"hash": 1, "bucket": 2}})
    assert Beat.from_document(body) == Beat("g", 3, 5, "w")
    assert Beat.from_document(orjson.dumps({"_indexer": {"deleted": True}})) is None


def test_the_canary_table_defaults_to_the_first_tables_database() -> None:
    assert TABLE is not None
    assert (TABLE.name, TABLE.topic, TABLE.alias) == (
        "shop.indexer_canary", "mysql.shop.indexer_canary", "indexer-canary-mysql-shop")
    assert TABLE.canary and TABLE not in CONFIG.tables
    off = build_config({"tables": [{"name": "shop.products"}], "canary": {"enabled": False}},
                       Path())
    assert off.canary_table is None
    # Deployments sharing a search server share no canary index: another source or database
    # has another alias by default.
    other = build_config({"tables": [{"name": "Shop_2.products"}],
                          "connector": {"topic_prefix": "eu"}}, Path()).canary_table
    assert other is not None and other.alias == "indexer-canary-eu-shop_2"
    moved = build_config({"tables": [{"name": "shop.products"}], "canary": {
        "table": "ops.beats", "alias": "beats", "interval_s": 2, "max_age_s": 10}}, Path())
    assert moved.canary_table is not None and moved.canary_table.topic == "mysql.ops.beats"


@pytest.mark.parametrize(("section", "message"), [
    ({"interval_s": 0}, "canary.interval_s must be more than 0"),
    ({"interval_s": 10, "max_age_s": 15}, "canary.max_age_s must be at least twice"),
    ({"table": "nodot"}, "canary.table: expected '<database>.<table>'"),
    ({"table": "a.b-c"}, "canary.table: 'b-c' is not a plain MySQL identifier"),
    ({"alias": "Bad"}, "canary.alias: 'Bad' is not a valid index name"),
    ({"speed": 1}, "canary.speed: unknown setting"),
])
def test_bad_canary_settings_are_refused_naming_the_setting(section: dict[str, object],
                                                           message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config({"tables": [{"name": "shop.products"}], "canary": section}, Path())


def test_beats_go_to_the_mysql_server_the_canary_names_with_the_rest_of_mysql() -> None:
    assert CONFIG.canary_mysql == CONFIG.mysql
    moved = build_config({"tables": [{"name": "shop.products"}],
                          "mysql": {"host": "replica", "port": 3307, "user": "u"},
                          "canary": {"mysql_host": "primary"}}, Path())
    assert (moved.canary_mysql.host, moved.canary_mysql.port, moved.canary_mysql.user) == (
        "primary", 3307, "u")
    assert moved.mysql.host == "replica"


def test_a_table_named_like_the_canary_is_refused() -> None:
    with pytest.raises(ConfigError, match="is used by two tables"):
        build_config({"tables": [{"name": "shop.indexer_canary", "alias": "x"}]}, Path())


def test_a_side_that_cannot_be_read_concludes_nothing_but_the_others_still_speak() -> None:
    assert TABLE is not None

    def seen(**kwargs: object) -> list[str]:
        assert TABLE is not None
        sighting = Sighting(beat(30, 1), beat(20, 50), beat(20, 50), 3.0)
        return canary.problems(SETTINGS, TABLE, "g",
                               Sighting(**{**sighting.__dict__, **kwargs}), NOW)

    # The search server away: the beats still do not reach Kafka, and that is still a loss.
    (line,) = seen(indexed=None, index_read=False)
    assert "changes are being lost upstream" in line
    # ...while beats that reach Kafka say nothing about the index that cannot be read.
    assert seen(in_kafka=beat(30, 1), indexed=None, index_read=False) == []
    # Kafka away: only what the index shows.
    (line,) = seen(in_kafka=None, heartbeat_age_s=None, kafka_read=False)
    assert "Kafka cannot be read" in line and "lost upstream" not in line
    assert seen(in_kafka=None, indexed=beat(30, 1), kafka_read=False) == []
