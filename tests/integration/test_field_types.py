"""`indexer mappings generate` and `validate` against the real tables and servers: the
generated mapping takes every type's edge values, streamed and reindexed alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.jobs.reindex import reindex
from indexer.search.client import SearchClient
from tests.integration.conftest import running, wait_for_documents, wait_for_topic
from tests.integration.test_cli import indexer
from tests.integration.test_types import (
    COLUMNS,
    EXPECTED,
    insert_every_type,
)

pytestmark = pytest.mark.servers


async def test_a_generated_mapping_takes_every_type(db: Any, es: SearchClient, make_table: Any,
                                                    make_config: Any, tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    config_file = tmp_path / "indexer.toml"
    config = make_config(table.entry(), file=config_file)
    printed = await indexer("mappings", "generate", table.name, "-c", str(config_file))
    assert printed.returncode == 0, printed.stderr
    body = orjson.loads(printed.stdout)
    properties = body["mappings"]["properties"]
    assert properties["d"] == {"type": "double"} and properties["js"]["type"] in (
        "flattened", "flat_object")
    # What this server has decides the rest (test builds lack unsigned_long or scaled_float).
    assert properties["bu"]["type"] in ("unsigned_long", "keyword")
    written = await indexer("mappings", "generate", table.name, "--write", "-c", str(config_file))
    assert written.returncode == 0, written.stderr
    assert orjson.loads((tmp_path / f"{table.alias}.json").read_bytes()) == body
    valid = await indexer("mappings", "validate", "-c", str(config_file))
    assert valid.returncode == 0 and "fits the table" in valid.stderr, valid.stderr

    insert_every_type(db, table.name)
    await wait_for_topic(table.topic)
    async with running(config):
        await wait_for_documents(es, table.alias, EXPECTED)
        result = await reindex(config, config.tables[0])
        assert result.rows == len(EXPECTED) and result.failed == 0
    await wait_for_documents(es, table.alias, EXPECTED)


async def test_validate_names_each_column_a_mapping_would_refuse_or_lose(
        db: Any, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    mapping = {"mappings": {"dynamic": "strict", "properties": {
        "id": {"type": "integer"}, "price": {"type": "float"}, "big": {"type": "long"},
        "at": {"type": "date_nanos"}}}}
    table = make_table("id INT PRIMARY KEY, price DOUBLE, big BIGINT UNSIGNED, at DATETIME(6), "
                       "note VARCHAR(20)", mapping)
    config_file = tmp_path / "indexer.toml"
    make_config(table.entry(), file=config_file)
    result = await indexer("mappings", "validate", "-c", str(config_file))
    assert result.returncode == 1, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith(table.entry()["name"] + ": ")]
    for column, says in (("price", "float refuses a DOUBLE"), ("big", "long holds"),
                         ("at", "date_nanos refuses years outside 1970-2262"),
                         ("note", "no field, and dynamic is strict")):
        assert any(f": {column}: " in x and says in x for x in lines), (column, lines)
    files_only = await indexer("mappings", "validate", "--files-only", "-c", str(config_file))
    assert files_only.returncode == 0, files_only.stderr
    unknown = await indexer("mappings", "generate", "nope", "-c", str(config_file))
    assert unknown.returncode == 2
