"""Joined documents through real Debezium: a shop (products with their category and brand,
variants with their stock by warehouse under a composite key, tags through a link table) with
foreign keys that cascade. Every change kind rebuilds exactly the documents it touched, and
each test ends with MySQL's join, computed here with plain SQL, equal to the index field by
field."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from indexer.config import build_config
from indexer.errors import ConfigError
from indexer.jobs.explain import explain
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.run import rebuilds
from indexer.search.client import SearchClient
from indexer.settings import Config
from indexer.source.mysql.trees import TreeRows, load_tree
from tests.integration.conftest import (
    DATABASE,
    PROFILE,
    REPO,
    committed_offsets,
    documents,
    end_offsets,
    live_index,
    mysql_connect,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_canary import FAST

TABLES = ("categories", "brands", "products", "variants", "stock", "tags", "product_tags")
MAPPING = {
    "settings": {"index": {"number_of_replicas": 0}},
    "mappings": {"dynamic": False, "properties": {
        "name": {"type": "text"}, "price": {"type": "keyword"},
        "category": {"type": "object", "properties": {"name": {"type": "keyword"}}},
        "brand": {"type": "keyword"}, "tags": {"type": "keyword"},
        "variants": {"type": "nested", "properties": {
            "sku": {"type": "keyword"}, "grams": {"type": "integer"},
            "stock": {"type": "nested", "properties": {"warehouse": {"type": "keyword"},
                                                       "qty": {"type": "integer"}}}}}}},
}


@dataclass
class Shop:
    """The shop's tables (each test has its own), its document's configuration, and MySQL's
    join computed with plain SQL: what the index must hold."""

    suffix: str
    alias: str

    def t(self, name: str) -> str:
        return f"{name}_{self.suffix}"

    def entry(self, **overrides: Any) -> dict[str, Any]:
        t = self.t
        return {
            "name": f"{DATABASE}.{t('products')}", "alias": self.alias,
            "mapping": f"{self.alias}.json",
            "lookups": {
                "category": {"table": t("categories"), "on": {"category_id": "id"},
                             "include": ["name", "slug"]},
                "brand": {"table": t("brands"), "on": {"brand_id": "id"}, "value": "name"},
            },
            "children": {
                "variants": {"table": t("variants"), "on": {"id": "product_id"},
                             "order_by": ["position"], "exclude": ["product_id"],
                             "children": {"stock": {
                                 "table": t("stock"),
                                 "on": {"product_id": "product_id", "sku": "sku"},
                                 "include": ["warehouse", "qty"], "order_by": ["warehouse"]}}},
                "tags": {"table": t("product_tags"), "on": {"id": "product_id"},
                         "include": [], "value": "tag.name",
                         "lookups": {"tag": {"table": t("tags"), "on": {"tag_id": "id"}}}},
            },
            **overrides,
        }

    def topics(self) -> list[str]:
        return [f"mysql.{DATABASE}.{self.t(name)}" for name in TABLES]

    def expected(self, db: Any) -> dict[str, dict[str, Any]]:
        t = self.t
        categories = {r[0]: {"name": r[1], "slug": r[2]}
                      for r in sql(db, f"SELECT id, name, slug FROM {t('categories')}")}
        brands = dict(sql(db, f"SELECT id, name FROM {t('brands')}"))
        tags = dict(sql(db, f"SELECT id, name FROM {t('tags')}"))
        stock: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for product, sku, warehouse, qty in sql(
                db, f"SELECT product_id, sku, warehouse, qty FROM {t('stock')} "
                    "ORDER BY warehouse, product_id, sku"):
            stock.setdefault((product, sku), []).append({"warehouse": warehouse, "qty": qty})
        variants: dict[int, list[dict[str, Any]]] = {}
        for vid, product, sku, grams, position in sql(
                db, f"SELECT id, product_id, sku, grams, position FROM {t('variants')} "
                    "ORDER BY position, id"):
            variants.setdefault(product, []).append({
                "id": vid, "sku": sku, "grams": grams, "position": position,
                "stock": stock.get((product, sku), [])})
        links: dict[int, list[str | None]] = {}
        for product, tag in sql(db, f"SELECT product_id, tag_id FROM {t('product_tags')} "
                                    "ORDER BY product_id, tag_id"):
            links.setdefault(product, []).append(tags.get(tag))
        found = {}
        for pid, name, price, category, brand in sql(
                db, f"SELECT id, name, price, category_id, brand_id FROM {t('products')}"):
            found[str(pid)] = {
                "id": pid, "name": name, "price": None if price is None else f"{price:.2f}",
                "category_id": category, "brand_id": brand,
                "category": categories.get(category), "brand": brands.get(brand),
                "variants": variants.get(pid, []), "tags": links.get(pid, [])}
        return found


def create_shop(db: Any, tmp_path: Path, products: int = 6) -> Shop:
    shop = Shop(unique("s")[2:], unique("shop").replace("_", "-"))
    t = shop.t
    for statement in (
        f"CREATE TABLE {t('categories')} (id INT PRIMARY KEY, name VARCHAR(40), "
        "slug VARCHAR(40))",
        f"CREATE TABLE {t('brands')} (id INT PRIMARY KEY, name VARCHAR(40))",
        f"CREATE TABLE {t('products')} (id INT PRIMARY KEY, name VARCHAR(80), "
        "price DECIMAL(10,2), category_id INT NULL, brand_id INT NULL, "
        f"KEY by_category (category_id), KEY by_brand (brand_id), "
        f"FOREIGN KEY (category_id) REFERENCES {t('categories')}(id) "
        "ON DELETE SET NULL ON UPDATE CASCADE, "
        f"FOREIGN KEY (brand_id) REFERENCES {t('brands')}(id))",
        f"CREATE TABLE {t('variants')} (id INT PRIMARY KEY, product_id INT NOT NULL, "
        "sku VARCHAR(20) NOT NULL, grams INT, position INT, UNIQUE KEY by_sku (product_id, sku), "
        f"FOREIGN KEY (product_id) REFERENCES {t('products')}(id) "
        "ON DELETE CASCADE ON UPDATE CASCADE)",
        f"CREATE TABLE {t('stock')} (product_id INT, sku VARCHAR(20), warehouse VARCHAR(10), "
        "qty INT, PRIMARY KEY (product_id, sku, warehouse), "
        f"FOREIGN KEY (product_id, sku) REFERENCES {t('variants')}(product_id, sku) "
        "ON DELETE CASCADE ON UPDATE CASCADE)",
        f"CREATE TABLE {t('tags')} (id INT PRIMARY KEY, name VARCHAR(40))",
        f"CREATE TABLE {t('product_tags')} (product_id INT, tag_id INT, "
        "PRIMARY KEY (product_id, tag_id), KEY by_tag (tag_id), "
        f"FOREIGN KEY (product_id) REFERENCES {t('products')}(id) "
        "ON DELETE CASCADE ON UPDATE CASCADE, "
        f"FOREIGN KEY (tag_id) REFERENCES {t('tags')}(id) ON DELETE CASCADE)",
    ):
        sql(db, statement)
    sql(db, f"INSERT INTO {t('categories')} VALUES (1, 'Tea', 'tea'), (2, 'Coffee', 'coffee'), "
            "(3, 'Cocoa', 'cocoa')")
    sql(db, f"INSERT INTO {t('brands')} VALUES (1, 'Leafy'), (2, 'Beanz')")
    sql(db, f"INSERT INTO {t('tags')} VALUES (1, 'green'), (2, 'organic'), (3, 'strong')")
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO {t('products')} VALUES (%s, %s, %s, %s, %s)",
                        [(i, f"product {i}", Decimal(i) + Decimal("0.90"), 1 + i % 3,
                          1 + i % 2) for i in range(1, products + 1)])
        cur.executemany(f"INSERT INTO {t('variants')} VALUES (%s, %s, %s, %s, %s)",
                        [(i * 10 + v, i, f"sku-{v}", 100 * (v + 1), 3 - v)
                         for i in range(1, products + 1) for v in range(2)])
        cur.executemany(f"INSERT INTO {t('stock')} VALUES (%s, %s, %s, %s)",
                        [(i, f"sku-{v}", w, i + v) for i in range(1, products + 1)
                         for v in range(2) for w in ("berlin", "paris")])
        cur.executemany(f"INSERT INTO {t('product_tags')} VALUES (%s, %s)",
                        [(i, tag) for i in range(1, products + 1) for tag in (1, 2)
                         if (i + tag) % 3])
    (tmp_path / f"{shop.alias}.json").write_bytes(orjson.dumps(MAPPING))
    return shop


def drop_shop(db: Any, shop: Shop) -> None:
    sql(db, "SET FOREIGN_KEY_CHECKS = 0")
    for name in TABLES:
        with contextlib.suppress(pymysql.err.MySQLError):
            sql(db, f"DROP TABLE IF EXISTS {shop.t(name)}")
    sql(db, "SET FOREIGN_KEY_CHECKS = 1")


@contextlib.asynccontextmanager
async def made_shop(db: Any, es: SearchClient, tmp_path: Path,
                    **options: Any) -> AsyncIterator[Shop]:
    """The shop's tables for one test (``create_shop``'s options), dropped with its indices
    after it."""
    made = create_shop(db, tmp_path, **options)
    try:
        yield made
    finally:
        drop_shop(db, made)
        with contextlib.suppress(Exception):
            await es.delete_matching(f"{made.alias}-v*")


@pytest.fixture
async def shop(db: Any, es: SearchClient, tmp_path: Path) -> AsyncIterator[Shop]:
    async with made_shop(db, es, tmp_path) as made:
        for topic in made.topics():
            await wait_for_topic(topic)
        yield made


@contextlib.asynccontextmanager
async def streaming(db: Any, es: SearchClient, shop: Shop,
                    config: Config) -> AsyncIterator[Any]:
    async with running(config) as daemon:
        await wait_for_documents(es, shop.alias, shop.expected(db), timeout=90)
        yield daemon


async def settled(db: Any, es: SearchClient, shop: Shop, timeout: float = 60) -> None:
    await wait_for_documents(es, shop.alias, shop.expected(db), timeout=timeout)


def every_change_kind(t: Callable[[str], str]) -> list[str]:
    """Statements changing every part of the shop's documents (``t``: :meth:`Shop.t`)."""
    return [
        # the root: insert, update, and a lookup many documents share, renamed
        f"INSERT INTO {t('products')} VALUES (7, 'new', 1.00, 2, 1)",
        f"UPDATE {t('products')} SET name = 'renamed', price = 9.99 WHERE id = 1",
        f"UPDATE {t('categories')} SET name = 'Black tea' WHERE id = 1",
        # children: insert, update, moved to another parent, deleted
        f"INSERT INTO {t('variants')} VALUES (71, 7, 'sku-9', 50, 1)",
        f"UPDATE {t('variants')} SET grams = 999, position = 9 WHERE id = 10",
        f"UPDATE {t('variants')} SET product_id = 7 WHERE id = 11",  # moves its stock too
        f"DELETE FROM {t('variants')} WHERE id = 20",  # cascades its stock away
        # the third level, under a composite key
        f"INSERT INTO {t('stock')} VALUES (7, 'sku-9', 'rome', 5)",
        f"UPDATE {t('stock')} SET qty = 100 WHERE product_id = 3 AND sku = 'sku-0'",
        # many-to-many: a link added and removed, a tag renamed
        f"INSERT INTO {t('product_tags')} VALUES (7, 3)",
        f"DELETE FROM {t('product_tags')} WHERE product_id = 1",
        f"UPDATE {t('tags')} SET name = 'bio' WHERE id = 2",
        # cascades the binlog does not carry: a tag deleted takes its links with it; a
        # category deleted leaves its products' category_id NULL; a category's key
        # changed carries over to its products
        f"DELETE FROM {t('tags')} WHERE id = 1",
        f"DELETE FROM {t('categories')} WHERE id = 3",
        f"UPDATE {t('categories')} SET id = 20 WHERE id = 2",
        # a root's primary key changed (its children follow by ON UPDATE CASCADE)
        f"UPDATE {t('products')} SET id = 60 WHERE id = 6",
        # a root deleted: its children go with it
        f"DELETE FROM {t('products')} WHERE id = 4",
    ]


