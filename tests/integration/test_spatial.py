"""Every spatial type from MariaDB through real Debezium and the reindex into geo_point and
geo_shape fields: the same GeoJSON, found by geo queries, and reconciled exactly (the checksums
hash the stored bytes). Without schemas: test_schemaless (its second connector runs on the
default stack only)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from indexer.core.field_types import generate
from indexer.jobs.reconcile import reconcile
from indexer.jobs.reindex import reindex
from indexer.search.admin import field_capabilities
from indexer.search.client import SearchClient
from indexer.source.mysql.schema import read_layout
from tests.integration.conftest import (
    DATABASE,
    documents,
    running,
    sql,
    wait_for_documents,
    wait_for_topic,
)
from tests.integration.test_cli import indexer
from tests.integration.test_reconcile import behind_the_back

pytestmark = pytest.mark.servers

COLUMNS = ("id INT PRIMARY KEY, p POINT, ls LINESTRING, pg POLYGON, g GEOMETRY, mp MULTIPOINT, "
           "mls MULTILINESTRING, mpg MULTIPOLYGON, gc GEOMETRYCOLLECTION")
ROWS = {
    1: ("ST_GeomFromText('POINT(13.4050 52.52)', 4326)", "ST_GeomFromText('LINESTRING(0 0, 1 1)')",
        "ST_GeomFromText('POLYGON((0 0, 10 0, 10 10, 0 10, 0 0))')",
        "ST_GeomFromText('POINT(2.3522 48.8566)')",
        "ST_GeomFromText('MULTIPOINT(1 1, 2 2)')",
        "ST_GeomFromText('MULTILINESTRING((0 0, 1 1), (2 2, 3 3))')",
        "ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)), ((5 5, 6 5, 6 6, 5 5)))')",
        "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))')"),
    2: ("ST_GeomFromText('POINT(-122.4194 37.7749)')",) + ("NULL",) * 7,
    # Web Mercator metres: no longitude and latitude, so not indexed, but not refused either.
    3: ("ST_GeomFromText('POINT(1492237.0 6894699.0)', 3857)",
        "ST_GeomFromText('LINESTRING(500000 6000000, 500001 6000001)', 3857)") + ("NULL",) * 6,
}
EXPECTED = {
    "1": {"id": 1, "p": {"type": "Point", "coordinates": [13.405, 52.52]},
          "ls": {"type": "LineString", "coordinates": [[0.0, 0.0], [1.0, 1.0]]},
          "pg": {"type": "Polygon", "coordinates": [
              [[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0], [0.0, 0.0]]]},
          "g": {"type": "Point", "coordinates": [2.3522, 48.8566]},
          "mp": {"type": "MultiPoint", "coordinates": [[1.0, 1.0], [2.0, 2.0]]},
          "mls": {"type": "MultiLineString", "coordinates": [
              [[0.0, 0.0], [1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]]]},
          "mpg": {"type": "MultiPolygon", "coordinates": [
              [[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]],
              [[[5.0, 5.0], [6.0, 5.0], [6.0, 6.0], [5.0, 5.0]]]]},
          "gc": {"type": "GeometryCollection", "geometries": [
              {"type": "Point", "coordinates": [1.0, 1.0]},
              {"type": "LineString", "coordinates": [[0.0, 0.0], [1.0, 1.0]]}]}},
    "2": {"id": 2, "p": {"type": "Point", "coordinates": [-122.4194, 37.7749]},
          **dict.fromkeys(("ls", "pg", "g", "mp", "mls", "mpg", "gc"))},
    "3": {"id": 3, "p": {"type": "Point", "coordinates": [1492237.0, 6894699.0]},
          "ls": {"type": "LineString", "coordinates": [[500000.0, 6000000.0],
                                                       [500001.0, 6000001.0]]},
          **dict.fromkeys(("pg", "g", "mp", "mls", "mpg", "gc"))},
}


def insert(db: Any, table: str) -> None:
    for key, values in ROWS.items():
        sql(db, f"INSERT INTO `{table}` VALUES ({key}, {', '.join(values)})")


async def ids(es: SearchClient, alias: str, query: dict[str, Any]) -> set[str]:
    await es.request("POST", f"/{alias}/_refresh")
    found = await es.search(alias, {"query": query, "size": 10})
    return {hit["_id"] for hit in found["hits"]["hits"]}


async def generated_mapping(es: SearchClient, config: Any, table: Any) -> dict[str, Any]:
    """What `indexer mappings generate` writes for this server (geo_shape is a module that
    minimal builds such as the integration-test zips lack: then stored only)."""
    layout = read_layout(config.mysql, DATABASE, table.name)
    caps = await field_capabilities(es, table.alias)
    return generate(layout.columns, {c.name: c.name for c in layout.columns}, caps)


async def test_spatial_columns_stream_reindex_query_and_reconcile(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Any) -> None:
    table = make_table(COLUMNS)
    config = make_config(table.entry())
    mapping = await generated_mapping(es, config, table)
    properties = mapping["mappings"]["properties"]
    assert properties["p"]["type"] == "geo_point"
    shapes = {properties[c]["type"] for c in ("ls", "pg", "g", "mp", "mls", "mpg", "gc")}
    assert shapes in ({"geo_shape"}, {"object"})

    (tmp_path / f"{table.alias}.json").write_bytes(orjson.dumps(mapping))
    insert(db, table.name)
    await wait_for_topic(table.topic)
    entry = config.tables[0]
    async with running(config):
        await wait_for_documents(es, table.alias, EXPECTED)
        near_berlin = {"geo_distance": {"distance": "10km", "p": {"lat": 52.5, "lon": 13.4}}}
        assert await ids(es, table.alias, near_berlin) == {"1"}
        inside = {"geo_shape": {"pg": {"shape": {"type": "point", "coordinates": [5, 5]},
                                       "relation": "intersects"}}}
        if shapes == {"geo_shape"}:
            assert await ids(es, table.alias, inside) == {"1"}
        assert (await reconcile(config, entry, settle_s=0)).clean
    # Changed behind the daemon's back (stopped; its events are read at the next start).
    sql(db, f"UPDATE `{table.name}` SET p = ST_GeomFromText('POINT(13.41 52.53)', 4326) "
            "WHERE id = 1")
    report = await reconcile(config, entry, settle_s=0)
    assert report.stale == ["1"] and not report.missing and not report.extra
    repaired = await reconcile(config, entry, repair=True, settle_s=0)
    assert repaired.repaired and sum(repaired.repaired.values()) == 1
    assert (await reconcile(config, entry, settle_s=0)).clean
    moved = EXPECTED | {"1": EXPECTED["1"] | {"p": {"type": "Point",
                                                   "coordinates": [13.41, 52.53]}}}
    await reindex(config, entry)
    assert await documents(es, table.alias) == moved
    assert (await reconcile(config, entry, settle_s=0)).clean


async def test_validate_notes_an_srid_the_search_server_cannot_represent(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Any) -> None:
    table = make_table("id INT PRIMARY KEY")
    # Debezium 3.5's DDL parser stops its task at REF_SYSTEM_ID (README): the binlog is off
    # while this table is made and dropped, and nothing streams from it.
    columns = "id INT PRIMARY KEY, here POINT REF_SYSTEM_ID=4326, there POINT REF_SYSTEM_ID=3857"
    behind_the_back(db, f"DROP TABLE `{table.name}`", f"CREATE TABLE `{table.name}` ({columns})")
    try:
        config_file = tmp_path / "indexer.toml"
        config = make_config(table.entry(), file=config_file)
        assert [c.srid for c in read_layout(config.mysql, DATABASE, table.name).columns] == [
            0, 4326, 3857]
        (tmp_path / f"{table.alias}.json").write_bytes(
            orjson.dumps(await generated_mapping(es, config, table)))
        result = await indexer("mappings", "validate", "-c", str(config_file))
        assert result.returncode == 0, result.stderr  # notes, not problems: no row is refused
        notes = [line for line in result.stderr.splitlines() if ": note: " in line]
        assert any("there: declares SRID 3857, which geo_point cannot represent" in n
                   for n in notes), notes
        assert any("here: geo_point reads coordinates as WGS 84" in n for n in notes), notes
    finally:
        behind_the_back(db, f"DROP TABLE `{table.name}`")
