from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from indexer.core.mappings import (
    READ_FILTER,
    alias_of_index,
    new_index_name,
    swap_actions,
    validate_definition,
)
from indexer.errors import MappingError


def test_index_names_round_trip() -> None:
    name = new_index_name("products", datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC))
    assert name == "products-v20260102t030405000006"
    assert alias_of_index(name) == "products"
    assert alias_of_index("products") is None


@pytest.mark.parametrize(("raw", "match"), [
    ([], "JSON object"),
    ({"aliases": {}}, "unknown top-level"),
    ({"mappings": {"properties": {"_indexer": {"type": "keyword"}}}}, "reserved"),
    ({"mappings": {"properties": {"x": {"type": "strng"}}}}, "x: unknown field type"),
    ({"mappings": {"properties": {"x": {"properties": {"y": {}}}}}}, "x.properties.y has no type"),
])
def test_invalid_definitions(raw: object, match: str) -> None:
    with pytest.raises(MappingError, match=match):
        validate_definition(raw, "a", Path("a.json"))


def test_bulk_load_settings_and_restore() -> None:
    definition = validate_definition({"settings": {"index": {"refresh_interval": "5s"}}}, "a",
                                     Path("a.json"))
    assert definition.body(bulk_load=True)["settings"]["index.refresh_interval"] == "-1"
    assert definition.live_settings() == {"index.refresh_interval": "5s",
                                          "index.number_of_replicas": 1}


def test_swap_is_one_request_moving_the_filtered_read_alias() -> None:
    actions = swap_actions("a", "a-v2", ["a-v1"])
    assert actions == [{"remove": {"index": "a-v1", "alias": "a"}},
                       {"add": {"index": "a-v2", "alias": "a", "filter": READ_FILTER}}]
    assert orjson.dumps(READ_FILTER)
