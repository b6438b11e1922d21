"""Routed tables on the real MariaDB and search server: every document lives under its row's
routing value (its id's when NULL), a row whose value changes leaves its old shard, deletes
reach the shard the document is on, and reconcile finds and repairs what drift leaves under
another routing. On several shards and on one (where an old routing leads to the same shard,
the tombstone it leaves must lose to the document just written)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.errors import ConfigError
from indexer.jobs.explain import explain
from indexer.jobs.health import check_health
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient, SearchError
from indexer.settings import Config
from tests.integration import conftest
from tests.integration.conftest import live_index, running, sql, unique, wait_until
from tests.integration.test_joins import MAPPING, made_shop

COLUMNS = "id INT PRIMARY KEY, tenant VARCHAR(20) NULL, name VARCHAR(40)"


def mapping(shards: int) -> dict[str, Any]:
    return {"settings": {"index": {"number_of_replicas": 0, "number_of_shards": shards}}}


async def placed(es: SearchClient, alias: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """id -> (routing, source) of every live document of the live index: more than one
    entry is a copy under another routing."""
    await es.refresh(f"{alias}-sync")
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    query = {"bool": {"must_not": [{"term": {"_indexer.deleted": True}}]}}
    async for hit in es.scan(await live_index(es, alias), {"query": query}):
        source = {k: v for k, v in hit["_source"].items() if k != "_indexer"}
        found.setdefault(hit["_id"], []).append((str(hit.get("_routing")), source))
    return found


def routed_rows(db: Any, table: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """What the index must hold: each row once, under its tenant (its id when NULL); none
    for a row soft-deleted (name 'gone')."""
    return {str(i): [(tenant if tenant else str(i), {"id": i, "tenant": tenant, "name": name})]
            for i, tenant, name in sql(db, f"SELECT id, tenant, name FROM `{table}` "
                                           "WHERE name <> 'gone'")}


async def wait_placed(es: SearchClient, alias: str, want: dict[str, Any],
                      timeout: float = 60) -> None:
    last: dict[str, Any] = {}

    async def matches() -> bool:
        nonlocal last
        last = await placed(es, alias)
        return last == want

    try:
        await wait_until(matches, timeout, f"routed documents of {alias}", interval=0.3)
    except AssertionError:
        differ = [(k, last.get(k), want.get(k)) for k in sorted({*want, *last})
                  if last.get(k) != want.get(k)][:5]
        raise AssertionError(f"{alias}: {differ}") from None


async def put(es: SearchClient, alias: str, doc_id: str, routing: str, version: int,
              source: dict[str, Any]) -> None:
    """A document written behind indexer's back, under ``routing``."""
    await es.request("PUT", f"/{alias}-sync/_doc/{doc_id}?routing={routing}&version="
                     f"{version}&version_type=external&refresh=true", source)


async def put_copy(es: SearchClient, alias: str, doc_id: str, source: dict[str, Any]) -> None:
    """A second document with the id, on another shard than the first (a routing leading to
    the same shard would meet the document itself, newer: refused)."""
    for n in range(20):
        try:
            await put(es, alias, doc_id, f"elsewhere-{n}", 1, source)
            return
        except SearchError as exc:
            if exc.status != 409:
                raise
    raise AssertionError("no routing led to another shard")


