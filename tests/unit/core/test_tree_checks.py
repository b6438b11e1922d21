"""Joins that cannot work, named at start: columns, clashes, unique lookups, indexes."""

from __future__ import annotations

from typing import Any

import pytest

from indexer.core import tree_checks
from indexer.core.layout import Index
from tests.unit.core.test_trees import INDEXES, LAYOUTS, products


def test_a_well_formed_tree_passes_its_checks() -> None:
    assert tree_checks.check(products(), LAYOUTS, INDEXES) == []


@pytest.mark.parametrize(("changes", "indexes", "problem"), [
    ({"lookups": {"category": {"table": "categories", "on": {"category": "id"}}}}, INDEXES,
     "lookups.category.on: products has no column 'category'"),
    ({"lookups": {"name": {"table": "categories", "on": {"category_id": "id"}}}}, INDEXES,
     "the field 'name' is also a column of shop.products"),
    ({"lookups": {"category": {"table": "categories", "on": {"category_id": "id"},
                               "include": ["colour"]}}}, INDEXES,
     "lookups.category.include: categories has no column 'colour'"),
    ({"lookups": {"category": {"table": "categories", "on": {"name": "name"}}}}, INDEXES,
     "categories(name) is neither its primary key nor a unique key"),
    ({}, {**INDEXES, "shop.products": []},
     "no index on products(category_id), so finding the documents a change touches would "
     "scan"),
    ({}, {**INDEXES, "shop.variants": [Index("by_colour", ("colour_id",), False)]},
     "children.variants: no index on variants(product_id), so reading documents would scan"),
    ({"children": {"variants": {"table": "variants", "on": {"id": "product_id"},
                                "value": "weight"}}}, INDEXES,
     "children.variants.value: no field 'weight'"),
    ({"routing": "secret"}, INDEXES, "routing: the document has no field 'secret'"),
    ({"routing": "variants.id"}, INDEXES, "'variants' is no lookup of the document"),
])
def test_what_cannot_work_is_named(changes: dict[str, Any], indexes: dict[str, list[Index]],
                                   problem: str) -> None:
    table = products(**changes)
    found = tree_checks.check(table, LAYOUTS, indexes)
    assert any(problem in p for p in found), found


def test_an_unindexed_join_can_be_allowed() -> None:
    table = products(lookups={"category": {"table": "categories", "on": {"category_id": "id"},
                                           "allow_unindexed": True}})
    assert tree_checks.check(table, LAYOUTS, {**INDEXES, "shop.products": []}) == []


def test_a_unique_key_serves_a_lookup() -> None:
    table = products(lookups={"category": {"table": "categories", "on": {"name": "slug"}}})
    unique = {**INDEXES, "shop.categories": [Index("by_slug", ("slug",), True)],
              "shop.products": [Index("by_name", ("name",), False)]}
    assert tree_checks.check(table, LAYOUTS, unique) == []


@pytest.mark.parametrize("routing", ["name", "category_id", "category.name", "category"])
def test_a_root_field_or_a_lookups_value_routes_a_joined_document(routing: str) -> None:
    found = tree_checks.check(products(routing=routing), LAYOUTS, INDEXES)
    assert [p for p in found if "routing" in p] == ([] if routing != "category" else [
        "tables[shop.products].routing: the document has no field 'category'"])
