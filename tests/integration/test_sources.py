"""Source switches on real servers: a fail-over to a GTID replica that Debezium is repointed
at, RESET MASTER, and a fail-over while a reindex runs. Each ends with the index equal to the
table on the server that is primary at the end.

The servers are a MariaDB pair of their own (dev/stack.sh up failover-primary
failover-replica), made from nothing for each test, with a Debezium connector of its own on
the dev stack's Kafka Connect, registered and repointed through Connect's REST API as an
operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from indexer.core.sources import SAME_SECOND_MS
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient
from indexer.search.state import StateStore
from indexer.settings import Config, MySQLSettings
from indexer.source.canary_table import read_beat
from indexer.source.mysql import connection
from tests.integration.conftest import (
    COLUMNS,
    KAFKA,
    REPO,
    expected_rows,
    rest,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_cli import indexer

PRIMARY = int(os.environ.get("FAILOVER_PRIMARY_PORT", "3307"))
REPLICA = int(os.environ.get("FAILOVER_REPLICA_PORT", "3308"))
DATABASE = "failover"


def stack(*args: str) -> None:
    subprocess.run([str(REPO / "dev" / "stack.sh"), *args], check=True, timeout=300,
                   stdout=subprocess.DEVNULL)


def server(port: int) -> pymysql.connections.Connection[Any]:
    return connection.connect(MySQLSettings(port=port), DATABASE)


@pytest.fixture
def pair() -> Iterator[None]:
    """A fresh primary and its replica, with the table ``failover.items`` of 2,000 rows; the
    primary's binlog is three files ahead, as a long-running primary's is."""
    stack("down", "failover-replica", "failover-primary")
    stack("up", "failover-primary", "failover-replica")
    conn = connection.connect(MySQLSettings(port=PRIMARY), "mysql")
    try:
        sql(conn, f"CREATE DATABASE {DATABASE}")
        sql(conn, f"CREATE TABLE {DATABASE}.items ({COLUMNS})")
        sql(conn, f"INSERT INTO {DATABASE}.items SELECT seq, CONCAT('n', seq), seq % 100, 0 "
                  "FROM seq_1_to_2000")
        for _ in range(3):
            sql(conn, "FLUSH BINARY LOGS")
    finally:
        conn.close()
    try:
        yield
    finally:
        stack("down", "failover-replica", "failover-primary")


class Connector:
    """A Debezium connector capturing the pair's database, managed as an operator would."""

    def __init__(self, port: int) -> None:
        self.name = unique("failover")
        self.prefix = self.name.replace("_", "")
        template = (REPO / "dev" / "stack" / "connector.json").read_text()
        for placeholder, value in {"@MYSQL_PORT@": str(port), "@KAFKA_PORT@": KAFKA.split(":")[1],
                                   "@DEBEZIUM_USER@": "debezium",
                                   "@DEBEZIUM_PASSWORD@": "debezium",
                                   "@TOPIC_PREFIX@": self.prefix,
                                   "@CAPTURED_DATABASES@": DATABASE}.items():
            template = template.replace(placeholder, value)
        self.config = {**orjson.loads(template), "name": self.name,
                       "database.server.id": str(random.randint(200_000, 299_999))}
        rest("PUT", f"/connectors/{self.name}/config", self.config)

    @property
    def topic(self) -> str:
        return f"{self.prefix}.{DATABASE}.items"

    def repoint(self, port: int) -> None:
        """What an operator does in a fail-over: the connector's database is the new primary,
        where Debezium finds its place by GTID. Debezium 3.5 checks that place against the
        server's newest GTID only (MariaDB shows one per domain), so the new primary takes
        writes once the connector streams from it; otherwise it asks for a new snapshot,
        which indexer follows as well (test_reset_master...)."""
        self.config["database.port"] = str(port)
        rest("PUT", f"/connectors/{self.name}/config", self.config)
        deadline = time.monotonic() + 60
        while True:
            status = rest("GET", f"/connectors/{self.name}/status")
            tasks = status.get("tasks") or [{}]
            if tasks[0].get("state") == "RUNNING" and "Connector last known" not in str(status):
                break
            assert tasks[0].get("state") != "FAILED", tasks[0].get("trace", "")[:500]
            assert time.monotonic() < deadline, f"the connector did not restart: {status}"
            time.sleep(0.5)
        time.sleep(3)  # past its start-up checks, streaming from the new primary

    def snapshot_again(self) -> None:
        """What an operator does when the connector's binlog position is gone (RESET
        MASTER): stop it, drop its offsets, resume; it snapshots the tables again."""
        rest("PUT", f"/connectors/{self.name}/stop")
        deadline = time.monotonic() + 60
        while rest("GET", f"/connectors/{self.name}/status")["connector"]["state"] != "STOPPED":
            assert time.monotonic() < deadline, "the connector did not stop"
            time.sleep(0.5)
        rest("DELETE", f"/connectors/{self.name}/offsets")
        rest("PUT", f"/connectors/{self.name}/resume")

    def delete(self) -> None:
        with contextlib.suppress(OSError):
            rest("DELETE", f"/connectors/{self.name}")


