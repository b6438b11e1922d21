"""A table's transform: loaded by name, applied to the projected document, its failures and
wrong answers each a dead letter with where it broke, never a crash of the stream."""

import orjson
import pytest

from indexer import transforms
from indexer.core.checksums import content_hash
from indexer.core.documents import DocumentBuilder
from indexer.errors import ConfigError, DecodeError
from tests.unit.core.test_documents import change, table

PRICED = "tests.transforms:priced"
ROW = {"id": 7, "first": "Ada", "last": "Lovelace", "price": "12.50", "status": "on",
       "secret": "x"}


@pytest.mark.parametrize(("spec", "says"), [
    ("tests.transforms", "expected"), ("tests/transforms:priced", "expected"),
    ("tests.nowhere:priced", "cannot import tests.nowhere: ModuleNotFoundError"),
    ("tests.transforms:absent", "has no function 'absent'"),
    ("tests.transforms:NOT_CALLABLE", "has no function 'NOT_CALLABLE'"),
])
def test_a_name_that_is_not_a_function_is_refused(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        transforms.load(spec)


def test_the_stream_writes_the_transformed_document_hashed_as_written() -> None:
    builder = DocumentBuilder(table(transform=PRICED, exclude=("secret",)))
    assert not builder.identity
    write = builder.write_for_change(change("u", ROW, ROW))
    body = orjson.loads(write.source)
    meta = body.pop("_indexer")
    assert body == {"id": 7, "first": "Ada", "last": "Lovelace", "status": "on",
                    "full_name": "Ada Lovelace", "cents": 1250}
    assert meta["hash"] == content_hash(body)
    # The reindex and reconcile make the same bytes and hash from the row.
    assert builder.write_for_row({"id": 7}, ROW, write.version).source == write.source
    assert builder.row_hash({"id": 7}, ROW) == ("7", meta["hash"])


def test_the_function_gets_a_copy_so_the_row_is_left_as_read() -> None:
    row = dict(ROW)
    DocumentBuilder(table(transform=PRICED)).write_for_change(change("c", None, row))
    assert row == ROW


def test_none_removes_the_document_at_the_changes_version() -> None:
    builder = DocumentBuilder(table(transform=PRICED))
    hidden = {**ROW, "status": "hidden"}
    write = builder.write_for_change(change("u", ROW, hidden, pos=2000))
    assert write.deleted and write.version == builder.write_for_change(
        change("u", ROW, ROW, pos=2000)).version
    assert builder.row_hash({"id": 7}, hidden) is None
    assert builder.write_for_row({"id": 7}, hidden, 5).deleted
    # A delete is a tombstone whatever the function says.
    assert builder.write_for_change(change("d", ROW, None)).deleted


@pytest.mark.parametrize(("spec", "row", "says"), [
    (PRICED, {**ROW, "price": "-1"}, "ValueError: negative price -1"),
    (PRICED, {**ROW, "price": None}, "TypeError"),
    ("tests.transforms:not_a_document", ROW, "returned a list for row 7"),
    ("tests.transforms:claims_indexer", ROW, "'_indexer'"),
])
def test_what_the_function_raises_or_returns_wrongly_is_the_rows_dead_letter(
        spec: str, row: dict[str, object], says: str) -> None:
    builder = DocumentBuilder(table(transform=spec))
    with pytest.raises(DecodeError, match=says) as raised:
        builder.write_for_change(change("u", ROW, row))
    assert raised.value.kind == "transform-failed"
    if spec == PRICED and "ValueError" in says:  # where in the user's code it broke
        assert "tests/transforms.py" in raised.value.reason and "raise ValueError" in \
            raised.value.reason
