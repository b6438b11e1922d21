"""A table's transform on the real MariaDB and search server: the first load, the stream,
reconcile with its repairs, explain and a reindex all index what the function makes; a row it
returns None for leaves the index and comes back; a row it raises on is dead-lettered with
the function's traceback while the stream goes on, and stops a reindex with one line. Joined
documents go through it whole."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from indexer.errors import DecodeError
from indexer.jobs.explain import explain
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.jobs.table_reads import reads_for
from indexer.search.client import SearchClient
from indexer.search.dead_letters import DEAD_LETTER_INDEX
from indexer.settings import Config
from indexer.source.kafka.dead_letters import DeadLetter
from tests.integration import conftest
from tests.integration.conftest import (
    read_topic,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_until,
)
from tests.integration.test_joins import made_shop

PEOPLE = ("id INT PRIMARY KEY, first VARCHAR(20), last VARCHAR(20), price DECIMAL(10,2), "
          "status VARCHAR(10)")
PRICED = "tests.transforms:priced"


def expected(db: Any, table: str) -> dict[str, dict[str, Any]]:
    """The documents, made in SQL by hand (not by the function under test)."""
    rows = sql(db, f"SELECT id, first, last, CAST(price * 100 AS SIGNED), status FROM "
                   f"`{table}` WHERE status <> 'hidden' ORDER BY id")
    return {str(r[0]): {"id": r[0], "first": r[1], "last": r[2], "status": r[4],
                        "full_name": f"{r[1]} {r[2]}", "cents": r[3]} for r in rows}


def insert(db: Any, table: str, first: int, last: int) -> None:
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s, %s)",
                        [(i, f"F{i}", f"L{i}", Decimal(i) / 4,
                          "hidden" if i % 10 == 0 else "on") for i in range(first, last + 1)])


@pytest.mark.parametrize("source", ["binlog", "kafka"])
async def test_every_job_indexes_what_the_transform_makes(
        db: Any, es: SearchClient, make_table: Callable[..., conftest.TestTable],
        make_config: Callable[..., Config], source: str) -> None:
    table = make_table(PEOPLE)
    insert(db, table.name, 1, 300)
    name = unique("it-transform")
    # On Kafka the first rows arrive as Debezium's snapshot, through the stream's path.
    chosen = {"kind": "binlog", "name": name} if source == "binlog" else {}
    config = make_config(table.entry(transform=PRICED), canary={"enabled": False},
                         source=chosen)

    async def letters() -> list[tuple[str, str]]:
        """(kind, reason) of the dead letters, in the source's dead-letter place."""
        if source == "kafka":
            records = await read_topic(config.kafka.dead_letter_topic, 1)
            found = [DeadLetter.from_headers(list(r.headers)) for r in records]
            return [(letter.kind, letter.reason) for letter in found if letter is not None]
        with contextlib.suppress(Exception):
            await es.refresh(DEAD_LETTER_INDEX)
            hits = (await es.search(DEAD_LETTER_INDEX, {
                "size": 10, "query": {"term": {"source": name}}, "sort": ["position"]}))
            return [(h["_source"]["kind"], h["_source"]["reason"]) for h in hits["hits"]["hits"]]
        return []

    async def letter_count(n: int) -> bool:
        return len(await letters()) == n

    async with running(config):
        await wait_for_documents(es, table.alias, expected(db, table.name))  # the first load
        insert(db, table.name, 301, 350)
        sql(db, f"UPDATE `{table.name}` SET first = 'Ada' WHERE id = 5")
        sql(db, f"UPDATE `{table.name}` SET status = 'hidden' WHERE id IN (3, 4)")  # leave
        sql(db, f"UPDATE `{table.name}` SET status = 'on' WHERE id = 20")  # comes back
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 7")
        sql(db, f"UPDATE `{table.name}` SET price = -1 WHERE id = 8")  # the function raises
        sql(db, f"UPDATE `{table.name}` SET last = 'Byron' WHERE id = 9")  # after it: written
        await wait_until(lambda: letter_count(1), 60, "row 8's dead letter")
        ((kind, reason),) = await letters()
        assert kind == "transform-failed", reason
        assert "ValueError: negative price -1.00" in reason, reason
        assert "tests/transforms.py" in reason, reason  # where it broke
        want = expected(db, table.name)
        want["8"] = {**want["8"], "cents": 200}  # as before the change it could not make
        await wait_for_documents(es, table.alias, want)

        # Reconcile builds the documents the same way; the row the function raises on stops it.
        with pytest.raises(DecodeError, match="raised on row 8"):
            await reconcile(config, config.tables[0], settle_s=0)
        sql(db, f"UPDATE `{table.name}` SET price = 2 WHERE id = 8")  # the row fixed
        await wait_for_documents(es, table.alias, expected(db, table.name))
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean

        # Drift the stream did not make: a hidden row's document, a document gone, one stale.
        tombstone = await es.request("GET", f"/{table.alias}-sync/_doc/30")  # the first load's
        await es.request("PUT", f"/{table.alias}-sync/_doc/30?version_type=external&version="
                         f"{tombstone['_version'] + 1}&refresh=true",
                         {"id": 30, "status": "hidden"})
        await es.request("DELETE", f"/{table.alias}-sync/_doc/11?refresh=true")
        sql(db, "SET SESSION sql_log_bin = 0")  # changed behind the binlog's back
        sql(db, f"UPDATE `{table.name}` SET first = 'Quiet' WHERE id = 12")
        sql(db, "SET SESSION sql_log_bin = 1")
        found = await reconcile(config, config.tables[0], settle_s=0)
        assert (found.extra, found.missing, found.stale) == (["30"], ["11"], ["12"]), found
        repaired = await reconcile(config, config.tables[0], settle_s=0, repair=True)
        assert repaired.repaired is not None, repaired
        assert (repaired.repaired["rewritten"], repaired.repaired["tombstoned"]) == (2, 1)
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean
        await wait_for_documents(es, table.alias, expected(db, table.name))

        said = (await explain(config, config.tables[0], "4")).verdict
        assert said.in_sync and f"transform {PRICED} returns None" in said.summary, said
        assert (await explain(config, config.tables[0], "12")).verdict.in_sync

    result = await reindex(config, config.tables[0])
    assert result.written == 350 - 1  # a tombstone for each hidden row, none for row 7
    before = expected(db, table.name)
    await wait_for_documents(es, table.alias, before)
    sql(db, f"UPDATE `{table.name}` SET price = -3 WHERE id = 2")  # no daemon streams it
    with pytest.raises(DecodeError, match="raised on row 2"):
        await reindex(config, config.tables[0])
    await wait_for_documents(es, table.alias, before)  # the live index kept


