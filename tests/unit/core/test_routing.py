import orjson
import pytest

from indexer.condition_config import parse_rule
from indexer.core.bulk import action_line
from indexer.core.documents import DocumentBuilder, Write, leaving, placed_at
from indexer.core.layout import Column, TableLayout
from indexer.core.routing import check_column, routing_of, value_at
from indexer.errors import ConfigError, DecodeError
from indexer.settings import RowRule
from tests.unit.core.test_documents import change, table


def routed(rows: RowRule | None = None) -> DocumentBuilder:
    return DocumentBuilder(table(routing="tenant", rows=rows))


def test_values_route_as_text_and_an_absent_value_routes_by_the_id() -> None:
    assert routing_of("acme", "7", "tenant") == "acme"
    assert routing_of(42, "7", "tenant") == "42"
    assert routing_of(True, "7", "tenant") == "true"
    assert routing_of(None, "7", "tenant") == "7"  # where an unrouted document would be
    assert routing_of("", "7", "tenant") == "7"
    with pytest.raises(DecodeError, match="routing field 'tags' holds a list") as caught:
        routing_of(["a"], "7", "tags")
    assert caught.value.kind == "invalid-routing"


def test_a_path_reaches_through_lookups_and_stops_at_a_missing_object() -> None:
    document = {"shop": {"tenant": "t1"}, "name": "x", "none": None}
    assert value_at(document, ("shop", "tenant")) == "t1"
    assert value_at(document, ("name",)) == "x"
    assert value_at(document, ("none", "tenant")) is None
    assert value_at(document, ("missing",)) is None


def test_every_write_of_a_routed_table_names_its_routing() -> None:
    builder = routed()
    assert not builder.identity  # the native path hands routed tables to Python
    insert = builder.write_for_change(change("c", None, {"id": 7, "tenant": "a"}))
    assert (insert.routing, insert.leaves) == ("a", ())
    delete = builder.write_for_change(change("d", {"id": 7, "tenant": "a"}, None, pos=2000))
    assert delete.deleted and delete.routing == "a"  # the shard the document is on
    row = builder.write_for_row({"id": 7}, {"id": 7, "tenant": None}, 5)
    assert row.routing == "7"
    assert DocumentBuilder(table()).write_for_row({"id": 7}, {"id": 7}, 5).routing is None


def test_a_changed_routing_value_leaves_the_old_shard_at_the_same_version() -> None:
    builder = routed()
    moved = builder.write_for_change(change("u", {"id": 7, "tenant": "a"},
                                            {"id": 7, "tenant": "b"}))
    assert moved.routing == "b" and not moved.deleted
    (stone,) = moved.leaves
    assert (stone.routing, stone.version, stone.deleted) == ("a", moved.version, True)
    assert orjson.loads(stone.source)["_indexer"]["deleted"] is True
    same = builder.write_for_change(change("u", {"id": 7, "tenant": "a"},
                                           {"id": 7, "tenant": "a", "n": 1}))
    assert same.leaves == ()


def test_a_row_a_where_leaves_out_while_moving_is_removed_from_both_shards() -> None:
    builder = routed(rows=parse_rule({"where": "status = 'live'"}, "t"))
    out = builder.write_for_change(change("u", {"id": 7, "tenant": "a", "status": "live"},
                                          {"id": 7, "tenant": "b", "status": "gone"}))
    assert out.deleted and out.routing == "b"
    assert [(s.routing, s.deleted) for s in out.leaves] == [("a", True)]


def test_leaving_skips_the_writes_own_routing_and_sorts_the_others() -> None:
    write = Write("7", 9, b"{}", False, "b")
    assert leaving(write, ["b"], 0) is write
    assert [s.routing for s in leaving(write, ["c", "b", "a"], 0).leaves] == ["a", "c"]
    unrouted_stone = Write("7", 9, b"{}", True, "7")  # a tombstone routed by its id
    assert [s.routing for s in leaving(unrouted_stone, ["7", "x"], 0).leaves] == ["x"]


def test_the_action_line_carries_the_routing() -> None:
    line = orjson.loads(action_line("a-v1", Write("1", 2, b"{}", False, "t|1")))
    assert line["index"]["routing"] == "t|1"
    assert "routing" not in orjson.loads(action_line("a-v1", Write("1", 2, b"{}", False)))[
        "index"]


def test_a_routing_column_the_table_lacks_stops_the_start() -> None:
    layout = TableLayout("shop", "items", (Column("id", "int", "int", 0, 1),
                                           Column("tags", "set", "set('a','b')", 0, 0)))
    check_column("id", layout, "shop.items")
    check_column("", layout, "shop.items")
    with pytest.raises(ConfigError, match=r"tables\[shop.items\].routing: the table has no "
                                          "column 'tenant'"):
        check_column("tenant", layout, "shop.items")
    with pytest.raises(ConfigError, match="column 'tags' is set; route by a column of single"):
        check_column("tags", layout, "shop.items")


def test_a_write_superseding_another_also_leaves_where_that_one_was() -> None:
    builder = routed()
    first = builder.write_for_change(change("u", {"id": 7, "tenant": "a"},
                                            {"id": 7, "tenant": "b"}))
    second = builder.write_for_change(change("d", {"id": 7, "tenant": "b"}, None, pos=2000))
    assert placed_at(first) == ["b", "a"] and placed_at(Write("7", 1, b"{}", False)) == []
    kept = leaving(second, placed_at(first), 0)  # as a batch keeps only the newest per id
    assert kept.routing == "b" and [(s.routing, s.version) for s in kept.leaves] == [
        ("a", second.version)]
    assert leaving(kept, placed_at(first), 0) is kept  # nothing new to leave