@pytest.fixture
def connector(pair: None) -> Iterator[Connector]:
    made = Connector(PRIMARY)
    try:
        yield made
    finally:
        made.delete()


def table_config(make_config: Any, tmp_path: Path, connector: Connector, port: int,
                 alias: str | None = None, file: Path | None = None) -> Config:
    """The table's config; ``port`` is the server reindex and reconcile read."""
    alias = alias or unique("failover").replace("_", "-")
    (tmp_path / f"{alias}.json").write_bytes(b"{}")
    config: Config = make_config({"name": f"{DATABASE}.items", "alias": alias,
                                  "topic": connector.topic}, file=file, mysql={"port": port})
    return config


def writer(port: int, stop: threading.Event, first_id: int, seed: int) -> int:
    """Inserts, updates and deletes until stopped; returns how many changes it made."""
    rng = random.Random(seed)
    conn = server(port)
    changes, next_id = 0, first_id
    try:
        while not stop.is_set():
            action = rng.random()
            if action < 0.3:
                sql(conn, "INSERT INTO items VALUES (%s, 'new', 1.00, 1)", next_id)
                next_id += 1
            elif action < 0.85:
                sql(conn, "UPDATE items SET qty = qty + 1, name = %s WHERE id = %s",
                    f"u{port}-{changes}", rng.randint(1, next_id))
            else:
                sql(conn, "DELETE FROM items WHERE id = %s", rng.randint(1, next_id))
            changes += 1
            time.sleep(0.002)
    finally:
        conn.close()
    return changes


@contextlib.asynccontextmanager
async def writing(port: int, first_id: int, seconds: float) -> AsyncIterator[None]:
    stop = threading.Event()
    task = asyncio.create_task(asyncio.to_thread(writer, port, stop, first_id, port))
    try:
        await asyncio.sleep(seconds)
        yield
    finally:
        stop.set()
        assert await task > 10


async def promote_replica() -> None:
    """Waits for the replica to have everything, then makes it the primary."""
    def gtid(port: int) -> str:
        conn = connection.connect(MySQLSettings(port=port), "mysql")
        try:
            return str(sql(conn, "SELECT @@gtid_binlog_pos")[0][0])
        finally:
            conn.close()

    await wait_until(lambda: _true(gtid(REPLICA) == gtid(PRIMARY)), 60, "the replica")
    conn = connection.connect(MySQLSettings(port=REPLICA), "mysql")
    try:
        sql(conn, "STOP SLAVE")
        sql(conn, "RESET SLAVE ALL")
    finally:
        conn.close()


async def _true(value: bool) -> bool:
    return value


def rows(port: int) -> dict[str, dict[str, Any]]:
    conn = server(port)
    try:
        return expected_rows(conn, "items")
    finally:
        conn.close()


async def switches(es: SearchClient, config: Config) -> list[dict[str, Any]]:
    return (await StateStore(es).load(config.tables[0].alias)).switches


