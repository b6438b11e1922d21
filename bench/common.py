"""Shared pieces of the benchmarks: the real stack's endpoints, CPU pinning, event synthesis."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from indexer.search.client import SearchClient
from indexer.settings import ElasticsearchSettings

REPO = Path(__file__).parents[1]
STACK = REPO / ".stack"
KAFKA = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"
# The search server dev/stack.sh runs for SEARCH (its default ports and state folders).
SEARCH = os.environ.get("SEARCH", "es9")
_SEARCH_PORTS = {"es9": 9200, "es8": 9201, "opensearch2": 9202, "opensearch3": 9203}
ES = f"http://127.0.0.1:{os.environ.get('ES_PORT', _SEARCH_PORTS[SEARCH])}"
_SERVER_DIRS = {"elasticsearch": "elasticsearch" if SEARCH == "es9" else f"search-{SEARCH}"}
MYSQL_PORT = int(os.environ.get("MYSQL_PORT", "3306"))
DATABASE = "indexer_test"
# Elasticsearch gets core 0; Kafka, MariaDB and the client side (daemon or raw client) core 1.
ES_CORE, CLIENT_CORE = "0", "1"

BENCH_COLUMNS = ("id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, price DECIMAL(10,2) NOT NULL, "
                 "qty INT NOT NULL, updated_at DATETIME(6) NOT NULL")
BENCH_MAPPING = {
    "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}},
    "mappings": {"properties": {
        "id": {"type": "long"}, "name": {"type": "keyword"}, "price": {"type": "double"},
        "qty": {"type": "integer"}, "updated_at": {"type": "date"},
    }},
}


def search_client() -> SearchClient:
    """indexer's own client for the stack's search server (a slow aggregation may take long)."""
    return SearchClient(ElasticsearchSettings(hosts=(ES,), request_timeout_s=600))


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def mysql() -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=MYSQL_PORT, user="indexer", password="indexer",
                           database=DATABASE, autocommit=True)


def _pids(server: str) -> list[int]:
    pid = int((STACK / _SERVER_DIRS.get(server, server) / f"{server}.pid").read_text())
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [pid, *map(int, children.split())]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a running process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu(server: str) -> float:
    """CPU seconds of a running stack server and its child processes."""
    return sum(cpu_seconds(pid) for pid in _pids(server))


def core_ticks(core: str) -> tuple[int, int]:
    """(idle, total) clock ticks of one core since boot, from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            ticks = [int(t) for t in line.split()[1:]]
            return ticks[3] + ticks[4], sum(ticks[:8])  # idle + iowait; up to steal
    raise LookupError(f"no core {core} in /proc/stat")


class Busy:
    """How busy each server was over a measured window: CPU seconds / wall seconds, plus how
    much of the client core nobody used (idle) — the sign of a stall rather than a CPU limit."""

    def __init__(self, *servers: str) -> None:
        self._servers = servers
        self._start = {s: server_cpu(s) for s in servers}
        self._core = core_ticks(CLIENT_CORE)
        self._started = time.perf_counter()

    def report(self, **clients: float) -> str:
        """``clients`` maps names to CPU seconds used in the window by other processes."""
        wall = time.perf_counter() - self._started
        used = {s: server_cpu(s) - self._start[s] for s in self._servers} | clients
        idle, total = (now - then for now, then in zip(core_ticks(CLIENT_CORE), self._core,
                                                        strict=True))
        return ", ".join(f"{name} {seconds / wall:.0%}" for name, seconds in used.items()) + (
            f"; core {CLIENT_CORE} idle {idle / max(total, 1):.0%}")


def pin(server: str, cpus: str) -> None:
    """Moves every thread of a running stack server to ``cpus`` (taskset -a)."""
    for pid in _pids(server):
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True,
                       stdout=subprocess.DEVNULL)


def pin_self(cpus: str) -> None:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def pin_protocol() -> None:
    pin("elasticsearch", ES_CORE)
    pin("kafka", CLIENT_CORE)
    pin("mariadb", CLIENT_CORE)
    pin_self(CLIENT_CORE)


