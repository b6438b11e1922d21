"""`indexer run` on the binlog itself (``[source] kind = "binlog"``), on the real MariaDB: the
first start loads every table and streams from before the load, every change kind arrives,
a restart resumes from the saved position, a binlog without that position stops the start
with one line, and the same workload through Debezium and Kafka gives the same documents
and versions."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from indexer.core.sources import binlog_order
from indexer.errors import BinlogPurged, ConfigError
from indexer.jobs.binlog_letters import LetterReplay
from indexer.jobs.dlq import replay
from indexer.jobs.explain import explain
from indexer.jobs.health import check_health
from indexer.jobs.reconcile import reconcile
from indexer.jobs.sources import reset_position
from indexer.jobs.status import gather
from indexer.search.client import SearchClient
from indexer.search.dead_letters import DEAD_LETTER_INDEX
from indexer.search.state import StateStore
from indexer.settings import Config
from indexer.source.binlog.replication import binlog_end_of
from tests.integration import conftest
from tests.integration import test_outage_logs as outage_logs
from tests.integration import test_sources as failover
from tests.integration.conftest import (
    COLUMNS,
    DATABASE,
    at_least,
    count,
    documents,
    expected_rows,
    insert_rows,
    live_index,
    mysql_connect,
    raw_documents,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_canary import FAST
from tests.integration.test_joins import create_shop, drop_shop, every_change_kind
from tests.integration.test_sources import pair  # noqa: F401 (a fixture)


def binlog_config(make_config: Callable[..., Config], table: conftest.TestTable, name: str,
                  **sections: dict[str, Any]) -> Config:
    return make_config(table.entry(), source={"kind": "binlog", "name": name},
                       canary={"enabled": False}, **sections)


async def test_first_start_loads_then_streams_every_change_kind(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 200)
    config = binlog_config(make_config, table, unique("it-binlog"))
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        loaded = await live_index(es, table.alias)
        insert_rows(db, table.name, 201, 260)
        sql(db, f"UPDATE `{table.name}` SET name = 'renamed', qty = qty + 1 WHERE id <= 30")
        sql(db, f"DELETE FROM `{table.name}` WHERE id BETWEEN 31 AND 40")
        with db.cursor() as cur:  # one transaction of every kind, rows of one event each
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO `{table.name}` VALUES (1000, 'a', 1.5, 1), "
                        "(1001, 'b', 2.5, 2)")
            cur.execute(f"UPDATE `{table.name}` SET price = 9.99 WHERE id IN (1000, 200)")
            cur.execute(f"DELETE FROM `{table.name}` WHERE id = 1001")
            cur.execute(f"UPDATE `{table.name}` SET id = 2000 WHERE id = 1000")  # a new key
            cur.execute("COMMIT")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    # Stopped: the position was saved; changes made meanwhile arrive after a restart that
    # does not load the table again.
    saved = await StateStore(es).binlog_position(config.source.name)
    assert saved is not None and saved["file"].startswith("mysql-bin.")
    sql(db, f"UPDATE `{table.name}` SET qty = 77 WHERE id > 250")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 2")
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        assert await live_index(es, table.alias) == loaded
    assert await check_health(config) == []


async def test_writes_during_the_first_load_are_neither_lost_nor_doubled(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 20_000)
    stop = threading.Event()

    def write() -> None:
        conn = mysql_connect()
        n = 0
        while not stop.is_set():
            n += 1
            with conn.cursor() as cur:
                cur.execute(f"UPDATE `{table.name}` SET qty = %s WHERE id = %s",
                            (n, 1 + (n * 7919) % 20_000))
                cur.execute(f"INSERT INTO `{table.name}` VALUES (%s, 'new', 1, 1)",
                            (100_000 + n,))
                if n % 3 == 0:
                    cur.execute(f"DELETE FROM `{table.name}` WHERE id = %s", (n * 13 % 20_000,))
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        async with running(binlog_config(make_config, table, unique("it-binlog"))):
            await asyncio.sleep(2)
            stop.set()
            await asyncio.to_thread(writer.join)
            await wait_for_documents(es, table.alias, expected_rows(db, table.name), 120)
    finally:
        stop.set()
        writer.join()


async def test_a_position_the_binlog_no_longer_has_stops_the_start_with_one_line(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 50)
    config = binlog_config(make_config, table, unique("it-binlog"))
    await StateStore(es).save_binlog_position(config.source.name,
                                              {"file": "mysql-bin.000000", "pos": 4})
    with pytest.raises(BinlogPurged) as stopped:
        async with running(config):
            pass
    message = str(stopped.value)
    assert "mysql-bin.000000:4" in message and "indexer source reset" in message
    assert "\n" not in message
    problems = await check_health(config)
    assert any("no longer has its position mysql-bin.000000:4" in p for p in problems)
    # The way out it names: the position forgotten, the next start loads the table again.
    assert (await reset_position(config) or {})["file"] == "mysql-bin.000000"
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        with pytest.raises(ConfigError, match="a daemon reads the binlog now"):
            await reset_position(config)  # not while a daemon reads
        insert_rows(db, table.name, 51, 60)
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))


async def test_another_server_behind_the_address_stops_the_start_with_one_line(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    """A fail-over, or a replica behind a moved address: the saved coordinates are another
    server's, and reading its binlog there would read another history."""
    table = make_table(COLUMNS)
    config = binlog_config(make_config, table, unique("it-binlog"))
    async with running(config):
        pass
    state = StateStore(es)
    saved = await state.binlog_position(config.source.name)
    assert saved is not None and saved["server_id"] is not None
    await state.save_binlog_position(config.source.name, {**saved, "server_id": 4242})
    with pytest.raises(BinlogPurged) as stopped:
        async with running(config):
            pass
    message = str(stopped.value)
    assert "is another server" in message and "(server_id 4242" in message
    assert "indexer source reset" in message and "\n" not in message
    assert any("belongs to server_id 4242" in p for p in await check_health(config))


