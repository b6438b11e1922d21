"""Rows of a table in canonical values: consistent snapshots with their binlog position, rows in
primary-key order with constant memory, lookups by document id, key ranges.

The server sends each row as one JSON array of the values :mod:`indexer.core.values` writes
(or text a finisher ends), which the client parses in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pymysql
import pymysql.cursors

from indexer.core.documents import document_id
from indexer.core.layout import TableLayout
from indexer.errors import ConfigError
from indexer.settings import MySQLSettings
from indexer.source.mysql.condition_sql import with_rule
from indexer.source.mysql.connection import connect, fetch_all, qualified, quote
from indexer.source.mysql.value_sql import finisher, id_sql, value_sql

Row = dict[str, Any]


Converter = Callable[[Any], Any]


# Rows per network round trip of the unbuffered cursor: large enough to amortise the call,
# small enough to keep memory flat.
FETCH_ROWS = 2000


# Ids per IN list when rows are looked up by document id.
IDS_PER_LOOKUP = 1000


# Beyond this many ids of an integer key, one scan of the table is faster than lookups
# (other keys: beyond one IN list, since each one scans the table).
SCAN_ABOVE_IDS = 20_000


class RowReader:
    """Canonical rows of one table: the server sends each row as one JSON array (one column
    to parse instead of many, which is most of a Python client's cost per row)."""

    def __init__(self, layout: TableLayout) -> None:
        self.layout = layout
        self.names = tuple(c.name for c in layout.columns)
        self._plan = tuple((i, finish) for i, c in enumerate(layout.columns)
                           if (finish := finisher(c)) is not None)
        self._key_index = tuple(self.names.index(c.name) for c in layout.key)

    def row(self, raw: Sequence[Any]) -> tuple[Row, Row]:
        """(key, row) of one fetched ``(json_array,)``."""
        converted = orjson.loads(raw[0])
        for i, finish in self._plan:
            if converted[i] is not None:
                converted[i] = finish(converted[i])
        row = dict(zip(self.names, converted, strict=True))
        if len(self._key_index) == 1:
            name = self.names[self._key_index[0]]
            return {name: row[name]}, row
        return {self.names[i]: converted[i] for i in self._key_index}, row

    def select(self, where: str = "", args: Sequence[Any] = ()) -> tuple[str, list[Any]]:
        """The query (and its parameters) for the rows ``where`` selects that the table's
        row rule indexes."""
        array = ", ".join(value_sql(c) for c in self.layout.columns)
        order = ", ".join(quote(c.name) for c in self.layout.key)
        where, params = with_rule(self.layout, where, args)
        return (f"SELECT JSON_ARRAY({array}) FROM {qualified(self.layout)} {where} "
                f"ORDER BY {order}"), params


def ids_where(layout: TableLayout, ids: Sequence[str]) -> tuple[str, list[Any]]:
    """A WHERE clause (and its parameters) selecting the rows behind these document ids."""
    marks = ", ".join(["%s"] * len(ids))
    if layout.integer_key:
        return f"WHERE {quote(layout.key[0].name)} IN ({marks})", [int(i) for i in ids]
    # No index on the expression: a scan, fine for the few rows repaired or explained.
    return f"WHERE {id_sql(layout)} IN ({marks})", list(ids)


def rows_now(settings: MySQLSettings, layout: TableLayout,
             ids: Sequence[str]) -> list[tuple[Row, Row]]:
    """The rows behind a few document ids as they are now (no snapshot position)."""
    reader = RowReader(layout)
    where, args = ids_where(layout, ids)
    return [reader.row(raw) for raw in fetch_all(settings, layout.database,
                                                  *reader.select(where, args))]


@dataclass(frozen=True)
class SnapshotPosition:
    file: str
    pos: int
    ts_ms: int  # the server's clock when the snapshot began


class Snapshot:
    """A consistent read view with the binlog position it corresponds to; every change
    committed later has a higher position.

    MariaDB reports the position of ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` exactly and
    lock-free in ``Binlog_snapshot_file``/``Binlog_snapshot_position``. Servers without them
    (MySQL 8) are asked the way mysqldump ``--single-transaction --source-data`` and
    Debezium's snapshot ask: a global read lock while the transaction starts and the binary
    log status is read, released at once (``mysql.snapshot_position`` chooses).
    """

    def __init__(self, settings: MySQLSettings, layout: TableLayout) -> None:
        self._conn = connect(settings, layout.database)
        self.layout = layout
        try:
            with self._conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                found = None
                if settings.snapshot_position != "lock":
                    found = _lock_free_position(cur)
                    if found is None and settings.snapshot_position == "status":
                        raise ConfigError(
                            "mysql.snapshot_position = \"status\": the server reports no "
                            "Binlog_snapshot_file/position (MySQL has none: use \"auto\" or "
                            "\"lock\"; MariaDB needs binary logging on)")
                    if found is None:
                        cur.execute("ROLLBACK")
                if found is None:
                    found = _locked_position(cur)
                cur.execute("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)")
                ((now_ms,),) = cur.fetchall()
        except BaseException:
            self._conn.close()
            raise
        self.position = SnapshotPosition(found[0], found[1], int(now_ms))

    def rows(self, where: str = "", args: Sequence[Any] = (),
             page_rows: int = FETCH_ROWS) -> Iterator[list[tuple[Row, Row]]]:
        """Pages of (key, row) in primary-key order, streamed with an unbuffered cursor."""
        reader = RowReader(self.layout)
        with self._conn.cursor(pymysql.cursors.SSCursor) as cur:
            query, params = reader.select(where, args)
            cur.execute(query, tuple(params) or None)
            while page := cur.fetchmany(page_rows):
                yield [reader.row(raw) for raw in page]

    def rows_for_ids(self, ids: Sequence[str]) -> list[tuple[Row, Row]]:
        """The rows behind these document ids, inside the snapshot (absent ids are skipped)."""
        return [found for page in self.pages_for_ids(ids) for found in page]

    def pages_for_ids(self, ids: Sequence[str],
                      page_rows: int = FETCH_ROWS) -> Iterator[list[tuple[Row, Row]]]:
        """Pages of the rows behind these ids: looked up by id while they are few, else one
        streamed scan of the table (a reindex's cost) keeping the wanted ones."""
        scan_above = SCAN_ABOVE_IDS if self.layout.integer_key else IDS_PER_LOOKUP
        if len(ids) <= scan_above:
            for start in range(0, len(ids), IDS_PER_LOOKUP):
                yield from self.rows(*ids_where(self.layout, ids[start:start + IDS_PER_LOOKUP]))
            return
        wanted = set(ids)
        for page in self.rows(page_rows=page_rows):
            if kept := [(key, row) for key, row in page if document_id(key) in wanted]:
                yield kept

    def key_bounds(self) -> tuple[int, int] | None:
        """(min, max) of an integer primary key, inside the snapshot."""
        (key,) = self.layout.key
        with self._conn.cursor() as cur:
            cur.execute(f"SELECT MIN({quote(key.name)}), MAX({quote(key.name)}) "
                        f"FROM {qualified(self.layout)}")
            low, high = cur.fetchone() or (None, None)
        return None if low is None or high is None else (int(low), int(high))

    @property
    def connection(self) -> pymysql.connections.Connection[Any]:
        """The snapshot's connection: more reads inside the same read view (a tree's levels)."""
        return self._conn

    def close(self) -> None:
        self._conn.close()


def _lock_free_position(cur: Any) -> tuple[str, int] | None:
    """MariaDB's position of the snapshot this starts, or None where the server has none."""
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    cur.execute("SHOW STATUS WHERE Variable_name IN "
                "('Binlog_snapshot_file', 'Binlog_snapshot_position')")
    status = dict(cur.fetchall())
    file, pos = status.get("Binlog_snapshot_file"), status.get("Binlog_snapshot_position")
    return (str(file), int(pos)) if file and pos is not None else None


def _locked_position(cur: Any) -> tuple[str, int]:
    """Starts the snapshot under a brief global read lock, so nothing commits between it and
    the binary log status read beside it."""
    try:
        cur.execute("FLUSH TABLES WITH READ LOCK")
    except pymysql.err.OperationalError as exc:
        raise ConfigError(f"a snapshot position without Binlog_snapshot_* needs a brief global "
                          f"read lock, which the server refused ({exc.args[-1]}): grant RELOAD "
                          "(services that forbid FLUSH TABLES WITH READ LOCK, like RDS and "
                          "Aurora, need column versions)") from exc
    try:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        status = None
        # MySQL 8.4 removed SHOW MASTER STATUS for SHOW BINARY LOG STATUS (8.2+); MariaDB
        # knows only the first. Tried in turn, not chosen by version number.
        for statement in ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
            try:
                cur.execute(statement)
            except pymysql.err.ProgrammingError:
                continue
            except pymysql.err.OperationalError as exc:
                raise ConfigError(f"{statement} was refused ({exc.args[-1]}): grant REPLICATION "
                                  "CLIENT (MySQL) or BINLOG MONITOR (MariaDB)") from exc
            status = cur.fetchone()
            break
    finally:
        cur.execute("UNLOCK TABLES")
    if not status:
        raise ConfigError("the server reports no binary log position: binary logging must be "
                          "on for binlog versions")
    return str(status[0]), int(status[1])


def open_slices(low: int, high: int, parts: int) -> list[tuple[int | None, int | None]]:
    """[low, high] cut into up to ``parts`` consecutive inclusive slices; the first starts and
    the last ends open (None), so values outside the bounds read earlier fall in one too."""
    step = max(1, (high - low + parts) // parts)
    starts = list(range(low, high + 1, step))
    return [(None if i == 0 else start, None if i == len(starts) - 1 else start + step - 1)
            for i, start in enumerate(starts)]


def key_range_where(layout: TableLayout, low: int | None,
                    high: int | None) -> tuple[str, tuple[int, ...]]:
    """A WHERE clause for an integer key range; None leaves that end open."""
    (key,) = layout.key
    name = quote(key.name)
    conditions = [f"{name} {op} %s" for op, bound in ((">=", low), ("<=", high))
                  if bound is not None]
    args = tuple(bound for bound in (low, high) if bound is not None)
    return ("WHERE " + " AND ".join(conditions) if conditions else ""), args
