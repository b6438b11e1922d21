"""MySQL/MariaDB reads: table layout, consistent snapshots with their binlog position, rows in
primary-key order with constant memory, converted to the same canonical values as events.

pymysql is synchronous; callers run these functions in a worker thread
(``asyncio.to_thread``). Identifiers come from validated configuration and are quoted;
values are always parameters.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import pymysql
import pymysql.converters
import pymysql.cursors

from indexer import values
from indexer.config import ConfigError, MySQLSettings
from indexer.documents import KEY_BUCKETS, document_id
from indexer.security import tls_context, tls_reason

log = logging.getLogger(__name__)

Row = dict[str, Any]
Converter = Callable[[Any], Any]
Flavor = Literal["mariadb", "mysql"]

# Rows per network round trip of the unbuffered cursor: large enough to amortise the call,
# small enough to keep memory flat.
FETCH_ROWS = 2000
# Ids per IN list when rows are looked up by document id.
IDS_PER_LOOKUP = 1000
# Beyond this many ids of an integer key, one scan of the table is faster than lookups
# (other keys: beyond one IN list, since each one scans the table).
SCAN_ABOVE_IDS = 20_000


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def connect(settings: MySQLSettings, database: str) -> pymysql.connections.Connection[Any]:
    """A connection in autocommit mode; a refusal becomes one line naming what to fix."""
    try:
        # TIMESTAMPs are written in UTC, like Debezium's.
        return pymysql.connect(host=settings.host, port=settings.port, user=settings.user,
                               password=settings.password.reveal(), database=database,
                               charset="utf8mb4", autocommit=True,
                               init_command="SET time_zone = '+00:00'", **_tls(settings))
    except pymysql.err.OperationalError as exc:
        raise ConfigError(_refusal(settings, exc)) from exc


def _refusal(settings: MySQLSettings, exc: pymysql.err.OperationalError) -> str:
    code = exc.args[0] if exc.args else 0
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    where = f"mysql {settings.host}:{settings.port}"
    if code == 1045:
        hint = ("" if settings.uses_tls else "; if the account requires TLS, set mysql.tls = "
                "true and mysql.ca_file")
        return (f"{where} refused user {settings.user!r} (1045 access denied): check "
                f"mysql.user and mysql.password (or password_file){hint}")
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        if "match" in text or "mismatch" in text:
            return (f"{where}: its TLS certificate does not name {settings.host!r}; set "
                    "mysql.host to a name the certificate has, or mysql.verify_identity = "
                    "false")
        return (f"{where}: TLS certificate not trusted ({tls_reason(text)}); set "
                "mysql.ca_file to the CA that signed it")
    if "doesn't support" in text:
        return (f"{where} does not offer TLS ({text}): set mysql.tls = false, or point "
                "mysql.host and mysql.port at a server with TLS")
    if "SSL" in text or "TLS" in text or code == 2026:
        return f"{where}: TLS failed ({tls_reason(text)}); check mysql.tls and mysql.ca_file"
    return f"{where}: {text} (error {code}); check mysql.host and mysql.port"


def _tls(settings: MySQLSettings) -> dict[str, Any]:
    """TLS when configured (and then required: no silent fallback to plain text); pymysql's
    own default would try TLS without verifying anything."""
    if not settings.uses_tls:
        return {"ssl_disabled": True}
    if not settings.verify_certs:
        log.warning("TLS certificates of MySQL are NOT verified (mysql.verify_certs = false)")
    try:
        context = tls_context(ca_file=settings.ca_file, cert_file=settings.cert_file,
                              key_file=settings.key_file, verify=settings.verify_certs,
                              check_hostname=settings.verify_identity)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"mysql: cannot load the TLS files (ca_file, cert_file, key_file): "
                          f"{exc}") from exc
    return {"ssl": context}


def _fetch_all(settings: MySQLSettings, database: str, query: str,
               args: Sequence[Any] | None = None) -> tuple[tuple[Any, ...], ...]:
    """One query on a connection of its own: callers run in worker threads, side by side.
    Always formatted (no arguments is an empty tuple), so a literal '%' is written '%%'."""
    with connect(settings, database) as conn, conn.cursor() as cur:
        cur.execute(query, tuple(args or ()))
        return tuple(cur.fetchall())


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # information_schema DATA_TYPE: int, decimal, datetime, ...
    column_type: str  # the full type: "bigint(20) unsigned", "tinyint(1)", "set('a','b')"
    scale: int  # NUMERIC_SCALE or DATETIME_PRECISION
    key_position: int  # 1-based position in the primary key, 0 if not part of it

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type


# (document field name, the column it holds): what the checksums cover.
Field = tuple[str, Column]


@dataclass(frozen=True)
class TableLayout:
    database: str
    table: str
    columns: tuple[Column, ...]
    flavor: Flavor = "mariadb"  # the server's: its SQL dialect for checksums

    @property
    def key(self) -> tuple[Column, ...]:
        return tuple(sorted((c for c in self.columns if c.key_position),
                            key=lambda c: c.key_position))

    @property
    def qualified(self) -> str:
        return f"{quote(self.database)}.{quote(self.table)}"

    @property
    def integer_key(self) -> bool:
        key = self.key
        return len(key) == 1 and key[0].data_type in (
            "tinyint", "smallint", "mediumint", "int", "bigint")


def server_flavor(conn: pymysql.connections.Connection[Any]) -> Flavor:
    """MariaDB or MySQL, from the version string (MariaDB's says so)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        ((version,),) = cur.fetchall()
    return "mariadb" if "mariadb" in str(version).lower() else "mysql"


def table_layout(conn: pymysql.connections.Connection[Any], database: str, table: str,
                 server: Literal["auto", "mariadb", "mysql"] = "auto") -> TableLayout:
    flavor: Flavor = server_flavor(conn) if server == "auto" else server
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, "
            "COALESCE(c.NUMERIC_SCALE, c.DATETIME_PRECISION, 0), "
            "COALESCE(k.ORDINAL_POSITION, 0) "
            "FROM information_schema.COLUMNS c LEFT JOIN information_schema.KEY_COLUMN_USAGE k "
            "ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME "
            "AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' "
            "WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION",
            (database, table),
        )
        rows = cur.fetchall()
        json_columns = _json_columns(cur, database, table)
    if not rows:
        raise LookupError(f"table {database}.{table} does not exist")
    layout = TableLayout(database, table, tuple(
        Column(str(r[0]), "json" if r[0] in json_columns else str(r[1]).lower(),
               str(r[2]).lower(), int(r[3]), int(r[4]))
        for r in rows), flavor)
    if not layout.key:
        raise LookupError(f"table {database}.{table} has no primary key; documents need one")
    return layout


