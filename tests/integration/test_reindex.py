"""`indexer reindex` on the real stack, with the daemon streaming and a writer busy."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.core.documents import DocumentBuilder
from indexer.core.events import EnvelopeDecoder
from indexer.errors import ReindexError
from indexer.jobs.reindex import delete_old, reindex, rollback
from indexer.search.client import SearchClient
from indexer.settings import ConnectorSettings
from indexer.source.mysql import connection, schema, snapshots
from tests.integration.conftest import (
    COLUMNS,
    REPO,
    DaemonProcess,
    all_events,
    caught_up,
    documents,
    expected_rows,
    insert_rows,
    live_index,
    mysql_connect,
    running,
    sql,
    synced_indices,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_types import COLUMNS as TYPE_COLUMNS
from tests.integration.test_types import EXPECTED as TYPE_EXPECTED
from tests.integration.test_types import MAPPING as TYPE_MAPPING
from tests.integration.test_types import insert_every_type

pytestmark = pytest.mark.servers


def busy_writer(table: str, stop: threading.Event, first_new_id: int, seed: int) -> int:
    """Inserts, updates and deletes rows until stopped; returns how many changes it made."""
    rng = random.Random(seed)
    db = mysql_connect()
    changes = 0
    next_id = first_new_id
    try:
        while not stop.is_set():
            action = rng.random()
            if action < 0.4:
                sql(db, f"INSERT INTO `{table}` VALUES (%s, 'new', 1.00, 1)", next_id)
                next_id += 1
            elif action < 0.8:
                sql(db, f"UPDATE `{table}` SET qty = qty + 1, name = %s WHERE id = %s",
                    f"u{changes}", rng.randint(1, next_id))
            else:
                sql(db, f"DELETE FROM `{table}` WHERE id = %s", rng.randint(1, next_id))
            changes += 1
    finally:
        db.close()
    return changes


async def test_reindex_while_writing_and_streaming_ends_equal_to_mysql(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 30000)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config, timeout=120):
        old = await live_index(es, table.alias)
        stop = threading.Event()
        writer = asyncio.create_task(asyncio.to_thread(busy_writer, table.name, stop, 30001, 1))
        await asyncio.sleep(0.5)
        result = await reindex(config, config.tables[0], parallel=2)
        await asyncio.sleep(1)
        stop.set()
        changes = await writer
        assert changes > 50
        assert result.rows >= 30000 * 0.9
        assert result.written + result.stale == result.rows == result.read
        assert len(result.positions) == 2
        assert result.replaced == [old]
        new = await live_index(es, table.alias)
        assert new == result.index != old
        assert await synced_indices(es, table.alias) == {old, new}
        # Every document equals MySQL, in both indices (the old one is kept current).
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
        settings = (await es.request("GET", f"/{new}/_settings"))[new]["settings"]["index"]
        assert settings.get("refresh_interval", "1s") != "-1"


async def test_rollback_and_delete_old(db: Any, es: SearchClient, make_table: Any,
                                       make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 200)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        old = await live_index(es, table.alias)
        result = await reindex(config, config.tables[0])
        assert await live_index(es, table.alias) == result.index
        sql(db, f"UPDATE `{table.name}` SET name = 'after the swap' WHERE id = 7")
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 8")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        current, previous = await rollback(config, config.tables[0])
        assert (current, previous) == (result.index, old)
        assert await live_index(es, table.alias) == old
        # The old index was kept current while it was not live.
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    deleted = await delete_old(config, config.tables[0])
    assert deleted == [result.index]
    assert not await es.index_exists(result.index)
    assert await live_index(es, table.alias) == old


async def test_reindex_and_stream_build_identical_documents_for_every_type(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(TYPE_COLUMNS, TYPE_MAPPING)
    insert_every_type(db, table.name)
    config = make_config(table.entry())
    events = await all_events(db, table)
    # Byte for byte: the daemon's document from each event, the reindex's from each row.
    decoder = EnvelopeDecoder(ConnectorSettings(), {})
    builder = DocumentBuilder(config.tables[0])
    streamed = {}
    for record in events:
        change = decoder.decode(record.key, record.value)
        if change is not None and change.op != "d":
            write = builder.write_for_change(change)
            streamed[write.id] = write.source
    conn = connection.connect(config.mysql, "indexer_test")
    layout = schema.table_layout(conn, "indexer_test", table.name)
    conn.close()
    snapshot = snapshots.Snapshot(config.mysql, layout)
    try:
        reindexed = {builder.write_for_row(key, row, 1).id: builder.write_for_row(key, row, 1)
                     .source for page in snapshot.rows() for key, row in page}
    finally:
        snapshot.close()
    assert reindexed == streamed
    assert len(streamed) == len(TYPE_EXPECTED)
    # And in Elasticsearch: the stream-built index and the reindex-built one hold the same.
    async with running(config):
        await wait_for_documents(es, table.alias, TYPE_EXPECTED)
        streamed_docs = await documents(es, table.alias)
        result = await reindex(config, config.tables[0])
        assert result.stale == 0 and result.written == len(TYPE_EXPECTED)
        assert await documents(es, table.alias) == streamed_docs


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
async def test_ctrl_c_leaves_the_live_alias_and_names_the_half_built_index(
        es: SearchClient, make_config: Any, tmp_path: Path, stop: signal.Signals) -> None:
    table = unique("interrupted")
    alias = table.replace("_", "-")
    db = mysql_connect()
    try:
        sql(db, "CREATE DATABASE IF NOT EXISTS indexer_bench")
        sql(db, f"CREATE TABLE indexer_bench.`{table}` ({COLUMNS})")
        sql(db, f"INSERT INTO indexer_bench.`{table}` SELECT seq, 'n', 1.00, 1 "
                "FROM seq_1_to_400000")
        config_file = tmp_path / "indexer.toml"
        (tmp_path / f"{alias}.json").write_bytes(orjson.dumps({}))
        make_config({"name": f"indexer_bench.{table}", "alias": alias}, file=config_file)
        command = [sys.executable, "-m", "indexer", "reindex", table, "-c", str(config_file)]
        first = await asyncio.to_thread(subprocess.run, command, cwd=REPO, capture_output=True)
        assert first.returncode == 0, first.stderr.decode()
        live = await live_index(es, alias)
        # As from a terminal: a shell without job control (CI) starts background commands with
        # SIGINT ignored, and they would inherit that.
        proc = await asyncio.create_subprocess_exec(
            *command, cwd=REPO, stderr=asyncio.subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

        async def building() -> bool:  # interrupted during the load, however fast it is
            return len(await es.indices(f"{alias}-v*")) == 2
        await wait_until(building, 60, "the second index", interval=0.05)
        await asyncio.sleep(0.5)
        proc.send_signal(stop)
        _, stderr = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode != 0
        assert await live_index(es, alias) == live
        assert await synced_indices(es, alias) == {live}
        indices = set(await es.indices(f"{alias}-v*"))
        (half_built,) = indices - {live}
        assert half_built in stderr.decode()
        deleted = await asyncio.to_thread(
            subprocess.run, [*command, "--delete-old"], cwd=REPO, capture_output=True)
        assert deleted.returncode == 0 and half_built.encode() in deleted.stderr
        assert set(await es.indices(f"{alias}-v*")) == {live}
    finally:
        sql(db, f"DROP TABLE IF EXISTS indexer_bench.`{table}`")
        db.close()
        await es.delete_matching(f"{alias}-v*")


async def test_a_reindex_with_mysql_8s_locked_snapshot_position_loses_no_write(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    # The way servers without Binlog_snapshot_* are asked, forced on MariaDB.
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 5000)
    config = make_config(table.entry(), mysql={"snapshot_position": "lock"})
    async with caught_up(db, es, table, config):
        stop = threading.Event()
        writer = asyncio.create_task(asyncio.to_thread(busy_writer, table.name, stop, 5001, 3))
        await asyncio.sleep(0.3)
        result = await reindex(config, config.tables[0], parallel=2)
        await asyncio.sleep(0.5)
        stop.set()
        assert await writer > 20
        assert result.written + result.stale == result.rows == result.read
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)


async def test_the_tombstone_progress_counts_what_the_summary_reports(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 2600)
    sql(db, f"DELETE FROM `{table.name}` WHERE id <= 2500")  # more than one copy batch
    config = make_config(table.entry())
    seen: list[tuple[int, int]] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "tombstones":
            seen.append((done, total))

    async with caught_up(db, es, table, config):
        result = await reindex(config, config.tables[0], progress=progress)
    assert result.tombstones == 2500
    assert seen[0] == (0, 2500) and seen[-1] == (2500, 2500)
    assert all(total == 2500 for _, total in seen)


def qty_mapping(qty_type: str) -> dict[str, Any]:
    return {"settings": {"index": {"number_of_replicas": 0}},
            "mappings": {"_meta": {"owner": "shop"}, "properties": {"qty": {"type": qty_type}}}}


async def test_after_a_reindex_only_the_live_index_decides(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS, qty_mapping("byte"))
    insert_rows(db, table.name, 1, 3)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config) as daemon:
        old = await live_index(es, table.alias)
        # The column widened in the mapping: the new index takes what the old one refuses.
        (tmp_path / f"{table.alias}.json").write_bytes(orjson.dumps(qty_mapping("integer")))
        result = await reindex(config, config.tables[0])
        sql(db, f"UPDATE `{table.name}` SET qty = 1000 WHERE id = 2")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        assert await live_index(es, table.alias) == result.index
        registry = daemon.metrics.registry
        name = table.entry()["name"]
        assert registry.get_sample_value("indexer_dead_lettered_total",
                                         {"table": name, "kind": "mapping-conflict"}
                                         ) is None
        assert registry.get_sample_value("indexer_kept_index_rejected_total",
                                         {"index": old}) == 1.0
        # Every refusal is counted; the mark keeps what the mapping file put in _meta.
        sql(db, f"UPDATE `{table.name}` SET qty = 2000 WHERE id = 3")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        assert registry.get_sample_value("indexer_kept_index_rejected_total",
                                         {"index": old}) == 2.0
        meta = (await es.request("GET", f"/{old}/_mapping"))[old]["mappings"]["_meta"]
        assert meta["owner"] == "shop" and "reason" in meta["indexer_missed_writes"]
    with pytest.raises(ReindexError, match=f"{old} refused writes the live index took"):
        await rollback(config, config.tables[0])
    current, previous = await rollback(config, config.tables[0], force=True)
    assert (current, previous) == (result.index, old)


async def test_a_swap_waits_for_no_index_that_missed_changes(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS, qty_mapping("integer"))
    insert_rows(db, table.name, 1, 3)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file)
    await wait_for_topic(table.topic)
    daemon = DaemonProcess(config_file, tmp_path / "daemon.log")
    try:
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        old = await live_index(es, table.alias)
        # Narrowed: the index being built refuses a change the live one takes.
        (tmp_path / f"{table.alias}.json").write_bytes(orjson.dumps(qty_mapping("byte")))

        def meanwhile(phase: str, done: int, total: int) -> None:
            if phase == "refresh" and not done:
                sql(db, f"UPDATE `{table.name}` SET qty = 1000 WHERE id = 2")
                time.sleep(5)  # the daemon (its own process) writes it to both indices

        with pytest.raises(ReindexError, match="refused changes the live index took"):
            await reindex(config, config.tables[0], progress=meanwhile)
        assert await live_index(es, table.alias) == old
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(30)
        daemon.close()