@pytest.mark.servers  # nested documents, refs and versions on every server
async def test_every_change_kind_rebuilds_exactly_the_touched_documents(
        db: Any, es: SearchClient, shop: Shop, make_config: Any) -> None:
    t = shop.t
    config = make_config(shop.entry())
    async with streaming(db, es, shop, config):
        changes = every_change_kind(t)
        for change in changes:
            sql(db, change)
            await settled(db, es, shop)
        # A lookup row that does not exist yet (a dangling key) is null until it does.
        sql(db, "SET FOREIGN_KEY_CHECKS = 0")
        sql(db, f"INSERT INTO {t('products')} VALUES (8, 'early', 2.00, 1, 9)")
        # A child consumed before its parent exists.
        sql(db, f"INSERT INTO {t('variants')} VALUES (90, 9, 'sku-0', 10, 1)")
        sql(db, "SET FOREIGN_KEY_CHECKS = 1")
        await settled(db, es, shop)
        assert (await documents(es, shop.alias))["8"]["brand"] is None
        sql(db, f"INSERT INTO {t('brands')} VALUES (9, 'Late')")
        sql(db, f"INSERT INTO {t('products')} VALUES (9, 'parent later', 3.00, 1, 2)")
        await settled(db, es, shop)
        found = await documents(es, shop.alias)
        assert found["8"]["brand"] == "Late" and found["9"]["variants"][0]["id"] == 90
        assert "4" not in found and "6" not in found and found["60"]["variants"]
        # Nested queries see one child at a time.
        hits = await es.search(shop.alias, {"query": {"nested": {"path": "variants", "query": {
            "bool": {"filter": [{"term": {"variants.sku": "sku-0"}},
                                {"term": {"variants.grams": 999}}]}}}}})
        assert [h["_id"] for h in hits["hits"]["hits"]] == ["1"]
    report = await reconcile(config, config.tables[0], settle_s=0)
    assert report.clean, report.as_json()


