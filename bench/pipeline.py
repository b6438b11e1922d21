"""A burst of updates end to end through the dev stack's own Debezium, Kafka and `indexer run`:
rows/s into Kafka, rows/s searchable, and each process's CPU per row; A/B variants of the
daemon's and the connector's settings in the same run.

    .venv/bin/python -m bench.pipeline --rows 196500 --transactions 10 --rounds 2 \
        --variant default --variant fixed-20ms:indexer.batch.max_linger_ms=20

Each variant has a table of ``--rows`` rows of its own, loaded and indexed into an index of its
own first, so that each index goes through only its own variant's bursts, as a deployment's
would (until 2026-12-05 the variants took turns on one table and one index). Each burst then
updates every row in ``--transactions`` transactions (one UPDATE of a key range each, committed
back to back), and is timed from its first commit until every row's change is in Kafka and
until every document shows the burst's value in a search (Elasticsearch's default 1 s refresh
included). CPU per row is each process's CPU time over that window divided by the rows. Nothing
is pinned: the servers and the daemon share both cores, as on a small machine that runs all of
them.

A variant is ``label[:setting=value,...]``: ``indexer.<section>.<key>=v`` is passed to the
daemon as ``INDEXER_<SECTION>__<KEY>``; ``connector.<key>=v`` is set in the running connector's
configuration for that variant's bursts (``connector.producer.override.linger.ms=50``), and the
original is put back at the end. The variants take turns, ``--rounds`` times.

``indexer.source.kind=binlog`` runs the daemon on the binlog itself: Debezium's connector is
paused for its bursts (Kafka and Connect idle, their CPU still counted), and "in Kafka" is not
timed. Its first start loads the table; later rounds resume from its saved position.

Each burst waits until the search server runs no merge, so that it does not pay for the one
before (another variant's, or a first load's).

``--ceiling`` ends the run by posting its documents (read back with their versions) raw,
with bench.daemon's minimal client, into a fresh index of the same mapping: timed as
inserts into the empty index, then timed again as updates (posted once more at a higher
version and a new ``qty``: each replaces a document, as the bursts' do), and once more as
updates timed until a count of the new ``qty`` finds them all, polled every 0.1 s from the
first post, as a burst is timed (the searches keep the index refreshing every second, which
an index nobody searches does not). Each variant's rows/s is then also given as a share of
each `_bulk` ceiling; the update ceiling is the run's bar.

``--backlog`` commits each burst with the daemon stopped (Debezium, when it runs, puts it all
in Kafka first) and times the daemon from its start until the burst is searchable: the rows/s
of a backlog and the daemon's peak RSS while it works through one.

    .venv/bin/python -m bench.pipeline --rows 100000 --rounds 2 --variant debezium \
        --variant direct:indexer.source.kind=binlog
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
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from bench.common import (
    DATABASE,
    KAFKA,
    REPO,
    cpu_seconds,
    daemon_metric,
    mysql,
    peak_rss_mb,
    search_client,
    server_cpu,
    unique,
)
from bench.daemon import BULK_DOCS, QUIET_S, committed, raw_ceiling, write_config
from indexer.core.sources import binlog_order
from indexer.search.client import SearchClient
from indexer.search.state import StateStore

CONNECT = "http://127.0.0.1:8083"
CONNECTOR = "indexer-mariadb"
SERVERS = ("connect", "kafka", "elasticsearch", "mariadb")
METRICS_PORT = 9479  # the daemon's metrics, read for its bulk count
POLL_S = 0.1
LOAD_CHUNK = 5000  # rows per INSERT while loading the table
CATCH_UP_S = 600
CEILING_QTY = -1  # the ceiling's updates' new value: no burst sets it


@dataclass
class Variant:
    label: str
    env: dict[str, str] = field(default_factory=dict)
    connector: dict[str, str] = field(default_factory=dict)

    @property
    def binlog(self) -> bool:
        return self.env.get("INDEXER_SOURCE__KIND") == "binlog"

    @classmethod
    def parse(cls, text: str) -> Variant:
        label, _, settings = text.partition(":")
        variant = cls(label)
        for setting in filter(None, settings.split(",")):
            name, _, value = setting.partition("=")
            scope, _, key = name.partition(".")
            if scope == "indexer" and key.count(".") == 1:
                section, option = key.split(".")
                variant.env[f"INDEXER_{section.upper()}__{option.upper()}"] = value
            elif scope == "connector" and key:
                variant.connector[key] = value
            else:
                raise SystemExit(f"--variant {text}: expected indexer.<section>.<key>=v or "
                                 f"connector.<key>=v, got {setting!r}")
        if variant.binlog:
            variant.env.setdefault("INDEXER_SOURCE__NAME", unique(f"bench-{label}"))
        return variant


@dataclass
class Lane:
    """One variant's own table, its Debezium topic, and the daemon's configuration and index."""
    table: str
    topic: str
    config: Path
    group: str
    alias: str

    @classmethod
    def load(cls, folder: Path, rows: int) -> Lane:
        table = unique("pipeline")
        topic = f"mysql.{DATABASE}.{table}"
        print(f"loading {rows:,} rows into {table}", flush=True)
        load_table(table, rows)
        lane = folder / table
        lane.mkdir()
        return cls(table, topic, *write_config(lane, table, topic, True))


@dataclass
class Burst:
    variant: str
    rows: int
    kafka_s: float  # first commit -> every change in Kafka
    search_s: float  # first commit -> every document searchable with the new value
    cpu_us: dict[str, float]  # per process, CPU per row over the window
    bulks: float  # bulks the daemon sent in the window
    rss_mb: float = 0.0  # the daemon's peak resident memory
    commit_s: float = 0.0  # first UPDATE -> the last transaction committed: MariaDB's share

    def line(self) -> str:
        cpu = ", ".join(f"{name} {us:.0f}" for name, us in self.cpu_us.items())
        kafka = (f"in Kafka {self.kafka_s:5.1f} s ({self.rows / self.kafka_s:6,.0f} rows/s)"
                 if self.kafka_s else f"{'(no Kafka)':33}")
        commit = f"committed {self.commit_s:4.1f} s | " if self.commit_s else ""
        return (f"{self.variant:18} {commit}{kafka} | searchable {self.search_s:5.1f} s "
                f"({self.rows / self.search_s:6,.0f} rows/s) | µs CPU per row: {cpu} | "
                f"{self.rows / max(self.bulks, 1):,.0f} docs per bulk | peak RSS "
                f"{self.rss_mb:,.0f} MB")


def rest(method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        CONNECT + path, method=method, data=None if body is None else orjson.dumps(body),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return orjson.loads(raw) if raw else None


async def configure_connector(config: dict[str, Any]) -> None:
    """Puts the connector's configuration and waits for its task to run again."""
    rest("PUT", f"/connectors/{CONNECTOR}/config", config)
    deadline = time.monotonic() + 120
    await asyncio.sleep(2)  # the restart has begun
    while time.monotonic() < deadline:
        status = rest("GET", f"/connectors/{CONNECTOR}/status")
        if [t["state"] for t in status["tasks"]] == ["RUNNING"]:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"connector {CONNECTOR} did not run again: {status}")