async def test_a_fail_over_to_a_replica_loses_no_change(
        es: SearchClient, connector: Connector, make_config: Any, tmp_path: Path) -> None:
    config_file = tmp_path / "indexer.toml"
    config = table_config(make_config, tmp_path, connector, REPLICA, file=config_file)
    await wait_for_topic(connector.topic)
    async with running(config):
        async with writing(PRIMARY, 10_000, 3):
            pass
        await wait_for_documents(es, config.tables[0].alias, rows(PRIMARY), timeout=120)
        # The canary writes no beat into a replica: its own GTIDs there would be errant ones.
        assert config.canary_table is not None
        written, primary = await asyncio.to_thread(
            read_beat, config.canary_mysql, config.canary_table, config.kafka.group_id)
        assert written is None and primary is not None and primary.endswith(f":{PRIMARY}")
        await promote_replica()
        stack("down", "failover-primary")  # the old primary is gone
        connector.repoint(REPLICA)
        # The new primary's binlog is three files behind: every change from it has lower
        # coordinates than the changes indexed so far.
        async with writing(REPLICA, 20_000, 4):
            pass
        await wait_for_documents(es, config.tables[0].alias, rows(REPLICA), timeout=120)
    (switch,) = await switches(es, config)
    assert switch["epoch"] == 1 and "went back" in switch["reason"]
    assert "failover-primary-bin" not in switch["new"]  # descriptions are file numbers
    report = await reconcile(config, config.tables[0], settle_s=0)
    assert report.clean and report.rows == len(rows(REPLICA))

    checked = await indexer("check", "-c", str(config_file))
    assert checked.returncode == 1 and "source switch" in checked.stderr
    acked = await indexer("source", "ack", "items", "-c", str(config_file))
    assert acked.returncode == 0 and "1 source switches acknowledged" in acked.stderr
    assert "source switch" not in (await indexer("check", "-c", str(config_file))).stderr


async def test_reset_master_then_a_new_snapshot_starts_an_epoch(
        es: SearchClient, connector: Connector, make_config: Any, tmp_path: Path) -> None:
    config = table_config(make_config, tmp_path, connector, PRIMARY)
    await wait_for_topic(connector.topic)
    alias = config.tables[0].alias
    async with running(config):
        async with writing(PRIMARY, 10_000, 2):
            pass
        await wait_for_documents(es, alias, rows(PRIMARY), timeout=120)
        conn = server(PRIMARY)
        try:
            sql(conn, "RESET MASTER")
            # Debezium's position is gone: these changes reach Kafka only as the new
            # snapshot's rows, and the deleted row not at all.
            sql(conn, "UPDATE items SET name = 'after the reset' WHERE id <= 50")
            sql(conn, "INSERT INTO items VALUES (30000, 'inserted after the reset', 1.00, 1)")
            sql(conn, "DELETE FROM items WHERE id = 60")
        finally:
            conn.close()
        connector.snapshot_again()
        expected = rows(PRIMARY)

        async def all_but_the_deleted_row() -> bool:
            docs = await _documents(es, alias)
            return {k: v for k, v in docs.items() if k != "60"} == expected

        await wait_until(all_but_the_deleted_row, 120, "the new snapshot")
    (switch,) = await switches(es, config)
    assert "snapshot" in switch["reason"] and switch["epoch"] == 1
    # Only the delete made while the connector had no position is missing: repair finds it.
    # A snapshot within a second of the epoch's start cannot tell which side of it it is on
    # (binlog commit times have whole seconds: SAME_SECOND_MS) and keeps the older epoch, so
    # its tombstone loses to the old document; an operator's repair comes later than that.
    await asyncio.sleep(SAME_SECOND_MS / 1000)
    found = await reconcile(config, config.tables[0], settle_s=0)
    assert (found.missing, found.extra, found.stale) == ([], ["60"], [])
    repaired = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert repaired.clean and repaired.repaired == {"rewritten": 0, "tombstoned": 1,
                                                    "refused_as_newer": 0, "refused": 0}
    await wait_for_documents(es, alias, expected)


async def _documents(es: SearchClient, alias: str) -> dict[str, dict[str, Any]]:
    from tests.integration.conftest import documents

    with contextlib.suppress(Exception):
        return await documents(es, alias)
    return {}


async def test_a_fail_over_during_a_reindex(
        es: SearchClient, connector: Connector, make_config: Any, tmp_path: Path) -> None:
    conn = server(PRIMARY)
    try:
        sql(conn, "INSERT INTO items SELECT seq, 'bulk', 1.00, 1 FROM seq_2001_to_60000")
    finally:
        conn.close()
    config = table_config(make_config, tmp_path, connector, PRIMARY)
    await wait_for_topic(connector.topic)
    alias = config.tables[0].alias
    async with running(config):
        await wait_for_documents(es, alias, rows(PRIMARY), timeout=180)
        # The reindex reads the old primary (a planned switchover keeps it up) while the
        # replica is promoted and takes the writes.
        rebuilding = asyncio.create_task(reindex(config, config.tables[0]))
        await asyncio.sleep(1)
        await promote_replica()
        connector.repoint(REPLICA)
        async with writing(REPLICA, 70_000, 4):
            pass
        result = await rebuilding
        assert result.rows >= 60_000
        await wait_for_documents(es, alias, rows(REPLICA), timeout=180)
    assert [s["epoch"] for s in await switches(es, config)] == [1]
    replica_config = table_config(make_config, tmp_path, connector, REPLICA, alias=alias)
    report = await reconcile(replica_config, replica_config.tables[0], settle_s=0)
    assert report.clean, (report.missing[:5], report.extra[:5], report.stale[:5])



