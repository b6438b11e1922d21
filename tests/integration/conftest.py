"""Fixtures for tests on the real stack (dev/stack.sh up): MariaDB, Kafka, Debezium, ES.

Every test gets its own table in the captured database ``indexer_test`` (so its own Debezium
topic), its own alias, consumer group and dead-letter topic: tests never see each other's data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import tomllib
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import orjson
import pymysql
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord, TopicPartition

from indexer.config import build_config
from indexer.core.documents import META_FIELD
from indexer.errors import ConfigError
from indexer.run.daemon import Daemon
from indexer.search.client import SearchClient
from indexer.settings import Config
from indexer.source.kafka.clients import client_security
from indexer.source.mysql import connection

REPO = Path(__file__).parents[2]
DATABASE = "indexer_test"
TOPIC_PREFIX = "mysql"
SENTINEL_ID = 987654321  # a key no test uses for its own rows
CONNECT = f"http://127.0.0.1:{os.environ.get('CONNECT_PORT', '8083')}"  # Kafka Connect's REST
CONNECTOR = os.environ.get("CONNECTOR_NAME", "indexer-mariadb")  # the stack's Debezium

Record: TypeAlias = ConsumerRecord[bytes, bytes]


def _profile() -> dict[str, Any]:
    """How to reach the stack under test: the connection sections of a config file written
    by ``dev/stack.sh profile`` (INDEXER_TEST_CONFIG; a server variant or the secured
    stack), or the default dev stack's ports."""
    path = os.environ.get("INDEXER_TEST_CONFIG")
    if path:
        return tomllib.loads(Path(path).read_text())
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"},
        "elasticsearch": {"hosts": [f"http://127.0.0.1:{os.environ.get('ES_PORT', '9200')}"]},
        "mysql": {"port": int(os.environ.get("MYSQL_PORT", "3306"))},
    }


PROFILE = _profile()
# The stack's connection settings, through indexer's own configuration and adapters.
STACK = build_config({**PROFILE, "tables": [{"name": f"{DATABASE}.t"}]}, REPO)
KAFKA = STACK.kafka.bootstrap_servers
KAFKA_SECURITY = client_security(STACK.kafka)


def rest(method: str, path: str, body: Any = None) -> Any:
    """A call to the dev stack's Kafka Connect REST API, as an operator makes it."""
    request = urllib.request.Request(f"{CONNECT}{path}", method=method,
                                     data=orjson.dumps(body) if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
    return orjson.loads(text) if text else None


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def mysql_connect() -> pymysql.connections.Connection[Any]:
    return connection.connect(STACK.mysql, DATABASE)


@pytest.fixture(scope="session", autouse=True)
def _stack_is_up() -> None:
    try:
        mysql_connect().close()
    except ConfigError as exc:
        pytest.fail(f"MariaDB is not reachable ({exc}); run dev/stack.sh up")


@pytest.fixture
def db() -> Iterator[pymysql.connections.Connection[Any]]:
    conn = mysql_connect()
    yield conn
    conn.close()


def sql(db: pymysql.connections.Connection[Any], statement: str, *args: Any) -> list[Any]:
    with db.cursor() as cur:
        cur.execute(statement, args or None)
        return list(cur.fetchall())


@pytest.fixture
async def es() -> AsyncIterator[SearchClient]:
    async with SearchClient(STACK.elasticsearch) as client:
        yield client


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout: float,
                     what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def consumer_of(**options: Any) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(bootstrap_servers=KAFKA, enable_auto_commit=False,
                                **KAFKA_SECURITY, **options)
    await consumer.start()
    await asyncio.sleep(0)  # aiokafka's stop() raises if its group-less task never ran
    try:
        yield consumer
    finally:
        await consumer.stop()


async def read_topic(topic: str, count: int, timeout: float = 60) -> list[Record]:
    """The first ``count`` messages of a topic (all partitions), waiting for them to exist."""
    records: list[Record] = []
    async with consumer_of(auto_offset_reset="earliest", metadata_max_age_ms=1000) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: {len(records)} of {count} messages after "
                                     f"{timeout}s")
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                records.extend(messages)
    return sorted(records, key=lambda r: (r.partition, r.offset))