async def test_a_fan_out_killed_mid_way_loses_nothing(
        db: Any, es: SearchClient, tmp_path: Path, make_config: Any, spawn: Any) -> None:
    products = rebuilds.FANOUT_ROOTS * 6
    async with made_shop(db, es, tmp_path, products=products) as shop:
        for topic in shop.topics():
            await wait_for_topic(topic)
        config_file = tmp_path / "indexer.toml"
        # Bulks of 100 documents: the fan-out of 2,000 takes twenty, killed among them.
        config = make_config(shop.entry(), file=config_file, batch={"max_events": 100})
        first = spawn(config_file)
        await settled(db, es, shop, timeout=180)

        async def all_committed() -> bool:
            # The snapshot's own fan-outs (each category and brand touches thousands of
            # documents) go on after the documents are right: the rename waits for them.
            for topic in shop.topics():
                committed = await committed_offsets(config.kafka.group_id, topic)
                if sum(committed.values()) < sum((await end_offsets(topic)).values()):
                    return False
            return True

        await wait_until(all_committed, 120, "the snapshot's fan-outs to end")
        # One category renamed touches a third of the documents: a fan-out.
        sql(db, f"UPDATE {shop.t('categories')} SET name = 'Fanned' WHERE id = 1")
        touched = sum(1 for i in range(1, products + 1) if 1 + i % 3 == 1)

        async def some_renamed() -> bool:
            # Refreshed on every look: a refresh interval's wait can outlast the fan-out.
            with contextlib.suppress(Exception):
                await es.refresh(f"{shop.alias}-sync")
                hits = await es.count(shop.alias, {"term": {"category.name": "Fanned"}})
                return hits >= 100
            return False

        await wait_until(some_renamed, 60, "the fan-out to begin", interval=0.05)
        first.proc.send_signal(signal.SIGKILL)
        assert first.proc.wait(10) == -signal.SIGKILL
        await es.refresh(f"{shop.alias}-sync")
        renamed = await es.count(shop.alias, {"term": {"category.name": "Fanned"}})
        topic = f"mysql.{DATABASE}.{shop.t('categories')}"
        committed = sum((await committed_offsets(config.kafka.group_id, topic)).values())
        assert committed < sum((await end_offsets(topic)).values()), \
            "the category's change was committed before its fan-out ended"
        second = spawn(config_file)
        await settled(db, es, shop, timeout=180)
        assert second.proc.poll() is None, second.tail()
        assert renamed < touched, "killed after the fan-out ended: nothing was tested"
        assert "a fan-out; only its partition's commits wait" in second.tail()
        # Three chunks of documents: their sums are read by two worker processes.
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.clean and report.rows == products and report.chunks > 1


