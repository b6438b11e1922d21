import zlib

import orjson
import pytest

from indexer.condition_config import parse_rule
from indexer.core.checksums import content_hash
from indexer.core.documents import (
    KEY_BUCKETS,
    DocumentBuilder,
    column_version,
    document_id,
    key_bucket,
    pack_binlog_version,
)
from indexer.core.envelope import Position
from indexer.core.events import Change
from indexer.core.versions import MAX_FILE, MAX_ROW, unpack_binlog_version
from indexer.errors import DecodeError, VersionError
from indexer.settings import TableConfig, VersionSource


def table(version: str = "binlog", **kw: object) -> TableConfig:
    return TableConfig(database="shop", table="items", topic="t", alias="items",
                       mapping="items.json",
                       version=VersionSource("binlog") if version == "binlog" else
                       VersionSource("column", version.removeprefix("column:")),
                       **kw)  # type: ignore[arg-type]


def change(op: str, before: dict[str, object] | None, after: dict[str, object] | None,
           pos: int = 1000, row: int = 0, file: str = "mysql-bin.000003") -> Change:
    return Change(op, {"id": 7}, before, after, Position(file, pos, row, 1_700_000_000_000))


def test_binlog_versions_follow_commit_order() -> None:
    ordered = [("mysql-bin.000001", 4, 0), ("mysql-bin.000001", 4, 1), ("mysql-bin.000001", 5, 0),
               ("mysql-bin.000002", 0, 0), ("mysql-bin.524287", 2**32 - 1, MAX_ROW)]
    versions = [pack_binlog_version(*c) for c in ordered]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(0 < v < 2**63 for v in versions)
    assert unpack_binlog_version(versions[2]) == (1, 5, 0)


@pytest.mark.parametrize(("file", "pos", "row", "match"), [
    (f"mysql-bin.{MAX_FILE + 1}", 4, 0, "file number"),
    ("mysql-bin.000001", 2**32, 0, "position"),
    ("mysql-bin.000001", 4, MAX_ROW + 1, "binlog_row_event_max_size"),
    ("mysql-bin", 4, 0, "numeric suffix"),
])
def test_binlog_versions_that_do_not_fit_fail_clearly(file: str, pos: int, row: int,
                                                      match: str) -> None:
    with pytest.raises(VersionError, match=match):
        pack_binlog_version(file, pos, row)


def test_column_versions() -> None:
    assert column_version(42, "v") == 42
    assert column_version("1970-01-01T00:00:01.000001", "u") == 1_000_001
    assert column_version("1970-01-01T00:00:01Z", "u") == 1_000_000
    for bad in (None, 0, -3, "soon", 1.5, True):
        with pytest.raises(VersionError):
            column_version(bad, "v")


def test_ids_single_and_composite_are_unambiguous() -> None:
    assert document_id({"id": 42}) == "42"
    assert document_id({"sku": "A-1"}) == "A-1"
    assert document_id({"a": 1, "b": "x"}) == "1|x"
    assert document_id({"a": "x|y", "b": "z"}) != document_id({"a": "x", "b": "y|z"})
    assert document_id({"a": "x\\", "b": "|"}) != document_id({"a": "x\\|", "b": ""})
    with pytest.raises(DecodeError, match="512"):
        document_id({"id": "x" * 600})


def test_insert_update_and_delete_writes_under_binlog_versions() -> None:
    builder = DocumentBuilder(table())
    insert = builder.write_for_change(change("c", None, {"id": 7, "n": "a"}, pos=100))
    delete = builder.write_for_change(change("d", {"id": 7, "n": "a"}, None, pos=200))
    assert insert.id == "7" and not insert.deleted
    assert orjson.loads(insert.source) == {
        "id": 7, "n": "a", "_indexer": {"hash": content_hash({"id": 7, "n": "a"}), "key": 7}}
    assert delete.deleted and delete.version > insert.version
    assert orjson.loads(delete.source) == {"_indexer": {"deleted": True,
                                                         "deleted_at": 1_700_000_000_000}}


def test_delete_outranks_the_row_it_removes_under_column_versions() -> None:
    builder = DocumentBuilder(table("column:version"))
    row: dict[str, object] = {"id": 7, "version": 9}
    assert builder.write_for_change(change("u", None, row)).version == 9
    assert builder.write_for_change(change("d", row, None)).version == 10


