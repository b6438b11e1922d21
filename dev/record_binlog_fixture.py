"""Records tests/unit/fixtures/alltypes.binlog and alltypes.binlog.json from a MariaDB of the
dev stack (binlog_row_metadata = FULL): a table of every type with edge values, inserted,
updated and deleted, as the binlog holds it; and what the reindex reads of each row (the
canonical values the decoder must give), the server's collations and the JSON columns.

    .venv/bin/python dev/record_binlog_fixture.py [--port 3306]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parents[1]))

from indexer.core import binlog_events as ev
from indexer.settings import MySQLSettings
from indexer.source.mysql import connection, schema, snapshots
from tests.integration import test_types

FIXTURES = Path(__file__).parents[1] / "tests" / "unit" / "fixtures"
EXTRA = ("l1 VARCHAR(20) CHARACTER SET latin1, u16 VARCHAR(10) CHARACTER SET utf16, "
         "zf INT(6) UNSIGNED ZEROFILL, tm6 TIME(6), e2 ENUM('p','q') NOT NULL DEFAULT 'p', "
         "s2 SET('m','n')")
# Values at the edges the every-type rows leave out: zero dates, YEAR 0000, an empty ENUM,
# an empty SET, latin1's cp1252 and C1 bytes, utf16, negative times with fractions.
EDGES = [
    "INSERT INTO t (id, dt, dtm0, dtm6, yr, en, st, s2) "
    "VALUES (20, '0000-00-00', '0000-00-00 00:00:00', '2024-02-00 10:00:00.5', 0, '', '', '')",
    "INSERT INTO t (id, l1, u16, zf, tm6, tm3, e2) VALUES (21, CONCAT('\u20ac', "
    "CAST(0x81 AS CHAR CHARACTER SET latin1), 'x\u00e9'), 'z\u65e5\u672c', 42, "
    "'-00:00:00.000001', '-12:34:56.789', 'q')",
    "INSERT INTO t (id, tm6, tm, dec_small, dec_big) VALUES (22, '-838:59:59.000000', "
    "'-00:00:01', '-0.01', '0.000000000000000000000000000001')",
    "UPDATE t SET vc = 'changed', js = '{\"a\": \"\\\\u00e9\", \"n\": 1.50}' WHERE id = 1",
    "DELETE FROM t WHERE id = 2",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--datadir", type=Path, default=Path(".stack/mariadb/data"))
    args = parser.parse_args()
    settings = MySQLSettings(port=args.port)
    admin = connection.connect(settings, "mysql")
    with admin.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_metadata = FULL")
        cur.execute("CREATE DATABASE IF NOT EXISTS binlog_fixture")
        cur.execute("DROP TABLE IF EXISTS binlog_fixture.t")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        ((log, *_),) = cur.fetchall()
    db = connection.connect(settings, "binlog_fixture")  # opened after SET GLOBAL: FULL maps
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE t ({test_types.COLUMNS}, {EXTRA}) CHARACTER SET utf8mb4")
        # The every-type rows, their 70 kB texts and blobs cut short (the length prefixes'
        # sizes come from the column types, not the values).
        short = tuple(v[:300] if isinstance(v, str | bytes) and len(v) > 300 else v
                      for v in test_types.MAX_ROW)
        marks = ", ".join(["%s"] * len(test_types.NAMES))
        cur.execute("SET time_zone = '+00:00'")
        for row in (short, test_types.MIN_ROW):
            cur.execute(f"INSERT INTO t ({', '.join(test_types.NAMES)}) VALUES ({marks})", row)
        cur.execute("INSERT INTO t (id) VALUES (3)")
        for floats in test_types.FLOAT_ROWS:
            cur.execute("INSERT INTO t (id, f, d) VALUES (%s, %s, %s)", floats)
        cur.execute("SET sql_mode = ''")
        for statement in EDGES:
            cur.execute(statement)
    with admin.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                    "WHERE ID IS NOT NULL")
        charsets = {int(i): str(c) for i, c in cur.fetchall()}
    data = (args.datadir / log).read_bytes()
    kept, at, checksummed = [data[:4]], 4, False
    while at < len(data):
        head = ev.header(data[at:at + ev.HEADER_SIZE])
        event = data[at:at + head.size]
        if head.type == ev.FORMAT_DESCRIPTION:
            checksummed = ev.format_description(event).checksummed
        wanted = head.type in (ev.FORMAT_DESCRIPTION, ev.TABLE_MAP, ev.ROTATE,
                               ev.MARIADB_GTID, ev.XID, *ev.ROWS_EVENTS)
        if wanted and (head.type != ev.TABLE_MAP
                       or ev.table_map(event, checksummed).table == "t"):
            kept.append(event)
        at += head.size
    layout = schema.read_layout(settings, "binlog_fixture", "t")
    rows = snapshots.rows_now(settings, layout, [str(i) for i in range(1, 30)])
    expected = {str(key["id"]): row for key, row in rows}
    (FIXTURES / "alltypes.binlog").write_bytes(b"".join(kept))
    (FIXTURES / "alltypes.binlog.json").write_bytes(orjson.dumps({
        "log": log, "charsets": charsets,
        "json_columns": sorted(c.name for c in layout.columns if c.data_type == "json"),
        "rows": expected}, default=lambda g: {"geometry": g.text},
        option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    print(f"recorded {len(kept) - 1} events of {log} and {len(expected)} rows", file=sys.stderr)


if __name__ == "__main__":
    main()