class Writer:
    """Changes rows of every table of the shop from a thread until stopped."""

    def __init__(self, shop: Shop) -> None:
        self.shop = shop
        self.done = threading.Event()
        self.changes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t, rnd = self.shop.t, random.Random(7)
        db = mysql_connect()
        try:
            while not self.done.is_set():
                product = rnd.randint(1, 30)
                statement = rnd.choice([
                    f"UPDATE {t('variants')} SET grams = grams + 1 WHERE product_id = %s",
                    f"UPDATE {t('stock')} SET qty = qty + 1 WHERE product_id = %s",
                    f"UPDATE {t('products')} SET price = price + 1 WHERE id = %s",
                    f"UPDATE {t('variants')} SET position = position + 1 WHERE product_id = %s",
                ])
                with contextlib.suppress(pymysql.err.MySQLError):
                    sql(db, statement, product)
                    self.changes += 1
                if self.changes % 20 == 0:
                    sql(db, f"UPDATE {t('categories')} SET slug = %s WHERE id = 2",
                        f"s{self.changes}")
                time.sleep(0.01)
        finally:
            db.close()


async def test_a_reindex_during_writes_to_every_table_builds_the_streamed_documents(
        db: Any, es: SearchClient, tmp_path: Path, make_config: Any) -> None:
    async with made_shop(db, es, tmp_path, products=30) as shop:
        for topic in shop.topics():
            await wait_for_topic(topic)
        config = make_config(shop.entry())
        async with streaming(db, es, shop, config):
            before = await _sources(es, shop.alias)
            quiet = await reindex(config, config.tables[0])
            assert quiet.written == 30 or quiet.stale + quiet.written == 30
            # The same builder, from a snapshot: the very same documents, hash and refs too.
            assert await _sources(es, shop.alias) == before
            writer = Writer(shop)
            writer.thread.start()
            try:
                await asyncio.sleep(1)
                result = await reindex(config, config.tables[0], parallel=2)
            finally:
                writer.done.set()
                writer.thread.join()
            assert writer.changes > 20
            assert await live_index(es, shop.alias) == result.index
            await settled(db, es, shop, timeout=90)
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.clean, report.as_json()