async def all_events(db: pymysql.connections.Connection[Any], table: TestTable,
                     timeout: float = 60) -> list[Record]:
    """Every event of the table's topic so far, in order: a sentinel row inserted and deleted
    after the test's writes marks the end (its own events are left out)."""
    sql(db, f"INSERT INTO `{table.name}` (id) VALUES (%s)", SENTINEL_ID)
    sql(db, f"DELETE FROM `{table.name}` WHERE id = %s", SENTINEL_ID)
    records: list[Record] = []
    async with consumer_of(auto_offset_reset="earliest", metadata_max_age_ms=1000) as consumer:
        consumer.subscribe([table.topic])
        deadline = time.monotonic() + timeout
        while not records or records[-1].value is not None or b"%d" % SENTINEL_ID not in (
                records[-1].key or b""):
            if time.monotonic() > deadline:
                raise AssertionError(f"{table.topic}: no sentinel after {timeout}s")
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(messages)
    return [r for r in records if b"%d" % SENTINEL_ID not in (r.key or b"")]


async def end_offsets(topic: str) -> dict[int, int]:
    async with consumer_of() as consumer:
        await consumer._client.force_metadata_update()
        partitions = consumer.partitions_for_topic(topic) or set()
        assert partitions, f"topic {topic} does not exist"
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}


async def committed_offsets(group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA, **KAFKA_SECURITY)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
    finally:
        await admin.close()


async def create_topic(topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA, **KAFKA_SECURITY)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    await wait_for_topic(topic, partitions)


async def wait_for_topic(topic: str, partitions: int = 1, timeout: float = 60) -> None:
    async def exists() -> bool:
        async with consumer_of() as consumer:
            await consumer._client.force_metadata_update()
            return len(consumer.partitions_for_topic(topic) or ()) >= partitions

    await wait_until(exists, timeout, f"topic {topic}", interval=0.5)


async def produce(topic: str, messages: Sequence[tuple[bytes | None, bytes | None, int | None]],
                  headers: list[tuple[str, bytes]] | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=KAFKA, acks="all", **KAFKA_SECURITY)
    await producer.start()
    try:
        for key, value, partition in messages:
            await producer.send_and_wait(topic, value=value, key=key, partition=partition,
                                         headers=headers or [])
    finally:
        await producer.stop()


@dataclass
class TestTable:
    """A table of the captured database, with its Debezium topic and its own alias."""

    name: str
    alias: str
    mapping: dict[str, Any]

    @property
    def topic(self) -> str:
        return f"{TOPIC_PREFIX}.{DATABASE}.{self.name}"

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"name": f"{DATABASE}.{self.name}", "alias": self.alias,
                "mapping": f"{self.alias}.json", **overrides}


@pytest.fixture
async def make_table(db: pymysql.connections.Connection[Any], es: SearchClient,
                     tmp_path: Path) -> AsyncIterator[Callable[..., TestTable]]:
    created: list[str] = []
    aliases: list[str] = []

    def make(columns: str, mapping: dict[str, Any] | None = None,
             prefix: str = "t") -> TestTable:
        table = TestTable(unique(prefix), unique(prefix.lower()).replace("_", "-"),
                          mapping or {"settings": {"index": {"number_of_replicas": 0}}})
        sql(db, f"CREATE TABLE `{table.name}` ({columns}) CHARACTER SET utf8mb4")
        (tmp_path / f"{table.alias}.json").write_bytes(orjson.dumps(table.mapping))
        created.append(table.name)
        aliases.append(table.alias)
        return table

    yield make
    for name in created:
        with contextlib.suppress(pymysql.err.MySQLError):
            sql(db, f"DROP TABLE IF EXISTS `{name}`")
    # A dev stack outlives many runs: leftover indices would reach the per-node shard limit.
    for alias in aliases:
        with contextlib.suppress(Exception):
            await es.delete_matching(f"{alias}-v*")


