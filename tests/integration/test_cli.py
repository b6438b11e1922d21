"""The operations commands as users run them: check, mappings, metrics, JSON logs, dead-letter
replay, tombstone purge."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.search.client import SearchClient
from indexer.source.kafka.clients import topic_partitions
from tests.integration.conftest import (
    COLUMNS,
    REPO,
    DaemonProcess,
    expected_rows,
    insert_rows,
    live_index,
    produce,
    raw_documents,
    running,
    sql,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)

pytestmark = pytest.mark.servers


async def indexer(*args: str, env: dict[str, str] | None = None,
                  ) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "indexer", *args], cwd=REPO,
        capture_output=True, text=True, env=env, timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_mappings_apply_and_check(es: SearchClient, make_table: Any,
                                        make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    config_file = tmp_path / "indexer.toml"
    make_config(table.entry(), file=config_file)
    assert (await indexer("mappings", "validate", "-c", str(config_file))).returncode == 0
    unhealthy = await indexer("check", "-c", str(config_file))
    assert unhealthy.returncode == 1 and "mappings apply" in unhealthy.stderr
    applied = await indexer("mappings", "apply", "-c", str(config_file))
    assert applied.returncode == 0, applied.stderr
    index = await live_index(es, table.alias)
    assert index.startswith(f"{table.alias}-v")
    mapping = (await es.request("GET", f"/{index}/_mapping"))[index]["mappings"]
    assert mapping["properties"]["_indexer"]["properties"]["hash"] == {"type": "long"}
    no_topic = await indexer("check", "-c", str(config_file))
    # The topic appears with the table's first change.
    assert no_topic.returncode == 1 and "does not exist yet" in no_topic.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[[tables]]\nname = "nodot"\n')
    wrong = await indexer("check", "-c", str(bad))
    assert wrong.returncode == 2 and "tables[0].name" in wrong.stderr


async def test_metrics_json_logs_replay_and_purge(
        db: Any, es: SearchClient, make_table: Any, make_config: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1), (2, 'b', 2, 2)")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 2")
    await wait_for_topic(table.topic)
    await produce(table.topic, [(b'{"id": 3}', b"not json", None)])
    config_file = tmp_path / "indexer.toml"
    port = free_port()
    config = make_config(table.entry(), file=config_file, metrics={"port": port},
                         logging={"format": "json"}, deletes={"tombstone_retention_s": 0})
    daemon = DaemonProcess(config_file, tmp_path / "daemon.log")
    try:
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        assert (await indexer("check", "-c", str(config_file))).returncode == 0

        async def scraped() -> bool:
            try:
                text = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read())
            except OSError:
                return False
            name = f'table="indexer_test.{table.name}"'
            return (f"indexer_indexed_total{{{name}}} 1.0".encode() in text
                    and f"indexer_deleted_total{{{name}}} 1.0".encode() in text
                    and b"indexer_dead_lettered_total" in text
                    and b"indexer_consumer_lag" in text)

        await wait_until(scraped, 30, "metrics")
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(30)
        daemon.close()
    lines = [orjson.loads(line) for line in daemon.log.read_text().splitlines()
             if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message"} <= set(x) for x in lines)
    assert any(x["level"] == "error" and "dead-lettering" in x["message"] for x in lines)

    listed = await indexer("dlq", "replay", "--dry-run", "-c", str(config_file))
    assert listed.returncode == 0 and "matched 1, replayed 0" in listed.stderr
    replayed = await indexer("dlq", "replay", "--kind", "undecodable", "-c",
                             str(config_file))
    assert "replayed 1" in replayed.stderr

    assert (await raw_documents(es, table.alias))["2"]["_indexer"]["deleted"] is True
    purged = await indexer("tombstones", "purge", "-c", str(config_file))
    assert purged.returncode == 0 and "purged 1 tombstones" in purged.stderr
    assert "2" not in await raw_documents(es, table.alias)
    assert config.metrics.port == port


async def test_a_misspelt_table_stops_run_and_check_names_it(
        es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    config_file = tmp_path / "indexer.toml"
    misspelt = table.entry(name=table.entry()["name"] + "x")
    make_config(misspelt, file=config_file)
    started = await indexer("run", "-c", str(config_file))
    assert started.returncode == 2, started.stderr
    error = [line for line in started.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and f"{misspelt['name']} does not exist" in error[0], started.stderr
    assert not await es.request("GET", f"/{table.alias}-v*", ok=(404,))  # no index made
    checked = await indexer("check", "-c", str(config_file))
    assert checked.returncode == 1 and "does not exist" in checked.stderr, checked.stderr


async def test_an_empty_tables_topic_is_not_created_by_subscribing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    empty, table = make_table(COLUMNS), make_table(COLUMNS)
    insert_rows(db, table.name, 1, 3)
    config = make_config(empty.entry(), table.entry())
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    # Debezium writes no topic for an empty table, and the daemon's subscription made none.
    assert await topic_partitions(config.kafka, empty.topic) == []


async def test_reconcile_all_reports_a_failing_table_and_goes_on(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 5)
    config_file = tmp_path / "indexer.toml"
    gone = make_table(COLUMNS)
    config = make_config(gone.entry(), table.entry(), file=config_file)
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    sql(db, f"DROP TABLE `{gone.name}`")
    result = await indexer("reconcile", "--all", "--format", "json", "-c", str(config_file))
    assert result.returncode == 2, result.stderr
    report = orjson.loads(result.stdout)
    assert [r["table"] for r in report["tables"]] == [config.tables[1].name]
    assert report["tables"][0]["clean"]
    assert [e["table"] for e in report["errors"]] == [config.tables[0].name]
    assert "not reconciled" in result.stderr
