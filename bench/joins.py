"""Joined documents: what a document rebuilt from its tables costs, against reindexing the
same documents, in one run.

    .venv/bin/python -m bench.joins --products 100000 [--reconcile-products 1000000]

Products (id, name, price, category) with their category as a lookup and 5 variants each as
children, all in category 1. Loaded into MariaDB without binlog events (so Kafka holds none
of the load), then:

1. **reindex**: `indexer reindex` of the products, the reference rate (documents/s);
2. **child changes**: with the daemon stopped, one variant of every product updated (one
   change per document), then every variant (five per document), 10,000 rows per
   transaction; once Debezium has put them in Kafka, `indexer run` drains them: rebuilt
   documents/s against the reindex rate (goal >= 0.5);
3. **fan-out**: the daemon caught up, category 1 renamed: every document rebuilt, timed
   from the commit to the category topic's offset committed (goal: within 2x of the
   reindex's time for as many documents), the daemon's RSS sampled throughout (goal <= 300 MB);
4. **freshness**: 500 variant updates a second, each of another product, for 20 s; a poller
   asks the index for each new value (goal: p99 <= 2 s);
5. with ``--reconcile-products``: a second set of that many products (5 variants each),
   reindexed, then `indexer reconcile` of it (goal <= 60 s for 1M).

Pinning as in bench.daemon for 1-4: Elasticsearch on core 0; MariaDB, Kafka, Connect and
the indexer (daemon, reindex) on core 1. The reconcile (5) runs on the whole machine, as
bench.reconcile's: both of its sides are mostly server work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from bench.common import (
    CLIENT_CORE,
    DATABASE,
    ES,
    KAFKA,
    REPO,
    daemon_metric,
    mysql,
    pin,
    pin_protocol,
    search_client,
    unique,
    unpin,
)
from bench.daemon import committed
from bench.pipeline import topic_end
from indexer.config import build_config
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.settings import Config

CHILDREN = 5
METRICS_PORT = 9481
CATCH_UP_S = 1800.0
POLL_S = 0.02
MAPPING = {
    "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}},
    "mappings": {"dynamic": False, "properties": {
        "id": {"type": "long"}, "name": {"type": "keyword"}, "price": {"type": "keyword"},
        "category": {"type": "object", "properties": {"name": {"type": "keyword"}}},
        "variants": {"type": "nested", "properties": {
            "sku": {"type": "keyword"}, "grams": {"type": "integer"}}}}},
}


class Shop:
    """The bench's three tables, named for one run."""

    def __init__(self, products: int) -> None:
        suffix = unique("j")[2:]
        self.products = products
        self.p, self.c, self.v = f"jp_{suffix}", f"jc_{suffix}", f"jv_{suffix}"
        self.alias = f"bench-joins-{suffix}"

    def topic(self, table: str) -> str:
        return f"mysql.{DATABASE}.{table}"

    @property
    def topics(self) -> list[str]:
        return [self.topic(t) for t in (self.p, self.c, self.v)]

    def create(self) -> None:
        n = self.products
        db = mysql()
        try:
            with db.cursor() as cur:
                for statement in (
                    f"CREATE TABLE {self.c} (id INT PRIMARY KEY, name VARCHAR(40))",
                    f"CREATE TABLE {self.p} (id INT PRIMARY KEY, name VARCHAR(80), "
                    f"price DECIMAL(10,2), category_id INT, KEY by_category (category_id))",
                    f"CREATE TABLE {self.v} (id INT PRIMARY KEY, product_id INT NOT NULL, "
                    "sku VARCHAR(20), grams INT, KEY by_product (product_id))",
                ):
                    cur.execute(statement)
                cur.execute("SET SESSION sql_log_bin = 0")  # the load is no change to stream
                cur.execute(f"INSERT INTO {self.c} VALUES (1, 'everything'), (2, 'none')")
                cur.execute(f"INSERT INTO {self.p} SELECT seq, CONCAT('product ', seq), "
                            f"seq % 1000 + 0.5, 1 FROM seq_1_to_{n}")
                cur.execute(f"INSERT INTO {self.v} SELECT seq, 1 + (seq - 1) DIV {CHILDREN}, "
                            f"CONCAT('sku-', seq), seq % 1000 FROM seq_1_to_{n * CHILDREN}")
                cur.execute("SET SESSION sql_log_bin = 1")
                # One change per table, so that Debezium makes their topics.
                cur.execute(f"UPDATE {self.c} SET name = 'nothing' WHERE id = 2")
                cur.execute(f"UPDATE {self.p} SET name = 'product 1' , price = price + 0 "
                            f"WHERE id = 1")
                cur.execute(f"UPDATE {self.v} SET grams = grams + 1 WHERE id = 1")
        finally:
            db.close()

    def drop(self) -> None:
        db = mysql()
        try:
            with db.cursor() as cur:
                for table in (self.v, self.p, self.c):
                    cur.execute(f"DROP TABLE IF EXISTS {table}")
        finally:
            db.close()

    def entry(self) -> dict[str, Any]:
        return {"name": f"{DATABASE}.{self.p}", "alias": self.alias,
                "mapping": "joins.json",
                "lookups": {"category": {"table": self.c, "on": {"category_id": "id"},
                                         "include": ["name"]}},
                "children": {"variants": {"table": self.v, "on": {"id": "product_id"},
                                          "exclude": ["product_id"]}}}

    def config(self, folder: Path, group: str) -> tuple[Config, Path]:
        (folder / "joins.json").write_bytes(orjson.dumps(MAPPING))
        raw = {"kafka": {"bootstrap_servers": KAFKA, "group_id": group,
                         "dead_letter_topic": unique("bench-dlq")},
               "elasticsearch": {"hosts": [ES], "mappings_dir": str(folder)},
               "metrics": {"port": METRICS_PORT}, "verify": {"enabled": False},
               "tables": [self.entry()]}
        path = folder / "joins.toml"
        path.write_text(_toml(raw))
        return build_config(raw, folder), path


