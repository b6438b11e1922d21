"""Freshness: from a row's commit in MariaDB to the document being searchable, through real
Debezium, Kafka and `indexer run`, under a steady insert load.

    .venv/bin/python -m bench.freshness --rate 500 --seconds 30 \
        [--variant default --variant fixed-20ms:indexer.batch.max_linger_ms=20]

With ``--variant`` (as in bench.pipeline; ``indexer.*`` settings only) each variant runs
its own load in turn, and the daemon's CPU per row and mean documents per bulk are printed
beside its freshness. ``--per-commit`` rows go in each transaction (one by default), for
rates one connection cannot commit row by row.

Pinning as in bench.daemon (Elasticsearch on core 0; MariaDB, Kafka, Connect and the daemon
on core 1). A writer thread commits one row per transaction at a steady rate and notes the
commit time; a poller searches the read alias every 20 ms for rows not seen yet and notes
when each first shows. The index keeps Elasticsearch's default refresh_interval of 1 s, so
about half a second of every figure is the refresh.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import (
    BENCH_COLUMNS,
    CLIENT_CORE,
    DATABASE,
    cpu_seconds,
    mysql,
    pin,
    pin_protocol,
    search_client,
    server_cpu,
    unique,
    unpin,
    wait_for_topic,
)
from bench.daemon import write_config
from bench.pipeline import METRICS_PORT, Variant, bulks_sent

POLL_S = 0.02


def writer(table: str, rate: int, seconds: float, per_commit: int,
           committed: dict[int, float], done: threading.Event) -> None:
    db = mysql()
    try:
        start = time.perf_counter()
        i = 0
        with db.cursor() as cur:
            while time.perf_counter() - start < seconds:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                ids = range(i + 1, i + 1 + per_commit)
                i += per_commit
                cur.execute(f"INSERT INTO `{table}` VALUES "
                            + ",".join(["(%s, 'p', 1.00, 1, NOW(6))"] * per_commit), tuple(ids))
                now = time.time()  # autocommit: the INSERT has committed
                for n in ids:
                    committed[n] = now
    finally:
        db.close()
        done.set()


async def measure(rate: int, seconds: float, per_commit: int, variant: Variant) -> None:
    db = mysql()
    table = unique("fresh")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` ({BENCH_COLUMNS})")
        cur.execute(f"INSERT INTO `{table}` VALUES (0, 'topic', 0, 0, NOW(6))")  # not timed
    await wait_for_topic(f"mysql.{DATABASE}.{table}")
    pin_protocol()
    pin("connect", CLIENT_CORE)
    es = await search_client().__aenter__()
    with tempfile.TemporaryDirectory() as tmp:
        config, _, alias = write_config(Path(tmp), table, f"mysql.{DATABASE}.{table}", True)
        proc = await asyncio.create_subprocess_exec(
            "taskset", "-c", CLIENT_CORE, sys.executable, "-m", "indexer", "run",
            "--config", str(config), stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "INDEXER_METRICS__PORT": str(METRICS_PORT), **variant.env})
        assert proc.stderr is not None
        try:
            while b"indexer running" not in (line := await proc.stderr.readline()):
                if not line:
                    raise RuntimeError("indexer run exited before it started")
            committed: dict[int, float] = {}
            seen: dict[int, float] = {}
            done = threading.Event()
            cpu_before, bulks_before = cpu_seconds(proc.pid), bulks_sent()
            es_before = server_cpu("elasticsearch")
            thread = threading.Thread(target=writer, args=(table, rate, seconds, per_commit,
                                                           committed, done))
            thread.start()
            deadline = None
            while deadline is None or time.monotonic() < deadline:
                if done.is_set() and deadline is None:
                    deadline = time.monotonic() + 15
                unseen = [i for i in list(committed) if i not in seen]  # the writer adds to it
                if done.is_set() and not unseen:
                    break
                if unseen:
                    response = await es.search(alias, {
                        "size": 10000, "_source": False,
                        "query": {"ids": {"values": [str(i) for i in unseen[:10000]]}}})
                    now = time.time()
                    for hit in response["hits"]["hits"]:
                        seen.setdefault(int(hit["_id"]), now)
                await asyncio.sleep(POLL_S)
            thread.join()
            cpu_us = (cpu_seconds(proc.pid) - cpu_before) / len(committed) * 1e6
            es_us = (server_cpu("elasticsearch") - es_before) / len(committed) * 1e6
            per_bulk = len(committed) / max(1.0, bulks_sent() - bulks_before)
        finally:
            proc.terminate()
            await proc.wait()
            await es.delete_matching(f"{alias}-v*")
            await es.close()
            unpin()
            with db.cursor() as cur:
                cur.execute(f"DROP TABLE `{table}`")
    lags = sorted(seen[i] - committed[i] for i in seen)
    missing = len(committed) - len(seen)
    p50 = statistics.median(lags)
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(f"{variant.label}: {len(committed)} rows at {len(committed) / seconds:.0f} rows/s | "
          f"p50 {p50:.3f} s | p99 {p99:.3f} s | max {lags[-1]:.3f} s | never seen {missing} | "
          f"µs CPU per row: indexer {cpu_us:.0f}, Elasticsearch {es_us:.0f} (its searches "
          f"included) | {per_bulk:.0f} docs per bulk", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="rows per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--per-commit", type=int, default=1, help="rows per transaction")
    parser.add_argument("--variant", action="append", type=Variant.parse,
                        help="label[:indexer.<section>.<key>=v,...]")
    args = parser.parse_args()
    for variant in args.variant or [Variant("default")]:
        if variant.connector:
            raise SystemExit(f"--variant {variant.label}: only indexer.* settings here")
        await measure(args.rate, args.seconds, args.per_commit, variant)


if __name__ == "__main__":
    asyncio.run(main())
