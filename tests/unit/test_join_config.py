"""Joins in the configuration: nested lookups and children, composite keys, projections, and
every refusal as one line naming the setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from indexer.config import build_config, load_config
from indexer.errors import ConfigError
from indexer.settings import DEFAULT_CHILDREN_MAX, TableConfig

SHOP = """
[[tables]]
name = "shop.products"

[tables.lookups.category]
table = "shop.categories"
on = { category_id = "id" }
include = ["name", "slug"]

[tables.children.variants]
table = "variants"
on = { id = "product_id" }
order_by = ["position", "id desc"]
max = 50

[tables.children.variants.lookups.colour]
table = "colours"
on = { colour_code = "code", brand_id = "brand_id" }

[tables.children.tags]
table = "shop.product_tags"
on = { id = "product_id" }
include = []
value = "tag.name"
lookups.tag = { table = "shop.tags", on = { tag_id = "id" }, include = ["name"] }
"""


def products(tmp_path: Path, text: str = SHOP) -> TableConfig:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(path, {}).tables[0]


def test_a_shop_document_in_toml(tmp_path: Path) -> None:
    table = products(tmp_path)
    category, variants, tags = table.joins
    assert (category.name, category.kind, category.full_name, category.on) == (
        "category", "lookup", "shop.categories", (("category_id", "id"),))
    assert category.include == ("name", "slug") and category.topic == "mysql.shop.categories"
    assert (variants.kind, variants.full_name, variants.max) == ("child", "shop.variants", 50)
    assert variants.order_by == (("position", False), ("id", True))
    (colour,) = variants.joins
    assert colour.on == (("colour_code", "code"), ("brand_id", "brand_id"))  # in order
    assert colour.include is None and colour.max == DEFAULT_CHILDREN_MAX
    assert tags.include == () and tags.value == ("tag", "name")
    assert tags.joins[0].include == ("name",)


def test_joins_from_the_environment_as_json(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[tables]]\nname = "shop.products"\n')
    config = load_config(path, {"INDEXER_TABLES__PRODUCTS__LOOKUPS":
                                '{"brand": {"table": "brands", "on": {"brand_id": "id"}}}'})
    assert config.tables[0].joins[0].full_name == "shop.brands"


def entry(**joins: Any) -> dict[str, Any]:
    return {"name": "shop.products", **joins}


def lookup(**settings: Any) -> dict[str, Any]:
    return {"table": "categories", "on": {"category_id": "id"}, **settings}


@pytest.mark.parametrize(("raw", "match"), [
    (entry(lookups={"category": {"on": {"a": "b"}}}), r"lookups.category.table"),
    (entry(lookups={"category": lookup(on={})}), r"lookups.category.on: expected"),
    (entry(lookups={"category": lookup(on={"category-id": "id"})}), "plain MySQL identifier"),
    (entry(lookups={"category": lookup(max=3)}), r"category.max: unknown setting \(max is "
                                                 "for children"),
    (entry(lookups={"category": lookup(colour=1)}), "category.colour: unknown"),
    (entry(lookups={"category": lookup(include=["a"], exclude=["b"])}), "not both"),
    (entry(lookups={"_indexer": lookup()}), "cannot name a document field"),
    (entry(lookups={"a.b": lookup()}), "cannot name a document field"),
    (entry(lookups={"x": lookup()}, children={"x": lookup()}), "another join of the same "
                                                              "table fills the field 'x'"),
    (entry(lookups={"category": lookup(rename={"name": "_indexer"})}), "reserved"),
    (entry(children={"v": lookup(order_by=["id sideways"])}), r"v.order_by: cannot read"),
    (entry(children={"v": lookup(max=0)}), r"v.max: must be at least 1"),
    (entry(children={"v": lookup(max="many")}), r"v.max: expected a number"),
    (entry(lookups={"category": lookup(allow_unindexed="yes")}), "allow_unindexed"),
    (entry(lookups={"c": lookup(lookups={"p": {"table": "products", "on": {"a": "id"}}})}),
     r"comes back to shop.products \(shop.products -> shop.categories -> shop.products\)"),
    (entry(lookups={"c": lookup(table="shop.categories", lookups={"p": lookup()})}),
     "comes back to shop.categories"),
    (entry(children={"t": lookup(value="tag.name")}), r"t.value: 'tag' is not a lookup"),
    (entry(children={"t": lookup(value="a..b")}), r"t.value: expected"),
    (entry(version="column:updated_at", lookups={"c": lookup()}),
     "joined documents need binlog versions"),
])
def test_refused_with_the_setting_named(raw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_config({"tables": [raw]}, Path())


def test_depth_is_bounded() -> None:
    join: dict[str, Any] = {"table": "t6", "on": {"a": "b"}}
    for level in range(5, 0, -1):
        join = {"table": f"t{level}", "on": {"a": "b"}, "children": {f"c{level}": join}}
    with pytest.raises(ConfigError, match="nest at most 5 levels"):
        build_config({"tables": [entry(children={"c0": join})]}, Path())
    inner = join["children"]["c1"]  # five levels is fine
    assert build_config({"tables": [entry(children={"c1": inner})]}, Path()).tables[0].joins
