"""Joined documents from MySQL: the tables' layouts and indexes checked at start, documents
read level by level (one query per joined table per batch of documents, never one per
document), the walk from changed rows up to the documents they are part of, and the wait a
replica needs before it can be read after a change.

Synchronous (pymysql): callers run these in worker threads. Identifiers come from validated
configuration and are quoted; values are always parameters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import orjson
import pymysql

from indexer.core import conditions, tree_checks, trees
from indexer.core.layout import Column, Flavor, Index, TableLayout
from indexer.core.trees import Assembled, Matches, Node, Row, Tree, Values
from indexer.errors import JoinError
from indexer.settings import MySQLSettings, TableConfig
from indexer.source.mysql.connection import connect, quote
from indexer.source.mysql.schema import table_layout
from indexer.source.mysql.value_sql import finisher, sql_param, value_sql

log = logging.getLogger(__name__)

Connection: TypeAlias = "pymysql.connections.Connection[Any]"

Grouping = Literal["limit", "window"]
# Values per IN list: one round trip for a thousand parents, well under max_allowed_packet.
VALUES_PER_QUERY = 1000
# Roots per page of a key-ordered read (reindex, reconcile): about the size of a bulk.
PAGE_ROOTS = 1000
# How long a read of a replica waits for it to apply a change before saying so and waiting on.
REPLICA_WAIT_S = 30


def read_indexes(conn: Connection, database: str, table: str) -> list[Index]:
    """The table's secondary indexes (the primary key is the layout's)."""
    with conn.cursor() as cur:
        cur.execute("SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME <> 'PRIMARY' "
                    "ORDER BY INDEX_NAME, SEQ_IN_INDEX", (database, table))
        rows = cur.fetchall()
    found: dict[str, tuple[list[str], bool]] = {}
    for name, non_unique, column in rows:
        columns, _ = found.setdefault(str(name), ([], not int(non_unique)))
        columns.append(str(column))
    return [Index(name, tuple(columns), unique) for name, (columns, unique) in found.items()]


def load_tree(settings: MySQLSettings, table: TableConfig) -> Tree:
    """The table's tree over its tables' current layouts; a join that cannot work (a column
    that does not exist, a lookup that can match two rows, a join without an index) stops
    here with every reason, joined by '; '."""
    layouts: dict[str, TableLayout] = {}
    indexes: dict[str, list[Index]] = {}
    conn = connect(settings, table.database)
    try:
        for database, name in trees.tree_tables(table):
            full = f"{database}.{name}"
            layouts[full] = table_layout(conn, database, name, settings.server)
            indexes[full] = read_indexes(conn, database, name)
    finally:
        conn.close()
    problems = tree_checks.check(table, layouts, indexes)
    if problems:
        raise JoinError("; ".join(problems))
    return trees.build(table, layouts)


@dataclass(frozen=True)
class _Reader:
    """Columns of a table selected as one JSON array and parsed into canonical values."""

    columns: str  # the JSON_ARRAY
    names: tuple[str, ...]
    finishers: tuple[tuple[int, Any], ...]

    @classmethod
    def of(cls, columns: Sequence[Column]) -> _Reader:
        return cls(f"JSON_ARRAY({', '.join(value_sql(c) for c in columns)})",
                   tuple(c.name for c in columns),
                   tuple((i, f) for i, c in enumerate(columns)
                         if (f := finisher(c)) is not None))

    def values(self, text: str | bytes) -> list[Any]:
        """The columns' canonical values, in the order selected (a column may come twice)."""
        return self.finish(orjson.loads(text))

    def finish(self, values: list[Any]) -> list[Any]:
        for i, finish in self.finishers:
            if values[i] is not None:
                values[i] = finish(values[i])
        return values

    def row(self, text: str | bytes) -> Row:
        return dict(zip(self.names, self.values(text), strict=True))

    def row_of(self, values: list[Any]) -> Row:
        """A row from its array already parsed (one element of a grouped value)."""
        return dict(zip(self.names, self.finish(values), strict=True))


