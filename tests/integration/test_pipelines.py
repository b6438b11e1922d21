"""A table's ingest pipeline on the real search server: a missing one stops the start and is
named by `check`; every document write (first load, stream, repair, reindex) goes through it
and no tombstone does, as the server's own ingest counters show; a processor's failure
dead-letters the row, and the letter replays once the pipeline is fixed.

The test distributions here carry one ingest processor only (no ingest-common module), and
the server counts no document through a pipeline without processors: the pipeline here runs
`set_security_user`, which fails on a server without security and, ignored, leaves each
document as indexer wrote it while the server counts it. What a processor changes in a
document is covered by the unit tests of explain's comparison."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from indexer.errors import ConfigError
from indexer.jobs.binlog_letters import LetterReplay
from indexer.jobs.dlq import replay
from indexer.jobs.explain import explain
from indexer.jobs.health import check_health
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient
from indexer.search.dead_letters import DEAD_LETTER_INDEX
from indexer.settings import Config
from tests.integration import conftest
from tests.integration.conftest import (
    documents,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_until,
)
from tests.integration.test_joins import made_shop

ITEMS = "id INT PRIMARY KEY, name VARCHAR(20), gone_at DATETIME NULL"


async def put_pipeline(es: SearchClient, name: str, *, failing: bool = False) -> None:
    """The pipeline; ``failing``: its processor's failure is not ignored, so the server
    refuses every document sent through it (500, illegal_state_exception)."""
    await es.request("PUT", f"/_ingest/pipeline/{name}",
                     {"description": "indexer's tests", "processors": [
                         {"set_security_user": {"field": "by", "ignore_failure": not failing}}]})


@pytest.fixture
async def pipeline(es: SearchClient) -> AsyncIterator[str]:
    name = unique("it-pipe").lower()
    await put_pipeline(es, name)
    yield name
    with contextlib.suppress(Exception):
        await es.request("DELETE", f"/_ingest/pipeline/{name}")


async def ingested(es: SearchClient, name: str) -> int:
    """Documents the server has put through the pipeline, over every node."""
    stats = await es.request("GET", "/_nodes/stats/ingest")
    return sum(node["ingest"]["pipelines"].get(name, {}).get("count", 0)
               for node in stats["nodes"].values())


def expected(db: Any, table: str) -> dict[str, dict[str, Any]]:
    return {str(r[0]): {"id": r[0], "name": r[1], "gone_at": None}
            for r in sql(db, f"SELECT id, name FROM `{table}` WHERE gone_at IS NULL")}


async def test_every_document_write_goes_through_the_pipeline_and_no_tombstone_does(
        db: Any, es: SearchClient, pipeline: str,
        make_table: Callable[..., conftest.TestTable],
        make_config: Callable[..., Config]) -> None:
    table = make_table(ITEMS)
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.name}` VALUES (%s, %s, NULL)",
                        [(i, f"item {i}") for i in range(1, 41)])
    source = {"kind": "binlog", "name": unique("it-pipe")}

    absent = make_config(table.entry(pipeline=f"{pipeline}-absent"), source=source,
                         canary={"enabled": False})
    with pytest.raises(ConfigError, match=rf"pipeline: the search server has no ingest "
                                          rf"pipeline '{pipeline}-absent'"):
        async with running(absent):
            pass
    assert any("no ingest pipeline" in p for p in await check_health(absent))

    config = make_config(table.entry(pipeline=pipeline, deleted_when="gone_at IS NOT NULL"),
                         source=source, canary={"enabled": False})
    async with running(config):
        await wait_for_documents(es, table.alias, expected(db, table.name))
        assert await ingested(es, pipeline) == 40  # the first load
        sql(db, f"UPDATE `{table.name}` SET name = CONCAT(name, '!') WHERE id <= 5")
        await wait_for_documents(es, table.alias, expected(db, table.name))
        assert await ingested(es, pipeline) == 45
        # A delete and a soft delete write tombstones: not through the pipeline.
        sql(db, f"DELETE FROM `{table.name}` WHERE id IN (6, 7)")
        sql(db, f"UPDATE `{table.name}` SET gone_at = NOW() WHERE id IN (8, 9, 10)")
        await wait_for_documents(es, table.alias, expected(db, table.name))
        assert await ingested(es, pipeline) == 45
        verdict = (await explain(config, config.tables[0], "3")).verdict
        assert verdict.in_sync, verdict
        assert await ingested(es, pipeline) == 46  # explain asked the server (_simulate)

        await es.request("DELETE", f"/{table.alias}-sync/_doc/20?refresh=true")
        repaired = await reconcile(config, config.tables[0], repair=True)
        assert repaired.repaired is not None and repaired.repaired["rewritten"] == 1, repaired
        assert await ingested(es, pipeline) == 47
        await wait_for_documents(es, table.alias, expected(db, table.name))

    result = await reindex(config, config.tables[0])
    assert result.written == 35
    assert await ingested(es, pipeline) == 47 + 35
    assert await documents(es, table.alias) == expected(db, table.name)


async def test_joined_documents_go_through_their_tables_pipeline(
        db: Any, es: SearchClient, tmp_path: Path, pipeline: str,
        make_config: Callable[..., Config]) -> None:
    async with made_shop(db, es, tmp_path) as shop:
        config = make_config(shop.entry(pipeline=pipeline),
                             source={"kind": "binlog", "name": unique("it-pipe")},
                             canary={"enabled": False})
        async with running(config):
            await wait_for_documents(es, shop.alias, shop.expected(db), timeout=90)
            loaded = await ingested(es, pipeline)
            assert loaded >= len(shop.expected(db))
            sql(db, f"UPDATE {shop.t('variants')} SET grams = 7 WHERE product_id = 2")
            await wait_for_documents(es, shop.alias, shop.expected(db), timeout=60)
            assert await ingested(es, pipeline) > loaded  # the rebuilt document
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.clean, report.as_json()


async def test_a_processor_that_fails_dead_letters_the_row_with_the_servers_reason(
        db: Any, es: SearchClient, pipeline: str,
        make_table: Callable[..., conftest.TestTable],
        make_config: Callable[..., Config]) -> None:
    table = make_table(ITEMS)
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'one', NULL)")
    name = unique("it-pipe")
    config = make_config(table.entry(pipeline=pipeline), canary={"enabled": False},
                         source={"kind": "binlog", "name": name}, batch={"max_backoff_s": 0.2})

    async def letters() -> list[dict[str, Any]]:
        with contextlib.suppress(Exception):
            await es.refresh(DEAD_LETTER_INDEX)
            found = await es.search(DEAD_LETTER_INDEX, {
                "size": 10, "query": {"term": {"source": name}}, "sort": ["position"]})
            return [hit["_source"] for hit in found["hits"]["hits"]]
        return []

    async with running(config):
        await wait_for_documents(es, table.alias, expected(db, table.name))
        await put_pipeline(es, pipeline, failing=True)
        sql(db, f"INSERT INTO `{table.name}` VALUES (2, 'two', NULL)")
        await wait_until(lambda: _letters_are(letters, 1), 60, "row 2's dead letter")
        (letter,) = await letters()
        assert letter["kind"] == "illegal_state_exception", letter
        assert "set_security_user" in letter["reason"], letter
        assert letter["change"]["after"]["name"] == "two"
        sql(db, f"INSERT INTO `{table.name}` VALUES (3, 'three', NULL)")  # the stream goes on
        await wait_until(lambda: _letters_are(letters, 2), 60, "row 3's dead letter")

        await put_pipeline(es, pipeline)  # the fix; then the letters are replayed through it
        report = await replay(config, [], [], None, dry_run=False)
        assert isinstance(report, LetterReplay) and report.replayed == 2, report
        await wait_for_documents(es, table.alias, expected(db, table.name))


async def _letters_are(letters: Callable[[], Any], n: int) -> bool:
    return len(await letters()) == n