async def pause_connector(pause: bool) -> None:
    """Pauses (or resumes) the connector's task and waits until it has."""
    rest("PUT", f"/connectors/{CONNECTOR}/{'pause' if pause else 'resume'}")
    wanted = "PAUSED" if pause else "RUNNING"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = rest("GET", f"/connectors/{CONNECTOR}/status")
        if [t["state"] for t in status["tasks"]] == [wanted]:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"connector {CONNECTOR} is not {wanted}: {status}")


def load_table(table: str, rows: int) -> None:
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT "
                        "NULL, price DECIMAL(10,2) NOT NULL, qty INT NOT NULL, "
                        "updated_at DATETIME(6) NOT NULL)")
            for start in range(0, rows, LOAD_CHUNK):
                ids = range(start, min(start + LOAD_CHUNK, rows))
                cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, 0, NOW(6))",
                                [(i, f"product {i}", f"{1 + i % 1000}.50") for i in ids])
    finally:
        db.close()


def update_burst(table: str, rows: int, transactions: int, value: int) -> None:
    db = mysql()
    try:
        with db.cursor() as cur:
            step = -(-rows // transactions)
            for start in range(0, rows, step):
                cur.execute(f"UPDATE `{table}` SET qty = %s, updated_at = NOW(6) "
                            "WHERE id >= %s AND id < %s", (value, start, start + step))
    finally:
        db.close()


async def topic_end(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, topic: str) -> int:
    (described,) = await admin.describe_topics([topic])
    partitions = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
    ends = await consumer.end_offsets(partitions) if partitions else {}
    return sum(ends.values())


def bulks_sent() -> float:
    return daemon_metric(METRICS_PORT, "indexer_bulk_seconds_count") or 0.0


@contextlib.asynccontextmanager
async def daemon(config: Path, env: dict[str, str]) -> AsyncIterator[int]:
    """`indexer run` with the variant's settings; yields its pid."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "indexer", "run", "--config", str(config), cwd=REPO,
        env={**os.environ, "INDEXER_METRICS__PORT": str(METRICS_PORT), **env},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    drain: asyncio.Task[bytes] | None = None
    try:
        while b"indexer running" not in (line := await proc.stderr.readline()):
            if not line:
                raise RuntimeError("indexer run exited before it started")
        drain = asyncio.create_task(proc.stderr.read())  # a full pipe would stall it
        yield proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        if drain is not None:
            await drain


async def wait_binlog_caught_up(es: SearchClient, name: str) -> None:
    """Until the binlog source's saved position is the binlog's end (nothing else writes)."""
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
    finally:
        db.close()
    end = binlog_order((str(file), int(pos)))
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        saved = await StateStore(es).binlog_position(name)
        if saved and binlog_order((saved["file"], saved["pos"])) >= end:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the binlog source {name} did not catch up in {CATCH_UP_S} s")


async def wait_caught_up(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, group: str,
                         topic: str) -> None:
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        end = await topic_end(admin, consumer, topic)
        if end and await committed(admin, group, topic) >= end:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the daemon did not catch up with {topic} in {CATCH_UP_S} s")


async def wait_in_kafka(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, group: str,
                        topic: str, rows: int) -> None:
    """Until the topic holds ``rows`` records past the group's committed offset."""
    await wait_topic_end(admin, consumer, topic, await committed(admin, group, topic) + rows)


async def wait_topic_end(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, topic: str,
                         wanted: int) -> None:
    """Until the topic's end is at least ``wanted``. A task the connector stopped is started
    again: a paused task's binlog connection is dropped by MariaDB (net_write_timeout) when a
    burst it does not read lasts over a minute, and Debezium stops on that, not reconnects."""
    deadline = time.monotonic() + CATCH_UP_S
    while await topic_end(admin, consumer, topic) < wanted:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} did not reach offset {wanted:,} in {CATCH_UP_S} s")
        status = rest("GET", f"/connectors/{CONNECTOR}/status")
        if any(t["state"] == "FAILED" for t in status["tasks"]):
            rest("POST", f"/connectors/{CONNECTOR}/restart?includeTasks=true&onlyFailed=true")
        await asyncio.sleep(POLL_S)