def _toml(raw: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return orjson.dumps(v).decode()

    lines = []
    for section, values in raw.items():
        for entry in values if section == "tables" else [values]:
            lines.append(f"[[{section}]]" if section == "tables" else f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def rebuilt_documents() -> float:
    """The daemon's joined documents written or found current, from its metrics."""
    return daemon_metric(METRICS_PORT, "indexer_rebuilt_total") or 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Daemon:
    """`indexer run` pinned to the client core, its stderr kept for errors."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.proc: asyncio.subprocess.Process | None = None
        self.errors: list[str] = []
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            "taskset", "-c", CLIENT_CORE, sys.executable, "-m", "indexer", "run",
            "--config", str(self.config), cwd=REPO, stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL)
        assert self.proc.stderr is not None
        while b"indexer running" not in (line := await self.proc.stderr.readline()):
            if not line:
                raise RuntimeError("indexer run exited before it started")
        self._drain = asyncio.create_task(self._read(self.proc.stderr))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            if b" ERROR " in line:
                self.errors.append(line.decode(errors="replace").rstrip())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()
        if self._drain is not None:
            await self._drain
        if self.errors:
            raise RuntimeError("the daemon logged errors:\n" + "\n".join(self.errors[:5]))


async def caught_up(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, group: str,
                    topics: list[str]) -> None:
    deadline = time.monotonic() + CATCH_UP_S
    for topic in topics:
        while True:
            end = await topic_end(admin, consumer, topic)
            if await committed(admin, group, topic) >= end:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not catch up with {topic}")
            await asyncio.sleep(0.2)


def update_variants(shop: Shop, per_document: int) -> None:
    """``per_document`` variants of every product (of its 5) updated."""
    db = mysql()
    try:
        with db.cursor() as cur:
            step = 10_000 // per_document * CHILDREN
            for start in range(1, shop.products * CHILDREN + 1, step):
                cur.execute(f"UPDATE {shop.v} SET grams = grams + 1 WHERE id >= %s AND id < %s "
                            f"AND (id - 1) %% {CHILDREN} < {per_document}",
                            (start, start + step))
    finally:
        db.close()


async def measure_reindex(config: Config) -> tuple[float, float]:
    started = time.perf_counter()
    result = await reindex(config, config.tables[0])
    seconds = time.perf_counter() - started
    return result.rows / seconds, seconds


async def child_changes(shop: Shop, config: Config, path: Path, admin: AIOKafkaAdminClient,
                        consumer: AIOKafkaConsumer,
                        per_document: int) -> tuple[float, int, float]:
    """(rebuilt documents/s, events, seconds) draining ``per_document`` variant updates of
    every document."""
    topic = shop.topic(shop.v)
    before = await topic_end(admin, consumer, topic)
    await asyncio.to_thread(update_variants, shop, per_document)
    events = shop.products * per_document
    deadline = time.monotonic() + CATCH_UP_S
    while await topic_end(admin, consumer, topic) < before + events:
        if time.monotonic() > deadline:
            raise RuntimeError("Debezium did not deliver the updates")
        await asyncio.sleep(0.5)
    daemon = Daemon(path)
    await daemon.start()
    try:
        started = time.perf_counter()
        done = rebuilt_documents()
        await caught_up(admin, consumer, config.kafka.group_id, [topic])
        seconds = time.perf_counter() - started
        rebuilt = rebuilt_documents() - done
    finally:
        await daemon.stop()
    return rebuilt / seconds, events, seconds


async def fan_out(shop: Shop, config: Config, path: Path, admin: AIOKafkaAdminClient,
                  consumer: AIOKafkaConsumer) -> tuple[float, float]:
    """(seconds from the rename to its offset committed, peak RSS in MB during it)."""
    daemon = Daemon(path)
    await daemon.start()
    peak = 0.0
    try:
        await caught_up(admin, consumer, config.kafka.group_id, shop.topics)
        topic = shop.topic(shop.c)
        end = await topic_end(admin, consumer, topic)
        db = mysql()
        try:
            with db.cursor() as cur:
                cur.execute(f"UPDATE {shop.c} SET name = 'renamed' WHERE id = 1")
        finally:
            db.close()
        started = time.perf_counter()
        while await committed(admin, config.kafka.group_id, topic) <= end:
            peak = max(peak, rss_mb(daemon.pid))
            await asyncio.sleep(0.1)
        seconds = time.perf_counter() - started
    finally:
        await daemon.stop()
    return seconds, peak


def change_variants(shop: Shop, rate: int, seconds: float, committed_at: dict[int, float],
                    done: threading.Event) -> None:
    """One variant of another product per transaction, each to a value of its own."""
    db = mysql()
    try:
        with db.cursor() as cur:
            start = time.perf_counter()
            i = 0
            while time.perf_counter() - start < seconds and i < shop.products:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                value = 10_000_000 + i
                cur.execute(f"UPDATE {shop.v} SET grams = %s WHERE id = %s",
                            (value, i * CHILDREN + 1))
                committed_at[value] = time.time()
                i += 1
    finally:
        db.close()
        done.set()


async def freshness(shop: Shop, path: Path, rate: int, seconds: float) -> tuple[float, float, int]:
    """(p50, p99 seconds from a variant's commit to its document searchable, never seen)."""
    daemon = Daemon(path)
    await daemon.start()
    es = await search_client().__aenter__()
    committed_at: dict[int, float] = {}
    seen: dict[int, float] = {}
    try:
        done = threading.Event()
        writer = threading.Thread(target=change_variants,
                                  args=(shop, rate, seconds, committed_at, done))
        writer.start()
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            if done.is_set() and deadline is None:
                deadline = time.monotonic() + 15
            unseen = [v for v in list(committed_at) if v not in seen]
            if done.is_set() and not unseen:
                break
            if unseen:
                response = await es.search(shop.alias, {
                    "size": 10_000, "_source": ["variants.grams"],
                    "query": {"nested": {"path": "variants", "query": {
                        "terms": {"variants.grams": unseen[:10_000]}}}}})
                now = time.time()
                for hit in response["hits"]["hits"]:
                    for variant in hit["_source"].get("variants", []):
                        if variant.get("grams") in committed_at:
                            seen.setdefault(variant["grams"], now)
            await asyncio.sleep(POLL_S)
        writer.join()
    finally:
        await es.close()
        await daemon.stop()
    lags = sorted(seen[v] - committed_at[v] for v in seen)
    return (statistics.median(lags), lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            len(committed_at) - len(seen))


async def reconcile_many(products: int, folder: Path) -> tuple[float, float, int]:
    """(reindex documents/s, reconcile seconds, documents) for a second, larger set."""
    shop = Shop(products)
    await asyncio.to_thread(shop.create)
    try:
        config, _ = shop.config(folder, unique("bench-group"))
        rate, _ = await measure_reindex(config)
        started = time.perf_counter()
        report = await reconcile(config, config.tables[0], settle_s=0)
        seconds = time.perf_counter() - started
        if not report.clean:
            raise RuntimeError(f"reconcile found differences: {report.as_json()}")
        return rate, seconds, report.documents
    finally:
        await asyncio.to_thread(shop.drop)
        async with search_client() as es:
            await es.delete_matching(f"{shop.alias}-v*")


async def main(products: int, reconcile_products: int, rate: int, seconds: float) -> None:
    pin_protocol()
    pin("connect", CLIENT_CORE)
    shop = Shop(products)
    await asyncio.to_thread(shop.create)
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
    consumer = AIOKafkaConsumer(bootstrap_servers=KAFKA)
    await admin.start()
    await consumer.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config, path = shop.config(Path(tmp), unique("bench-group"))
            reindexed, reindex_s = await measure_reindex(config)
            print(f"reindex: {products:,} documents ({CHILDREN} children each) in "
                  f"{reindex_s:.1f} s = {reindexed:,.0f} documents/s", flush=True)
            for per_document in (1, CHILDREN):
                per_s, events, drained_s = await child_changes(shop, config, path, admin,
                                                               consumer, per_document)
                print(f"child changes, {per_document} per document: {events:,} variant updates "
                      f"drained in {drained_s:.1f} s, {per_s:,.0f} documents rebuilt/s = "
                      f"{per_s / reindexed:.2f} of the reindex rate (goal >= 0.5)", flush=True)
            fan_s, peak = await fan_out(shop, config, path, admin, consumer)
            print(f"fan-out: {products:,} documents in {fan_s:.1f} s = "
                  f"{fan_s / reindex_s:.2f}x the reindex's time (goal <= 2); daemon RSS peak "
                  f"{peak:.0f} MB (goal <= 300)", flush=True)
            p50, p99, never = await freshness(shop, path, rate, seconds)
            print(f"freshness at {rate} child changes/s: p50 {p50:.3f} s, p99 {p99:.3f} s "
                  f"(goal <= 2), never seen {never}", flush=True)
            if reconcile_products:
                unpin()
                again, took, docs = await reconcile_many(reconcile_products, Path(tmp))
                print(f"reconcile: {docs:,} documents ({CHILDREN} children each) in "
                      f"{took:.1f} s (goal <= 60 for 1M); their reindex {again:,.0f} "
                      "documents/s", flush=True)
    finally:
        await consumer.stop()
        await admin.close()
        unpin()
        await asyncio.to_thread(shop.drop)
        async with search_client() as es:
            with contextlib.suppress(Exception):
                await es.delete_matching(f"{shop.alias}-v*")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--reconcile-products", type=int, default=0)
    parser.add_argument("--rate", type=int, default=500, help="child changes per second")
    parser.add_argument("--seconds", type=float, default=20)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(args.products, args.reconcile_products, args.rate, args.seconds))