async def _sources(es: SearchClient, alias: str) -> dict[str, Any]:
    await es.refresh(f"{alias}-sync")
    return {hit["_id"]: hit["_source"] async for hit in es.scan(alias, {"query": {
        "match_all": {}}})}


async def test_a_replay_of_every_topic_leaves_the_same_documents(
        db: Any, es: SearchClient, shop: Shop, make_config: Any) -> None:
    config = make_config(shop.entry())
    async with streaming(db, es, shop, config):
        sql(db, f"UPDATE {shop.t('tags')} SET name = 'eco' WHERE id = 2")
        sql(db, f"DELETE FROM {shop.t('variants')} WHERE id = 30")
        await settled(db, es, shop)
    before = await _versions(es, shop.alias)
    replay = make_config(shop.entry())  # a new group: every topic from its first event
    async with running(replay):
        ends = {topic: sum((await end_offsets(topic)).values()) for topic in shop.topics()}

        async def replayed() -> bool:
            for topic, end in ends.items():
                done = await committed_offsets(replay.kafka.group_id, topic)
                if sum(done.values()) < end:
                    return False
            return True

        await wait_until(replayed, 120, "the replay")
    assert await _versions(es, shop.alias) == before
    await settled(db, es, shop)


async def _versions(es: SearchClient, alias: str) -> dict[str, tuple[int, Any]]:
    await es.refresh(f"{alias}-sync")
    index = await live_index(es, alias)
    response = await es.search(index, {"size": 1000, "version": True,
                                       "query": {"match_all": {}}})
    return {h["_id"]: (h["_version"], h["_source"]) for h in response["hits"]["hits"]}


