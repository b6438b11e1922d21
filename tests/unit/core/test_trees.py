"""Joined documents, pure: the tree over the tables' layouts, the start-time checks, the walk
from a changed row up to its documents, and documents assembled from rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.config import build_config
from indexer.core import compare, trees
from indexer.core.documents import document_id
from indexer.core.layout import Column, Index, TableLayout
from indexer.core.trees import Matches
from indexer.errors import DecodeError
from indexer.settings import TableConfig


def column(name: str, data_type: str = "int", key: int = 0) -> Column:
    return Column(name, data_type, data_type, 0, key)


LAYOUTS = {
    "shop.products": TableLayout("shop", "products", (
        column("id", key=1), column("name", "varchar"), column("category_id"),
        column("secret", "varchar"))),
    "shop.categories": TableLayout("shop", "categories", (
        column("id", key=1), column("name", "varchar"), column("slug", "varchar"))),
    "shop.variants": TableLayout("shop", "variants", (
        column("id", key=1), column("product_id"), column("grams"), column("colour_id"))),
    "shop.colours": TableLayout("shop", "colours", (column("id", key=1),
                                                    column("name", "varchar"))),
    "shop.product_tags": TableLayout("shop", "product_tags", (
        column("product_id", key=1), column("tag_id", key=2))),
    "shop.tags": TableLayout("shop", "tags", (column("id", key=1), column("name", "varchar"))),
}
INDEXES = {
    "shop.products": [Index("by_category", ("category_id",), False)],
    "shop.variants": [Index("by_product", ("product_id", "id"), False),
                      Index("by_colour", ("colour_id",), False)],
    "shop.product_tags": [Index("by_tag", ("tag_id",), False)],
}
JOINS: dict[str, Any] = {
    "exclude": ["secret"],
    "lookups": {"category": {"table": "categories", "on": {"category_id": "id"},
                             "include": ["name"]}},
    "children": {
        "variants": {"table": "variants", "on": {"id": "product_id"}, "order_by": ["id"],
                     "max": 2, "exclude": ["product_id", "colour_id"],
                     "lookups": {"colour": {"table": "colours", "on": {"colour_id": "id"},
                                            "value": "name"}}},
        "tags": {"table": "product_tags", "on": {"id": "product_id"}, "include": [],
                 "value": "tag.name",
                 "lookups": {"tag": {"table": "tags", "on": {"tag_id": "id"}}}},
    },
}


def products(**changes: Any) -> TableConfig:
    entry = {"name": "shop.products", "alias": "products", **JOINS, **changes}
    return build_config({"tables": [entry]}, Path()).tables[0]


TREE = trees.build(products(), LAYOUTS)


def test_the_tree_depth_first() -> None:
    assert [(n.path, n.kind, n.parent) for n in TREE.nodes] == [
        ("", "root", -1), ("category", "lookup", 0), ("variants", "child", 0),
        ("variants.colour", "lookup", 2), ("tags", "child", 0), ("tags.tag", "lookup", 4)]
    assert TREE.root.fields == (("id", "id"), ("name", "name"), ("category_id", "category_id"))
    assert TREE.nodes[4].fields == ()  # include = []: the link row adds nothing itself
    assert [[n.path for n in level] for level in TREE.levels()] == [
        ["category", "variants", "tags"], ["variants.colour", "tags.tag"]]
    assert TREE.topics["mysql.shop.tags"] == "shop.tags"
    assert [n.path for n in TREE.places("shop.variants")] == ["variants"]
    assert trees.tree_tables(products())[:3] == [
        ("shop", "products"), ("shop", "categories"), ("shop", "variants")]


def test_the_walk_up_from_each_table() -> None:
    variants, colour, tag = TREE.nodes[2], TREE.nodes[3], TREE.nodes[5]
    # A variant names its product: no query.
    (direct,) = trees.climb(TREE, variants)
    assert direct.direct and direct.match == ("id",)
    # A colour: the variants that use it, then their products.
    first, second = trees.climb(TREE, colour)
    assert (first.node, first.match, first.select, first.direct) == (
        2, ("colour_id",), ("product_id",), False)
    assert second.direct
    # A category is a lookup of the root: the products that point at it.
    (step,) = trees.climb(TREE, TREE.nodes[1])
    assert (step.node, step.match, step.select, step.direct) == (0, ("category_id",), ("id",),
                                                                 False)
    assert [s.direct for s in trees.climb(TREE, tag)] == [False, True]
    assert trees.root_values(TREE, direct, (7,)) == (7,)


def test_a_moved_child_touches_both_parents() -> None:
    found = trees.touch(TREE, "shop.variants", {"id": 70, "product_id": 7},
                        {"id": 70, "product_id": 8})
    assert found.starts == {2: {(7,), (8,)}} and not found.refs and not found.roots


def test_a_root_change_names_its_documents() -> None:
    assert trees.touch(TREE, "shop.products", {"id": 7}, None).roots == [{"id": 7}]


def test_deleting_or_rekeying_a_lookup_row_asks_the_index() -> None:
    deleted = trees.touch(TREE, "shop.tags", {"id": 3, "name": "green"}, None)
    assert deleted.refs == {"shop.tags#3"} and deleted.starts == {5: {(3,)}}
    renamed = trees.touch(TREE, "shop.tags", {"id": 3, "name": "green"},
                          {"id": 3, "name": "GREEN"})
    assert not renamed.refs  # MySQL still knows who points at it
    rekeyed = trees.touch(TREE, "shop.tags", {"id": 3, "name": "g"}, {"id": 4, "name": "g"})
    assert rekeyed.refs == {"shop.tags#3"} and rekeyed.starts == {5: {(3,), (4,)}}


def matches(rows: list[tuple[tuple[Any, ...], dict[str, Any]]],
            totals: dict[tuple[Any, ...], int] | None = None) -> Matches:
    found = Matches()
    for values, row in rows:
        found.add(values, row, (totals or {}).get(values, 0))
    return found


def test_documents_from_rows() -> None:
    rows = {
        1: matches([((1,), {"id": 1, "name": "Tea", "slug": "tea"})]),
        2: matches([((7,), {"id": 70, "product_id": 7, "grams": 100, "colour_id": 5}),
                    ((7,), {"id": 71, "product_id": 7, "grams": 250, "colour_id": None})],
                   totals={(7,): 3}),
        3: matches([((5,), {"id": 5, "name": "green"})]),
        4: matches([((7,), {"product_id": 7, "tag_id": 3}),
                    ((7,), {"product_id": 7, "tag_id": 9})]),  # tag 9 does not exist
        5: matches([((3,), {"id": 3, "name": "organic"})]),
    }
    roots = [({"id": 7}, {"id": 7, "name": "Sencha", "category_id": 1, "secret": "x"}),
             ({"id": 8}, {"id": 8, "name": "Lone", "category_id": None, "secret": "y"}),
             ({"id": 9}, None)]
    sencha, lone, gone = trees.assemble(TREE, roots, rows)
    assert sencha.document == {
        "id": 7, "name": "Sencha", "category_id": 1, "category": {"name": "Tea"},
        "variants": [{"id": 70, "grams": 100, "colour": "green"},
                     {"id": 71, "grams": 250, "colour": None}],
        "tags": ["organic", None]}
    assert sencha.refs == ["shop.categories#1", "shop.colours#5", "shop.tags#3"]
    assert sencha.truncated == ["variants"]  # three variants, two kept
    assert lone.document == {"id": 8, "name": "Lone", "category_id": None, "category": None,
                             "variants": [], "tags": []}
    assert gone.document is None
    write = trees.write_for(sencha, 42, 0)
    body = orjson.loads(write.source)
    meta = body.pop("_indexer")
    assert body == sencha.document and (write.id, write.version) == ("7", 42)
    assert meta == {"hash": trees.document_hash(sencha.document), "key": 7,
                    "refs": sencha.refs, "truncated": ["variants"]}
    tombstone = trees.write_for(gone, 43, 1000)
    assert tombstone.deleted and orjson.loads(tombstone.source)["_indexer"]["deleted"]


def test_a_transform_gets_the_whole_document() -> None:
    tree = trees.build(products(transform="tests.transforms:shelf"), LAYOUTS)
    rows = {1: matches([]), 2: matches([((7,), {"id": 70, "product_id": 7, "grams": 100,
                                                "colour_id": None})]),
            3: matches([]), 4: matches([]), 5: matches([])}
    roots = [({"id": 7}, {"id": 7, "name": "Sencha", "category_id": None}),
             ({"id": 8}, {"id": 8, "name": "Lone", "category_id": None})]
    sencha, lone = trees.assemble(tree, roots, rows)
    assert sencha.document is not None and sencha.document["grams"] == 100
    assert lone.document is None  # no variants: no document, a tombstone
    assert trees.write_for(lone, 5, 0).deleted
    boom = [({"id": 7}, {"id": 7, "name": "boom", "category_id": None})]
    with pytest.raises(DecodeError, match="raised on row 7: RuntimeError: boom"):
        trees.assemble(tree, boom, rows)


def test_the_hash_sees_every_part() -> None:
    document: dict[str, Any] = {"id": 1, "category": {"name": "Tea"},
                                "variants": [{"id": 1}, {"id": 2}]}
    changed = [{**document, "category": {"name": "Coffee"}},
               {**document, "variants": [{"id": 2}, {"id": 1}]},  # order is content
               {**document, "variants": [{"id": 1}]}]
    hashes = {trees.document_hash(d) for d in [document, *changed]}
    assert len(hashes) == 4


def test_ids_back_to_root_keys() -> None:
    assert trees.root_values_of_id(TREE, "7") == (7,)
    composite = trees.build(build_config({"tables": [{"name": "shop.product_tags"}]},
                                         Path()).tables[0], LAYOUTS)
    assert trees.root_values_of_id(composite, "7|3") == (7, 3)
    strings = TableLayout("shop", "s", (column("a", "varchar", 1), column("b", "varchar", 2)))
    tree = trees.build(build_config({"tables": [{"name": "shop.s"}]}, Path()).tables[0],
                       {"shop.s": strings})
    key = {"a": "eu|west", "b": "x\\y"}
    assert trees.root_values_of_id(tree, document_id(key)) == ("eu|west", "x\\y")


def test_what_differs_in_a_stale_document() -> None:
    mysql = {"id": 7, "name": "Sencha", "category": {"name": "Tea", "slug": "tea"},
             "variants": [{"id": 70, "grams": 100}, {"id": 71, "grams": 250}],
             "tags": ["green"]}
    index = {"id": 7, "name": "Sencha", "category": {"name": "Tea", "slug": "t"},
             "variants": [{"id": 70, "grams": 100}, {"id": 71, "grams": 200}],
             "tags": ["green", "organic"], "_indexer": {"hash": 1}}
    assert compare.differences(mysql, index) == ["category.slug", "tags", "variants[1].grams"]
    fewer = {**index, "category": mysql["category"], "tags": ["green"],
             "variants": [{"id": 70, "grams": 100}]}
    assert compare.differences(mysql, fewer) == ["variants: 2 in MySQL, 1 in the index"]


def test_a_routed_document_is_routed_by_its_path_and_a_tombstone_by_its_id() -> None:
    document = trees.Assembled({"id": 7}, {"id": 7, "category": {"name": "Tea"}})
    assert trees.write_for(document, 5, 0, ("category", "name")).routing == "Tea"
    assert trees.write_for(document, 5, 0).routing is None
    gone = trees.write_for(trees.Assembled({"id": 7}, None), 6, 0, ("category", "name"))
    assert gone.deleted and gone.routing == "7"  # the rebuild adds where it was found
