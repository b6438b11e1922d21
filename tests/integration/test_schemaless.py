"""Events without schemas (JsonConverter with schemas.enable=false) from a real Debezium
connector: decoded with the table's column types read from MySQL, no hints configured."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from indexer.jobs.reconcile import reconcile
from indexer.search.client import SearchClient
from tests.integration import conftest
from tests.integration.conftest import (
    CONNECTOR,
    DATABASE,
    rest,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_spatial import COLUMNS as SPATIAL_COLUMNS
from tests.integration.test_spatial import EXPECTED as SPATIAL_EXPECTED
from tests.integration.test_spatial import generated_mapping, insert
from tests.integration.test_types import COLUMNS, EXPECTED, MAPPING, insert_every_type

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


@contextmanager
def schemaless_connector(*tables: conftest.TestTable) -> Iterator[str]:
    """A second Debezium connector for these tables whose messages carry no schemas; yields
    its topic prefix."""
    name, prefix = unique("it-plain"), unique("plain")
    config = {**rest("GET", f"/connectors/{CONNECTOR}/config"), "name": name,
              "topic.prefix": prefix,
              "database.server.id": str(300_000 + secrets.randbelow(100_000)),
              "schema.history.internal.kafka.topic": unique("plain-history"),
              "table.include.list": ",".join(f"{DATABASE}.{t.name}" for t in tables),
              "heartbeat.interval.ms": "0",
              "key.converter": JSON_CONVERTER, "key.converter.schemas.enable": "false",
              "value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "false"}
    rest("PUT", f"/connectors/{name}/config", config)
    try:
        yield prefix
    finally:
        rest("DELETE", f"/connectors/{name}")


async def test_every_type_and_unsigned_keys_without_schemas_as_with_them(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    every = make_table(COLUMNS, MAPPING)
    # keyword: this test build has no unsigned_long (what `mappings generate` falls back to)
    keyed = make_table("id BIGINT UNSIGNED PRIMARY KEY, doc JSON, tags SET('a','b')",
                       {"mappings": {"properties": {"id": {"type": "keyword"},
                                                    "doc": {"type": "flattened"}}}})
    with schemaless_connector(every, keyed) as prefix:
        # Rows written once it streams: Debezium's own snapshot reads a FLOAT as MariaDB's
        # 6-digit text (README), which reconcile then reports and repairs.
        sql(db, f"INSERT INTO `{keyed.name}` VALUES (0, NULL, '')")
        topics = {t.name: f"{prefix}.{DATABASE}.{t.name}" for t in (every, keyed)}
        await wait_for_topic(topics[keyed.name])
        sql(db, f"DELETE FROM `{keyed.name}` WHERE id = 0")
        insert_every_type(db, every.name)
        for key in (1, 2**63, 2**64 - 1):
            sql(db, f"INSERT INTO `{keyed.name}` VALUES (%s, %s, 'a,b')", key,
                '{"k": [1, "x"]}')
        await wait_for_topic(topics[every.name])
        config = make_config(every.entry(topic=topics[every.name]),
                             keyed.entry(topic=topics[keyed.name]))
        async with running(config):
            # The same documents as from events with schemas (test_types: EXPECTED).
            await wait_for_documents(es, every.alias, EXPECTED)
            await wait_for_documents(es, keyed.alias, {
                str(key): {"id": key, "doc": {"k": [1, "x"]}, "tags": ["a", "b"]}
                for key in (1, 2**63, 2**64 - 1)})

            # A column added while streaming: its type is read again from MySQL.
            sql(db, f"ALTER TABLE `{keyed.name}` ADD COLUMN amount DECIMAL(10,2), "
                    "ADD COLUMN seen DATETIME(3)")
            sql(db, f"UPDATE `{keyed.name}` SET amount = 12.5, seen = '2024-02-29 01:02:03.456' "
                    "WHERE id = 1")

            async def typed() -> bool:
                docs = await es.search(keyed.alias, {"query": {"ids": {"values": ["1"]}}})
                hits = docs["hits"]["hits"]
                return bool(hits) and hits[0]["_source"].get("amount") == "12.50" and (
                    hits[0]["_source"].get("seen") == "2024-02-29T01:02:03.456")
            await wait_until(typed, 60, "the new columns decoded with their MySQL types")


async def test_a_column_added_while_stopped_is_mapped_without_schemas_too(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    mapping = {"mappings": {"dynamic": "strict", "properties": {
        "id": {"type": "integer"}, "name": {"type": "keyword"}, "price": {"type": "keyword"},
        "qty": {"type": "integer"}}}}
    table = make_table("id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(10,2), qty INT",
                       mapping)
    with schemaless_connector(table) as prefix:
        topic = f"{prefix}.{DATABASE}.{table.name}"
        sql(db, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1.50, 1)")
        await wait_for_topic(topic)
        config = make_config(table.entry(topic=topic))
        first = {"1": {"id": 1, "name": "a", "price": "1.50", "qty": 1}}
        async with running(config):
            await wait_for_documents(es, table.alias, first)
        sql(db, f"ALTER TABLE `{table.name}` ADD COLUMN popularity DECIMAL(6,2) NULL")
        sql(db, f"UPDATE `{table.name}` SET popularity = 5.00 WHERE id = 1")
        async with running(config) as daemon:
            await wait_for_documents(es, table.alias, {"1": first["1"] | {"popularity": "5.00"}})
            assert daemon.metrics.registry.get_sample_value(
                "indexer_layout_changes_total", {"table": config.tables[0].name}) == 1.0
        index = (await es.request("GET", f"/{table.alias}/_mapping"))
        (body,) = index.values()
        assert body["mappings"]["properties"]["popularity"]["type"] in ("scaled_float", "double")


async def test_spatial_columns_without_schemas_as_with_them(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Any) -> None:
    table = make_table(SPATIAL_COLUMNS)
    with schemaless_connector(table) as prefix:
        topic = f"{prefix}.{DATABASE}.{table.name}"
        config = make_config(table.entry(topic=topic))

        (tmp_path / f"{table.alias}.json").write_bytes(
            orjson.dumps(await generated_mapping(es, config, table)))
        sql(db, f"INSERT INTO `{table.name}` (id) VALUES (0)")  # the topic, before the rows
        await wait_for_topic(topic)
        sql(db, f"DELETE FROM `{table.name}` WHERE id = 0")
        insert(db, table.name)
        async with running(config):
            await wait_for_documents(es, table.alias, SPATIAL_EXPECTED)
            assert (await reconcile(config, config.tables[0], settle_s=0)).clean

