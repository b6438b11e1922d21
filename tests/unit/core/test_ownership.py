from pathlib import Path

from indexer.config import build_config
from indexer.core.ownership import OWNER_META, Owner, adoption_problem, conflict, owner_in, owner_of

CONFIG = build_config({"tables": [
    {"name": "shop.orders", "alias": "orders"},
    {"name": "shop.products", "lookups": {"category": {"table": "categories",
                                                       "on": {"category_id": "id"}}}}],
    "mysql": {"host": "db1", "port": 3307}}, Path())


def test_an_index_records_its_table_and_source_and_reads_them_back() -> None:
    orders, products = CONFIG.tables
    owner = owner_of(CONFIG, orders)
    assert owner == Owner("mysql", "shop.orders", "orders", "table", "db1:3307")
    assert owner_in({OWNER_META: owner.as_meta(), "indexer_checksum": 3}) == owner
    assert owner_of(CONFIG, products).kind == "tree"
    assert CONFIG.canary_table is not None
    assert owner_of(CONFIG, CONFIG.canary_table).kind == "canary"
    assert owner_in({}) is None and owner_in(None) is None  # made before records existed
    assert owner_in({OWNER_META: {"table": "shop.orders"}}) is None  # not one of ours


def test_the_same_table_of_the_same_source_only() -> None:
    owner = owner_of(CONFIG, CONFIG.tables[0])
    moved = Owner("mysql", "shop.orders", "orders-2", "tree", "replica:3306")
    assert owner.same(moved)  # another alias, joins added, read from a replica: the same
    assert not owner.same(Owner("mysql", "accept.orders", "orders"))
    assert not owner.same(Owner("eu", "shop.orders", "orders"))
    line = conflict("orders", "orders-v1", Owner("mysql", "demo.orders", "orders"), owner)
    assert "demo.orders of source 'mysql'" in line and "shop.orders of source 'mysql'" in line
    assert "orders-v1" in line and "\n" not in line


def doc(doc_id: str, **fields: object) -> dict[str, object]:
    return {"_id": doc_id, "_source": {**fields, "_indexer": {"hash": 1, "key": 1}}}


def test_an_unrecorded_index_is_adopted_only_when_its_documents_are_the_tables() -> None:
    table = {"1": {"id", "name", "qty"}, "2": {"id", "name", "qty"}}
    assert adoption_problem([], table) is None  # nothing to lose
    assert adoption_problem([doc("1", id=1, name="a"), doc("3", id=3)], table) is None
    # another table's documents under the alias: a field this table's document lacks
    found = adoption_problem([doc("1", id=1, customer={"name": "x"})], table)
    assert found is not None and "customer" in found
    # documents indexer did not write
    assert "not written by indexer" in str(adoption_problem(
        [{"_id": "1", "_source": {"id": 1}}], table))
    # no row of the table behind any of them
    assert "none of 2 documents" in str(adoption_problem([doc("8"), doc("9")], table))
