"""Values at and near the edges of every MySQL type, generated (hypothesis), streamed through
the real connector with and without schemas: the two indices hold the same documents, and
`reconcile`, `explain` and `reconcile --repair` agree that they are MySQL's rows (clean, in
sync, nothing to repair). The same for a joined document's children.

Examples run against the real stack, so they are few (INDEXER_EDGE_EXAMPLES, default 4) and
not shrunk: hypothesis prints the failing example's rows.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import os
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from indexer.jobs.explain import explain
from indexer.jobs.reconcile import Report, reconcile
from indexer.search.client import SearchClient
from indexer.settings import Config
from tests.integration import conftest
from tests.integration.conftest import (
    STACK,
    documents,
    mysql_connect,
    running,
    sql,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_schemaless import schemaless_connector

EXAMPLES = int(os.environ.get("INDEXER_EDGE_EXAMPLES", "4"))
ROWS = 25  # rows per example
# Every value lives in _source only: this test is about values, not about field types.
MAPPING = {"settings": {"index": {"number_of_replicas": 0}}, "mappings": {"dynamic": False}}

INTS = {  # column type -> (least, greatest)
    "TINYINT": (-128, 127), "TINYINT UNSIGNED": (0, 255), "SMALLINT": (-32768, 32767),
    "MEDIUMINT UNSIGNED": (0, 16777215), "INT": (-2**31, 2**31 - 1),
    "INT(8) UNSIGNED ZEROFILL": (0, 2**32 - 1), "BIGINT": (-2**63, 2**63 - 1),
    "BIGINT UNSIGNED": (0, 2**64 - 1), "TINYINT(1)": (-128, 127), "BIT(1)": (0, 1),
    "BIT(12)": (0, 4095), "BIT(64)": (0, 2**64 - 1),
}
DECIMALS = {"DECIMAL(5,2)": (5, 2), "DECIMAL(10,0)": (10, 0), "DECIMAL(38,10)": (38, 10),
            "DECIMAL(65,30)": (65, 30), "DECIMAL(65,0)": (65, 0)}
TEXTS = {"CHAR(10)": 10, "VARCHAR(255)": 255, "TINYTEXT": 63, "TEXT": 300,
         "VARCHAR(20) CHARACTER SET latin1": 20, "VARCHAR(20) CHARACTER SET utf16": 20}
BINARIES = {"BINARY(4)": 4, "VARBINARY(16)": 16, "BLOB": 300}
ENUM = ("a", "b", "ü", "x y", "")
SET = ("x", "y", "z", "é", "a b")


def _edges(low: int, high: int) -> st.SearchStrategy[int]:
    near = [low, low + 1, high - 1, high, 0, 1, -1]
    return st.one_of(st.sampled_from([n for n in near if low <= n <= high]),
                     st.integers(low, high))


def _decimal(precision: int, scale: int) -> st.SearchStrategy[str]:
    whole = precision - scale
    top = Decimal(10) ** whole - Decimal(1).scaleb(-scale)
    edges = [top, -top, Decimal(0), Decimal(1).scaleb(-scale), -Decimal(1).scaleb(-scale)]
    return st.one_of(st.sampled_from(edges), st.decimals(-top, top, places=scale,
                                                         allow_nan=False)).map(str)


DOUBLE_EDGES = [5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                -1.7976931348623157e308, 0.0, -0.0, 1e15, 1e16, 1e-15, 1e-16, 0.1,
                1234567890123456.8, 9007199254740993.0]
FLOAT_EDGES = [1.4e-45, 1.17549435e-38, 3.4028234e38, -3.4028234e38, -1.5e-10, 0.0,
               16777217.0, 123456.7]


def _text(alphabet: st.SearchStrategy[str], size: int) -> st.SearchStrategy[str]:
    return st.one_of(st.just(""), st.just("ü" * size), st.text(alphabet, max_size=size))


UNICODE = st.characters(exclude_categories=["Cs"])  # what utf8mb4 holds (no lone surrogates)
# MySQL's latin1 is cp1252; its five undefined bytes (0x81, 0x8d, ...) MySQL reads as C1
# controls and Debezium as U+FFFD: a real difference, which reconcile reports.
LATIN1 = st.characters(codec="cp1252", min_codepoint=0x20)
# Within the BMP: utf16 holds all of it; no NUL or control characters (Debezium's JSON and the
# search server keep them, but a CHAR's trailing-space rule is MySQL's business, not ours).
BMP = st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs", "Cc"])


def _json_text() -> st.SearchStrategy[str]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(DOUBLE_EDGES),
        st.text(UNICODE, max_size=8))
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(UNICODE, max_size=5), inner,
                                                     max_size=4)), max_leaves=12)
    # As applications write JSON: Python's json (spaces, \u escapes), compact UTF-8 (orjson),
    # and numbers written with more digits than they need.
    return st.one_of(values.map(json.dumps), values.map(lambda v: orjson.dumps(v).decode()),
                     st.sampled_from(['{"x": 1.5e300}', '[1.50, 1E2, 0.10, -0.0]',
                                      '{"a": "\\u00e9\\/"}', '"just a string"', "12",
                                      "true", "null", "[]", "{}"]))


def _time() -> st.SearchStrategy[str]:
    def text(micros: int, digits: int) -> str:
        sign = "-" if micros < 0 else ""
        seconds, fraction = divmod(abs(micros), 1_000_000)
        clock = f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return clock + (f".{fraction:06d}"[:digits + 1] if digits else "")

    limit = (838 * 3600 + 59 * 60 + 59) * 1_000_000
    return st.builds(text, _edges(-limit, limit), st.integers(0, 6))


def _datetime(low: dt.datetime, high: dt.datetime) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([low, high]), st.datetimes(low, high)).map(
        lambda d: d.isoformat(sep=" "))


COLUMNS: dict[str, st.SearchStrategy[Any]] = {
    **{t: _edges(*bounds) for t, bounds in INTS.items()},
    **{t: _decimal(*ps) for t, ps in DECIMALS.items()},
    "FLOAT": st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(width=32, allow_nan=False,
                                                                 allow_infinity=False)),
    "DOUBLE": st.one_of(st.sampled_from(DOUBLE_EDGES), st.floats(allow_nan=False,
                                                                  allow_infinity=False)),
    "DATE": st.one_of(st.just("0000-00-00"), st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31))
                      .map(str)),
    **{f"DATETIME({fsp})": _datetime(dt.datetime(1000, 1, 1),
                                      dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
       for fsp in (0, 3, 6)},
    **{f"TIMESTAMP({fsp}) NULL": _datetime(dt.datetime(1970, 1, 1, 0, 0, 1),
                                            dt.datetime(2038, 1, 19, 3, 14, 7, 999999))
       for fsp in (0, 6)},
    **{f"TIME({fsp})": _time() for fsp in (0, 3, 6)},
    "YEAR": st.one_of(st.just(0), st.integers(1901, 2155)),
    **{t: _text(LATIN1 if "latin1" in t else BMP if "utf16" in t else UNICODE, size)
       for t, size in TEXTS.items()},
    **{t: st.one_of(st.just(b""), st.just(b"\xff" * size), st.binary(max_size=size))
       for t, size in BINARIES.items()},
    "ENUM('a','b','ü','x y','')": st.sampled_from(ENUM),
    "SET('x','y','z','é','a b')": st.sets(st.sampled_from(SET)).map(",".join),
    "JSON": _json_text(),
}
NAMES = {t: f"c{i}" for i, t in enumerate(COLUMNS)}
DEFINITION = "id INT PRIMARY KEY, " + ", ".join(f"{NAMES[t]} {t}" for t in COLUMNS)

Row = dict[str, Any]
# Each example's rows take new ids: the last example's documents are not mistaken for them.
FIRST_IDS = itertools.count(1, 1000)
rows_strategy = st.lists(st.fixed_dictionaries(
    {NAMES[t]: st.one_of(st.none(), s) for t, s in COLUMNS.items()}), min_size=ROWS,
    max_size=ROWS)


def write_rows(table: str, rows: list[Row], id_from: int = 1) -> None:
    """Replaces the table's rows (their deletes stream too) with these."""
    db = mysql_connect()
    try:
        sql(db, "SET time_zone = '+00:00', sql_mode = ''")
        sql(db, f"DELETE FROM `{table}`")
        for i, row in enumerate(rows, id_from):
            names = ", ".join(["id", *row])
            marks = ", ".join(["%s"] * (len(row) + 1))
            sql(db, f"INSERT INTO `{table}` ({names}) VALUES ({marks})", i, *row.values())
    finally:
        db.close()


