"""Continuous verification on the real stack: drift made behind the pipeline's back is found
by `indexer run` itself, counted, recorded for `check`, and repaired when allowed; the quick
pass finds a recent change within seconds; rows changing while they are looked at are not
drift."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from indexer.jobs.health import check_health
from indexer.search.client import SearchClient
from indexer.search.state import StateStore
from indexer.settings import Config
from tests.integration.conftest import (
    COLUMNS,
    CONNECT,
    CONNECTOR,
    caught_up,
    documents,
    expected_rows,
    insert_rows,
    running,
    sql,
    wait_for_documents,
    wait_until,
)
from tests.integration.test_canary import FAST
from tests.integration.test_reconcile import inject_drift
from tests.integration.test_reindex import busy_writer

QUICK = {"period_s": 4, "settle_s": 1}


def drift_counted(daemon: Any, config: Config, kind: str) -> float:
    found = daemon.metrics.registry.get_sample_value(
        "indexer_verify_drift_total", {"table": config.tables[0].name, "kind": kind})
    return float(found or 0.0)


async def record(es: SearchClient, config: Config) -> dict[str, Any]:
    return await StateStore(es).verification(config.tables[0].alias) or {}


@pytest.mark.servers  # the search server's side: aggregations, ids, scans
async def test_drift_is_found_counted_recorded_for_check_and_then_repaired(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 3000)
    config = make_config(table.entry(), verify=QUICK, canary=FAST)
    async with caught_up(db, es, table, config) as daemon:
        expected = await inject_drift(db, es, table)
        wanted = {i: kind for kind, ids in expected.items() for i in ids}

        async def recorded() -> bool:
            return (await record(es, config)).get("unrepaired") == wanted

        await wait_until(recorded, 90, "the drift recorded", interval=1)
        for kind, ids in expected.items():
            assert drift_counted(daemon, config, kind) == len(ids)
        found = await record(es, config)
        assert found["unrepaired_count"] == 11 and found["repair"] is False
        (line,) = [p for p in await check_health(config) if "differ from MySQL" in p]
        assert line.startswith(f"{config.tables[0].name}: 11 rows differ from MySQL")
        assert f"`indexer reconcile --repair {table.name}`" in line
        await asyncio.sleep(2 * QUICK["period_s"])  # more passes: counted once, not again
        assert drift_counted(daemon, config, "missing") == len(expected["missing"])

    repairing = make_config(table.entry(), verify={**QUICK, "repair": True}, canary=FAST,
                            kafka={"group_id": config.kafka.group_id,
                                   "dead_letter_topic": config.kafka.dead_letter_topic})
    async with running(repairing) as daemon:
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=90)

        async def cleared() -> bool:
            return (await record(es, repairing)).get("unrepaired_count") == 0

        await wait_until(cleared, 60, "the record cleared", interval=1)
        repaired = daemon.metrics.registry.get_sample_value(
            "indexer_verify_repaired_total", {"table": repairing.tables[0].name})
        assert repaired == 11
        assert not [p for p in await check_health(repairing) if "differ from MySQL" in p]


async def test_the_quick_pass_repairs_a_recent_change_made_behind_the_pipelines_back(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS + ", changed DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
                       "ON UPDATE CURRENT_TIMESTAMP(6), KEY (changed)")
    # More rows changed at once than one ids query may name (the search server's result
    # window, 10,000): the quick pass looks them up in parts.
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.name}` (id, name, price, qty) "
                        "VALUES (%s, 'a', 1, 1)", [(i,) for i in range(1, 12_001)])
    # The rolling pass looks once at the start, then not for an hour: only the quick pass
    # over rows changed lately can find what follows.
    config = make_config(table.entry(), canary=FAST, verify={
        "period_s": 3600, "settle_s": 1, "recent_every_s": 2, "repair": True})

    async def indexed() -> bool:
        return len(await documents(es, table.alias)) == 12_000

    async with running(config) as daemon:
        await wait_until(indexed, 60, "the rows indexed")
        await asyncio.sleep(3)  # past the rolling pass's first look
        sql(db, "SET SESSION sql_log_bin = 0")
        try:
            sql(db, f"UPDATE `{table.name}` SET qty = 99 WHERE id = 2")
        finally:
            sql(db, "SET SESSION sql_log_bin = 1")

        async def repaired() -> bool:
            return bool((await documents(es, table.alias))["2"]["qty"] == 99)

        await wait_until(repaired, 45, "the recent change repaired", interval=1)
        registry = daemon.metrics.registry
        name = config.tables[0].name
        assert registry.get_sample_value("indexer_verify_drift_total",
                                         {"table": name, "kind": "stale"}) == 1
        assert (registry.get_sample_value("indexer_verify_rows_total",
                                          {"table": name, "pass": "recent"}) or 0) >= 1


@pytest.mark.parametrize("barrier", ["canary", "connector offsets"])
async def test_rows_changing_while_they_are_verified_are_not_drift(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, barrier: str) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 2000)
    # With [connect], the second look waits for the connector's committed source offset.
    connect = {"url": CONNECT, "connectors": [CONNECTOR]} if barrier != "canary" else {}
    config = make_config(table.entry(), canary=FAST, connect=connect,
                         verify={**QUICK, "period_s": 2, "max_load_share": 0.5})
    async with caught_up(db, es, table, config) as daemon:
        stop = threading.Event()
        writer = asyncio.create_task(asyncio.to_thread(busy_writer, table.name, stop, 2001, 7))
        try:
            await asyncio.sleep(25)  # a dozen passes over a table that never stands still
        finally:
            stop.set()
            changes = await writer
        assert changes > 500
        await wait_for_documents(es, table.alias, expected_rows(db, table.name), timeout=60)
        registry = daemon.metrics.registry
        name = config.tables[0].name
        assert (registry.get_sample_value("indexer_verify_rows_total",
                                          {"table": name, "pass": "rolling"}) or 0) > 10_000
        for kind in ("missing", "extra", "stale"):
            assert drift_counted(daemon, config, kind) == 0, kind