def owners(port: int) -> dict[str, dict[str, Any]]:
    """Each owner with its pets, as MySQL joins them."""
    conn = server(port)
    try:
        pets: dict[int, list[dict[str, Any]]] = {}
        for pid, owner, name in sql(conn, "SELECT id, owner_id, name FROM pets ORDER BY id"):
            pets.setdefault(owner, []).append({"id": pid, "name": name})
        return {str(oid): {"id": oid, "name": name, "pets": pets.get(oid, [])}
                for oid, name in sql(conn, "SELECT id, name FROM owners")}
    finally:
        conn.close()


async def test_joined_documents_read_a_replica_once_it_applied_and_keep_one_epoch(
        es: SearchClient, connector: Connector, make_config: Any, tmp_path: Path) -> None:
    conn = server(PRIMARY)
    try:
        sql(conn, "CREATE TABLE owners (id INT PRIMARY KEY, name VARCHAR(40))")
        sql(conn, "CREATE TABLE pets (id INT PRIMARY KEY, owner_id INT NOT NULL, "
                  "name VARCHAR(40), FOREIGN KEY (owner_id) REFERENCES owners(id) "
                  "ON DELETE CASCADE)")
        sql(conn, "INSERT INTO owners SELECT seq, CONCAT('o', seq) FROM seq_1_to_20")
        sql(conn, "INSERT INTO pets SELECT seq, 1 + seq % 20, CONCAT('p', seq) "
                  "FROM seq_1_to_60")
    finally:
        conn.close()
    alias = unique("owners").replace("_", "-")
    (tmp_path / f"{alias}.json").write_bytes(b"{}")
    prefix = connector.prefix
    # The daemon reads the replica; the connector follows the primary.
    config: Config = make_config({
        "name": f"{DATABASE}.owners", "alias": alias, "topic": f"{prefix}.{DATABASE}.owners",
        "children": {"pets": {"table": "pets", "on": {"id": "owner_id"},
                              "topic": f"{prefix}.{DATABASE}.pets",
                              "exclude": ["owner_id"]}}}, mysql={"port": REPLICA})
    for table in ("owners", "pets"):
        await wait_for_topic(f"{prefix}.{DATABASE}.{table}")
    async with running(config):
        await wait_for_documents(es, alias, owners(PRIMARY), timeout=120)
        replica = server(REPLICA)
        try:
            sql(replica, "STOP SLAVE SQL_THREAD")  # the replica falls behind
            primary = server(PRIMARY)
            try:
                sql(primary, "UPDATE pets SET owner_id = 2, name = 'moved' WHERE id = 5")
                sql(primary, "UPDATE owners SET name = 'renamed' WHERE id = 7")
                sql(primary, "DELETE FROM owners WHERE id = 8")  # its pets cascade
            finally:
                primary.close()
            await asyncio.sleep(4)  # the changes reach the daemon, which waits for the replica
            sql(replica, "START SLAVE SQL_THREAD")
        finally:
            replica.close()
        await wait_for_documents(es, alias, owners(PRIMARY), timeout=120)
        await promote_replica()
        stack("down", "failover-primary")
        connector.repoint(REPLICA)
        conn = server(REPLICA)
        try:  # changes of both tables from the new primary, its binlog three files behind
            sql(conn, "INSERT INTO owners VALUES (21, 'new')")
            sql(conn, "INSERT INTO pets VALUES (61, 21, 'first'), (62, 3, 'second')")
            sql(conn, "UPDATE owners SET name = 'after' WHERE id = 1")
        finally:
            conn.close()
        await wait_for_documents(es, alias, owners(REPLICA), timeout=120)
    # One record of epochs for the whole tree: both tables' partitions in one epoch.
    registry = await StateStore(es).load(alias)
    assert registry.current.number == 1
    assert {c.epoch for c in registry.cursors.values()} == {1} and len(registry.cursors) == 2
    report = await reconcile(config, config.tables[0], settle_s=0)
    assert report.clean, report.as_json()