Documents = dict[str, dict[str, Any]]


async def agreed(configs: list[Config], ids: set[str],
                 written: Callable[[Documents], bool] = lambda docs: True) -> None:
    """Every configuration's index holds these documents (``written`` says when they hold
    what was written), the same ones, and reconcile, explain and repair agree that they are
    MySQL's."""
    async with SearchClient(STACK.elasticsearch) as es:
        held: dict[str, Documents] = {}

        async def arrived() -> bool:
            for config in configs:
                held[config.tables[0].alias] = await documents(es, config.tables[0].alias)
            return all(set(docs) == ids and written(docs) for docs in held.values())

        await wait_until(arrived, 120, "every row's document in every index")
    first, *others = held.values()
    for other in others:  # with and without schemas: the same documents
        assert other == first, [i for i in ids if other.get(i) != first.get(i)]
    for config in configs:
        table = config.tables[0]
        report = await reconcile(config, table, settle_s=0)
        assert report.clean, _told(report, first)
        for doc_id in sorted(ids, key=int)[:3] + sorted(ids, key=int)[-2:]:
            verdict = (await explain(config, table, doc_id, scan_budget=2000)).verdict
            assert verdict.in_sync, (doc_id, verdict, first.get(doc_id))
        repaired = await reconcile(config, table, repair=True, settle_s=0)
        assert repaired.clean and repaired.repaired is None, _told(repaired, first)