async def wait_merges_done(es: SearchClient) -> None:
    """Until the search server runs no merge: each burst starts on a quiet server, not paying
    for the merges of the one before (another variant's, or a first load's)."""
    deadline = time.monotonic() + QUIET_S
    while time.monotonic() < deadline:
        stats = await es.request("GET", "/_nodes/stats/indices/merge")
        if not sum(node["indices"]["merges"]["current"] for node in stats["nodes"].values()):
            return
        await asyncio.sleep(1)
    print(f"(merges still running after {QUIET_S} s: the burst starts anyway)", flush=True)


async def ceiling(es: SearchClient, alias: str) -> tuple[int, float, float, float]:
    """The raw `_bulk` ceilings for this run's documents: every one read back with its version
    and posted by bench.daemon's minimal client, as many bulks in flight as indexer, into a
    fresh index of the same mapping (merges included, as the run pays for them); (documents,
    docs/s as inserts into the empty index, docs/s as updates: the same documents posted again
    at a higher version and a new ``qty`` once loaded, which is the work a burst of updates
    asks for; and the same updates timed until searchable, their count polled as a burst's)."""
    loads: list[bytes] = []
    updates: list[bytes] = []
    lines: dict[int, list[bytes]] = {0: [], 1: []}
    async for hit in es.scan(alias, {"query": {"match_all": {}}, "version": True}):
        for step, bodies in ((0, loads), (1, updates)):
            source = hit["_source"] if step == 0 else {**hit["_source"], "qty": CEILING_QTY}
            lines[step] += [orjson.dumps({"index": {
                "_id": hit["_id"], "version": hit["_version"] + step,
                "version_type": "external"}}), orjson.dumps(source)]
            if len(lines[step]) == 2 * BULK_DOCS:
                bodies.append(b"\n".join(lines[step]) + b"\n")
                lines[step] = []
    for step, bodies in ((0, loads), (1, updates)):
        if lines[step]:
            bodies.append(b"\n".join(lines[step]) + b"\n")
    documents = sum(body.count(b"\n") for body in loads) // 2
    return (documents, await raw_ceiling(loads, documents),
            await raw_ceiling(updates, documents, preload=loads),
            await raw_ceiling(updates, documents, preload=loads,
                              searched={"term": {"qty": CEILING_QTY}}))


