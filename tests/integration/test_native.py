"""The native per-batch path through a real connector, with and without schemas: documents
as MySQL holds them, and reconciliation's checksums (MySQL's own) agreeing with every
document's content hash."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from indexer.build import current_build
from indexer.jobs.reconcile import reconcile
from indexer.search.client import SearchClient
from tests.integration.conftest import (
    DATABASE,
    TOPIC_PREFIX,
    running,
    sql,
    wait_for_documents,
    wait_for_topic,
)
from tests.integration.test_schemaless import schemaless_connector

# The types the native side converts itself, and text that needs escaping.
COLUMNS = ("id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(12,2), big DECIMAL(30,0), "
           "at DATETIME(3), micro DATETIME(6), qty BIGINT")
NAMES = ["plain", 'quote " and \\ backslash', "tab\tnew\nline", "é ✓ \U0001f600", ""]


@contextlib.contextmanager
def topic_prefix(schemas: bool, table: Any) -> Iterator[str]:
    if schemas:
        yield TOPIC_PREFIX  # the stack's connector
    else:
        with schemaless_connector(table) as prefix:
            yield prefix


@pytest.mark.parametrize("schemas", [True, False], ids=["with-schemas", "without-schemas"])
async def test_the_native_path_indexes_what_mysql_holds(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, schemas: bool) -> None:
    table = make_table(COLUMNS)
    with topic_prefix(schemas, table) as prefix:
        topic = f"{prefix}.{DATABASE}.{table.name}"
        sql(db, f"INSERT INTO `{table.name}` (id) VALUES (0)")  # the topic, before the rows
        await wait_for_topic(topic)
        rows = [(i, NAMES[i % len(NAMES)] + str(i), f"{i * 1.25 - 300:.2f}",
                 str(10**25 + i) if i % 7 else None, f"2024-02-29 01:02:03.{i % 1000:03d}",
                 f"1999-12-31 23:59:59.{i:06d}", -(2**62) + i if i % 2 else i)
                for i in range(1, 601)]
        for start in range(0, len(rows), 100):
            sql(db, f"INSERT INTO `{table.name}` VALUES "
                    + ",".join(["(%s,%s,%s,%s,%s,%s,%s)"] * 100),
                *[v for row in rows[start:start + 100] for v in row])
        sql(db, f"UPDATE `{table.name}` SET name = CONCAT(name, '!'), qty = qty + 1 "
                "WHERE id % 3 = 0")
        sql(db, f"DELETE FROM `{table.name}` WHERE id % 10 = 0 OR id = 0")
        config = make_config(table.entry(topic=topic))
        async with running(config) as daemon:
            expected = {}
            for i, name, price, big, at, micro, qty in rows:
                if i % 10 == 0:
                    continue
                changed = i % 3 == 0
                expected[str(i)] = {
                    "id": i, "name": name + "!" if changed else name, "price": price,
                    "big": big, "at": at.replace(" ", "T"), "micro": micro.replace(" ", "T"),
                    "qty": qty + 1 if changed else qty}
            await wait_for_documents(es, table.alias, expected)
            taken = daemon.metrics.registry.get_sample_value(
                "indexer_native_events_total", {"table": config.tables[0].name})
            if current_build().native:  # (dev/test.sh requires the native build)
                # the 600 inserts and 200 updates but the first few (a new layout, a source)
                assert taken is not None and taken > len(rows)
            assert (await reconcile(config, config.tables[0], settle_s=0)).clean
