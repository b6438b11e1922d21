"""Tables that change while `indexer run` streams, through real Debezium: each case ends with
`reconcile` clean after the remedy the README gives for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient
from indexer.source.kafka.dead_letters import DeadLetter, ReplayFilter, replay
from tests.integration.conftest import (
    COLUMNS,
    caught_up,
    documents,
    expected_rows,
    insert_rows,
    live_index,
    read_topic,
    running,
    sql,
    wait_for_documents,
    wait_until,
)
from tests.integration.test_cli import indexer

pytestmark = pytest.mark.servers

STRICT = {"mappings": {"dynamic": "strict", "properties": {
    "id": {"type": "integer"}, "name": {"type": "keyword"}, "price": {"type": "keyword"},
    "qty": {"type": "integer"}}}}


def rows_now(db: Any, table: str) -> dict[str, dict[str, Any]]:
    """The documents the table's rows make now, whatever its columns."""
    with db.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}` ORDER BY id")
        names = [d[0] for d in cur.description]
        found = cur.fetchall()
    return {str(row[0]): {n: (f"{v:.2f}" if n == "price" and v is not None else v)
                          for n, v in zip(names, row, strict=True)} for row in found}


async def field_type(es: SearchClient, alias: str, field: str) -> str | None:
    index = await live_index(es, alias)
    mapping = await es.request("GET", f"/{index}/_mapping")
    found = mapping[index]["mappings"]["properties"].get(field)
    return None if found is None else str(found["type"])


async def test_columns_added_renamed_and_dropped_while_streaming(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS, STRICT)
    insert_rows(db, table.name, 1, 20)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config) as daemon:
        def changes() -> float | None:
            return daemon.metrics.registry.get_sample_value(
                "indexer_layout_changes_total", {"table": config.tables[0].name})

        # Added: mapped from the table's type (double: a guessed float refuses 1.8e308)
        # before its first value is written, although the mapping is strict.
        sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN score DOUBLE NULL")
        sql(db, f"UPDATE `{table.name}` SET score = 1.7976931348623157e308 WHERE id = 1")
        sql(db, f"INSERT INTO `{table.name}` VALUES (21, 'n21', 2.50, 1, 0.5)")
        expected = expected_rows(db, table.name)
        expected["1"]["score"], expected["21"]["score"] = 1.7976931348623157e308, 0.5
        await wait_for_documents(es, table.alias, expected)
        assert await field_type(es, table.alias, "score") == "double"
        assert changes() == 1.0
        # Rows not written since keep no score field: NULL and absent are the same content.
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean

        # Widened to a type the mapping still takes: nothing to see, nothing to do.
        sql(db, f"ALTER TABLE `{table.name}` MODIFY price DECIMAL(14,2)")
        sql(db, f"UPDATE `{table.name}` SET price = 123456789012.34 WHERE id = 5")
        expected["5"] |= {"price": "123456789012.34", "score": None}  # written whole
        await wait_for_documents(es, table.alias, expected)
        assert changes() == 1.0

        # Renamed, then dropped: rows written since have the new layout, the others not.
        sql(db, f"ALTER TABLE `{table.name}` CHANGE name title VARCHAR(40)")
        sql(db, f"UPDATE `{table.name}` SET qty = qty + 1 WHERE id = 2")
        sql(db, f"ALTER TABLE `{table.name}` DROP COLUMN qty")
        sql(db, f"UPDATE `{table.name}` SET title = 'renamed' WHERE id = 3")

        async def rewritten() -> bool:
            docs = await documents(es, table.alias)
            return "title" in docs["2"] and docs["3"].get("title") == "renamed"
        await wait_until(rewritten, 60, "rows written after the changes")
        assert changes() == 3.0
        assert await field_type(es, table.alias, "title") == "text"
        found = await reconcile(config, config.tables[0], settle_s=0)
        assert set(found.stale) == {str(i) for i in range(1, 22)} - {"3"}
        assert not (found.missing or found.extra)
        # The remedy: repair rewrites every document whole.
        assert (await reconcile(config, config.tables[0], repair=True, settle_s=0)).clean
        assert await documents(es, table.alias) == rows_now(db, table.name)
        assert (await documents(es, table.alias))["7"] == {
            "id": 7, "title": "name 7", "price": "7.00", "score": None}


async def test_an_incompatible_type_change_is_a_mapping_conflict_until_reindexed(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS, STRICT)
    insert_rows(db, table.name, 1, 10)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file)
    async with caught_up(db, es, table, config):
        # Widened in MySQL; the index's integer cannot hold the new values.
        sql(db, f"ALTER TABLE `{table.name}` MODIFY qty BIGINT")
        sql(db, f"UPDATE `{table.name}` SET qty = {2**40} WHERE id = 4")
        (record,) = await read_topic(config.kafka.dead_letter_topic, 1)
        letter = DeadLetter.from_headers(list(record.headers))
        assert letter is not None and letter.kind == "mapping-conflict"
        assert f"indexer mappings generate {table.name} --write" in letter.reason
        assert f"indexer reindex {table.name}" in letter.reason

        # The remedy named in the letter: a mapping made from the table, a reindex, a replay.
        generated = await indexer("mappings", "generate", table.name, "--write", "-c",
                                  str(config_file))
        assert generated.returncode == 0, generated.stderr
        result = await reindex(config, config.tables[0])
        assert result.failed == 0
        assert await field_type(es, table.alias, "qty") == "long"
        report = await replay(config.kafka, ReplayFilter(kinds=frozenset({"mapping-conflict"})),
                              dry_run=False)
        assert report.replayed == 1
        await wait_for_documents(es, table.alias, rows_now(db, table.name))
    assert (await documents(es, table.alias))["4"]["qty"] == 2**40
    assert (await reconcile(config, config.tables[0], settle_s=0)).clean


async def test_a_primary_key_change_is_repaired_by_a_reindex(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 10)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        sql(db, f"ALTER TABLE `{table.name}` DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)")
        sql(db, f"UPDATE `{table.name}` SET qty = 99 WHERE id = 5")

        async def rekeyed() -> bool:
            return "5|name 5" in await documents(es, table.alias)
        await wait_until(rekeyed, 60, "a document under the new key")
        # Every _id changes: the old documents are extra, the rows not written since missing.
        found = await reconcile(config, config.tables[0], settle_s=0)
        assert len(found.extra) == 10 and len(found.missing) == 9
        await reindex(config, config.tables[0])
        docs = await documents(es, table.alias)
        assert sorted(docs) == sorted(f"{i}|name {i}" for i in range(1, 11))
        assert docs["5|name 5"]["qty"] == 99
        assert (await reconcile(config, config.tables[0], settle_s=0)).clean


async def test_a_table_added_to_the_configuration_is_indexed_from_its_topic(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    first, second = make_table(COLUMNS), make_table(COLUMNS)
    insert_rows(db, first.name, 1, 5)
    insert_rows(db, second.name, 1, 7)
    config = make_config(first.entry())
    async with caught_up(db, es, first, config):
        pass
    both = make_config(first.entry(), second.entry())
    async with caught_up(db, es, second, both):
        sql(db, f"UPDATE `{first.name}` SET qty = 42 WHERE id = 1")
        await wait_for_documents(es, first.alias, expected_rows(db, first.name))
    for added in (first, second):
        index = both.table(added.name)
        assert (await reconcile(both, index, settle_s=0)).clean


async def hits(es: SearchClient, alias: str, query: dict[str, Any]) -> set[str]:
    await es.request("POST", f"/{alias}/_refresh")
    found = await es.request("POST", f"/{alias}/_search", {"query": query, "size": 100})
    return {hit["_id"] for hit in found["hits"]["hits"]}


@pytest.mark.parametrize("dynamic", ["strict", "false"])
@pytest.mark.parametrize("first_event", ["old layout", "new layout"])
async def test_a_column_added_while_the_daemon_was_stopped_is_mapped(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, dynamic: str,
        first_event: str) -> None:
    mapping = {"mappings": {**STRICT["mappings"], "dynamic": dynamic}}
    table = make_table(COLUMNS, mapping)
    insert_rows(db, table.name, 1, 10)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        pass
    # While stopped (a deploy): maybe a change of the old layout, then the ALTER and writes.
    if first_event == "old layout":
        sql(db, f"UPDATE `{table.name}` SET qty = 9 WHERE id = 2")
    sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN popularity DECIMAL(6,2) NULL")
    sql(db, f"UPDATE `{table.name}` SET popularity = 5.00 WHERE id = 3")
    expected = rows_now(db, table.name)
    for doc in expected.values():
        if doc["popularity"] is None:
            del doc["popularity"]
        else:
            doc["popularity"] = f"{doc['popularity']:.2f}"
    async with running(config) as daemon:
        await wait_for_documents(es, table.alias, expected)
        changes = daemon.metrics.registry.get_sample_value(
            "indexer_layout_changes_total", {"table": config.tables[0].name})
        assert changes == 1.0
    assert await field_type(es, table.alias, "popularity") in ("scaled_float", "double")
    assert await hits(es, table.alias, {"term": {"popularity": 5.0}}) == {"3"}
    assert (await reconcile(config, config.tables[0], settle_s=0)).clean