async def test_a_joined_documents_transform_follows_its_joins(
        db: Any, es: SearchClient, tmp_path: Path, make_config: Callable[..., Config]) -> None:
    """The whole document goes through the function: a product without variants has none
    until one is added; a child's change reaches the computed field; a document the function
    raises on dead-letters the changes behind it while the others are rebuilt."""
    async with made_shop(db, es, tmp_path) as shop:
        t = shop.t
        name = unique("it-transform")

        def shaped(db: Any) -> dict[str, dict[str, Any]]:
            """By hand, as tests.transforms:shelf says."""
            return {i: {**doc, "grams": sum(v["grams"] or 0 for v in doc["variants"])}
                    for i, doc in shop.expected(db).items() if doc["variants"]}

        config = make_config(shop.entry(transform="tests.transforms:shelf"),
                             source={"kind": "binlog", "name": name}, canary={"enabled": False})
        async with running(config):
            await wait_for_documents(es, shop.alias, shaped(db), timeout=90)
            sql(db, f"INSERT INTO {t('products')} VALUES (7, 'bare', 1.00, 2, 1)")  # no variant
            sql(db, f"UPDATE {t('variants')} SET grams = 7 WHERE product_id = 2")
            await wait_for_documents(es, shop.alias, shaped(db), timeout=60)
            assert "7" not in shaped(db)
            sql(db, f"INSERT INTO {t('variants')} VALUES (71, 7, 'sku-0', 50, 1)")
            before = shaped(db)
            sql(db, f"UPDATE {t('products')} SET name = 'boom' WHERE id = 3")
            sql(db, f"UPDATE {t('variants')} SET grams = 9 WHERE product_id = 4")
            want = {**shaped(db), "3": before["3"]}  # kept as it was: its rebuild failed
            await wait_for_documents(es, shop.alias, want, timeout=60)
            assert want["7"]["grams"] == 50

            async def lettered() -> bool:
                with contextlib.suppress(Exception):
                    await es.refresh(DEAD_LETTER_INDEX)
                    hits = await es.search(DEAD_LETTER_INDEX, {
                        "size": 10, "query": {"term": {"source": name}}})
                    return any("RuntimeError: boom" in h["_source"]["reason"]
                               for h in hits["hits"]["hits"])
                return False

            await wait_until(lettered, 60, "product 3's dead letter")
            sql(db, f"UPDATE {t('products')} SET name = 'fixed' WHERE id = 3")
            await wait_for_documents(es, shop.alias, shaped(db), timeout=60)
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.clean, report.as_json()


def test_a_function_raising_mid_read_leaves_no_snapshot_open(
        db: Any, make_table: Callable[..., conftest.TestTable],
        make_config: Callable[..., Config]) -> None:
    """The rows' snapshot ends with the read the function stopped, not when the collector
    gets to it: an open one would hold its transaction, and a DROP of the table, meanwhile."""
    table = make_table(PEOPLE)
    insert(db, table.name, 1, 50)
    sql(db, f"UPDATE `{table.name}` SET price = -1 WHERE id = 21")  # the function raises
    config = make_config(table.entry(transform=PRICED), canary={"enabled": False})
    reads = reads_for(config, config.tables[0])
    open_before = sql(db, "SELECT COUNT(*) FROM information_schema.INNODB_TRX")[0][0]
    gc.disable()  # what the collector would close later must already be closed
    try:
        with pytest.raises(DecodeError, match="raised on row 21") as caught:
            reads.chunk_hashes(10, [0, 1, 2, 3])
        # The error kept, as a log record or a paused verification keeps it: its traceback
        # holds the frames of the read it ended.
        assert caught.value.__traceback__ is not None
        open_after = sql(db, "SELECT COUNT(*) FROM information_schema.INNODB_TRX")[0][0]
    finally:
        del caught  # then collected: a failure here must not hang the table's DROP
        gc.enable()
        gc.collect()
    assert open_after == open_before