async def test_a_column_added_while_streaming_is_mapped_and_indexed(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 10)
    async with running(binlog_config(make_config, table, unique("it-binlog"))):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN note JSON")
        sql(db, f"UPDATE `{table.name}` SET note = '{{\"k\": [1, 2]}}' WHERE id = 3")

        async def noted() -> bool:
            found = await raw_documents(es, table.alias)
            return found.get("3", {}).get("note") == {"k": [1, 2]}

        await wait_until(noted, 60, "the new column's value, as JSON")


async def test_one_workload_through_both_sources_gives_the_same_documents_and_versions(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    other_alias = unique("viabinlog").replace("_", "-")
    binlog = make_config({**table.entry(), "alias": other_alias},
                         source={"kind": "binlog", "name": unique("it-binlog")},
                         canary={"enabled": False})
    kafka = make_config(table.entry(), canary={"enabled": False})
    try:
        async with running(binlog):  # an empty table: every document comes from the stream
            sql(db, f"INSERT INTO `{table.name}` VALUES (0, 'first', 0, 0)")
            await wait_for_topic(table.topic)
            async with running(kafka):
                insert_rows(db, table.name, 1, 300, chunk=50)
                sql(db, f"UPDATE `{table.name}` SET price = price * 2 WHERE id % 3 = 0")
                sql(db, f"DELETE FROM `{table.name}` WHERE id % 10 = 1")
                sql(db, f"UPDATE `{table.name}` SET name = NULL WHERE id % 10 = 2")
                # a new primary key: Debezium sends a delete and an insert
                sql(db, f"UPDATE `{table.name}` SET id = id + 10000 WHERE id % 10 = 3")
                expected = expected_rows(db, table.name)
                await wait_for_documents(es, table.alias, expected)
                await wait_for_documents(es, other_alias, expected)
        via_kafka = await raw_documents(es, table.alias)
        via_binlog = await raw_documents(es, other_alias)
        assert via_binlog == via_kafka  # sources, versions and deletes' tombstones alike
    finally:
        await es.delete_matching(f"{other_alias}-v*")


async def test_kill_9_mid_stream_then_restart_loses_nothing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, spawn: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file,
                         source={"kind": "binlog", "name": unique("it-binlog")},
                         canary={"enabled": False}, batch={"max_events": 250, "in_flight": 2})
    first = spawn(config_file)
    await wait_until(lambda: _has_position(es, config), 60, "the first start's load")
    insert_rows(db, table.name, 1, 30_000, chunk=100)
    sql(db, f"DELETE FROM `{table.name}` WHERE id % 10 = 0")
    await wait_until(lambda: at_least(es, table.alias, 2000), 60, "a first part")
    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(10) == -signal.SIGKILL
    assert await count(es, table.alias) < 27_000, "killed too late to be mid-stream"
    second = spawn(config_file)
    await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
    assert second.proc.poll() is None, second.tail()