@pytest.mark.servers  # nested documents, refs and versions on every server
async def test_reconcile_finds_a_child_changed_behind_the_daemons_back_and_repairs_it(
        db: Any, es: SearchClient, shop: Shop, make_config: Any) -> None:
    config = make_config(shop.entry(), verify={"enabled": False})
    table = config.tables[0]
    async with streaming(db, es, shop, config):
        pass
    # Changes the binlog never sees: the index cannot know, reconcile must.
    sql(db, "SET SESSION sql_log_bin = 0")
    sql(db, f"UPDATE {shop.t('stock')} SET qty = 77 WHERE product_id = 2 AND sku = 'sku-1' "
            "AND warehouse = 'paris'")
    sql(db, f"UPDATE {shop.t('categories')} SET slug = 'hidden' WHERE id = 2")
    sql(db, f"DELETE FROM {shop.t('product_tags')} WHERE product_id = 5")
    sql(db, "SET SESSION sql_log_bin = 1")
    report = await reconcile(config, table, settle_s=0)
    assert not report.clean
    stale = set(report.stale)
    touched = {pid for pid, row in shop.expected(db).items() if row["category_id"] == 2}
    assert stale == touched | {"2", "5"}
    # What differs is named by its place in the document: the variant sku-1 comes first
    # (position 2 before 3), its stock in paris second (by warehouse).
    assert report.stale_fields["2"] == ["variants[0].stock[1].qty"]
    assert report.stale_fields["1"] == ["category.slug"]
    assert report.stale_fields["5"] == ["tags"]
    why = await explain(config, table, "2")
    assert not why.verdict.in_sync
    assert why.verdict.differing_fields == ["variants[0].stock[1].qty"]
    assert ("variants.stock", f"{DATABASE}.{shop.t('stock')}", "2|sku-1|paris") in [
        tuple(r) for r in why.made_of]
    repaired = await reconcile(config, table, repair=True, settle_s=0)
    assert repaired.repaired is not None and repaired.clean
    await settled(db, es, shop)


async def test_joins_that_cannot_work_stop_the_start_with_the_reason(
        db: Any, es: SearchClient, shop: Shop, make_config: Any) -> None:
    t = shop.t
    refused = [
        (shop.entry(lookups={"category": {"table": t("categories"),
                                          "on": {"category_id": "slug"}}}),
         r"lookups.category.on: categories_\w+\(slug\) is neither its primary key nor a "
         "unique key"),
        (shop.entry(children={"tags": {"table": t("product_tags"), "on": {"name": "tag_id"}}}),
         r"no index on products_\w+\(name\), so finding the documents a change touches "
         "would scan"),
        (shop.entry(children={"variants": {"table": t("variants"), "on": {"id": "variant"}}}),
         r"children.variants.on: variants_\w+ has no column 'variant'"),
    ]
    for entry, reason in refused:
        with pytest.raises(ConfigError, match=reason):
            async with running(make_config(entry)):
                pass
    # None of them made an index.
    assert not await es.indices(f"{shop.alias}-v*")
    with pytest.raises(ConfigError, match="joined documents need binlog versions"):
        build_config({**PROFILE, "tables": [shop.entry(version="column:price")]}, REPO)


