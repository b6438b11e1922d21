"""The daemon under failure: kill -9, SIGTERM, Elasticsearch down or answering 429,
rebalances. Each ends with the index equal to MySQL."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.search.client import SearchClient
from tests.integration.conftest import (
    COLUMNS,
    REPO,
    all_events,
    at_least,
    caught_up,
    committed_offsets,
    count,
    create_topic,
    documents,
    end_offsets,
    expected_rows,
    insert_rows,
    live_index,
    produce,
    raw_documents,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_until,
)


def stack(*args: str) -> None:
    subprocess.run([str(REPO / "dev" / "stack.sh"), *args], check=True, timeout=300,
                   stdout=subprocess.DEVNULL)


async def test_kill_9_mid_batch_then_restart_loses_nothing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, spawn: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 20000)
    sql(db, f"DELETE FROM `{table.name}` WHERE id % 10 = 0")
    await all_events(db, table)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file,
                         batch={"max_events": 250, "in_flight": 2})
    first = spawn(config_file)
    await wait_until(lambda: at_least(es, table.alias, 2000), 60, "a first part")
    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(10) == -signal.SIGKILL
    indexed = await count(es, table.alias)
    committed = sum((await committed_offsets(config.kafka.group_id, table.topic)).values())
    ends = sum((await end_offsets(table.topic)).values())
    assert committed < ends, "killed too late to be mid-stream"
    second = spawn(config_file)
    await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
    assert second.proc.poll() is None, second.tail()
    assert indexed < 18000



async def test_sigterm_finishes_the_batch_commits_and_exits_0(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, spawn: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 20000)
    await all_events(db, table)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file, batch={"max_events": 250})
    daemon = spawn(config_file)
    await wait_until(lambda: at_least(es, table.alias, 1000), 60, "a first part")
    started = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(30) == 0, daemon.tail()
    assert time.monotonic() - started < 25
    committed = sum((await committed_offsets(config.kafka.group_id, table.topic)).values())
    # Everything committed was written: the index holds at least the committed prefix.
    assert 0 < committed <= await count(es, table.alias)
    spawn(config_file)
    await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)


async def test_elasticsearch_down_30s_then_back_loses_nothing_and_deletes_stay(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 50)
    sql(db, f"UPDATE `{table.name}` SET qty = 99 WHERE id = 1")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 1")
    config = make_config(table.entry())
    async with caught_up(db, es, table, config) as daemon:
        stack("down", "elasticsearch")
        try:
            down_at = time.monotonic()
            insert_rows(db, table.name, 51, 300)
            sql(db, f"UPDATE `{table.name}` SET name = 'while down' WHERE id < 20")
            sql(db, f"DELETE FROM `{table.name}` WHERE id BETWEEN 40 AND 45")
            await asyncio.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
            retries = daemon.metrics.registry.get_sample_value(
                "indexer_retries_total", {"reason": "ConnectionError"})
            assert retries and retries > 0
        finally:
            stack("up", "elasticsearch")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
        # The restart dropped Elasticsearch's in-memory delete tombstones; ours are documents.
        update = next(r for r in await all_events(db, table)
                      if r.value and orjson.loads(r.value)["payload"]["op"] == "u"
                      and orjson.loads(r.key)["payload"]["id"] == 1)
        await produce(table.topic, [(update.key, update.value, None)])
        await asyncio.sleep(3)
        assert "1" not in await documents(es, table.alias)
        assert (await raw_documents(es, table.alias))["1"]["_indexer"]["deleted"] is True


@pytest.mark.servers
async def test_elasticsearch_answering_429_holds_commits_then_catches_up(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 10)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config) as daemon:
        ends = await end_offsets(table.topic)
        await wait_until(lambda: _committed(config.kafka.group_id, table.topic, ends), 30,
                         "first commit")
        index = await live_index(es, table.alias)
        # The flood-stage block: every write to the index answers 429.
        await es.put_settings(index, {"index.blocks.read_only_allow_delete": True})
        try:
            insert_rows(db, table.name, 11, 60)
            await asyncio.sleep(5)
            assert await count(es, table.alias) == 10
            assert await committed_offsets(config.kafka.group_id, table.topic) == ends
            retried = daemon.metrics.registry.get_sample_value("indexer_retries_total",
                                                               {"reason": "item"})
            assert retried and retried >= 50
        finally:
            await es.put_settings(index, {"index.blocks.read_only_allow_delete": None})
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))


async def _committed(group: str, topic: str, ends: dict[int, int]) -> bool:
    return await committed_offsets(group, topic) == ends


async def test_rebalances_between_two_daemons_lose_nothing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 4000, chunk=200)
    rng = random.Random(3)
    for _ in range(300):
        i = rng.randint(1, 4000)
        sql(db, f"UPDATE `{table.name}` SET qty = qty + 1 WHERE id = %s", i)
    sql(db, f"DELETE FROM `{table.name}` WHERE id % 13 = 0")
    events = await all_events(db, table)
    topic = unique("it-rebalance")
    await create_topic(topic, 4)
    # Keyed like Debezium would be on a 4-partition topic: per-key order holds.
    await produce(topic, [(r.key, r.value, hash(r.key) % 4) for r in events])
    config = make_config(table.entry(topic=topic), batch={"max_events": 100, "in_flight": 1})
    async with running(config):
        await wait_until(lambda: at_least(es, table.alias, 200), 60, "progress")
        async with running(config):  # joins the group: partitions move
            await asyncio.sleep(3)
        # the second daemon leaves: its partitions come back
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
