"""A joined document's mapping: generated (lookups as objects, children nested, value joins as
their field's type) and checked the same way."""

from __future__ import annotations

from typing import Any

from indexer.core import field_types, tree_mappings, trees
from tests.unit.core.test_trees import LAYOUTS, TREE, products

CAPS = field_types.SERVERS["es9"]


def test_a_shop_document_mapping() -> None:
    properties = tree_mappings.generate(TREE, CAPS)["mappings"]["properties"]
    assert properties["name"]["type"] == "text"
    assert properties["category"] == {"type": "object", "properties": {
        "name": {"type": "text", "fields": {"keyword": {"type": "keyword",
                                                        "ignore_above": 256}}}}}
    variants = properties["variants"]
    assert variants["type"] == "nested"
    assert set(variants["properties"]) == {"id", "grams", "colour"}
    assert variants["properties"]["colour"]["type"] == "text"  # value = "name": its type
    assert properties["tags"]["type"] == "text"  # value = "tag.name": an array of names


def test_a_generated_mapping_fits_its_tree() -> None:
    mapping = tree_mappings.generate(TREE, CAPS)["mappings"]
    assert tree_mappings.check(TREE, mapping, "map") == ([], [])


def test_what_a_mapping_gets_wrong_is_named_with_its_path() -> None:
    mapping: dict[str, Any] = tree_mappings.generate(TREE, CAPS)["mappings"]
    mapping["dynamic"] = "strict"
    del mapping["properties"]["category"]
    mapping["properties"]["variants"]["type"] = "object"
    mapping["properties"]["variants"]["properties"]["grams"] = {"type": "boolean"}
    problems, notes = tree_mappings.check(TREE, mapping)
    assert any(p.startswith("category: no field for the join, and dynamic is strict")
               for p in problems)
    assert any(p.startswith("variants.grams: boolean refuses") for p in problems)
    assert any(n.startswith("variants: children mapped as object") for n in notes)


def test_a_table_without_joins_is_a_tree_of_one() -> None:
    table = products(lookups={}, children={})
    tree = trees.build(table, LAYOUTS)
    columns = [c for c in LAYOUTS["shop.products"].columns if c.name != "secret"]
    names = {c.name: c.name for c in columns}
    assert tree_mappings.generate(tree, CAPS) == field_types.generate(columns, names, CAPS)