async def test_a_quiet_tables_resume_point_moves_on_while_other_tables_change(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, spawn: Any,
        tmp_path: Path) -> None:
    """Only another table changes: the saved resume point still follows the binlog, so a
    restart does not read all of it again (nor find it purged)."""
    table, other = make_table(COLUMNS), make_table(COLUMNS)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file,
                         source={"kind": "binlog", "name": unique("it-binlog")},
                         canary={"enabled": False})
    daemon = spawn(config_file)
    await wait_until(lambda: _has_position(es, config), 60, "the first start's load")
    insert_rows(db, other.name, 1, 20_000, chunk=100)
    end = binlog_order(binlog_end_of(config.mysql))

    async def saved_past_the_other_tables_writes() -> bool:
        saved = await StateStore(es).binlog_position(config.source.name)
        return saved is not None and binlog_order((saved["file"], saved["pos"])) >= end

    await wait_until(saved_past_the_other_tables_writes, 30, "the resume point to move on")
    assert await count(es, table.alias) == 0
    assert daemon.proc.poll() is None, daemon.tail()


async def test_a_lost_connection_and_a_new_binlog_file_under_writes_lose_nothing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    killed = 0
    async with running(binlog_config(make_config, table, unique("it-binlog"))):
        for round_ in range(3):
            insert_rows(db, table.name, 1 + round_ * 1000, 1000 + round_ * 1000, chunk=50)
            sql(db, f"UPDATE `{table.name}` SET qty = qty + 1 WHERE id % 7 = {round_}")
            await wait_until(lambda: _reading(db), 30, "the daemon reading the binlog")
            sql(db, f"KILL {await _dump_thread(db)}")
            killed += 1
            sql(db, "FLUSH BINARY LOGS")
            sql(db, f"DELETE FROM `{table.name}` WHERE id % 11 = {round_}")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
    assert killed >= 3


class RestartWriter(outage_logs.Writer):
    """Inserts and updates rows from a thread until stopped, through MariaDB's restart: a
    statement the restart broke is tried again on a new connection (an upsert, so one that
    committed before the break changes nothing the second time)."""

    retried = 0

    def _run(self) -> None:
        db = None
        while not self._stop.wait(0.02):
            try:
                db = db or mysql_connect()
                sql(db, f"INSERT INTO `{self.table}` VALUES (%s, 'w', 1.00, 1) "
                    "ON DUPLICATE KEY UPDATE qty = 1", self.next)
                sql(db, f"UPDATE `{self.table}` SET qty = qty + 1 WHERE id = %s",
                    self.next // 2)
                self.next += 1
            except Exception:
                self.retried += 1
                with contextlib.suppress(Exception):
                    if db is not None:
                        db.close()
                db = None
                self._stop.wait(0.5)
        if db is not None:
            db.close()


async def test_mariadb_restarted_under_writes_loses_nothing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 500)
    config = binlog_config(make_config, table, unique("it-binlog"),
                           batch={"max_backoff_s": 2.0})
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        with RestartWriter(table.name, 10_000) as writer:
            await asyncio.sleep(2)
            await asyncio.to_thread(failover.stack, "down", "mariadb")
            await asyncio.sleep(5)
            await asyncio.to_thread(failover.stack, "up", "mariadb")
            target = writer.next + 50
            await wait_until(lambda: _written_since(writer, target), 120,
                             "the writer writing again")
        assert writer.retried > 0, "the restart broke no statement: nothing was tested"
        with contextlib.suppress(Exception):  # the fixture's connection died with the server
            db.close()
        db.connect()
        await _debezium_back(db)
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)