def test_a_row_the_rule_leaves_out_is_a_tombstone_at_its_change_version() -> None:
    rule = parse_rule({"where": "n = 'a'", "deleted_when": "gone IS NOT NULL"}, "t")
    builder = DocumentBuilder(table(rows=rule))
    assert not builder.identity  # never the native path's: it builds every row as it is
    kept = builder.write_for_change(change("c", None, {"id": 7, "n": "a", "gone": None}, 100))
    left = builder.write_for_change(change("u", None, {"id": 7, "n": "b", "gone": None}, 200))
    soft = builder.write_for_change(change("u", None, {"id": 7, "n": "a", "gone": 1}, 300))
    back = builder.write_for_change(change("u", None, {"id": 7, "n": "a", "gone": None}, 400))
    assert not kept.deleted and not back.deleted
    assert left.deleted and soft.deleted and orjson.loads(soft.source)["_indexer"]["deleted"]
    assert kept.version < left.version < soft.version < back.version
    by_column = DocumentBuilder(table("column:v", rows=rule))
    assert by_column.write_for_change(change("u", None, {"id": 7, "n": "b", "gone": None,
                                                          "v": 5})).version == 5


def test_a_row_out_before_and_after_a_change_needs_no_write() -> None:
    rule = parse_rule({"where": "n = 'a'"}, "t")
    builder = DocumentBuilder(table(rows=rule))
    a, b = {"id": 7, "n": "a"}, {"id": 7, "n": "b"}
    assert builder.stays_out(change("c", None, b))  # inserted out: nothing to remove
    assert builder.stays_out(change("u", b, {"id": 7, "n": "c"}))
    assert builder.stays_out(change("d", b, None))
    assert not builder.stays_out(change("u", a, b))  # leaves: its tombstone
    assert not builder.stays_out(change("u", b, a))  # comes back
    assert not builder.stays_out(change("d", a, None))
    assert not builder.stays_out(change("r", None, b))  # a snapshot's read: a document may be
    assert not builder.stays_out(change("u", None, b))  # no before image: cannot tell
    assert not DocumentBuilder(table()).stays_out(change("c", None, b))


def test_projection_include_exclude_rename() -> None:
    row = {"id": 1, "secret": "s", "name": "n"}
    assert DocumentBuilder(table(exclude=("secret",))).document(row) == {"id": 1, "name": "n"}
    assert DocumentBuilder(table(include=("id",))).document(row) == {"id": 1}
    assert DocumentBuilder(table(rename={"name": "title"})).document(row) == {
        "id": 1, "secret": "s", "title": "n"}


def test_row_and_change_build_identical_bytes() -> None:
    builder = DocumentBuilder(table())
    row = {"id": 7, "price": "1.50", "tags": ["a"], "j": {"k": [1]}}
    from_change = builder.write_for_change(change("u", None, dict(row)))
    from_row = builder.write_for_row({"id": 7}, row, from_change.version)
    assert from_row == from_change


def test_chunk_fields_for_integer_and_other_keys() -> None:
    builder = DocumentBuilder(table())
    by_int = orjson.loads(builder.write_for_row({"id": 5}, {"id": 5}, 1).source)["_indexer"]
    by_text = orjson.loads(builder.write_for_row({"sku": "a"}, {"sku": "a"}, 1).source)
    huge = orjson.loads(builder.write_for_row({"id": 2**64 - 1}, {}, 1).source)["_indexer"]
    assert by_int["key"] == 5 and "bucket" not in by_int
    assert by_text["_indexer"]["bucket"] == key_bucket("a") < KEY_BUCKETS
    assert "key" not in huge and "bucket" in huge


def test_json_values_hash_as_their_server_renders_them() -> None:
    row = {"id": 7, "doc": {"a": [1, "x"], "b": None}, "tags": ["a", "c"]}
    mariadb = '#doc={"a":[1.0E0,"x"],"b":null}#id=7#tags=["a","c"]'  # JSON_NORMALIZE
    mysql = '#doc={"a": [1, "x"], "b": null}#id=7#tags=["a", "c"]'
    assert content_hash(row) == zlib.crc32(mariadb.encode())
    assert content_hash(row, spaced=True) == zlib.crc32(mysql.encode())
    # The daemon reads the server from Debezium's source block, unless configured.
    for connector, text in (("mariadb", mariadb), ("mysql", mysql)):
        event = Change("c", {"id": 7}, None, row, Position("b.000001", 4, 0, 1, None, None,
                                                            connector))
        source = DocumentBuilder(table()).write_for_change(event).source
        assert orjson.loads(source)["_indexer"]["hash"] == zlib.crc32(text.encode())
    forced = DocumentBuilder(table(), "mysql").write_for_row({"id": 7}, row, 1).source
    assert orjson.loads(forced)["_indexer"]["hash"] == zlib.crc32(mysql.encode())


def test_a_value_json_cannot_hold_is_a_bad_value_not_a_crash() -> None:
    with pytest.raises(DecodeError, match="cannot be written as JSON") as info:
        DocumentBuilder(table()).write_for_change(change("c", None, {"id": 7, "n": 2**70}))
    assert info.value.kind == "bad-value"