async def test_every_way_of_reading_children_reads_the_same_documents(
        db: Any, shop: Shop, make_config: Any) -> None:
    """MariaDB caps a parent's children inside GROUP_CONCAT, MySQL 8 ranks them with window
    functions first (MariaDB runs both), and a group too big for one value is read row by
    row: the same documents, cut at the same cap."""
    capped = shop.entry()
    capped["children"]["variants"]["max"] = 1
    keys = [{"id": i} for i in range(1, 7)]
    conn = mysql_connect()
    try:
        found = {}
        for name, entry in (("all", shop.entry()), ("capped", capped)):
            tree = load_tree(make_config(entry).mysql, make_config(entry).tables[0])
            found[name, "limit"] = TreeRows(tree, "limit").by_keys(conn, keys)
            found[name, "window"] = TreeRows(tree, "window").by_keys(conn, keys)
            sql(conn, "SET SESSION group_concat_max_len = 64")  # every group is cut
            found[name, "rows"] = TreeRows(tree, "limit").by_keys(conn, keys)
            sql(conn, "SET SESSION group_concat_max_len = 1073741824")
    finally:
        conn.close()
    for name in ("all", "capped"):
        limit, window, rows = (found[name, way] for way in ("limit", "window", "rows"))
        assert [(a.document, a.truncated) for a in window] == [
            (a.document, a.truncated) for a in limit] == [(a.document, a.truncated) for a in rows]
    assert all(a.document and len(a.document["variants"]) == 2 for a in found["all", "limit"])
    cut = found["capped", "limit"]
    assert all(a.document and len(a.document["variants"]) == 1 for a in cut)
    assert all(a.truncated == ["variants"] for a in cut)


async def test_continuous_verification_repairs_a_joined_document_by_itself(
        db: Any, es: SearchClient, shop: Shop, make_config: Any) -> None:
    config = make_config(shop.entry(), verify={"period_s": 4, "settle_s": 1, "repair": True},
                         canary=FAST)
    async with streaming(db, es, shop, config) as daemon:
        sql(db, "SET SESSION sql_log_bin = 0")  # behind the pipeline's back
        sql(db, f"UPDATE {shop.t('variants')} SET grams = 1 WHERE id = 31")
        sql(db, f"DELETE FROM {shop.t('product_tags')} WHERE product_id = 6")
        sql(db, "SET SESSION sql_log_bin = 1")
        await settled(db, es, shop, timeout=120)  # found, looked at twice, repaired
        repaired = daemon.metrics.registry.get_sample_value(
            "indexer_verify_repaired_total", {"table": config.tables[0].name})
        assert repaired == 2


async def test_a_joined_table_indexed_on_its_own_too(
        db: Any, es: SearchClient, shop: Shop, make_config: Any, tmp_path: Path) -> None:
    alias = f"{shop.alias}-categories"
    (tmp_path / f"{alias}.json").write_bytes(b"{}")
    categories = {"name": f"{DATABASE}.{shop.t('categories')}", "alias": alias,
                  "mapping": f"{alias}.json"}
    config = make_config(shop.entry(), categories)
    try:
        async with streaming(db, es, shop, config):
            sql(db, f"UPDATE {shop.t('categories')} SET name = 'Green' WHERE id = 1")
            sql(db, f"INSERT INTO {shop.t('categories')} VALUES (4, 'New', 'new')")
            await settled(db, es, shop)
            rows = {str(i): {"id": i, "name": n, "slug": s} for i, n, s in
                    sql(db, f"SELECT id, name, slug FROM {shop.t('categories')}")}
            await wait_for_documents(es, alias, rows)
        for table in config.tables:  # both clean, each versioned in its own record of epochs
            assert (await reconcile(config, table, settle_s=0)).clean
    finally:
        with contextlib.suppress(Exception):
            await es.delete_matching(f"{alias}-v*")


