"""CPU per row change of the binlog source's decoding, alone: the dev stack's MariaDB writes a
burst of updates, the binlog range it took is read once over the replication protocol, then
decoded in this process ``--rounds`` times (the events to row changes with their canonical
values, :class:`indexer.core.binlog_changes.ChangeReader`) and each change's write built as
the daemon builds it (document, ``_indexer`` block, id, version). Decodes both ways where the
native module is built: row images read by the Python decoder, and by the native RowPlan.
Prints the medians, the decode's share and the native decode's against Python's.

    .venv/bin/python -m bench.binlog_decode --rows 100000 --rounds 3

The table is bench.pipeline's (five columns: BIGINT key, VARCHAR, DECIMAL(10,2), INT,
DATETIME(6)); each update changes two columns, and every row event holds both images.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.common import BENCH_COLUMNS, DATABASE, MYSQL_PORT, mysql, unique
from indexer.build import current_build, load_native
from indexer.core import binlog_events as ev
from indexer.core.binlog_changes import ChangeReader, RowChange, TableColumns
from indexer.core.binlog_rows import NativePlan
from indexer.core.documents import DocumentBuilder
from indexer.settings import MySQLSettings, TableConfig, VersionSource
from indexer.source.binlog.replication import BinlogStream, binlog_end
from indexer.source.binlog.source import replica_id

LOAD_CHUNK = 5000


def write_burst(table: str, rows: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """Loads the table, then updates every row in ten transactions: the binlog range of the
    updates."""
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute(f"CREATE TABLE `{table}` ({BENCH_COLUMNS})")
            for chunk in range(0, rows, LOAD_CHUNK):
                cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, 0, NOW(6))",
                                [(i, f"product {i}", f"{1 + i % 1000}.50")
                                 for i in range(chunk, min(chunk + LOAD_CHUNK, rows))])
        start = binlog_end(db)
        with db.cursor() as cur:
            step = -(-rows // 10)
            for first in range(0, rows, step):
                cur.execute(f"UPDATE `{table}` SET qty = 1, updated_at = NOW(6) "
                            "WHERE id >= %s AND id < %s", (first, first + step))
        return start, binlog_end(db)
    finally:
        db.close()


async def read_range(start: tuple[str, int], end: tuple[str, int]) -> tuple[list[bytes], bool,
                                                                            dict[int, str]]:
    settings = MySQLSettings(port=MYSQL_PORT)
    events: list[bytes] = []
    async with BinlogStream(settings, replica_id(unique("bench"), 0), start) as stream:
        assert stream.server is not None
        server = stream.server
        while True:
            got = await stream.read(10_000, 5.0)
            events += got
            last = ev.header(events[-1]) if events else None
            if last is not None and last.next_position >= end[1] and last.type == ev.XID:
                break
    codecs = {i: ev.CHARSET_CODECS[n] for i, n in server.collations.items()
              if n in ev.CHARSET_CODECS}
    return events, server.checksummed, codecs


def decode(events: list[bytes], table: str, codecs: dict[int, str], checksummed: bool,
           file: str, native: NativePlan | None) -> tuple[float, list[RowChange]]:
    columns = TableColumns(frozenset({"id", "name", "price", "qty", "updated_at"}), frozenset())
    reader = ChangeReader({f"{DATABASE}.{table}": columns}.get, codecs, "mariadb", file,
                          checksummed=checksummed, native=native)
    changes: list[RowChange] = []
    started = time.process_time()
    for event in events:
        changes += reader.feed(event)
    return time.process_time() - started, changes


def build(changes: list[RowChange], table: str) -> float:
    builder = DocumentBuilder(TableConfig(DATABASE, table, table, table, f"{table}.json",
                                          VersionSource("binlog")))
    started = time.process_time()
    for row in changes:
        assert row.change is not None
        builder.write_for_change(row.change)
    return time.process_time() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    table = unique("binlog_decode")
    print(f"{current_build().describe}; {args.rows:,} updates of {table}", flush=True)
    start, end = await asyncio.to_thread(write_burst, table, args.rows)
    try:
        events, checksummed, codecs = await read_range(start, end)
    finally:
        db = mysql()
        with db.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")
        db.close()
    module = load_native()
    ways: dict[str, NativePlan | None] = {"python": None}
    if module is not None:
        ways["native"] = module.RowPlan
    decoded: dict[str, list[float]] = {way: [] for way in ways}
    built: list[float] = []
    for _ in range(args.rounds):
        results = {}
        for way, native in ways.items():
            seconds, changes = decode(events, table, codecs, checksummed, start[0], native)
            assert len(changes) == args.rows, f"{len(changes)} changes decoded"
            decoded[way].append(seconds / len(changes) * 1e6)
            results[way] = [c.change for c in changes]
        assert all(found == results["python"] for found in results.values()), \
            "the native decoder's changes differ from Python's"
        built.append(build(changes, table) / len(changes) * 1e6)
    build_us = statistics.median(built)
    for way in ways:
        decode_us = statistics.median(decoded[way])
        print(f"{way}: {len(events):,} events, {args.rows:,} row changes: decode "
              f"{decode_us:.1f} µs CPU per change, build {build_us:.1f} µs; decode is "
              f"{decode_us / (decode_us + build_us):.0%} of the two (medians of {args.rounds})")
    if "native" in ways:
        ratio = statistics.median(decoded["native"]) / statistics.median(decoded["python"])
        print(f"native decode / Python decode: {ratio:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