@pytest.mark.parametrize(("source", "shards"), [("binlog", 4), ("kafka", 1)])
async def test_documents_live_under_their_rows_routing(
        db: Any, es: SearchClient, make_table: Callable[..., conftest.TestTable],
        make_config: Callable[..., Config], source: str, shards: int) -> None:
    table = make_table(COLUMNS, mapping(shards))
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.name}` VALUES (%s, %s, %s)",
                        [(i, None if i % 10 == 0 else f"t{i % 5}", f"n{i}")
                         for i in range(1, 201)])
    chosen = {"kind": "binlog", "name": unique("it-routing")} if source == "binlog" else {}
    config = make_config(table.entry(routing="tenant", deleted_when="name = 'gone'"),
                         canary={"enabled": False}, source=chosen)
    async with running(config):
        await wait_placed(es, table.alias, routed_rows(db, table.name), timeout=90)
        index = await live_index(es, table.alias)
        found = await es.request("GET", f"/{index}/_mapping")
        assert found[index]["mappings"]["_routing"] == {"required": True}

        sql(db, f"UPDATE `{table.name}` SET tenant = 'moved' WHERE id BETWEEN 1 AND 20")
        sql(db, f"UPDATE `{table.name}` SET tenant = 'back', name = 'x' WHERE id = 30")  # NULL→
        sql(db, f"UPDATE `{table.name}` SET tenant = NULL WHERE id = 41")  # → by its id
        sql(db, f"DELETE FROM `{table.name}` WHERE id BETWEEN 50 AND 55")
        sql(db, f"UPDATE `{table.name}` SET tenant = 'moved' WHERE id = 60")
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 60")  # deleted where it moved to
        sql(db, f"UPDATE `{table.name}` SET tenant = 't1' WHERE id = 2")  # and moved again
        sql(db, f"INSERT INTO `{table.name}` VALUES (500, 'new', 'n500')")
        sql(db, f"UPDATE `{table.name}` SET tenant = 'm2', name = 'gone' WHERE id IN (80, 81)")
        await wait_placed(es, table.alias, routed_rows(db, table.name))  # gone from both
        sql(db, f"UPDATE `{table.name}` SET name = 'back' WHERE id = 80")  # back, where it is
        await wait_placed(es, table.alias, routed_rows(db, table.name))
        routed = await es.request("GET", f"/{table.alias}/_doc/2?routing=t1")
        assert routed["found"] and routed["_source"]["tenant"] == "t1"
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean

        # Drift: a routing change the index never saw, a copy under another routing, an extra.
        sql(db, "SET SESSION sql_log_bin = 0")
        sql(db, f"UPDATE `{table.name}` SET tenant = 'quiet' WHERE id = 70")
        sql(db, "SET SESSION sql_log_bin = 1")
        stale = ["70"]
        if shards > 1:  # (on one shard, a copy under another routing is the same document)
            await put_copy(es, table.alias, "71", {"id": 71, "tenant": "t1", "name": "n71"})
            said = (await explain(config, config.tables[0], "71")).verdict
            assert not said.in_sync and "2 documents have this id" in said.summary, said
            stale.append("71")
        await put(es, table.alias, "9999", "lost", 1, {"id": 9999, "tenant": "lost"})
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert (report.missing, report.extra, sorted(report.stale)) == \
            ([], ["9999"], stale), report.as_json()
        repaired = await reconcile(config, config.tables[0], settle_s=0, repair=True)
        assert repaired.repaired is not None and repaired.repaired["refused"] == 0, repaired
        await wait_placed(es, table.alias, routed_rows(db, table.name))
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean
        assert (await explain(config, config.tables[0], "71")).verdict.in_sync
        if shards > 1:  # one document under a routing its row does not name: explain says
            await es.request("DELETE", f"/{table.alias}-sync/_doc/72?routing=t2&refresh=true")
            await put_copy(es, table.alias, "72", {"id": 72, "tenant": "t2", "name": "n72"})
            said = (await explain(config, config.tables[0], "72")).verdict
            assert not said.in_sync and "the row names 't2'" in said.summary, said
            assert said.fix == f"indexer reindex {table.name}"

        # A reindex places every document by the setting too, and keeps the tombstones'.
        result = await reindex(config, config.tables[0])
        assert result.written == len(routed_rows(db, table.name))
        assert (await explain(config, config.tables[0], "72")).verdict.in_sync
        sql(db, f"UPDATE `{table.name}` SET tenant = 'last' WHERE id = 3")
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 4")
        await wait_placed(es, table.alias, routed_rows(db, table.name))
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean

    # The setting dropped: the index still places documents by it; only a reindex moves them.
    unrouted = make_config(table.entry(), canary={"enabled": False}, source=chosen)
    with pytest.raises(ConfigError, match=r"the table sets no routing but its index \S+ was "
                                          r"made with one; `indexer reindex`"):
        async with running(unrouted):
            pass
    assert any("made with one" in p for p in await check_health(unrouted))


async def test_a_joined_document_follows_its_lookups_value(
        db: Any, es: SearchClient, tmp_path: Path, make_config: Callable[..., Config]) -> None:
    """Routed by its brand (a lookup's value): renaming a brand moves every product of it,
    changing a product's brand moves that one, a deleted product's tombstone reaches it."""
    async with made_shop(db, es, tmp_path) as shop:
        t = shop.t
        (tmp_path / f"{shop.alias}.json").write_bytes(orjson.dumps(
            {**MAPPING, "settings": {"index": {"number_of_replicas": 0,
                                               "number_of_shards": 3}}}))

        def want(db: Any) -> dict[str, list[tuple[str, dict[str, Any]]]]:
            return {i: [(doc["brand"] or i, doc)] for i, doc in shop.expected(db).items()}

        config = make_config(shop.entry(routing="brand"), canary={"enabled": False},
                             source={"kind": "binlog", "name": unique("it-routing")})
        async with running(config):
            await wait_placed(es, shop.alias, want(db), timeout=90)
            sql(db, f"UPDATE {t('brands')} SET name = 'Renamed' WHERE id = 1")
            sql(db, f"UPDATE {t('products')} SET brand_id = 1 WHERE id = 2")
            sql(db, f"UPDATE {t('products')} SET brand_id = NULL WHERE id = 3")
            sql(db, f"DELETE FROM {t('products')} WHERE id = 5")
            await wait_placed(es, shop.alias, want(db), timeout=60)
            assert (await reconcile(config, config.tables[0], settle_s=0)).clean
            await put_copy(es, shop.alias, "4", want(db)["4"][0][1])  # a stray copy
            assert (await reconcile(config, config.tables[0], settle_s=0)).stale == ["4"]
            await reconcile(config, config.tables[0], settle_s=0, repair=True)
            await wait_placed(es, shop.alias, want(db), timeout=60)
