"""Outages log like an operator wants: the search server and Kafka restarted under a writer,
the daemon's log counted. Each outage is a WARNING when it starts and an INFO when it ends
(a reminder a minute while it lasts), not a line per attempt; no library logs an ERROR about a
server that is reachable again; nothing is lost."""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
from pathlib import Path
from typing import Any, Self

from indexer.search.client import SearchClient
from tests.integration.conftest import (
    COLUMNS,
    REPO,
    expected_rows,
    insert_rows,
    mysql_connect,
    sql,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)

OUTAGE_S = 20
# Lines one outage may add to the daemon's log: its WARNING and its INFO, a rebalance's two
# lines after a broker restart, and a little room; a line per retry would be hundreds.
LINES_PER_OUTAGE = 8


def stack(*args: str) -> None:
    subprocess.run([str(REPO / "dev" / "stack.sh"), *args], check=True, timeout=300,
                   stdout=subprocess.DEVNULL)


class Writer:
    """Inserts a row every few tens of milliseconds until stopped, like an application."""

    def __init__(self, table: str, first: int) -> None:
        self.table, self.next = table, first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        db = mysql_connect()
        try:
            while not self._stop.wait(0.05):
                sql(db, f"INSERT INTO `{self.table}` VALUES (%s, 'w', 1.00, 1)", self.next)
                self.next += 1
        finally:
            db.close()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines()
            if re.match(r"^\d{4}-\d\d-\d\d ", line)]


async def test_restarts_of_the_search_server_and_kafka_are_one_line_each_way(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, spawn: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 100)
    await wait_for_topic(table.topic)
    config_file = tmp_path / "indexer.toml"
    make_config(table.entry(), file=config_file, batch={"max_backoff_s": 2.0})
    daemon = spawn(config_file)
    await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=90)
    first_start = len(lines(daemon.log))
    assert not [line for line in lines(daemon.log) if "WARNING" in line and "canary" in line]

    counts = {}
    with Writer(table.name, 1000):
        for server, told in (("elasticsearch", "the search server"), ("kafka", "Kafka")):
            before = len(lines(daemon.log))
            stack("down", server)
            try:
                await asyncio.sleep(OUTAGE_S)
            finally:
                stack("up", server)
            back = re.compile(rf"INFO .*{re.escape(told)} is back after")

            async def told_back(back: re.Pattern[str] = back, before: int = before) -> bool:
                return any(back.search(line) for line in lines(daemon.log)[before:])

            await wait_until(told_back, 120, f"the daemon telling {told} is back")
            await asyncio.sleep(5)  # what a reconnect still logs
            during = lines(daemon.log)[before:]
            counts[server] = len(during)
            down = [line for line in during if f"WARNING indexer.outages: {told}" in line]
            assert len(down) == 1, during
            assert len(during) <= LINES_PER_OUTAGE, during
            assert not [line for line in during if "ERROR" in line], during
    await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=120)
    assert daemon.proc.poll() is None, daemon.tail()
    everything = lines(daemon.log)[first_start:]
    assert not [line for line in everything if re.search(r"ERROR +aiokafka", line)]
    print("log lines per outage:", counts)
