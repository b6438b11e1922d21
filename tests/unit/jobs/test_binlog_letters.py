"""A binlog dead letter back to the change it was about: the write built from it is the one
the daemon built."""

from __future__ import annotations

import orjson

from indexer.core.documents import DocumentBuilder
from indexer.core.envelope import Position
from indexer.core.events import Built, Change
from indexer.core.streams import Delivery, Stream
from indexer.jobs.binlog_letters import _change
from indexer.search.dead_letters import letter_for
from indexer.settings import TableConfig, VersionSource

TABLE = TableConfig("shop", "items", "mysql.shop.items", "items", "items.json",
                    VersionSource("binlog"))


def test_a_letter_gives_back_its_change_and_the_same_write() -> None:
    position = Position("mysql-bin.000007", 4711, 2, 1_700_000_000_000, "0-1-42", "false",
                        "mariadb")
    change = Change("u", {"id": 7}, {"id": 7, "name": "a", "price": "1.50"},
                    {"id": 7, "name": "b", "price": "2.50"}, position)
    delivery = Delivery(Stream(TABLE.topic, -1), 123, None, None, 10, change=change)
    letter = orjson.loads(orjson.dumps(letter_for("shop", delivery, "mapping-conflict", "no",
                                                  1)))
    back = _change(letter)
    assert back is not None and back.position == position
    builder = DocumentBuilder(TABLE)
    assert builder.write_for_change(back) == builder.write_for_change(change)


def test_a_letter_of_a_document_its_source_built_gives_back_the_same_write() -> None:
    position = Position("mysql-bin.000007", 4711, 2, 1_700_000_000_000, None, "false",
                        "mariadb")
    builder = DocumentBuilder(TABLE)
    row = {"id": 7, "name": "b\u00e9", "price": "2.50", "at": None}
    write = builder.write_for_change(Change("c", {"id": 7}, None, row, position))
    built = Built("c", position, write.id, write.source, "id")
    delivery = Delivery(Stream(TABLE.topic, -1), 123, None, None, 10, built=built)
    letter = orjson.loads(orjson.dumps(letter_for("shop", delivery, "mapping-conflict", "no",
                                                  1)))
    assert letter["change"] == {"op": "c", "key": {"id": 7}, "before": None, "after": row}
    back = _change(letter)
    assert back is not None and back.position == position
    assert builder.write_for_change(back) == write


def test_a_letter_without_a_change_gives_none() -> None:
    delivery = Delivery(Stream(TABLE.topic, -1), 9, None, None, 10,
                        error=("unsupported-op", "TRUNCATE"))
    assert _change(letter_for("shop", delivery, "unsupported-op", "TRUNCATE", 1)) is None