def gtid_position(settings: MySQLSettings, database: str) -> str | None:
    """The GTIDs the server has committed so far (MariaDB's @@gtid_binlog_pos, MySQL's
    @@gtid_executed); None without GTIDs. No privilege is needed to read them."""
    with connect(settings, database) as conn:
        flavor = server_flavor(conn) if settings.server == "auto" else settings.server
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos" if flavor == "mariadb"
                        else "SELECT @@gtid_executed")
            ((found,),) = cur.fetchall()
    return str(found) if found else None


def read_layout(settings: MySQLSettings, database: str, table: str) -> TableLayout:
    with connect(settings, database) as conn:
        return table_layout(conn, database, table, settings.server)


_JSON_VALID = re.compile(r"^json_valid\(`?([^`]+)`?\)$", re.IGNORECASE)


def _json_columns(cur: Any, database: str, table: str) -> set[str]:
    """MariaDB's JSON is LONGTEXT plus a json_valid() check; MySQL's JSON is its own type."""
    try:
        cur.execute("SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                    "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s", (database, table))
    except pymysql.err.MySQLError:
        return set()  # MySQL before 8.0.16 has no such table, and no need for it
    return {m.group(1) for (clause,) in cur.fetchall()
            if (m := _JSON_VALID.match(str(clause).strip()))}


_INTEGERS = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")
_FLOATS = ("float", "double", "real")
_BINARIES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


def _unless_zero_date(column: str, expression: str) -> str:
    """Dates with a zero part ('0000-00-00', '2024-02-00') are NULL, as Debezium sends them."""
    return (f"IF(YEAR({column}) = 0 OR MONTH({column}) = 0 OR DAYOFMONTH({column}) = 0, "
            f"NULL, {expression})")


def value_sql(column: Column) -> str:
    """SQL for one column's element of the row's JSON array: the canonical value of
    :mod:`indexer.values` where the server can write it, else text :func:`finisher` ends."""
    c, t = quote(column.name), column.data_type
    if t in _INTEGERS:
        # YEAR 0 prints as 0000 and ZEROFILL pads: neither is a JSON number.
        zero_padded = t == "year" or "zerofill" in column.column_type
        return f"CAST({c} AS {'UNSIGNED' if column.unsigned else 'SIGNED'})" if zero_padded else c
    if t == "date":
        return _unless_zero_date(c, f"CAST({c} AS CHAR)")
    if t == "datetime":
        return _unless_zero_date(c, f"REPLACE(CAST({c} AS CHAR), ' ', 'T')")
    if t == "timestamp":  # the session's time zone is UTC (connect)
        return _unless_zero_date(c, f"CONCAT(REPLACE(CAST({c} AS CHAR), ' ', 'T'), 'Z')")
    if t in _BINARIES:
        return f"REPLACE(TO_BASE64({c}), '\\n', '')"
    if t == "bit":
        return f"CAST({c} AS UNSIGNED)"
    if t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"):
        return c
    if t == "float":  # its own text keeps 6 digits; the double it widens to is exact
        return f"CAST({c} + 0e0 AS CHAR)"
    # DECIMAL exact at its scale, TIME as MySQL prints it, doubles and JSON as their text.
    return f"CAST({c} AS CHAR)"


def finisher(column: Column) -> Converter | None:
    """Turns what :func:`value_sql` sent into the canonical value; None = already is."""
    t = column.data_type
    if t in _FLOATS:
        return float  # the text a plain SELECT sends, parsed the same way
    if t == "json":
        return orjson.loads
    if t == "set":
        return values.set_members
    if t == "bit" and column.column_type in ("bit", "bit(1)"):
        return lambda v: v == 1
    return None


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

    def select(self, where: str = "") -> str:
        array = ", ".join(value_sql(c) for c in self.layout.columns)
        order = ", ".join(quote(c.name) for c in self.layout.key)
        return f"SELECT JSON_ARRAY({array}) FROM {self.layout.qualified} {where} ORDER BY {order}"


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
    return [reader.row(raw) for raw in _fetch_all(settings, layout.database,
                                                  reader.select(where), args)]


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
            cur.execute(reader.select(where), tuple(args) or None)
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
                        f"FROM {self.layout.qualified}")
            low, high = cur.fetchone() or (None, None)
        return None if low is None or high is None else (int(low), int(high))

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


