"""The foundation: real Debezium events from MariaDB, and Elasticsearch's external versions."""

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.search.client import SearchClient, SearchError
from tests.integration.conftest import REPO, read_topic, sql, unique


def payload(value: bytes | None) -> dict[str, Any] | None:
    return None if value is None else orjson.loads(value)["payload"]


async def test_row_changes_arrive_in_kafka_as_debezium_events(db: Any, make_table: Any) -> None:
    table = make_table("id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(8,2)")
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'tea', 7.90)")
    sql(db, f"UPDATE `{table.name}` SET name = 'green tea' WHERE id = 1")
    sql(db, f"DELETE FROM `{table.name}` WHERE id = 1")
    sql(db, f"INSERT INTO `{table.name}` VALUES (2, 'mug', 14.00)")
    sql(db, f"UPDATE `{table.name}` SET id = 3 WHERE id = 2")  # a primary-key change

    records = await read_topic(table.topic, 8)
    keys = [orjson.loads(r.key)["payload"] for r in records if r.key is not None]
    values = [payload(r.value) for r in records]
    ops = [v["op"] if v else None for v in values]
    # c, u, d + tombstone, c, then the key change as d(2) + tombstone + c(3).
    assert ops == ["c", "u", "d", None, "c", "d", None, "c"]
    assert keys == [{"id": 1}] * 4 + [{"id": 2}] * 3 + [{"id": 3}]
    insert, update, delete = values[0], values[1], values[2]
    assert insert is not None and update is not None and delete is not None
    assert insert["before"] is None
    assert insert["after"]["name"] == "tea" and insert["after"]["price"] == "AxY="  # 790
    assert update["before"]["name"] == "tea" and update["after"]["name"] == "green tea"
    assert delete["before"]["name"] == "green tea" and delete["after"] is None
    key_delete, key_create = values[5], values[7]
    assert key_delete is not None and key_create is not None
    assert key_delete["before"]["id"] == 2 and key_create["after"]["id"] == 3
    positions = [(int(v["source"]["file"].rsplit(".", 1)[1]), v["source"]["pos"],
                  v["source"]["row"]) for v in values if v]
    # Strictly increasing, except that a key change's delete and create share the position
    # of the one row update they come from (different ids, so no version clash).
    assert positions == sorted(positions)
    assert len(set(positions)) == len(positions) - 1 and positions[-1] == positions[-2]
    assert all(v["source"]["table"] == table.name for v in values if v)


async def test_rows_of_one_transaction_have_increasing_positions(db: Any,
                                                                 make_table: Any) -> None:
    table = make_table("id INT PRIMARY KEY, n INT")
    db.begin()
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.name}` VALUES (%s, %s)", [(i, i) for i in range(50)])
        cur.execute(f"UPDATE `{table.name}` SET n = n + 1")
    db.commit()
    records = await read_topic(table.topic, 100)
    positions = [(v["source"]["file"], v["source"]["pos"], v["source"]["row"])
                 for v in (payload(r.value) for r in records) if v]
    assert len(positions) == 100
    assert positions == sorted(positions) and len(set(positions)) == 100


async def test_external_versions_reject_lower_versions(es: SearchClient) -> None:
    index = unique("it-versions").lower()
    await es.create_index(index, {})

    async def write(version: int) -> None:
        await es.request("PUT", f"/{index}/_doc/1", {"v": version},
                         params={"version": version, "version_type": "external"})

    try:
        await write(5)
        for stale in (4, 5):
            with pytest.raises(SearchError) as refused:
                await write(stale)
            assert refused.value.status == 409
        await write(6)
        assert (await es.request("GET", f"/{index}/_doc/1"))["_source"] == {"v": 6}
    finally:
        await es.delete_index(index)


def test_a_server_that_cannot_start_fails_up_at_once_with_its_log(tmp_path: Path) -> None:
    env = {**os.environ, "STACK_DIR": str(tmp_path / "stack"), "KAFKA_HEAP": "not-a-size",
           "KAFKA_PORT": str(free_port()), "KAFKA_CONTROLLER_PORT": str(free_port())}
    started = time.monotonic()
    result = subprocess.run([str(REPO / "dev" / "stack.sh"), "up", "kafka"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - started < 60
    assert "kafka" in result.stderr and ("exited during start-up" in result.stderr
                                         or "formatting Kafka storage failed" in result.stderr)
    assert "heap" in result.stderr.lower()
    status = subprocess.run([str(REPO / "dev" / "stack.sh"), "status"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert "kafka          stopped" in status.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
