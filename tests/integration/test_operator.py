"""The operator's toolbox on the real stack: `indexer explain`, `indexer status`, `check`
with Kafka Connect's health and a stall bound, and a 10 MB row end to end."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.search.client import SearchClient
from tests.integration.conftest import (
    COLUMNS,
    CONNECT,
    CONNECTOR,
    expected_rows,
    live_index,
    rest,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_cli import indexer

# `name` mapped as a number: a row whose name is not one is refused and dead-lettered.
NAME_AS_NUMBER = {"settings": {"index": {"number_of_replicas": 0}},
                  "mappings": {"properties": {"name": {"type": "long"}}}}


def indexable(db: Any, table: str, refused: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in expected_rows(db, table).items() if k != refused}


async def explained(config_file: Path, table: str, key: str) -> tuple[int, dict[str, Any], str]:
    as_json = await indexer("explain", table, key, "--format", "json", "-c", str(config_file))
    assert as_json.returncode in (0, 1), as_json.stderr
    text = await indexer("explain", table, key, "-c", str(config_file))
    assert text.returncode == as_json.returncode, text.stderr
    return as_json.returncode, orjson.loads(as_json.stdout), text.stdout


@pytest.mark.servers
async def test_explain_in_sync_stale_missing_deleted_dead_lettered_and_waiting(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS, NAME_AS_NUMBER)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, '11', 1.50, 1), (2, '22', 2, 2), "
            "(3, '33', 3, 3), (4, '44', 4, 4)")
    sql(db, f"INSERT INTO `{table.name}` VALUES (5, 'not a number', 5, 5)")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 4")
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file)
    name = table.name
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, indexable(db, name, "5"))

        async def dead_lettered() -> bool:
            code, _, _ = await explained(config_file, name, "5")
            return code == 1
        await wait_until(dead_lettered, 60, "row 5 dead-lettered")

        code, found, text = await explained(config_file, name, "1")
        assert code == 0 and found["verdict"]["in_sync"], text
        assert found["row"] == {"id": 1, "name": "11", "price": "1.50", "qty": 1}
        (doc,) = found["documents"]
        assert doc["live"] and not doc["deleted"] and doc["source"] == found["row"]
        # The binlog version decoded: the file of the stack's binlog, a position, row 0.
        assert set(doc["version_decoded"]) == {"binlog_file", "position", "row", "epoch"}
        (event,) = found["events"]
        assert event["op"] == "c" and event["committed"] and event["version"] == doc["version"]
        assert "MySQL now:" in text and "Verdict: in sync" in text

        # Stale: changed behind the daemon's back (not in the binlog).
        sql(db, "SET SESSION sql_log_bin = 0")
        sql(db, f"UPDATE `{name}` SET qty = 99 WHERE id = 2")
        sql(db, "SET SESSION sql_log_bin = 1")
        code, found, text = await explained(config_file, name, "2")
        assert code == 1 and found["verdict"]["differing_fields"] == ["qty"]
        assert found["verdict"]["fix"] == f"indexer reconcile --repair {name}"
        assert "fields: qty" in text

        # Missing: the document is gone from the index.
        index = await live_index(es, table.alias)
        await es.request("DELETE", f"/{index}/_doc/3", params={"refresh": "true"})
        code, found, _ = await explained(config_file, name, "3")
        assert code == 1 and found["verdict"]["summary"].startswith("missing")
        assert found["documents"] == []

        # Deleted, with its tombstone: in sync.
        code, found, text = await explained(config_file, name, "4")
        assert code == 0 and found["row"] is None
        (doc,) = found["documents"]
        assert doc["deleted"] and "tombstone" in text
        assert [e["op"] for e in found["events"]][:2] == [
            "tombstone (Debezium's, after a delete)", "d"]

        # Dead-lettered: the reason, and the fix through the mapping and a replay.
        code, found, _ = await explained(config_file, name, "5")
        (letter,) = found["dead_letters"]
        assert letter["kind"] == "mapping-conflict"
        fix = found["verdict"]["fix"]
        assert f"mappings/{table.alias}.json" in fix and f"indexer reindex {name}" in fix
        assert "indexer dlq replay" in fix

    # With the daemon stopped, a new change waits in Kafka: the verdict says so.
    sql(db, f"UPDATE `{name}` SET qty = 7 WHERE id = 1")

    async def waiting() -> bool:
        code, found, _ = await explained(config_file, name, "1")
        return code == 1 and found["events"] and not found["events"][0]["committed"]
    await wait_until(waiting, 60, "the update in Kafka")
    _, found, _ = await explained(config_file, name, "1")
    assert found["verdict"]["fix"].startswith("wait: its change at")

    unknown = await indexer("explain", "nope", "1", "-c", str(config_file))
    assert unknown.returncode == 2 and "unknown table 'nope'" in unknown.stderr
    wrong = await indexer("explain", name, "x1", "-c", str(config_file))
    assert wrong.returncode == 2 and "primary key id is an integer" in wrong.stderr


@pytest.mark.servers
async def test_explain_composite_key(db: Any, es: SearchClient, make_table: Any,
                                     make_config: Any, tmp_path: Path) -> None:
    table = make_table("a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b)")
    sql(db, f"INSERT INTO `{table.name}` VALUES ('x|y', 1, 10), ('x', 2, 20)")
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file)
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, {
            "x\\|y|1": {"a": "x|y", "b": 1, "v": 10}, "x|2": {"a": "x", "b": 2, "v": 20}})
        code, found, _ = await explained(config_file, table.name, "x\\|y|1")
        assert code == 0 and found["row"] == {"a": "x|y", "b": 1, "v": 10}
        assert found["events"][0]["op"] == "c"


async def test_status_reports_lag_dead_letters_tombstones_and_consumers(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS, NAME_AS_NUMBER)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, '1', 1, 1), (2, 'two', 2, 2), "
            "(3, '3', 3, 3)")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 3")
    config_file = tmp_path / "indexer.toml"
    # Row 2 is dead-lettered, so the index lacks it: continuous verification would say so
    # (tests/integration/test_verify.py); what this test reads is the rest of the status.
    config = make_config(table.entry(), file=config_file, verify={"enabled": False},
                         connect={"url": CONNECT, "connectors": [CONNECTOR]})
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, indexable(db, table.name, "2"))

        async def settled() -> bool:
            result = await indexer("status", "--format", "json", "-c", str(config_file))
            found = orjson.loads(result.stdout)
            t = found["tables"][0]
            return (result.returncode == 0 and t["lag"] == 0
                    and sum(t["dead_letters"].values()) == 1 and t["tombstones"] == 1)
        await wait_until(settled, 60, "status settles")
        result = await indexer("status", "--format", "json", "-c", str(config_file))
        found = orjson.loads(result.stdout)
        assert found["healthy"] and found["consumers"], result.stdout
        (t,) = found["tables"]
        assert t["documents"] == 1 and t["live"] == [await live_index(es, table.alias)]
        (p,) = t["partitions"]
        assert p["indexed_up_to"] and p["oldest_waiting_s"] is None
        (c,) = found["connectors"]
        assert c["name"] == CONNECTOR and c["state"] == "RUNNING"
        text = await indexer("status", "-c", str(config_file))
        assert text.returncode == 0 and f"{table.name}: alias {table.alias} ->" in text.stdout
        assert "lag 0" in text.stdout and "dead letters " in text.stdout
    # The daemon gone and changes waiting: unhealthy, and how long the oldest has waited.
    sql(db, f"INSERT INTO `{table.name}` VALUES (4, '4', 4, 4)")

    async def lagging() -> bool:
        result = await indexer("status", "--format", "json", "-c", str(config_file))
        return result.returncode == 1 and orjson.loads(result.stdout)["tables"][0]["lag"] > 0
    await wait_until(lagging, 60, "lag seen")
    result = await indexer("status", "--format", "json", "-c", str(config_file))
    found = orjson.loads(result.stdout)
    assert any("no daemon consumes them" in p for p in found["problems"])
    assert found["tables"][0]["partitions"][0]["oldest_waiting_s"] is not None


async def test_check_sees_a_failed_connector_and_a_stall(
        db: Any, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 1)")
    await wait_for_topic(table.topic)
    config_file = tmp_path / "indexer.toml"
    # No daemon runs here, so no canary beat would arrive: what is checked is Connect.
    no_canary = {"enabled": False}
    make_config(table.entry(), file=config_file, canary=no_canary,
                connect={"url": CONNECT, "connectors": [CONNECTOR]})
    applied = await indexer("mappings", "apply", "-c", str(config_file))
    assert applied.returncode == 0, applied.stderr
    healthy = await indexer("check", "-c", str(config_file))
    assert healthy.returncode == 0, healthy.stderr

    # A second connector whose transform cannot handle the first change: its task FAILS for
    # good, as Debezium's does on a message larger than its producer's max.request.size.
    name = unique("it-broken")
    base = rest("GET", f"/connectors/{CONNECTOR}/config")
    config = {**base, "name": name, "topic.prefix": unique("broken"),
              "database.server.id": str(200_000 + secrets.randbelow(100_000)),
              "snapshot.mode": "no_data", "heartbeat.interval.ms": "0",
              "schema.history.internal.kafka.topic": unique("broken-history"),
              "transforms": "cast",
              "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
              "transforms.cast.spec": "op:int32"}
    try:
        rest("PUT", f"/connectors/{name}/config", config)
        await wait_until(lambda: asyncio.to_thread(_running, name), 60, "connector running")
        await asyncio.sleep(2)  # past its start-up read of the binlog position

        async def failed() -> bool:
            sql(db, f"UPDATE `{table.name}` SET qty = qty + 1")
            return await asyncio.to_thread(_failed, name)
        await wait_until(failed, 90, "connector failed")
        make_config(table.entry(), file=config_file, canary=no_canary,
                    connect={"url": CONNECT, "connectors": [CONNECTOR, name]})
        broken = await indexer("check", "-c", str(config_file))
        assert broken.returncode == 1, broken.stderr
        line = next(x for x in broken.stderr.splitlines() if name in x)
        assert "task 0 is FAILED on " in line and "Exception" in line, line
        assert f"{CONNECT}/connectors/{name}/restart?includeTasks=true&onlyFailed=true" in line
        status = await indexer("status", "--format", "json", "-c", str(config_file))
        assert status.returncode == 1
        assert any(c["name"] == name and c["tasks"][0]["state"] == "FAILED"
                   for c in orjson.loads(status.stdout)["connectors"])
    finally:
        rest("DELETE", f"/connectors/{name}")

    # Without Connect's API: the newest event (table topics, Debezium's heartbeats) bounds it.
    make_config(table.entry(), file=config_file, canary=no_canary,
                health={"max_source_age_s": 600})
    fresh = await indexer("check", "-c", str(config_file))
    assert fresh.returncode == 0, fresh.stderr
    make_config(table.entry(), file=config_file, canary=no_canary,
                health={"max_source_age_s": 0.001})
    stalled = await indexer("check", "-c", str(config_file))
    assert stalled.returncode == 1 and "health.max_source_age_s" in stalled.stderr
    unreachable = await indexer("check", "-c", str(config_file),
                                env={**os.environ, "INDEXER_HEALTH__MAX_SOURCE_AGE_S": "0",
                                     "INDEXER_CONNECT__URL": "http://127.0.0.1:9"})
    assert unreachable.returncode == 1 and "does not answer" in unreachable.stderr


def _state(name: str) -> dict[str, Any]:
    try:
        return rest("GET", f"/connectors/{name}/status")  # type: ignore[no-any-return]
    except OSError:
        return {}


def _running(name: str) -> bool:
    tasks = _state(name).get("tasks", [])
    return bool(tasks) and tasks[0]["state"] == "RUNNING"


def _failed(name: str) -> bool:
    tasks = _state(name).get("tasks", [])
    return bool(tasks) and tasks[0]["state"] == "FAILED"


async def test_a_10_mb_row_streams_end_to_end(db: Any, es: SearchClient, make_table: Any,
                                              make_config: Any) -> None:
    table = make_table("id INT PRIMARY KEY, body LONGTEXT",
                       {"settings": {"index": {"number_of_replicas": 0}},
                        "mappings": {"properties": {"body": {"type": "text", "index": False}}}})
    body = secrets.token_hex(5 * 1024 * 1024)  # 10 MiB that lz4 cannot shrink
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'small')")
    await wait_for_topic(table.topic)
    config = make_config(table.entry())
    async with running(config):
        sql(db, f"INSERT INTO `{table.name}` VALUES (2, %s), (3, 'after')", body)
        await wait_for_documents(es, table.alias, {
            "1": {"id": 1, "body": "small"}, "2": {"id": 2, "body": body},
            "3": {"id": 3, "body": "after"}}, 120)
    # Connect's task is still running: the row did not stop the pipeline.
    assert _running(CONNECTOR)