def row_count_estimate(settings: MySQLSettings, layout: TableLayout) -> int:
    found = _fetch_all(settings, layout.database,
                       "SELECT TABLE_ROWS FROM information_schema.TABLES "
                       "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                       (layout.database, layout.table))
    return int(found[0][0] or 0) if found else 0


# --- reconciliation: the server computes per-row texts and checksums -----------------------

def text_sql(column: Column, flavor: Flavor = "mariadb") -> str:
    """SQL giving the column as the text :func:`indexer.checksums.hash_text` gives its
    canonical value (NULL for NULL). JSON and SET texts are compact on MariaDB (its
    JSON_COMPACT) and spaced on MySQL 8, which renders JSON that way and cannot compact it."""
    c, t = quote(column.name), column.data_type
    if t in _FLOATS:
        # As a double, written the way checksums.double_text writes it (a FLOAT too: its
        # own text has only 6 digits; DOUBLE(M,D) would keep D decimals).
        return f"CAST({c} + 0e0 AS CHAR)"
    if t in ("date", "datetime", "timestamp", "bit") or t in _BINARIES:
        return value_sql(column)
    if t == "json":
        return f"JSON_COMPACT({c})" if flavor == "mariadb" else f"CAST({c} AS CHAR)"
    if t == "set":
        separator = "\",\"" if flavor == "mariadb" else "\", \""
        return f"IF({c} = '', '[]', CONCAT('[\"', REPLACE({c}, ',', '{separator}'), '\"]'))"
    if t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"):
        return c
    return f"CAST({c} AS CHAR)"


def hash_sql(fields: Sequence[Field], flavor: Flavor = "mariadb") -> str:
    """The SQL twin of checksums.content_hash: CRC32 of ``#name=text`` for each column, in
    the order of the field names; a NULL makes its part NULL, which CONCAT_WS leaves out."""
    parts = ", ".join(f"CONCAT({_literal(f'#{name}=')}, {text_sql(column, flavor)})"
                      for name, column in sorted(fields, key=lambda f: f[0])) or "''"
    return f"CRC32(CONCAT_WS('', {parts}))"


def _literal(text: str) -> str:
    """A string literal for queries run through _fetch_all (which always formats them)."""
    return "'" + pymysql.converters.escape_string(text).replace("%", "%%") + "'"


def id_sql(layout: TableLayout) -> str:
    """The document id (documents.document_id) computed by the server."""
    key = layout.key
    if len(key) == 1:
        return text_sql(key[0], layout.flavor)
    escaped = [f"REPLACE(REPLACE({text_sql(c, layout.flavor)}, '\\\\', '\\\\\\\\'), '|', '\\\\|')"
               for c in key]
    return f"CONCAT_WS('|', {', '.join(escaped)})"


@dataclass(frozen=True)
class ChunkSum:
    chunk: int
    rows: int
    hash_sum: int


def chunk_sums(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
               width: int, first: int | None = None, last: int | None = None,
               ) -> dict[int, ChunkSum]:
    """Per chunk of ``width`` key values (integer keys) or per id bucket: count and hash sum,
    in one scan inside the server (of chunks ``first``..``last`` only, when given)."""
    chunk = _chunk_sql(layout, width)
    where: str = ""
    args: tuple[int, ...] = ()
    if layout.integer_key:
        where, args = key_range_where(layout, None if first is None else first * width,
                                      None if last is None else (last + 1) * width - 1)
    row_hash = hash_sql(fields, layout.flavor)
    found = _fetch_all(settings, layout.database,
                       f"SELECT {chunk} AS chunk, COUNT(*), SUM({row_hash}) "
                       f"FROM {layout.qualified} {where} GROUP BY chunk", args)
    return {int(c): ChunkSum(int(c), int(n), int(h)) for c, n, h in found}


def _chunk_sql(layout: TableLayout, width: int) -> str:
    if layout.integer_key:
        return f"FLOOR({quote(layout.key[0].name)} / {int(width)})"
    return f"MOD(CRC32({id_sql(layout)}), {KEY_BUCKETS})"


def chunk_rows(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
               width: int, chunks: Sequence[int]) -> dict[str, int]:
    """id -> row hash for every row in these chunks."""
    if not chunks:
        return {}
    if layout.integer_key:
        key = quote(layout.key[0].name)
        where = " OR ".join(f"({key} >= %s AND {key} < %s)" for _ in chunks)
        args: list[int] = []
        for c in chunks:
            args += [c * width, (c + 1) * width]
    else:
        where = f"{_chunk_sql(layout, width)} IN ({', '.join(['%s'] * len(chunks))})"
        args = list(chunks)
    found = _fetch_all(settings, layout.database,
                       f"SELECT {id_sql(layout)}, {hash_sql(fields, layout.flavor)} "
                       f"FROM {layout.qualified} "
                       f"WHERE {where}", args)
    return {str(i): int(h) for i, h in found}


def hashes_for_ids(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
                   ids: Sequence[str]) -> dict[str, int]:
    """id -> row hash of the rows behind these document ids (absent ids are left out)."""
    if not ids:
        return {}
    where, args = ids_where(layout, ids)
    found = _fetch_all(settings, layout.database,
                       f"SELECT {id_sql(layout)}, {hash_sql(fields, layout.flavor)} "
                       f"FROM {layout.qualified} {where}", args)
    return {str(i): int(h) for i, h in found}


def changed_since(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
                  column: str, since: str | None, back_s: float,
                  limit: int) -> tuple[dict[str, int], str | None]:
    """id -> row hash of the rows whose ``column`` (when the row last changed) is at least
    ``since`` (None: ``back_s`` before the newest value), oldest first, at most ``limit``; and
    the newest value read (None: no row). Values are the column's own text, so the server's
    and the writers' time zones never meet."""
    c = quote(column)
    if since is None:
        ((since,),) = _fetch_all(settings, layout.database,
                                 f"SELECT CAST(MAX({c}) - INTERVAL %s SECOND AS CHAR) "
                                 f"FROM {layout.qualified}", (int(back_s),))
        if since is None:
            return {}, None
    found = _fetch_all(settings, layout.database,
                       f"SELECT {id_sql(layout)}, {hash_sql(fields, layout.flavor)}, "
                       f"CAST({c} AS CHAR) FROM {layout.qualified} WHERE {c} >= %s "
                       f"ORDER BY {c} LIMIT {int(limit)}", (since,))
    return {str(i): int(h) for i, h, _ in found}, (str(found[-1][2]) if found else since)


def changed_column(settings: MySQLSettings, layout: TableLayout,
                   wanted: str | None) -> tuple[str | None, str]:
    """The indexed DATETIME/TIMESTAMP column that says when a row last changed: ``wanted``,
    or the one MySQL sets ON UPDATE CURRENT_TIMESTAMP; and why there is none."""
    columns = _fetch_all(settings, layout.database,
                         "SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS "
                         "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                         (layout.database, layout.table))
    if wanted is None:
        found = [str(name) for name, data_type, extra in columns
                 if str(data_type).lower() in ("datetime", "timestamp")
                 and "on update current_timestamp" in str(extra).lower()]
        if not found:
            return None, "no column is set ON UPDATE CURRENT_TIMESTAMP (set changed_column)"
        wanted = found[0]
    elif wanted not in {str(name) for name, _, _ in columns}:
        return None, f"changed_column {wanted!r} is not a column of the table"
    leading = _fetch_all(settings, layout.database,
                         "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                         "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1",
                         (layout.database, layout.table, wanted))
    if not leading:
        return None, f"column {wanted} has no index of its own (each look would scan the table)"
    return wanted, ""


def key_range(settings: MySQLSettings, layout: TableLayout) -> tuple[int, int, int] | None:
    """(min key, max key, rows) of an integer-keyed table."""
    key = quote(layout.key[0].name)
    ((low, high, rows),) = _fetch_all(
        settings, layout.database,
        f"SELECT MIN({key}), MAX({key}), COUNT(*) FROM {layout.qualified}")
    return None if low is None or high is None else (int(low), int(high), int(rows))