def unpin() -> None:
    for server in ("elasticsearch", "kafka", "mariadb", "connect"):  # connect: if pinned
        pin(server, "0,1")
    pin_self("0,1")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def decimal_base64(cents: int) -> str:
    return base64.b64encode(cents.to_bytes((cents.bit_length() + 8) // 8, "big", signed=True)
                            ).decode()


# Events.base_micros as MySQL writes a DATETIME: rows made in SQL match the events' documents.
BASE = "2025-10-09 08:53:20"


class Events:
    """Debezium events in the real connector's format, synthesised from one captured event."""

    def __init__(self, key_template: bytes, value_template: bytes) -> None:
        key = orjson.loads(key_template)
        value = orjson.loads(value_template)
        self.key_schema = orjson.dumps(key["schema"])
        self.value_schema = orjson.dumps(value["schema"])
        self.envelope = value["payload"]
        self.base_micros = 1_760_000_000_000_000

    def row(self, i: int) -> dict[str, Any]:
        return {"id": i, "name": f"product {i}", "price": decimal_base64(100 + i % 100_000),
                "qty": i % 1000, "updated_at": self.base_micros + i}

    def document(self, i: int) -> dict[str, Any]:
        """What indexer must write for event i (the raw client posts exactly this)."""
        cents = 100 + i % 100_000
        micros = self.base_micros + i
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(micros // 1_000_000))
        return {"id": i, "name": f"product {i}", "price": f"{cents // 100}.{cents % 100:02d}",
                "qty": i % 1000, "updated_at": f"{stamp}.{micros % 1_000_000:06d}"}

    def message(self, i: int, schemas: bool) -> tuple[bytes, bytes]:
        source = dict(self.envelope["source"], pos=1000 + i * 300, row=0, file="mysql-bin.000001")
        payload = dict(self.envelope, op="c", before=None, after=self.row(i), source=source)
        if not schemas:
            return orjson.dumps({"id": i}), orjson.dumps(payload)
        return (b'{"schema":' + self.key_schema + b',"payload":' + orjson.dumps({"id": i}) + b"}",
                b'{"schema":' + self.value_schema + b',"payload":' + orjson.dumps(payload) + b"}")


async def capture_template(db: pymysql.connections.Connection[Any]) -> tuple[str, Events]:
    """Creates a bench table, inserts one row and returns the real Debezium event for it."""
    table = unique("bench")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` ({BENCH_COLUMNS})")
        cur.execute(f"INSERT INTO `{table}` VALUES (1, 'x', 1.00, 1, NOW(6))")
    topic = f"mysql.{DATABASE}.{table}"
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=KAFKA, auto_offset_reset="earliest",
                                enable_auto_commit=False, metadata_max_age_ms=500)
    await consumer.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    if record.key is not None and record.value is not None:
                        return table, Events(record.key, record.value)
    finally:
        await consumer.stop()
    raise RuntimeError(f"no Debezium event for {table} within 60 s; is the connector running?")


def daemon_metric(port: int, name: str) -> float | None:
    """The sum of a metric's samples on a daemon's /metrics (None: it has none yet); raises
    OSError when nothing answers there."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines()
              if line.startswith((name + "{", name + " "))]
    return sum(values) if values else None


def chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


async def wait_for_topic(topic: str, timeout_s: float = 60) -> None:
    """Until the topic exists: Debezium creates a table's topic with its first change, and
    a daemon started before that only notices it at its next metadata refresh (~30 s)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout_s
        while topic not in await admin.list_topics():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no topic {topic} within {timeout_s:.0f} s; is the "
                                   "connector running?")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def delete_topic(topic: str) -> None:
    """Drops a benchmark's topic: its messages would otherwise fill the broker's disk."""
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def produce_events(topic: str, events: Events, n: int, schemas: bool) -> int:
    """Pre-loads n events into a one-partition topic; returns their total size in bytes."""
    producer = AIOKafkaProducer(bootstrap_servers=KAFKA, acks=1, linger_ms=20,
                                max_batch_size=1 << 20, max_request_size=16 << 20)
    await producer.start()
    total = 0
    try:
        for part in chunks(n, 20_000):
            futures = []
            for i in part:
                key, value = events.message(i, schemas)
                total += len(key) + len(value)
                futures.append(await producer.send(topic, value=value, key=key, partition=0))
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return total