def toml(raw: dict[str, Any]) -> str:
    """Just enough TOML for the test configs: sections of scalars and lists, [[tables]]."""
    def value(v: Any) -> str:
        return orjson.dumps(v).decode() if not isinstance(v, dict) else "{ " + ", ".join(
            f"{k} = {value(x)}" for k, x in v.items()) + " }"

    lines: list[str] = []
    for section, values in raw.items():
        for entry in values if section == "tables" else [values]:
            lines.append(f"[[{section}]]" if section == "tables" else f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    def make(*entries: dict[str, Any], file: Path | None = None,
             **sections: dict[str, Any]) -> Config:
        raw: dict[str, Any] = {
            "kafka": {**PROFILE.get("kafka", {}), "group_id": unique("it-group"),
                      "dead_letter_topic": unique("it-dlq")},
            "elasticsearch": {**PROFILE.get("elasticsearch", {}), "mappings_dir": str(tmp_path)},
            "mysql": dict(PROFILE.get("mysql", {})),
            "metrics": {"port": 0},
            "batch": {"max_backoff_s": 2.0},
            "tables": list(entries),
        }
        for name, values in sections.items():
            raw[name] = {**raw.get(name, {}), **values}
        if file is not None:
            file.write_text(toml(raw))
        return build_config(raw, tmp_path)

    return make


@contextlib.asynccontextmanager
async def running(config: Config) -> AsyncIterator[Daemon]:
    """The daemon in this process, stopped (cleanly) when the block ends."""
    daemon = Daemon(config)
    task = asyncio.create_task(daemon.run())
    started = asyncio.create_task(daemon.started.wait())
    await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        started.cancel()
        task.result()
    try:
        yield daemon
        assert not task.done(), "the daemon stopped on its own"
    finally:
        daemon.stop()
        await asyncio.wait_for(task, 60)


async def documents(es: SearchClient, alias: str) -> dict[str, dict[str, Any]]:
    """Every document visible through the read alias (tombstones are filtered out), without
    the indexer's own ``_indexer`` field."""
    await es.refresh(f"{alias}-sync")
    return {hit["_id"]: _without_meta(hit["_source"])
            async for hit in es.scan(alias, {"query": {"match_all": {}}}, size=5000)}


def _without_meta(source: dict[str, Any]) -> dict[str, Any]:
    source.pop(META_FIELD, None)
    return source


async def count(es: SearchClient, alias: str) -> int:
    await es.refresh(f"{alias}-sync")
    return await es.count(alias)


async def at_least(es: SearchClient, alias: str, n: int) -> bool:
    """Whether the alias holds n documents yet (False while it cannot be read)."""
    try:
        return await count(es, alias) >= n
    except Exception:
        return False


async def live_index(es: SearchClient, alias: str) -> str:
    (index,) = await es.aliases([alias])
    return index


async def synced_indices(es: SearchClient, alias: str) -> set[str]:
    return set(await es.aliases([f"{alias}-sync"]))


async def raw_documents(es: SearchClient, alias: str) -> dict[str, dict[str, Any]]:
    """Every document of the live index, tombstones included, with ``_version``."""
    await es.refresh(f"{alias}-sync")
    live = await live_index(es, alias)
    response = await es.search(live, {"size": 10000, "query": {"match_all": {}},
                                      "version": True})
    return {hit["_id"]: {**hit["_source"], "_version": hit["_version"]}
            for hit in response["hits"]["hits"]}


async def wait_for_documents(es: SearchClient, alias: str,
                             expected: dict[str, dict[str, Any]], timeout: float = 60) -> None:
    last: dict[str, dict[str, Any]] = {}

    async def matches() -> bool:
        nonlocal last
        with contextlib.suppress(Exception):
            last = await documents(es, alias)
        return last == expected

    try:
        await wait_until(matches, timeout, f"documents of {alias}", interval=0.3)
    except AssertionError:
        missing = sorted(set(expected) - set(last))[:5]
        extra = sorted(set(last) - set(expected))[:5]
        differ = [k for k in expected if k in last and last[k] != expected[k]][:3]
        raise AssertionError(
            f"{alias}: {len(last)} docs, {len(expected)} expected; missing {missing}, "
            f"extra {extra}, differ {[(k, last[k], expected[k]) for k in differ]}"
        ) from None


# The table most tests use, its rows as documents, and a quick way to fill it.
COLUMNS = "id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2), qty INT"


def expected_rows(db: Any, table: str) -> dict[str, dict[str, Any]]:
    rows = sql(db, f"SELECT id, name, price, qty FROM `{table}` ORDER BY id")
    return {str(r[0]): {"id": r[0], "name": r[1], "price": f"{r[2]:.2f}", "qty": r[3]}
            for r in rows}


def insert_rows(db: Any, table: str, first: int, last: int, chunk: int = 1000) -> None:
    with db.cursor() as cur:
        for start in range(first, last + 1, chunk):
            rows = [(i, f"name {i}", i % 1000, i % 7)
                    for i in range(start, min(start + chunk, last + 1))]
            cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s)", rows)


@contextlib.asynccontextmanager
async def caught_up(db: Any, es: SearchClient, table: TestTable, config: Config,
                    timeout: float = 60) -> AsyncIterator[Daemon]:
    """The daemon running, once every row of the table already written is in the index."""
    await wait_for_topic(table.topic)
    async with running(config) as daemon:
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout)
        yield daemon


class DaemonProcess:
    """``python -m indexer run`` in a child process, as users run it."""

    def __init__(self, config_file: Path, log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "indexer", "run", "--config", str(config_file)],
            cwd=REPO, stdout=self._out, stderr=subprocess.STDOUT,
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    started: list[DaemonProcess] = []

    def start(config_file: Path) -> DaemonProcess:
        process = DaemonProcess(config_file, tmp_path / f"daemon-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()