async def _debezium_back(db: Any) -> None:
    """The stack's Debezium connector (the Kafka path's tests after this one read through
    it) either stops its task on a lost binlog connection or, its task still RUNNING,
    reconnects only at its keep-alive check, two minutes later at times: restarted, as an
    operator would, where the stack runs one, until its binlog dump reads again."""
    try:
        conftest.rest("GET", f"/connectors/{conftest.CONNECTOR}/status")
    except OSError:
        return  # no Kafka Connect here (a stack of MariaDB and the search server)
    user = conftest.rest("GET", f"/connectors/{conftest.CONNECTOR}/config")["database.user"]
    conftest.rest("POST", f"/connectors/{conftest.CONNECTOR}/restart?includeTasks=true")

    async def reading_again() -> bool:
        status = conftest.rest("GET", f"/connectors/{conftest.CONNECTOR}/status")
        states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
        if any(state == "FAILED" for state in states):
            conftest.rest("POST", f"/connectors/{conftest.CONNECTOR}/restart"
                                  "?includeTasks=true&onlyFailed=true")
        return all(state == "RUNNING" for state in states) and bool(sql(
            db, "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE COMMAND = 'Binlog Dump' AND USER = %s", user))

    await wait_until(reading_again, 120, "Debezium's connector reading the binlog again",
                     interval=1)


async def _written_since(writer: RestartWriter, target: int) -> bool:
    return writer.next >= target


async def _dump_thread(db: Any) -> int:
    """The daemon's binlog dump thread on the server (Debezium reads as another user)."""
    found = await _dump_threads(db)
    return found[0] if found else 0


async def _reading(db: Any) -> bool:
    return await _dump_thread(db) > 0


async def _has_position(es: SearchClient, config: Config) -> bool:
    try:
        return await StateStore(es).binlog_position(config.source.name) is not None
    except Exception:
        return False