async def test_columns_of_a_joined_table_added_and_dropped_while_streaming(
        db: Any, es: SearchClient, shop: Shop, make_config: Any) -> None:
    config = make_config(shop.entry())
    t = shop.t
    async with streaming(db, es, shop, config):
        # Added: the variants' next event has the new layout, and the tree reads it.
        sql(db, f"ALTER TABLE {t('variants')} ADD COLUMN colour VARCHAR(10) NULL")
        sql(db, f"UPDATE {t('variants')} SET colour = 'blue' WHERE id = 10")

        async def coloured() -> bool:
            found = await documents(es, shop.alias)
            return [v.get("colour", "-") for v in found["1"]["variants"]] == [None, "blue"]

        await wait_until(coloured, 60, "the new column in document 1")
        # Dropped: a rebuild reads the old layout first, fails on the gone column, reads the
        # layouts again and goes on.
        sql(db, f"ALTER TABLE {t('variants')} DROP COLUMN grams")
        sql(db, f"UPDATE {t('products')} SET name = 'after the drop' WHERE id = 2")

        async def dropped() -> bool:
            found = (await documents(es, shop.alias))["2"]
            return found["name"] == "after the drop" and all(
                "grams" not in v for v in found["variants"])

        await wait_until(dropped, 60, "document 2 without the dropped column")
    # The documents not rebuilt since the drop still hold the old column: a repair rewrites
    # them (as for a table's own columns: README, "When the table changes").
    found = await reconcile(config, config.tables[0], settle_s=0)
    assert set(found.stale) == {"1", "3", "4", "5", "6"}
    assert (await reconcile(config, config.tables[0], repair=True, settle_s=0)).clean


async def test_a_document_of_a_composite_key_streams_reindexes_and_reconciles(
        db: Any, es: SearchClient, shop: Shop, make_config: Any, tmp_path: Path) -> None:
    """A link row as the document (key product_id|tag_id): keyset pages over two columns, ids
    read back into keys, chunks by crc32(id)."""
    t = shop.t
    alias = f"{shop.alias}-links"
    (tmp_path / f"{alias}.json").write_bytes(b"{}")
    entry = {"name": f"{DATABASE}.{t('product_tags')}", "alias": alias,
             "mapping": f"{alias}.json",
             "lookups": {"tag": {"table": t("tags"), "on": {"tag_id": "id"}, "value": "name"},
                         "product": {"table": t("products"), "on": {"product_id": "id"},
                                     "include": ["name"]}}}
    config = make_config(entry)

    def links() -> dict[str, dict[str, Any]]:
        tags = dict(sql(db, f"SELECT id, name FROM {t('tags')}"))
        names = dict(sql(db, f"SELECT id, name FROM {t('products')}"))
        return {f"{p}|{g}": {"product_id": p, "tag_id": g, "tag": tags.get(g),
                             "product": {"name": names[p]} if p in names else None}
                for p, g in sql(db, f"SELECT product_id, tag_id FROM {t('product_tags')}")}

    try:
        async with running(config):
            await wait_for_documents(es, alias, links(), timeout=90)
            sql(db, f"UPDATE {t('tags')} SET name = 'bio' WHERE id = 2")
            sql(db, f"UPDATE {t('products')} SET name = 'renamed' WHERE id = 1")
            sql(db, f"INSERT INTO {t('product_tags')} VALUES (3, 3)")
            await wait_for_documents(es, alias, links())
            before = await _sources(es, alias)
            result = await reindex(config, config.tables[0])
            assert result.rows == len(links()) and await _sources(es, alias) == before
        sql(db, "SET SESSION sql_log_bin = 0")
        sql(db, f"UPDATE {t('tags')} SET name = 'hidden' WHERE id = 3")
        sql(db, "SET SESSION sql_log_bin = 1")
        report = await reconcile(config, config.tables[0], settle_s=0)
        assert report.chunking.endswith("buckets of crc32(id)")
        assert set(report.stale) == {k for k, v in links().items() if v["tag_id"] == 3}
        assert (await reconcile(config, config.tables[0], repair=True, settle_s=0)).clean
        await wait_for_documents(es, alias, links())
    finally:
        with contextlib.suppress(Exception):
            await es.delete_matching(f"{alias}-v*")
