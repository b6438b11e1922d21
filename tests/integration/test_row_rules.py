"""A table's ``where`` and ``deleted_when`` on the real MariaDB: the server's SQL and the
stream's Python answer every row of every type a condition can name alike; the stream removes
a row that stops matching and brings it back when it matches again; the first load, reindex
and reconcile (with its repairs) index exactly the rows the rule keeps."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from indexer.condition_config import parse_rule
from indexer.core.conditions import bind, keeps
from indexer.jobs.explain import explain
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient
from indexer.settings import Config
from indexer.source.mysql import schema
from indexer.source.mysql.snapshots import Snapshot
from tests.integration import conftest
from tests.integration.conftest import (
    DATABASE,
    documents,
    running,
    sql,
    unique,
    wait_for_documents,
)
from tests.integration.test_joins import made_shop

TYPES = """id INT PRIMARY KEY, ti TINYINT, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT,
    bi BIGINT UNSIGNED, y YEAR, d DECIMAL(12,3), c CHAR(5) CHARACTER SET latin1,
    vc VARCHAR(20), tx TEXT COLLATE utf8mb4_unicode_ci, e ENUM('a','B','ü'),
    dt DATETIME(3), dd DATE, ts TIMESTAMP NULL, j JSON, f DOUBLE, bt BIT(3), s SET('x','y'),
    vb VARBINARY(4)"""
VALUES = [
    (1, 0, -32768, 0, -1, 0, 1901, "0.000", "a", "published", "x", "a", "2024-01-01 00:00:00",
     "2024-01-01", "2024-01-01 00:00:00", '{"a": 1}', 1.5, 1, "x", b"\x00"),
    (2, 127, 32767, 16777215, 2147483647, 18446744073709551615, 2155, "-12.500", "A ",
     "Published", "X", "B", "0000-00-00 00:00:00", "0000-00-00", None, "null", -0.0, 0, "",
     b""),
    (3, None, None, None, None, None, None, None, None, None, None, None, None, None, None,
     None, None, None, None, None),
    (4, 1, 5, 5, 5, 5, 2000, "12.5", "ä", "published ", "ü", "ü", "1999-12-31 23:59:59.999",
     "1999-12-31", "2038-01-19 03:14:07", "[]", 1e300, 7, "x,y", b"\xff"),
    (5, -128, 0, 1, 0, 9223372036854775808, 0, "99999.999", "", "", "", "", None, None, None,
     '"s"', None, None, None, None),
]
CONDITIONS = [
    "ti = 0", "ti != 0", "ti > 0 OR si < 0", "si BETWEEN -32768 AND 5", "mi >= 16777215",
    "i < 0", "i IN (5, 2147483647)", "bi > 9223372036854775807", "bi = 18446744073709551615",
    "y = 0", "y > 2000", "d = 12.5", "d < -12.4", "d BETWEEN 0 AND 12.500", "d != 0",
    "c = 'a'", "c = 'A'", "c = 'ä'", "c > 'a'", "c IN ('', 'a')", "vc = 'published'",
    "vc != 'published'", "vc NOT IN ('published', 'Published')", "vc < 'p'", "tx = 'x'",
    "tx = 'ü'", "tx >= 'X'", "e = 'b'", "e = 'B'", "e IN ('ü', '')", "e > 'a'",
    "dt IS NULL", "dd IS NOT NULL", "ts IS NULL", "j IS NULL", "f IS NOT NULL", "bt IS NULL",
    "s IS NULL", "vb IS NOT NULL", "NOT (ti = 0 AND vc = 'published')",
    "(i > 0 OR d > 0) AND NOT e = 'a'",
]


def test_the_server_and_the_stream_agree_on_every_type_a_condition_names(db: Any) -> None:
    name = unique("rules")
    sql(db, "SET SESSION sql_mode = ''")  # zero dates and the like, as old tables hold them
    sql(db, f"CREATE TABLE `{name}` ({TYPES}) CHARACTER SET utf8mb4")
    try:
        with db.cursor() as cur:
            cur.executemany(f"INSERT INTO `{name}` VALUES ({', '.join(['%s'] * 20)})", VALUES)
        layout = schema.read_layout(conftest.STACK.mysql, DATABASE, name)
        every = _rows(layout)
        assert len(every) == len(VALUES)
        disagree = []
        for text in CONDITIONS:
            for key in ("where", "deleted_when"):
                rule = parse_rule({key: text}, f"tables[{name}]")
                assert rule is not None
                by_sql = set(_rows(bind(rule, layout, name)))
                by_python = {i for i, row in every.items() if keeps(rule, row)}
                if by_sql != by_python:
                    disagree.append((key, text, sorted(by_sql), sorted(by_python)))
        assert not disagree
    finally:
        sql(db, f"DROP TABLE IF EXISTS `{name}`")


def _rows(layout: Any) -> dict[int, dict[str, Any]]:
    snapshot = Snapshot(conftest.STACK.mysql, layout)
    try:
        return {key["id"]: row for page in snapshot.rows() for key, row in page}
    finally:
        snapshot.close()


POSTS = "id INT PRIMARY KEY, status VARCHAR(20), price DECIMAL(10,2), deleted_at DATETIME NULL"
RULE = {"where": "status IN ('published', 'featured') AND price > 0",
        "deleted_when": "deleted_at IS NOT NULL"}


def _indexed(db: Any, table: str) -> dict[str, dict[str, Any]]:
    """The documents the rule keeps, written in SQL by hand (not by the code under test)."""
    rows = sql(db, f"SELECT id, status, price, deleted_at FROM `{table}` WHERE BINARY status "
                   "IN ('published', 'featured') AND price > 0 AND deleted_at IS NULL ORDER BY id")
    return {str(r[0]): {"id": r[0], "status": r[1], "price": f"{r[2]:.2f}", "deleted_at": None}
            for r in rows}


def _insert(db: Any, table: str, first: int, last: int) -> None:
    statuses = ("published", "draft", "featured", "Published", None)
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s)",
                        [(i, statuses[i % 5], Decimal(i % 4), "2024-01-01" if i % 7 == 0
                          else None) for i in range(first, last + 1)])


@pytest.mark.parametrize("source", ["kafka", "binlog"])
async def test_rows_leave_and_come_back_with_the_rule_and_every_job_agrees(
        db: Any, es: SearchClient, make_table: Callable[..., conftest.TestTable],
        make_config: Callable[..., Config], source: str) -> None:
    table = make_table(POSTS)
    _insert(db, table.name, 1, 300)
    # On Kafka the first rows arrive as Debezium's inserts: those left out write nothing.
    chosen = {"kind": "binlog", "name": unique("it-rules")} if source == "binlog" else {}
    config = make_config(table.entry(**RULE), source=chosen, canary={"enabled": False})
    async with running(config):
        # The first load reads only the rows the rule keeps.
        await wait_for_documents(es, table.alias, _indexed(db, table.name))
        _insert(db, table.name, 301, 400)
        sql(db, f"UPDATE `{table.name}` SET status = 'published' WHERE id IN (1, 6)")  # draft
        sql(db, f"UPDATE `{table.name}` SET status = 'draft' WHERE id IN (2, 12)")  # leave
        sql(db, f"UPDATE `{table.name}` SET deleted_at = NOW() WHERE id IN (3, 15, 30)")  # soft
        sql(db, f"UPDATE `{table.name}` SET deleted_at = NULL WHERE id IN (14, 21)")  # restored
        sql(db, f"UPDATE `{table.name}` SET price = 0 WHERE id = 22")  # stops matching
        sql(db, f"UPDATE `{table.name}` SET status = NULL WHERE id = 27")  # unknown: left out
        sql(db, f"DELETE FROM `{table.name}` WHERE id IN (5, 10, 17)")
        sql(db, f"UPDATE `{table.name}` SET deleted_at = NULL, status = 'featured', price = 3 "
                "WHERE id = 15")  # back after its soft delete
        await wait_for_documents(es, table.alias, _indexed(db, table.name))
        assert "15" in await documents(es, table.alias)
        soft = (await explain(config, config.tables[0], "30")).verdict
        assert soft.in_sync and "deleted_when (deleted_at IS NOT NULL) is true" in soft.summary
        assert (await explain(config, config.tables[0], "15")).verdict.in_sync

        # Nothing to find; then drift the stream did not make: a document for a row the
        # rule leaves out, a kept row's document gone.
        clean = await reconcile(config, config.tables[0])
        assert clean.clean, clean
        # id 8 is 'Published': never indexed (the rule compares exactly, not by collation).
        await es.request("PUT", f"/{table.alias}-sync/_doc/8?version=1&version_type=external"
                         "&refresh=true", {"id": 8, "status": "Published"})
        kept = min(_indexed(db, table.name), key=int)
        await es.request("DELETE", f"/{table.alias}-sync/_doc/{kept}?refresh=true")
        found = await reconcile(config, config.tables[0])
        assert (found.extra, found.missing, found.stale) == (["8"], [kept], []), found
        repaired = await reconcile(config, config.tables[0], repair=True)
        assert repaired.repaired is not None
        assert (repaired.repaired["rewritten"], repaired.repaired["tombstoned"]) == (1, 1)
        assert (await reconcile(config, config.tables[0])).clean
        await wait_for_documents(es, table.alias, _indexed(db, table.name))

    result = await reindex(config, config.tables[0])
    assert result.written == len(_indexed(db, table.name))
    await wait_for_documents(es, table.alias, _indexed(db, table.name))


async def test_a_joined_documents_root_rule_holds_through_its_joins_changes(
        db: Any, es: SearchClient, tmp_path: Path, make_config: Callable[..., Config]) -> None:
    """Products over 3.00 with a category: a category deleted sets its products' category to
    NULL by a cascade the binlog does not carry, and their documents go; a child's change
    does not bring back a document its root's rule leaves out."""
    async with made_shop(db, es, tmp_path) as shop:
        t = shop.t

        def indexed() -> dict[str, dict[str, Any]]:
            return {i: doc for i, doc in shop.expected(db).items()
                    if Decimal(doc["price"]) > 3 and doc["category_id"] is not None}

        config = make_config(shop.entry(where="price > 3", deleted_when="category_id IS NULL"),
                             source={"kind": "binlog", "name": unique("it-rules")},
                             canary={"enabled": False})
        async with running(config):
            await wait_for_documents(es, shop.alias, indexed(), timeout=90)
            assert set(indexed()) == {"3", "4", "5", "6"}
            sql(db, f"UPDATE {t('products')} SET price = 1 WHERE id = 4")
            sql(db, f"UPDATE {t('products')} SET price = 9 WHERE id = 1")
            sql(db, f"DELETE FROM {t('categories')} WHERE id = 3")  # products 2 and 5
            sql(db, f"UPDATE {t('variants')} SET grams = 7 WHERE product_id IN (2, 6)")
            await wait_for_documents(es, shop.alias, indexed(), timeout=60)
            assert set(indexed()) == {"1", "3", "6"}
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.clean, report.as_json()