async def test_what_cannot_be_written_is_dead_lettered_in_the_search_server(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    strict = {"mappings": {"dynamic": "strict", "properties": {
        "id": {"type": "long"}, "name": {"type": "keyword"}, "price": {"type": "double"},
        "qty": {"type": "integer"}}}}
    table = make_table(COLUMNS, strict)
    name = unique("it-binlog")
    config = make_config(table.entry(new_columns="keep"),
                         source={"kind": "binlog", "name": name}, canary={"enabled": False})
    async with running(config):
        sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
        # A column the strict mapping does not know: Elasticsearch refuses the document.
        sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN colour VARCHAR(10) NULL")
        sql(db, f"INSERT INTO `{table.name}` VALUES (2, 'b', 2, 2, 'red')")
        sql(db, f"TRUNCATE TABLE `{table.name}`")
        sql(db, f"INSERT INTO `{table.name}` VALUES (3, 'c', 3, 3, NULL)")  # refused too

        async def letters() -> list[dict[str, Any]]:
            with contextlib.suppress(Exception):
                await es.refresh(DEAD_LETTER_INDEX)
                found = await es.search(DEAD_LETTER_INDEX, {
                    "size": 10, "query": {"term": {"source": name}}, "sort": ["position"]})
                return [hit["_source"] for hit in found["hits"]["hits"]]
            return []

        await wait_until(lambda: _count_is(letters, 3), 60, "three dead letters")
        refused, truncated, also_refused = await letters()
        assert refused["kind"] == also_refused["kind"] == "mapping-conflict"
        assert "strict_dynamic_mapping_exception" in refused["reason"]
        assert refused["change"]["after"] == {"id": 2, "name": "b", "price": "2.00", "qty": 2,
                                              "colour": "red"}
        assert refused["binlog"]["file"].startswith("mysql-bin.")
        assert truncated["kind"] == "unsupported-op" and "indexer reindex" in truncated["reason"]
        assert also_refused["change"]["key"] == {"id": 3}
        assert sorted(await documents(es, table.alias)) == ["1"]
        # status counts them, explain shows the key's with its binlog coordinates, and
        # `dlq replay` says what to do instead.
        status = await gather(config, None)
        assert status.binlog is not None and status.binlog["reader_connection"] is not None
        assert status.tables[0].dead_letters == {"mapping-conflict": 2, "unsupported-op": 1}
        explained = await explain(config, config.tables[0], "2")
        (letter,) = explained.dead_letters
        assert letter.kind == "mapping-conflict" and letter.binlog is not None
        assert letter.binlog.startswith(f"{refused['binlog']['file']}:{refused['binlog']['pos']} ")
        assert explained.events == [] and explained.source == "binlog"

        # The fix: the mapping learns the column. Row 3 changes again meanwhile, so its
        # letter is older than its document; the TRUNCATE's letter holds no change.
        await es.put_mapping(await live_index(es, table.alias), {"colour": {"type": "keyword"}})
        sql(db, f"UPDATE `{table.name}` SET name = 'c2' WHERE id = 3")
        await wait_until(lambda: _has_doc(es, table.alias, "3"), 30, "row 3's new change")
        dry = await replay(config, [], [], None, dry_run=True)
        assert (dry.read, dry.replayed) == (3, 0) and len(await letters()) == 3
        report = await replay(config, [], ["mapping-conflict", "unsupported-op"], None,
                              dry_run=False)
        assert isinstance(report, LetterReplay)
        assert (report.read, report.replayed, report.stale, report.refused,
                report.skipped) == (3, 1, 1, 0, 1)
        docs = await documents(es, table.alias)
        assert docs["2"] == {"id": 2, "name": "b", "price": "2.00", "qty": 2, "colour": "red"}
        assert docs["3"]["name"] == "c2"
        (left,) = await letters()
        assert left["kind"] == "unsupported-op"
        again = await replay(config, [], [], None, dry_run=False)
        assert (again.read, again.replayed) == (1, 0)


async def _has_doc(es: SearchClient, alias: str, doc_id: str) -> bool:
    with contextlib.suppress(Exception):
        return doc_id in await documents(es, alias)
    return False


async def _count_is(letters: Callable[[], Any], n: int) -> bool:
    return len(await letters()) == n


async def test_a_second_daemon_stands_by_and_takes_over_after_kill_9(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, spawn: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 100)
    config_file = tmp_path / "indexer.toml"
    make_config(table.entry(), file=config_file,
                source={"kind": "binlog", "name": unique("it-binlog")},
                canary={"enabled": False})
    reader = spawn(config_file)
    await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    standby = spawn(config_file)
    await wait_until(lambda: _logged(standby, "standing by"), 60, "the second daemon waiting")
    insert_rows(db, table.name, 101, 200)
    await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    assert len(await _dump_threads(db)) == 1
    reader.proc.send_signal(signal.SIGKILL)
    assert reader.proc.wait(10) == -signal.SIGKILL
    killed_at = asyncio.get_running_loop().time()
    insert_rows(db, table.name, 201, 300)
    sql(db, f"DELETE FROM `{table.name}` WHERE id <= 50")
    await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    assert asyncio.get_running_loop().time() - killed_at < 30
    assert await _logged(standby, "taking over") and len(await _dump_threads(db)) == 1
    assert standby.proc.poll() is None, standby.tail()
    # A standby stopped with SIGTERM exits at once, cleanly.
    third = spawn(config_file)
    await wait_until(lambda: _logged(third, "standing by"), 60, "a third daemon waiting")
    third.proc.send_signal(signal.SIGTERM)
    assert third.proc.wait(15) == 0, third.tail()


async def _logged(daemon: Any, text: str) -> bool:
    return text in daemon.log.read_text(errors="replace")


async def _dump_threads(db: Any) -> list[int]:
    return [int(r[0]) for r in sql(
        db, "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump' AND "
            "USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1)")]


async def test_joined_documents_and_the_canary_on_the_binlog_source(
        db: Any, es: SearchClient, tmp_path: Path, make_config: Any) -> None:
    """Every change kind of a joined tree rebuilds its documents from the binlog; the canary's
    table, absent at the start, is read from its first beat; status, explain, check and
    reconcile agree."""
    shop = create_shop(db, tmp_path)
    canary = unique("canary")
    alias = canary.replace("_", "-")  # another test's canary table has the shared one
    config = make_config(shop.entry(), source={"kind": "binlog", "name": unique("it-binlog")},
                         canary={"table": f"{DATABASE}.{canary}", "alias": alias, **FAST})
    try:
        async with running(config):
            await wait_for_documents(es, shop.alias, shop.expected(db), timeout=90)
            for change in every_change_kind(shop.t):
                sql(db, change)
            await wait_for_documents(es, shop.alias, shop.expected(db), timeout=60)
            await wait_until(lambda: _healthy(config), 60, "the canary's beats indexed")
            status = await gather(config, None)
            assert status.problems == [] and status.canary is not None
            assert status.canary["indexed"] is not None
            explained = await explain(config, config.tables[0], "1")
            assert explained.verdict.in_sync, explained.verdict
            assert explained.made_of and explained.source == "binlog"
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.clean, report.as_json()
    finally:
        drop_shop(db, shop)
        sql(db, f"DROP TABLE IF EXISTS `{canary}`")
        with contextlib.suppress(Exception):
            for name in (shop.alias, alias):
                await es.delete_matching(f"{name}-v*")


async def _healthy(config: Config) -> bool:
    return await check_health(config) == []


@pytest.mark.usefixtures("pair")
async def test_a_fail_over_is_followed_from_the_gtid_position_without_a_reload(
        es: SearchClient, make_config: Any, tmp_path: Path) -> None:
    """The GTID pair: the daemon reads the primary; the replica is promoted (its binlog three
    files behind, so its coordinates are lower than every version indexed), takes writes
    while no daemon runs, and the config is repointed. The start reads on from the GTID
    position saved with the old server's coordinates: every change since arrives, above the
    old versions (a new epoch), into the same index (no reload). A position saved without a
    GTID position (MySQL, or saved before they were) stops the start with one line instead,
    and `indexer source reset` reloads from the new primary."""
    alias = unique("failover").replace("_", "-")
    (tmp_path / f"{alias}.json").write_bytes(b"{}")
    name = unique("it-binlog")
    store = StateStore(es)

    def reading(port: int) -> Config:
        config: Config = make_config({"name": f"{failover.DATABASE}.items", "alias": alias},
                                     mysql={"port": port}, canary={"enabled": False},
                                     source={"kind": "binlog", "name": name})
        return config

    async with running(reading(failover.PRIMARY)):
        async with failover.writing(failover.PRIMARY, 10_000, 3):
            pass
        await wait_for_documents(es, alias, failover.rows(failover.PRIMARY), timeout=120)
    old = await store.binlog_position(name)
    assert old is not None and old.get("gtid", "").startswith("0-")
    index = await live_index(es, alias)
    await failover.promote_replica()
    failover.stack("down", "failover-primary")
    async with failover.writing(failover.REPLICA, 15_000, 2):  # before any daemon runs
        pass
    config = reading(failover.REPLICA)
    async with running(config):
        async with failover.writing(failover.REPLICA, 20_000, 3):
            pass
        await wait_for_documents(es, alias, failover.rows(failover.REPLICA), timeout=120)
    assert await live_index(es, alias) == index, "reloaded instead of followed"
    new = await store.binlog_position(name)
    assert new is not None and new["server_id"] != old["server_id"] and new["gtid"]
    report = await reconcile(config, config.tables[0], settle_s=0)
    assert report.clean, report.as_json()
    # Seen as a switch, to acknowledge after checking (as on the Kafka path).
    assert all(s["epoch"] >= 1 for s in await failover.switches(es, config))
    assert any("source switch" in p for p in await check_health(config))

    # Without a GTID position the coordinates of another server cannot be followed.
    await store.save_binlog_position(name, {**{k: v for k, v in new.items() if k != "gtid"},
                                            "server_id": int(new["server_id"]) + 1000})
    with pytest.raises(BinlogPurged, match="is another server"):
        async with running(config):
            pass
    assert any("belongs to server_id" in p for p in await check_health(config))
    await reset_position(config)
    async with running(config):
        await wait_for_documents(es, alias, failover.rows(failover.REPLICA), timeout=120)
    report = await reconcile(config, config.tables[0], settle_s=0)
    assert report.clean, report.as_json()