class TreeRows:
    """Reads a tree's documents: roots by key or in key order, then each joined table for the
    whole batch at once; and finds the documents a change touches."""

    def __init__(self, tree: Tree, grouping: Grouping | None = None) -> None:
        self.tree = tree
        # How a parent's children are cut at their cap inside one grouped value: MariaDB's
        # GROUP_CONCAT takes a LIMIT, MySQL's does not (window functions rank them first).
        self.grouping: Grouping = grouping or ("limit" if tree.flavor == "mariadb" else "window")
        self._readers = tuple(_Reader.of(n.columns) for n in tree.nodes)
        self._root = tree.root
        self._columns = {n.index: {c.name: c for c in n.columns} for n in tree.nodes}
        self._climbs = {n.index: trees.climb(tree, n) for n in tree.nodes}

    # --- reading documents -------------------------------------------------------------------

    def by_keys(self, conn: Connection, keys: Sequence[Row],
                trace: bool = False) -> list[Assembled]:
        """The documents of these roots as they are now (a root that is gone: None); with
        ``trace``, each lists the rows it is made of."""
        found: dict[Values, Row] = {}
        key = self._root.key
        for part in _parts(list(dict.fromkeys(tuple(k[c] for c in key) for k in keys))):
            where, args = self._in(self._root, key, part)
            for row in self._kept(self._rows(conn, self._root, where, args,
                                             self._order(self._root))):
                found[tuple(row[c] for c in key)] = row
        roots = [(dict(k), found.get(tuple(k[c] for c in key))) for k in keys]
        return self.assemble(conn, roots, trace)

    def pages(self, conn: Connection, low: int | None = None, high: int | None = None,
              page_roots: int = PAGE_ROOTS) -> Iterator[list[Assembled]]:
        """Every document in root key order (of an integer key's range [low, high], when
        given), a page at a time: keyset pages, so the joined tables are read between them on
        the same connection, inside the caller's snapshot."""
        key = self._root.key
        last: Values | None = None
        while True:
            conditions, args = [], []
            if low is not None or high is not None:
                (name,) = key
                for op, bound in ((">=", low), ("<=", high)):
                    if bound is not None:
                        conditions.append(f"{quote(name)} {op} %s")
                        args.append(bound)
            if last is not None:
                after, after_args = self._after(last)
                conditions.append(after)
                args += after_args
            where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
            rows = self._rows(conn, self._root, where, args, self._order(self._root),
                              limit=page_roots)
            if not rows:
                return
            last = tuple(rows[-1][c] for c in key)
            yield self.assemble(conn, [({c: r[c] for c in key}, r) for r in self._kept(rows)])
            if len(rows) < page_roots:
                return

    def _kept(self, roots: list[Row]) -> list[Row]:
        """The root rows the table's where and deleted_when index (the others have no
        document: a root read by key is then gone). Judged here, in Python, as the stream's
        rebuilds judge them, since every document of a tree is built from rows read here."""
        rule = self.tree.rows
        return roots if rule is None else [r for r in roots if conditions.keeps(rule, r)]

    def assemble(self, conn: Connection, roots: list[tuple[Row, Row | None]],
                 trace: bool = False) -> list[Assembled]:
        """The documents of these roots, every joined table read once per level."""
        rows: dict[int, list[Row]] = {0: [r for _, r in roots if r is not None]}
        matches: dict[int, Matches] = {}
        for level in self.tree.levels():
            for node in level:
                wanted = trees.wanted_values(node, rows[node.parent])
                matches[node.index], rows[node.index] = self._below(conn, node, wanted)
        return trees.assemble(self.tree, roots, matches, trace)

    def _below(self, conn: Connection, node: Node,
               wanted: set[Values]) -> tuple[Matches, list[Row]]:
        found = Matches()
        every: list[Row] = []
        own = node.own_columns
        for part in _parts(sorted(wanted, key=sortable)):
            where, args = self._in(node, own, part)
            if node.kind == "lookup":
                for row in self._rows(conn, node, where, args, ""):
                    found.add(tuple(row[c] for c in own), row)
                    every.append(row)
                continue
            for values, rows, total in self._grouped(conn, node, where, args):
                for row in rows:
                    found.add(values, row, total)
                every += rows
        return found, every

    def _grouped(self, conn: Connection, node: Node, where: str,
                 args: list[Any]) -> list[tuple[Values, list[Row], int]]:
        """A child table's rows for these parents: per parent, its first ``max`` rows in
        order (one value the server builds: one packet per parent, not per row, which is
        most of a Python client's cost) and how many it has in all. A parent whose rows do
        not fit in one packet (the server answers NULL, or cuts the value) is read row by
        row."""
        reader = self._readers[node.index]
        partition = ", ".join(quote(c) for c in node.own_columns)
        order = self._order(node).removeprefix("ORDER BY ")
        keys = _Reader.of([self._columns[node.index][c] for c in node.own_columns])
        if self.grouping == "limit":  # MariaDB 10.3+: the cap inside GROUP_CONCAT, a third less
            query = (f"SELECT {keys.columns}, CONCAT('[', GROUP_CONCAT({reader.columns} ORDER BY "
                     f"{order} SEPARATOR ',' LIMIT %s), ']'), COUNT(*) FROM {_table(node)} "
                     f"{where} GROUP BY {partition}")
            args = [node.max, *args]
        else:  # MySQL 8 has no LIMIT there: ranked first by window functions
            query = (f"SELECT {keys.columns}, CONCAT('[', GROUP_CONCAT(doc ORDER BY n "
                     f"SEPARATOR ','), ']'), MAX(total) FROM (SELECT {partition}, "
                     f"{reader.columns} AS doc, ROW_NUMBER() OVER (PARTITION BY {partition} "
                     f"ORDER BY {order}) AS n, COUNT(*) OVER (PARTITION BY {partition}) AS total "
                     f"FROM {_table(node)} {where}) AS ranked WHERE n <= %s GROUP BY {partition}")
            args = [*args, node.max]
        found: list[tuple[Values, list[Row], int]] = []
        too_big: list[Values] = []
        with conn.cursor() as cur:
            cur.execute(query, tuple(args))
            for values_text, docs, total in cur.fetchall():
                values = tuple(keys.values(values_text))
                try:
                    parsed = orjson.loads(docs) if docs is not None else None
                except orjson.JSONDecodeError:  # cut at a lower group_concat_max_len
                    parsed = None
                if parsed is None:
                    too_big.append(values)
                    continue
                found.append((values, [reader.row_of(r) for r in parsed], int(total)))
        for values in too_big:  # rare: read its rows one by one
            where_one, args_one = self._in(node, node.own_columns, [values])
            rows = [row for row, _ in self._ranked(conn, node, where_one, args_one)]
            found.append((values, rows, len(rows) if len(rows) < node.max else
                          self._count(conn, node, where_one, args_one)))
        return found

    def _count(self, conn: Connection, node: Node, where: str, args: list[Any]) -> int:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {_table(node)} {where}", tuple(args))
            ((total,),) = cur.fetchall()
        return int(total)

    def _ranked(self, conn: Connection, node: Node, where: str,
                args: list[Any]) -> list[tuple[Row, int]]:
        """A child table's rows for these parents, in order, at most ``max`` per parent, each
        with how many the parent has in all (the server cuts, so a parent with a million
        children costs what its cap does)."""
        reader = self._readers[node.index]
        partition = ", ".join(quote(c) for c in node.own_columns)
        order = self._order(node).removeprefix("ORDER BY ")
        query = (f"SELECT doc, total FROM (SELECT {reader.columns} AS doc, ROW_NUMBER() OVER "
                 f"(PARTITION BY {partition} ORDER BY {order}) AS n, COUNT(*) OVER (PARTITION "
                 f"BY {partition}) AS total FROM {_table(node)} {where}) AS ranked "
                 f"WHERE n <= %s ORDER BY n")
        with conn.cursor() as cur:
            cur.execute(query, (*args, node.max))
            return [(reader.row(doc), int(total)) for doc, total in cur.fetchall()]

    def _rows(self, conn: Connection, node: Node, where: str, args: Sequence[Any], order: str,
              limit: int | None = None) -> list[Row]:
        reader = self._readers[node.index]
        tail = f" LIMIT {int(limit)}" if limit is not None else ""
        with conn.cursor() as cur:
            cur.execute(f"SELECT {reader.columns} FROM {_table(node)} {where} {order}{tail}",
                        tuple(args))
            return [reader.row(doc) for (doc,) in cur.fetchall()]

    def _order(self, node: Node) -> str:
        """A node's order: its ``order_by`` (children), then its key."""
        parts = [f"{quote(c)}{' DESC' if desc else ''}" for c, desc in node.order_by]
        taken = {c for c, _ in node.order_by}
        parts += [quote(c) for c in node.key if c not in taken]
        return f"ORDER BY {', '.join(parts)}"

    def _in(self, node: Node, columns: Sequence[str],
            values: Sequence[Values]) -> tuple[str, list[Any]]:
        """``WHERE (columns) IN (values)``, the values as parameters of each column's type."""
        types = [self._columns[node.index][c] for c in columns]
        args = [sql_param(t, v) for value in values for t, v in zip(types, value, strict=True)]
        if len(columns) == 1:
            return f"WHERE {quote(columns[0])} IN ({', '.join(['%s'] * len(values))})", args
        row = f"({', '.join(['%s'] * len(columns))})"
        names = ", ".join(quote(c) for c in columns)
        return f"WHERE ({names}) IN ({', '.join([row] * len(values))})", args

    def _after(self, last: Values) -> tuple[str, list[Any]]:
        """Rows after ``last`` in key order: (k1 > a) OR (k1 = a AND k2 > b) ..., which the
        server reads as ranges of the primary key."""
        key = self._root.key
        types = [self._columns[0][c] for c in key]
        ors, args = [], []
        for i in range(len(key)):
            ands = [f"{quote(key[j])} = %s" for j in range(i)] + [f"{quote(key[i])} > %s"]
            ors.append(f"({' AND '.join(ands)})")
            args += [sql_param(types[j], last[j]) for j in range(i + 1)]
        return f"({' OR '.join(ors)})", args

    # --- the walk up ------------------------------------------------------------------------

    def roots_of(self, conn: Connection, node: Node,
                 starts: Iterable[Values]) -> dict[Values, set[Values]]:
        """For each of these join values of ``node``'s rows, the root keys (in key order) of
        the documents holding such a row, as MySQL has them now: one query per level up for
        all the values at once."""
        origin: dict[Values, set[Values]] = {v: {v} for v in starts}
        found: dict[Values, set[Values]] = {}
        steps = self._climbs[node.index]
        for step in steps:
            if not origin:
                break
            if step.direct:
                for value, sources in origin.items():
                    root = trees.root_values(self.tree, step, value)
                    for source in sources:
                        found.setdefault(source, set()).add(root)
                return found
            parent = self.tree.nodes[step.node]
            columns = self._columns[parent.index]
            reader = _Reader.of([columns[c] for c in (*step.match, *step.select)])
            width = len(step.match)
            reached: dict[Values, set[Values]] = {}
            for part in _parts(sorted(origin, key=sortable)):
                where, args = self._in(parent, step.match, part)
                with conn.cursor() as cur:
                    cur.execute(f"SELECT {reader.columns} FROM {_table(parent)} {where}",
                                tuple(args))
                    rows = cur.fetchall()
                for (text,) in rows:
                    values = tuple(reader.values(text))
                    matched, selected = values[:width], values[width:]
                    if None not in selected:
                        reached.setdefault(selected, set()).update(origin.get(matched, ()))
            origin = reached
        for root, sources in origin.items():  # the last step selected the root's key
            for source in sources:
                found.setdefault(source, set()).add(root)
        return found