async def measure_backlog(es: SearchClient, variant: Variant, lane: Lane, rows: int,
                          value: int) -> Burst:
    """The burst already committed while the daemon was stopped: from the daemon's start
    (its process spawned) until every document shows it."""
    cpu_before = {s: server_cpu(s) for s in SERVERS}
    started = time.perf_counter()
    async with daemon(lane.config, variant.env) as pid:
        bulks_before = bulks_sent()  # counted from the start: the process is new
        while await es.count(lane.alias, {"term": {"qty": value}}) < rows:
            await asyncio.sleep(POLL_S)
            if time.perf_counter() - started > CATCH_UP_S:
                raise RuntimeError("the backlog did not become searchable in time")
        search_s = time.perf_counter() - started
        cpu = {s: server_cpu(s) - cpu_before[s] for s in SERVERS} | {
            "indexer": cpu_seconds(pid)}
        return Burst(variant.label, rows, 0.0, search_s,
                     {name: seconds / rows * 1e6 for name, seconds in cpu.items()},
                     bulks_sent() - bulks_before, peak_rss_mb(pid))


async def measure_burst(es: SearchClient, admin: AIOKafkaAdminClient,
                        consumer: AIOKafkaConsumer, variant: Variant, lane: Lane, rows: int,
                        transactions: int, value: int, pid: int) -> Burst:
    end_before = await topic_end(admin, consumer, lane.topic)
    cpu_before = {s: server_cpu(s) for s in SERVERS} | {"indexer": cpu_seconds(pid)}
    bulks_before = bulks_sent()
    started = time.perf_counter()
    writer = asyncio.create_task(asyncio.to_thread(update_burst, lane.table, rows,
                                                   transactions, value))
    kafka_s = search_s = commit_s = 0.0
    while not search_s:
        await asyncio.sleep(POLL_S)
        if not commit_s and writer.done():
            commit_s = time.perf_counter() - started
        if variant.binlog:  # Debezium is paused: nothing reaches Kafka
            kafka_s = -1.0
        elif not kafka_s and await topic_end(admin, consumer, lane.topic) >= end_before + rows:
            kafka_s = time.perf_counter() - started
        if kafka_s:
            found = await es.count(lane.alias, {"term": {"qty": value}})
            if found >= rows:
                search_s = time.perf_counter() - started
        if time.perf_counter() - started > CATCH_UP_S:
            raise RuntimeError("the burst did not become searchable in time")
    await writer
    cpu = {s: server_cpu(s) for s in SERVERS} | {"indexer": cpu_seconds(pid)}
    return Burst(variant.label, rows, max(kafka_s, 0.0), search_s,
                 {name: (cpu[name] - cpu_before[name]) / rows * 1e6 for name in cpu},
                 bulks_sent() - bulks_before, peak_rss_mb(pid),
                 commit_s or time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=196_500)
    parser.add_argument("--transactions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", action="append", type=Variant.parse,
                        help="label[:indexer.<section>.<key>=v,connector.<key>=v,...]")
    parser.add_argument("--ceiling", action="store_true",
                        help="then post the run's documents raw (bench.daemon's minimal client) "
                             "and divide each variant's rows/s by those ceilings")
    parser.add_argument("--backlog", action="store_true",
                        help="commit each burst with the daemon stopped, then time its start "
                             "until the burst is searchable (and its peak RSS)")
    args = parser.parse_args()
    variants: list[Variant] = args.variant or [Variant("default")]
    original = rest("GET", f"/connectors/{CONNECTOR}/config")
    current: dict[str, str] = {}
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
    consumer = AIOKafkaConsumer(bootstrap_servers=KAFKA)
    await admin.start()
    await consumer.start()
    bursts: list[Burst] = []
    lanes: dict[str, Lane] = {}
    try:
        async with search_client() as es:
            with tempfile.TemporaryDirectory() as tmp:
                for variant in variants:
                    lanes[variant.label] = Lane.load(Path(tmp), args.rows)
                value = 0
                for _ in range(args.rounds):
                    for variant in variants:
                        lane = lanes[variant.label]
                        if variant.connector != current:
                            await configure_connector({**original, **variant.connector})
                            current = variant.connector
                        if variant.binlog:
                            await pause_connector(True)
                            paused_at = await topic_end(admin, consumer, lane.topic)
                        async with daemon(lane.config, variant.env) as pid:
                            if variant.binlog:
                                await wait_binlog_caught_up(
                                    es, variant.env["INDEXER_SOURCE__NAME"])
                            else:
                                await wait_caught_up(admin, consumer, lane.group, lane.topic)
                            value += 1
                            await wait_merges_done(es)
                            if not args.backlog:
                                burst = await measure_burst(
                                    es, admin, consumer, variant, lane, args.rows,
                                    args.transactions, value, pid)
                        if args.backlog:
                            await asyncio.to_thread(update_burst, lane.table, args.rows,
                                                    args.transactions, value)
                            if not variant.binlog:  # the whole burst in Kafka first
                                await wait_in_kafka(admin, consumer, lane.group, lane.topic,
                                                    args.rows)
                            await wait_merges_done(es)
                            burst = await measure_backlog(es, variant, lane, args.rows, value)
                        if variant.binlog:
                            await pause_connector(False)
                            # Debezium streams the burst it missed: in Kafka before the next
                            # variant's burst, whose Connect would otherwise be doing it.
                            await wait_topic_end(admin, consumer, lane.topic,
                                                 paused_at + args.rows)
                        print(burst.line(), flush=True)
                        bursts.append(burst)
                if args.ceiling:
                    raw = await ceiling(es, lanes[variants[0].label].alias)
                for lane in lanes.values():
                    await es.delete_matching(f"{lane.alias}-v*")
    finally:
        if current:
            await configure_connector(original)
        await consumer.stop()
        await admin.close()
        db = mysql()
        with db.cursor() as cur:
            for lane in lanes.values():
                cur.execute(f"DROP TABLE `{lane.table}`")
        db.close()
    print("medians:")
    if args.ceiling:
        print(f"  raw _bulk ceilings: {raw[0]:,} documents inserted into an empty index at "
              f"{raw[1]:,.0f} docs/s, updated at {raw[2]:,.0f} docs/s, updated and searchable "
              f"(searched as a burst is) at {raw[3]:,.0f} docs/s")
    first = None
    for variant in variants:
        mine = [b for b in bursts if b.variant == variant.label]
        cpu = statistics.median(sum(b.cpu_us.values()) for b in mine)
        indexer = statistics.median(b.cpu_us["indexer"] for b in mine)
        search = statistics.median(b.search_s for b in mine)
        rss = max(b.rss_mb for b in mine)
        first = first or (cpu, indexer, search)
        vs_raw = (f", {args.rows / search / raw[2]:.2f} of the raw update ceiling, "
                  f"{args.rows / search / raw[3]:.2f} of the searched one, "
                  f"{args.rows / search / raw[1]:.2f} of the insert one" if args.ceiling else "")
        print(f"  {variant.label:18} searchable after {search:5.1f} s ({first[2] / search:.2f}x "
              f"the rows/s{vs_raw}), all processes {cpu:4.0f} µs CPU per row "
              f"({cpu / first[0]:.2f}), indexer {indexer:3.0f} µs ({indexer / first[1]:.2f}), "
              f"peak RSS {rss:,.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