def _told(report: Report, docs: dict[str, Any]) -> str:
    wrong = report.missing + report.extra + report.stale
    return f"{report}: " + "; ".join(f"{i}: {docs.get(i)}" for i in wrong[:5])


def _examples(test: Callable[..., None]) -> Callable[..., None]:
    # A failing example is printed whole, however long its rows.
    test = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")(test)
    return settings(max_examples=EXAMPLES, deadline=None, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large],
                    )(given(rows=rows_strategy)(test))


@pytest.fixture
def both_ways(make_table: Any, make_config: Any) -> Any:
    """One table of every type, read through the stack's connector (schemas) and a second one
    without schemas, each into its own index."""
    table: conftest.TestTable = make_table(DEFINITION, MAPPING, prefix="edge")
    plain = conftest.TestTable(table.name, table.alias + "-plain", MAPPING)
    with schemaless_connector(table) as prefix:
        topic = f"{prefix}.{table.topic.split('.', 1)[1]}"
        asyncio.run(topics_exist(table.name, [table.topic, topic]))
        off = {"canary": {"enabled": False}, "verify": {"enabled": False}}
        with_schemas = make_config(table.entry(new_columns="keep"), **off)
        without = make_config(plain.entry(topic=topic, mapping=f"{table.alias}.json",
                                          new_columns="keep"), **off)
        yield table, [with_schemas, without]


async def topics_exist(table: str, topics: list[str]) -> None:
    """Writes and deletes a row until the connectors (a new one snapshots first) have made
    the table's topics: the daemons then start on topics that exist."""
    db = mysql_connect()
    try:
        for topic in topics:
            for attempt in range(60):
                sql(db, f"INSERT INTO `{table}` (id) VALUES (0)")
                sql(db, f"DELETE FROM `{table}` WHERE id = 0")
                try:
                    await wait_for_topic(topic, timeout=3)
                    break
                except AssertionError:
                    if attempt == 59:
                        raise
    finally:
        db.close()


@_examples
def test_edge_values_stream_reconcile_and_explain_alike(both_ways: Any, rows: list[Row]) -> None:
    table, configs = both_ways
    first = next(FIRST_IDS)
    write_rows(table.name, rows, first)

    async def check() -> None:
        async with running(configs[0]), running(configs[1]):
            await agreed(configs, {str(i) for i in range(first, first + len(rows))})

    asyncio.run(check())


@pytest.fixture
def joined(make_table: Any, make_config: Any) -> Any:
    """Documents whose children are rows of every type."""
    parent = make_table("id INT PRIMARY KEY, name VARCHAR(20)", MAPPING, prefix="edgep")
    child: conftest.TestTable = make_table(DEFINITION + ", p_id INT, KEY (p_id)", MAPPING,
                                  prefix="edgec")
    db = mysql_connect()
    sql(db, f"INSERT INTO `{parent.name}` VALUES (1, 'one'), (2, 'two')")
    db.close()
    asyncio.run(wait_for_topic(parent.topic))
    asyncio.run(topics_exist(child.name, [child.topic]))
    config = make_config(parent.entry(new_columns="keep", children={"items": {
        "table": child.name, "on": {"id": "p_id"}, "exclude": ["p_id"]}}),
        canary={"enabled": False}, verify={"enabled": False})
    yield parent, child, config


@_examples
def test_edge_values_of_joined_children(joined: Any, rows: list[Row]) -> None:
    _, child, config = joined
    # Each row a child of one of the two parents.
    write_rows(child.name, [])
    first = next(FIRST_IDS)
    db = mysql_connect()
    sql(db, "SET time_zone = '+00:00', sql_mode = ''")
    for i, row in enumerate(rows, first):
        names = ", ".join(["id", "p_id", *row])
        marks = ", ".join(["%s"] * (len(row) + 2))
        sql(db, f"INSERT INTO `{child.name}` ({names}) VALUES ({marks})", i, 1 + i % 2,
            *row.values())
    db.close()
    ids = set(range(first, first + len(rows)))

    def children_written(docs: Documents) -> bool:
        return {c["id"] for d in docs.values() for c in d.get("items") or []} == ids

    async def check() -> None:
        async with running(config):
            await agreed([config], {"1", "2"}, children_written)

    asyncio.run(check())