def _table(node: Node) -> str:
    return f"{quote(node.database)}.{quote(node.table)}"


def _parts(values: Sequence[Values]) -> Iterator[Sequence[Values]]:
    for start in range(0, len(values), VALUES_PER_QUERY):
        yield values[start:start + VALUES_PER_QUERY]


def sortable(values: Values) -> tuple[Any, ...]:
    """A sort key for join values of any type (mixed with None): queries in a stable order."""
    return tuple((v is None, type(v).__name__, v) for v in values)


def wait_for(conn: Connection, flavor: Flavor, gtids: Mapping[str, str],
             timeout_s: int = REPLICA_WAIT_S) -> bool:
    """Waits until a replica has applied these transactions (one GTID per replication domain
    or source: the newest a batch touched); True when it has."""
    if not gtids:
        return True
    with conn.cursor() as cur:
        if flavor == "mariadb":
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (",".join(gtids.values()), timeout_s))
        else:
            cur.execute("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)",
                        (",".join(gtids.values()), timeout_s))
        ((result,),) = cur.fetchall()
    return int(result or 0) == 0


def begin_snapshot(conn: Connection) -> None:
    """A consistent read view for one batch of documents: every level read as of one moment."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")


def end_snapshot(conn: Connection) -> None:
    with conn.cursor() as cur:
        cur.execute("COMMIT")
