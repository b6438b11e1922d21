"""Reindex throughput against the raw _bulk ceiling of the same documents, in one run.

    .venv/bin/python -m bench.reindex --rows 1000000 --parallel 1

Protocol: Elasticsearch pinned to core 0; MariaDB and the client side (`indexer reindex` as a
child process, or the minimal raw client) to core 1. The table is generated inside MariaDB
from its sequence engine, in a database Debezium does not capture and with the binlog off for
the load. The ceiling posts the same documents as prebuilt NDJSON, as many as the table has
rows (Elasticsearch slows down as an index grows), as many bulks in flight as indexer, before
and after.
Prints rows/s, the ratio, peak RSS and how busy each process was.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench.common import (
    BASE,
    BENCH_COLUMNS,
    BENCH_MAPPING,
    CLIENT_CORE,
    ES,
    Busy,
    Events,
    mysql,
    peak_rss_mb,
    pin_protocol,
    unique,
    unpin,
)
from bench.daemon import ceiling_bodies, raw_ceiling
from indexer.core.mappings import load_settings

BENCH_DATABASE = "indexer_bench"  # not in the connector's database.include.list


def create_table(rows: int) -> str:
    table = unique("reindex")
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {BENCH_DATABASE}")
            cur.execute(f"CREATE TABLE {BENCH_DATABASE}.`{table}` ({BENCH_COLUMNS})")
            cur.execute("SET SESSION sql_log_bin = 0")
            for start in range(1, rows + 1, 1_000_000):
                end = min(start + 999_999, rows)
                cur.execute(
                    f"INSERT INTO {BENCH_DATABASE}.`{table}` SELECT seq, CONCAT('product ', seq),"
                    " (100 + seq MOD 100000) / 100, seq MOD 1000,"
                    f" TIMESTAMPADD(MICROSECOND, seq, '{BASE}') FROM seq_{start}_to_{end}")
    finally:
        db.close()
    return table


async def run_reindex(table: str, parallel: int) -> tuple[float, float, str, str]:
    """(seconds, peak RSS MB, summary line, how busy each process was) of `indexer reindex`
    in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        alias = unique("bench-reindex").lower().replace("_", "-")
        (folder / f"{alias}.json").write_bytes(orjson.dumps(BENCH_MAPPING))
        config = folder / "bench.toml"
        config.write_text(
            f'[elasticsearch]\nhosts = ["{ES}"]\nmappings_dir = "{folder}"\n'
            "[metrics]\nport = 0\n"
            f'[[tables]]\nname = "{BENCH_DATABASE}.{table}"\nalias = "{alias}"\n')
        output = folder / "reindex.log"
        started = time.perf_counter()
        busy, children = Busy("elasticsearch", "mariadb"), _children_cpu()
        with output.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                "taskset", "-c", CLIENT_CORE, sys.executable, "-m", "indexer", "reindex", table,
                "--parallel", str(parallel), "--config", str(config), stdout=log, stderr=log)
            rss = 0.0
            while proc.returncode is None:
                with contextlib.suppress(FileNotFoundError):
                    rss = max(rss, peak_rss_mb(proc.pid))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 0.5)
        elapsed = time.perf_counter() - started
        load = busy.report(indexer=_children_cpu() - children)
        text = output.read_text(errors="replace")
        if proc.returncode != 0:
            raise RuntimeError(f"indexer reindex failed:\n{text[-3000:]}")
        summary = next((line for line in text.splitlines() if "rows in" in line), "")
        async with aiohttp.ClientSession(base_url=ES) as http:
            await (await http.delete(f"/{alias}-v*")).read()
    return elapsed, rss, summary.strip(), load


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def main(rows: int, parallel: int, ceiling_docs: int) -> None:
    table = create_table(rows)
    pin_protocol()
    try:
        events = Events(b'{"schema":{},"payload":{"id":1}}',
                        b'{"schema":{},"payload":{"source":{}}}')
        n = min(rows, ceiling_docs or rows)
        bodies = ceiling_bodies(events, n)
        # The reindex loads with refresh off; so does its ceiling.
        before = await raw_ceiling(bodies, n, load_settings())
        seconds, rss, summary, load = await run_reindex(table, parallel)
        after = await raw_ceiling(bodies, n, load_settings())
        rate = rows / seconds
        ceiling = max(before, after)  # the higher: a ceiling, and noisy here
        print(f"reindex {rows:,} rows, --parallel {parallel} | raw _bulk ceiling {before:,.0f} / "
              f"{after:,.0f} docs/s | indexer reindex {rate:,.0f} rows/s (whole command) | "
              f"ratio {rate / ceiling:.2f} | peak RSS {rss:.0f} MB | CPU busy: {load}", flush=True)
        print(f"  {summary}")
    finally:
        unpin()
        drop_table(table)


def drop_table(table: str) -> None:
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute(f"DROP TABLE {BENCH_DATABASE}.`{table}`")
    finally:
        db.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--ceiling-docs", type=int, default=0,
                        help="documents the ceiling posts (default: as many as rows; fewer is "
                             "quicker but skips the cost of merging a large index)")
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.parallel, args.ceiling_docs))
