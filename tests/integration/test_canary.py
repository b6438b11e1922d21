"""The end-to-end canary on the real stack: beats travel MySQL -> Debezium -> Kafka ->
`indexer run` -> the search server; a connector that reads the binlog but emits nothing is
reported as upstream loss within the bound; daemons of one group write one beat at a time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from indexer.core.canary import Beat
from indexer.jobs.health import canary_report, check_health
from indexer.jobs.status import gather
from indexer.run.daemon import Daemon
from indexer.search.client import SearchClient, quote
from indexer.settings import Config
from indexer.source.canary_table import read_beat
from tests.integration.conftest import (
    COLUMNS,
    caught_up,
    running,
    sql,
    unique,
    wait_until,
)

# Fast beats so that the bounds are seconds: the shipped connector sends heartbeats every
# 10 s, so a bound of 15 s always holds a fresh one while it reads the binlog.
FAST = {"interval_s": 1, "max_age_s": 15}


async def indexed_beat(es: SearchClient, config: Config) -> Beat | None:
    assert config.canary_table is not None
    found = await es.request("GET", f"/{config.canary_table.alias}/_doc/"
                             f"{quote(config.kafka.group_id)}", ok=(404,))
    return Beat.from_row(found["_source"]) if found and found.get("found") else None


@pytest.mark.servers
async def test_beats_travel_the_whole_pipeline_and_are_measured(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
    config = make_config(table.entry(), canary=FAST)
    async with caught_up(db, es, table, config) as daemon:
        async def three_beats() -> bool:
            beat = await indexed_beat(es, config)
            return beat is not None and beat.seq >= 3

        await wait_until(three_beats, 60, "three canary beats indexed")
        registry = daemon.metrics.registry
        assert (registry.get_sample_value("indexer_canary_latency_seconds_count") or 0) >= 1
        assert (registry.get_sample_value("indexer_canaries_written_total") or 0) >= 3
        age = registry.get_sample_value("indexer_canary_age_seconds")
        assert age is not None and age < FAST["max_age_s"]
        assert not [p for p in await check_health(config) if "canary" in p]
        status = await gather(config, None)
        assert status.canary is not None
        assert status.canary["written"]["seq"] >= status.canary["indexed"]["seq"] >= 3
        assert status.canary["heartbeat_age_s"] is not None
        assert not [p for p in status.problems if "canary" in p]
        written, primary = await asyncio.to_thread(read_beat, config.mysql, config.canary_table,
                                                   config.kafka.group_id)
        assert written is not None and written.writer.startswith("indexer@")
        assert primary is None


async def test_a_connector_that_emits_no_canary_while_it_sends_heartbeats_is_upstream_loss(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    # The canary table lives where the connector does not capture: its beats go into the
    # binlog, Debezium reads past them and sends heartbeats, and emits no row change; the
    # very failure seen after MariaDB and Connect restarts, from where indexer stands.
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
    database = unique("uncaptured")
    sql(db, f"CREATE DATABASE `{database}`")
    try:
        config = make_config(table.entry(), canary={**FAST, "table": f"{database}.beats"})
        async with caught_up(db, es, table, config):
            started = time.monotonic()

            async def reported() -> bool:
                return any("changes are being lost upstream" in p
                           for p in (await canary_report(config))[1])

            await wait_until(reported, 60, "the canary reported lost", interval=1)
            # Reported once the bound has passed, and not long after.
            assert time.monotonic() - started < FAST["max_age_s"] + 30
            (line,) = [p for p in await check_health(config) if "canary" in p]
            assert "the connector reads the binlog but emits no row changes" in line
            assert f"{database}.beats" in line
            seen, _ = await canary_report(config)
            assert seen is not None and seen["written"]["seq"] > 10
            assert seen["in_kafka"] is None and seen["indexed"] is None
    finally:
        sql(db, f"DROP DATABASE `{database}`")


async def test_daemons_of_one_group_write_one_beat_an_interval_and_hand_over(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
    first = make_config(table.entry(), canary=FAST, kafka={"client_id": "first"})
    group = {"group_id": first.kafka.group_id, "dead_letter_topic": first.kafka.dead_letter_topic}
    second = make_config(table.entry(), canary=FAST, kafka={**group, "client_id": "second"})
    assert first.canary_table is not None

    async def beat() -> Beat:
        found, _ = await asyncio.to_thread(read_beat, first.mysql, first.canary_table,
                                           first.kafka.group_id)
        assert found is not None
        return found

    async with caught_up(db, es, table, first) as one, running(second):
        await wait_until(lambda: _balanced(one), 60, "both daemons hold partitions")
        await asyncio.sleep(2)
        before = await beat()
        await asyncio.sleep(8)
        after = await beat()
        # One writer: about one beat a second, not two (the second daemon does not race).
        assert 5 <= after.seq - before.seq <= 11, (before, after)
        assert after.writer == before.writer
        owner = after.writer.split("@")[0]
        assert owner in ("first", "second")
    # The daemon that did not write starts alone: it holds the canary's partition now, and
    # the beats go on from it.
    async with running(second if owner == "first" else first):
        handed = await beat()

        async def moving() -> bool:
            now = await beat()
            return now.seq > handed.seq + 2 and now.writer != after.writer

        await wait_until(moving, 90, "the other daemon writing beats")


async def _balanced(daemon: Daemon) -> bool:
    parts = daemon._parts
    return parts is not None and len(parts.source.assignment()) == 1


async def test_a_stopped_daemon_is_a_missing_writer(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
    config = make_config(table.entry(), canary={"interval_s": 1, "max_age_s": 3})

    async def beat_indexed() -> bool:
        found = await indexed_beat(es, config)
        return found is not None and found.seq >= 2

    async with caught_up(db, es, table, config):
        await wait_until(beat_indexed, 60, "canary beats indexed")
    await asyncio.sleep(4)
    (line,) = [p for p in await check_health(config) if "canary" in p]
    assert "no daemon of the group writes beats" in line
