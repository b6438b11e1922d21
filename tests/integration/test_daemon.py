"""The daemon on the real stack, through real Debezium: what users depend on."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest

from indexer.search.client import SearchClient
from indexer.source.kafka.dead_letters import DeadLetter
from tests.integration.conftest import (
    COLUMNS,
    all_events,
    caught_up,
    committed_offsets,
    create_topic,
    documents,
    end_offsets,
    expected_rows,
    live_index,
    produce,
    raw_documents,
    read_topic,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)

pytestmark = pytest.mark.servers


def counter(daemon: Any, name: str, table: str) -> float:
    value = daemon.metrics.registry.get_sample_value(f"indexer_{name}_total", {"table": table})
    return float(value or 0)


async def test_insert_update_delete_and_key_change(db: Any, es: SearchClient,
                                                   make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'tea', 7.90, 3), (2, 'mug', 14.00, 1)")
    async with caught_up(db, es, table, make_config(table.entry())) as daemon:
        sql(db, f"UPDATE `{table.name}` SET name = 'green tea', price = 8.10 WHERE id = 1")
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 2")
        sql(db, f"INSERT INTO `{table.name}` VALUES (5, 'pot', 49.99, 2)")
        sql(db, f"UPDATE `{table.name}` SET id = 6 WHERE id = 5")
        expected = expected_rows(db, table.name)
        assert set(expected) == {"1", "6"}
        await wait_for_documents(es, table.alias, expected)
        raw = await raw_documents(es, table.alias)
        # Deleted rows (2, and 5 after its key change) remain as hidden tombstones.
        assert raw["2"]["_indexer"]["deleted"] is True
        assert raw["5"]["_indexer"]["deleted"] is True
        name = f"indexer_test.{table.name}"
        assert counter(daemon, "deleted", name) == 2
        # Five writes; an insert superseded within one batch counts as stale.
        assert counter(daemon, "indexed", name) + counter(daemon, "stale", name) == 5


async def test_replaying_the_whole_topic_changes_nothing(db: Any, es: SearchClient,
                                                         make_table: Any,
                                                         make_config: Any) -> None:
    table = make_table(COLUMNS)
    for i in range(1, 31):
        sql(db, f"INSERT INTO `{table.name}` VALUES (%s, %s, %s, %s)", i, f"n{i}", i, i)
    sql(db, f"UPDATE `{table.name}` SET qty = qty + 100 WHERE id <= 10")
    sql(db, f"DELETE FROM `{table.name}` WHERE id > 25")
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        pass  # a first daemon indexes every row, then stops
    before = await raw_documents(es, table.alias)
    # A new consumer group reads the topic again from the start: every write is stale.
    replay = make_config(table.entry(), kafka={"group_id": unique("it-replay")})
    async with running(replay) as daemon:
        name = f"indexer_test.{table.name}"
        await wait_until(lambda: _ready(counter(daemon, "stale", name) >= 45), 60, "replay")
        assert counter(daemon, "indexed", name) == 0
        assert counter(daemon, "deleted", name) == 0
    assert await raw_documents(es, table.alias) == before


async def _ready(value: bool) -> bool:
    return value


async def test_events_shuffled_across_partitions_end_equal_to_mysql(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    rng = random.Random(7)
    for i in range(1, 41):
        sql(db, f"INSERT INTO `{table.name}` VALUES (%s, %s, %s, %s)", i, f"n{i}", i, 0)
    for _ in range(120):
        i = rng.randint(1, 40)
        if rng.random() < 0.15:
            sql(db, f"DELETE FROM `{table.name}` WHERE id = %s", i)
        else:
            sql(db, f"INSERT INTO `{table.name}` VALUES (%s, %s, %s, 1) ON DUPLICATE KEY "
                    "UPDATE qty = qty + 1, name = VALUES(name)", i, f"r{rng.random():.4f}", i)
    rows = sql(db, f"SELECT COUNT(*) FROM `{table.name}`")[0][0]
    assert rows > 10
    original = await all_events(db, table)
    shuffled_topic = unique("it-shuffled")
    await create_topic(shuffled_topic, 4)
    messages = [(r.key, r.value, rng.randrange(4)) for r in original]
    rng.shuffle(messages)
    await produce(shuffled_topic, messages)
    async with running(make_config(table.entry(topic=shuffled_topic))):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))


async def test_delete_then_stale_update_after_gc_deletes_stays_deleted(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1), (2, 'b', 2, 2)")
    sql(db, f"UPDATE `{table.name}` SET qty = 10 WHERE id = 1")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 1")
    async with caught_up(db, es, table, make_config(table.entry())):
        index = await live_index(es, table.alias)
        # Versioned deletes are forgotten after gc_deletes: make that immediate.
        await es.put_settings(index, {"index.gc_deletes": "0s"})
        await asyncio.sleep(1)
        records = await read_topic(table.topic, 5)
        # The update of row 1, older than its delete.
        (stale_update,) = [r for r in records
                           if r.value and orjson.loads(r.value)["payload"]["op"] == "u"]
        await produce(table.topic, [(stale_update.key, stale_update.value, None)])
        await asyncio.sleep(3)
        assert "1" not in await documents(es, table.alias)
        raw = await raw_documents(es, table.alias)
        assert raw["1"]["_indexer"]["deleted"] is True


async def test_poison_messages_are_dead_lettered_and_good_events_indexed(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    strict = {"mappings": {"dynamic": "strict", "properties": {
        "id": {"type": "long"}, "name": {"type": "keyword"}, "price": {"type": "double"},
        "qty": {"type": "integer"}}}}
    table = make_table(COLUMNS, strict)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
    await wait_for_topic(table.topic)
    poison = [(b'{"id": 99}', b"\xff\xfenot json", None),
              (b'{"id": 98}', b'{"op": "t", "source": {}}', None),
              (None, b'{"op": "c", "after": {"id": 97}, "source": {}}', None)]
    await produce(table.topic, poison, headers=[("trace-id", b"abc")])
    sql(db, f"INSERT INTO `{table.name}` VALUES (2, 'b', 2, 2)")
    # A column the strict mapping does not know: Elasticsearch refuses the document.
    sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN colour VARCHAR(10) NULL")
    sql(db, f"INSERT INTO `{table.name}` VALUES (3, 'c', 3, 3, 'red')")
    # new_columns = "keep": the mapping is the user's (the default maps the column).
    config = make_config(table.entry(new_columns="keep"))
    async with running(config):
        dead = await read_topic(config.kafka.dead_letter_topic, 4)
        letters = [DeadLetter.from_headers(list(r.headers)) for r in dead]
        assert all(letter is not None for letter in letters)
        kinds = sorted(letter.kind for letter in letters if letter)
        assert kinds == ["mapping-conflict", "undecodable", "undecodable", "unsupported-op"]
        (refused,) = [letter for letter in letters if letter and letter.kind == "mapping-conflict"]
        assert "strict_dynamic_mapping_exception" in refused.reason
        assert f"indexer mappings generate {table.name} --write" in refused.reason
        first = dead[0]
        assert (first.key, first.value) == poison[0][:2]
        assert ("trace-id", b"abc") in list(first.headers)
        assert letters[0] is not None and letters[0].topic == table.topic
        docs = await documents(es, table.alias)
        assert sorted(docs) == ["1", "2"]
        ends = await end_offsets(table.topic)
        await wait_until(
            lambda: _committed_all(config.kafka.group_id, table.topic, ends), 30, "commit")

    # After the fix (the mapping learns the column), a replay indexes the dead letter.
    index = await live_index(es, table.alias)
    await es.put_mapping(index, {"colour": {"type": "keyword"}})
    from indexer.source.kafka.dead_letters import ReplayFilter, replay

    report = await replay(config.kafka, ReplayFilter(kinds=frozenset({"mapping-conflict"})),
                          dry_run=False)
    assert (report.read, report.matched, report.replayed) == (4, 1, 1)
    async with running(config):
        await wait_until(lambda: _has(es, table.alias, "3"), 30, "replayed row 3")
    docs = await documents(es, table.alias)
    assert docs["3"] == {"id": 3, "name": "c", "price": "3.00", "qty": 3, "colour": "red"}


async def _committed_all(group: str, topic: str, ends: dict[int, int]) -> bool:
    return await committed_offsets(group, topic) == ends


async def _has(es: SearchClient, alias: str, doc_id: str) -> bool:
    return doc_id in await documents(es, alias)


async def test_several_tables_in_one_process(db: Any, es: SearchClient, make_table: Any,
                                             make_config: Any) -> None:
    first, second = make_table(COLUMNS), make_table(
        "sku VARCHAR(20), region VARCHAR(8), qty INT, PRIMARY KEY (sku, region)")
    insert_rows_first = [(i, f"n{i}", i, i) for i in range(1, 21)]
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{first.name}` VALUES (%s, %s, %s, %s)", insert_rows_first)
        cur.executemany(f"INSERT INTO `{second.name}` VALUES (%s, %s, %s)",
                        [("a|b", "eu", 1), ("a", "b|eu", 2), ("c\\\\", "us", 3)])
    await wait_for_topic(first.topic)
    await wait_for_topic(second.topic)
    async with running(make_config(first.entry(), second.entry(exclude=["qty"]))):
        await wait_for_documents(es, first.alias, expected_rows(db, first.name))
        await wait_for_documents(es, second.alias, {
            "a\\|b|eu": {"sku": "a|b", "region": "eu"},
            "a|b\\|eu": {"sku": "a", "region": "b|eu"},
            "c\\\\\\\\|us": {"sku": "c\\\\", "region": "us"},
        })
