"""`indexer reconcile` on the real stack: drift injected behind the pipeline's back is found
exactly, repaired, and live writes do not show up as drift."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.jobs import reconcile as reconcile_module
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient
from indexer.source.mysql import schema, snapshots
from tests.integration.conftest import (
    COLUMNS,
    REPO,
    caught_up,
    documents,
    expected_rows,
    insert_rows,
    live_index,
    running,
    sql,
    wait_for_documents,
    wait_for_topic,
)
from tests.integration.test_reindex import busy_writer
from tests.integration.test_types import COLUMNS as TYPE_COLUMNS
from tests.integration.test_types import EXPECTED as TYPE_EXPECTED
from tests.integration.test_types import MAPPING as TYPE_MAPPING
from tests.integration.test_types import insert_every_type

pytestmark = pytest.mark.servers


async def inject_drift(db: Any, es: SearchClient, table: Any) -> dict[str, set[str]]:
    index = await live_index(es, table.alias)
    for doc_id in ("11", "12", "13"):  # documents lost
        await es.request("DELETE", f"/{index}/_doc/{doc_id}")
    for doc_id in ("21", "22"):  # documents replaced by a hand-edited copy
        source = (await es.request("GET", f"/{index}/_doc/{doc_id}"))["_source"]
        source.pop("_indexer")
        await es.request("PUT", f"/{index}/_doc/{doc_id}", {**source, "name": "tampered"})
    await es.request("PUT", f"/{index}/_doc/9001", {"id": 9001, "name": "ghost"})
    await es.request("PUT", f"/{index}/_doc/not-a-key", {"name": "ghost"})
    # Rows changed with the binlog off: Debezium never sees them.
    sql(db, "SET SESSION sql_log_bin = 0")
    try:
        sql(db, f"UPDATE `{table.name}` SET qty = qty + 5 WHERE id IN (31, 32)")
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 41")
        sql(db, f"INSERT INTO `{table.name}` VALUES (5000, 'hidden', 1.00, 1)")
    finally:
        sql(db, "SET SESSION sql_log_bin = 1")
    await es.refresh(index)
    return {"missing": {"11", "12", "13", "5000"}, "extra": {"41", "9001", "not-a-key"},
            "stale": {"21", "22", "31", "32"}}


async def test_drift_behind_the_pipelines_back_is_found_exactly_and_repaired(
        db: Any, es: SearchClient, make_table: Any, make_config: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 3000)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        pass  # a first daemon indexes every row, then stops
    clean = await reconcile(config, config.tables[0], settle_s=0)
    assert clean.clean and clean.rows == clean.documents == 3000
    assert clean.chunks >= 1 and clean.chunks_differing == 0

    expected = await inject_drift(db, es, table)
    report = await reconcile(config, config.tables[0], settle_s=0.5)
    assert {"missing": set(report.missing), "extra": set(report.extra),
            "stale": set(report.stale)} == expected
    assert report.rechecked == 11

    repaired = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert repaired.repaired == {"rewritten": 8, "tombstoned": 3, "refused_as_newer": 0,
                                 "refused": 0}
    assert repaired.clean
    await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    assert (await reconcile(config, config.tables[0], settle_s=0)).clean

    # The command line: exit codes and the JSON and HTML reports.
    config_file = tmp_path / "indexer.toml"
    make_config(table.entry(), file=config_file)
    index = await live_index(es, table.alias)
    await es.request("DELETE", f"/{index}/_doc/7", params={"refresh": True})
    command = [sys.executable, "-m", "indexer", "reconcile", table.name, "--config",
               str(config_file), "--settle", "0"]
    drift = await _cli(command, "--format", "json")
    assert drift.returncode == 1, drift.stderr.decode()
    (result,) = orjson.loads(drift.stdout)["tables"]
    assert result["missing"] == ["7"] and result["clean"] is False
    html_file = tmp_path / "report.html"
    await _cli(command, "--format", "html", "--output", str(html_file))
    page = html_file.read_text()
    assert "<svg" in page and "missing: 1" in page and "<script" not in page
    fixed = await _cli(command, "--repair")
    assert fixed.returncode == 0, fixed.stdout.decode() + fixed.stderr.decode()
    assert (await _cli(command)).returncode == 0


async def _cli(command: list[str], *more: str) -> subprocess.CompletedProcess[bytes]:
    return await asyncio.to_thread(subprocess.run, [*command, *more], cwd=REPO,
                                   capture_output=True)


async def test_live_writes_are_rechecked_not_reported(db: Any, es: SearchClient,
                                                      make_table: Any,
                                                      make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 20000)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config, timeout=120):
        stop = threading.Event()
        writer = asyncio.create_task(asyncio.to_thread(busy_writer, table.name, stop, 20001, 2))
        checking = asyncio.create_task(reconcile(config, config.tables[0], settle_s=3))
        await asyncio.sleep(1.0)
        stop.set()
        changes = await writer
        report = await checking
        assert changes > 20
        assert report.clean, (report.missing, report.extra, report.stale)


async def test_the_mysql_8_checksum_variant_sees_json_and_set_drift(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    # MySQL 8 has no JSON_COMPACT: its variant hashes JSON and SET texts as MySQL renders
    # JSON (", " and ": "). MariaDB keeps JSON text as written, so rows written that way
    # stand in for MySQL's rendering here.
    table = make_table("id INT PRIMARY KEY, doc JSON, tags SET('a','b','c'), name VARCHAR(20)",
                       {"mappings": {"properties": {"doc": {"type": "flattened"}}}})
    for i in range(1, 41):
        sql(db, f"INSERT INTO `{table.name}` VALUES (%s, %s, 'a,c', %s)", i,
            f'{{"n": {i}, "items": [1, "two", null], "nested": {{"ok": true}}}}', f"n{i}")
    config = make_config(table.entry(), mysql={"server": "mysql"})
    expected = {str(i): {"id": i, "doc": {"n": i, "items": [1, "two", None],
                                          "nested": {"ok": True}},
                         "tags": ["a", "c"], "name": f"n{i}"} for i in range(1, 41)}
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, expected)
    clean = await reconcile(config, config.tables[0], settle_s=0)
    assert clean.clean and clean.rows == 40
    sql(db, "SET SESSION sql_log_bin = 0")
    try:
        sql(db, f"UPDATE `{table.name}` SET doc = '{{\"n\": 7, \"items\": [], \"nested\": "
                f"{{\"ok\": false}}}}' WHERE id = 7")
        sql(db, f"UPDATE `{table.name}` SET tags = 'b' WHERE id = 9")
    finally:
        sql(db, "SET SESSION sql_log_bin = 1")
    found = await reconcile(config, config.tables[0], settle_s=0)
    assert found.stale == ["7", "9"]
    assert (await reconcile(config, config.tables[0], repair=True, settle_s=0)).clean


async def test_the_locked_snapshot_position_is_the_lock_free_one(
        db: Any, make_table: Any, make_config: Any) -> None:
    # MySQL 8's way (a brief global read lock, then SHOW BINARY LOG STATUS, which MariaDB
    # refuses, so SHOW MASTER STATUS) gives the position MariaDB reports lock-free.
    table = make_table(COLUMNS)
    config = make_config(table.entry())
    layout = await asyncio.to_thread(schema.read_layout, config.mysql, "indexer_test", table.name)
    positions = []
    for mode in ("status", "lock", "auto"):
        settings = dataclasses.replace(config.mysql, snapshot_position=mode)
        snapshot = await asyncio.to_thread(snapshots.Snapshot, settings, layout)
        positions.append((snapshot.position.file, snapshot.position.pos))
        snapshot.close()
    assert positions[0] == positions[1] == positions[2]


def behind_the_back(db: Any, *statements: str) -> None:
    """Changes made with the binlog off: Debezium never sees them."""
    sql(db, "SET SESSION sql_log_bin = 0")
    try:
        for statement in statements:
            sql(db, statement)
    finally:
        sql(db, "SET SESSION sql_log_bin = 1")


async def test_every_type_checksums_agree_and_a_changed_float_is_found(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(TYPE_COLUMNS, TYPE_MAPPING)
    insert_every_type(db, table.name)
    config = make_config(table.entry())
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, TYPE_EXPECTED)
    # The server's texts of every edge value equal the documents' (NULLs included).
    clean = await reconcile(config, config.tables[0], settle_s=0)
    assert clean.clean and clean.rows == len(TYPE_EXPECTED), clean
    # One step of the last bit of a DOUBLE and of a FLOAT, each invisible at 6 digits.
    behind_the_back(db, f"UPDATE `{table.name}` SET d = 1234567890123457.0 WHERE id = 7",
                    f"UPDATE `{table.name}` SET f = 16777218 WHERE id = 6",
                    f"UPDATE `{table.name}` SET d = -1.0000000000000002e-16 WHERE id = 8")
    found = await reconcile(config, config.tables[0], settle_s=0)
    assert (found.stale, found.missing, found.extra) == (["6", "7", "8"], [], [])
    repaired = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert repaired.clean and repaired.repaired == {
        "rewritten": 3, "tombstoned": 0, "refused_as_newer": 0, "refused": 0}
    docs = await documents(es, table.alias)
    assert (docs["6"]["f"], docs["7"]["d"], docs["8"]["d"]) == (
        16777218.0, 1234567890123457.0, -1.0000000000000002e-16)


async def test_column_changes_are_seen_and_a_whole_table_repair_streams(
        db: Any, es: SearchClient, make_table: Any, make_config: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 3000)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        pass  # indexed; the changes below reach no document
    # A nullable column added without a default: NULL and absent are the same content.
    sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN note VARCHAR(20) NULL")
    assert (await reconcile(config, config.tables[0], settle_s=0)).clean
    # A renamed column: every document still has the old field, though the values match.
    sql(db, f"ALTER TABLE `{table.name}` CHANGE name title VARCHAR(40)")
    renamed = await reconcile(config, config.tables[0], settle_s=0)
    assert len(renamed.stale) == 3000 and not (renamed.missing or renamed.extra)
    # A dropped column and one added with a value: stale too. The repair of the whole
    # table streams it once instead of looking 3,000 ids up.
    sql(db, f"ALTER TABLE `{table.name}` DROP COLUMN qty, "
            "ADD COLUMN flag INT NOT NULL DEFAULT 1")
    monkeypatch.setattr(snapshots, "SCAN_ABOVE_IDS", 1000)
    repaired = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert repaired.clean and repaired.repaired == {
        "rewritten": 3000, "tombstoned": 0, "refused_as_newer": 0, "refused": 0}
    docs = await documents(es, table.alias)
    assert docs["7"] == {"id": 7, "title": "name 7", "price": "7.00", "note": None, "flag": 1}
    assert (await reconcile(config, config.tables[0], settle_s=0)).clean
    # Most of a (large) table differing: a reindex rebuilds it, faster than rewriting.
    sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN colour VARCHAR(8) NOT NULL DEFAULT 'red'")
    monkeypatch.setattr(reconcile_module, "REINDEX_MIN_ROWS", 1000)
    before = await live_index(es, table.alias)
    rebuilt = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert rebuilt.clean and rebuilt.repaired == {
        "rewritten": 3000, "tombstoned": 0, "refused_as_newer": 0, "refused": 0}
    assert any("rebuilt by a reindex" in note for note in rebuilt.notes)
    assert await live_index(es, table.alias) != before
    assert (await documents(es, table.alias))["7"]["colour"] == "red"


async def test_a_repair_straight_after_a_reindex_still_rewrites(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    """With nothing written to the binlog between them, the repair's snapshot has the very
    position the reindex's had: its version equals the documents', and must still win."""
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 50)
    config = make_config(table.entry())
    await reindex(config, config.tables[0])
    sql(db, "SET SESSION sql_log_bin = 0")
    sql(db, f"UPDATE `{table.name}` SET name = 'hidden' WHERE id = 7")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 8")
    sql(db, "SET SESSION sql_log_bin = 1")
    found = await reconcile(config, config.tables[0], settle_s=0)
    assert (found.stale, found.extra) == (["7"], ["8"])
    repaired = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert repaired.clean and repaired.repaired == {"rewritten": 1, "tombstoned": 1,
                                                    "refused_as_newer": 0, "refused": 0}
