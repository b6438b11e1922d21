"""Documents built by the native row reader (``RowPlan.documents``) against the Python path,
their reference: the rows decoded here, made into changes as the change reader makes them, and
written by the document builder. Where the native side builds a document it must be that
document, byte for byte, with that id; where it cannot, it declines the whole event."""

from __future__ import annotations

import struct
from dataclasses import replace
from types import ModuleType

from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.core import binlog_events as ev
from indexer.core.binlog_rows import RowDecoder
from indexer.core.documents import DocumentBuilder
from indexer.core.envelope import Position
from indexer.core.events import Change
from indexer.errors import DecodeError
from indexer.settings import TableConfig, VersionSource
from tests.unit.core.test_binlog import codecs
from tests.unit.core.test_binlog_native import (
    COLUMNS,
    JSON_COLUMNS,
    UTF8MB4,
    bitmap,
    column,
    projected,
    recorded_rows,
)

BUILDER = DocumentBuilder(TableConfig(database="d", table="t", topic="t", alias="t",
                                      mapping="t.json", version=VersionSource("binlog")))
POSITION = Position("mysql-bin.000001", 4, 0, 0)


def reference(decoder: RowDecoder, data: bytes, header: ev.RowsHeader,
              ) -> list[tuple[str, bytes]] | None:
    """What the Python path writes for each row, or None where it writes something else than
    one document per row (a delete, a key updated) or cannot read the event."""
    if header.op not in ("c", "u"):
        return None
    try:
        rows = decoder.decoded(data, header)
    except (ev.BinlogError, ValueError, IndexError, OverflowError):
        return None
    found = []
    (name,) = decoder.key
    for before, after in rows:
        assert after is not None
        if name not in after or (before is not None and before.get(name) != after[name]):
            return None
        try:
            write = BUILDER.write_for_change(Change(header.op, {name: after[name]}, before,
                                                    after, POSITION))
        except DecodeError:  # (an empty key, one too long for an id)
            return None
        found.append((write.id, write.source))
    return found


def built(decoder: RowDecoder, data: bytes, header: ev.RowsHeader,
          ) -> list[tuple[str, bytes]] | None:
    assert decoder.native is not None
    return decoder.documents(data, header)


def test_every_recorded_insert_and_update_is_built_as_the_builder_writes_it(
        module: ModuleType) -> None:
    compared = 0
    for table, header, event in recorded_rows():
        # What the native side writes: no JSON, UTF-16, float or SET column.
        keep = [i for i, c in enumerate(table.columns) if c.name not in ("js", "u16")
                and c.real_type not in (ev.FLOAT, ev.DOUBLE, ev.SET)]
        small, rows, data = projected(table, event, header, keep)
        decoder = RowDecoder(small, JSON_COLUMNS, codecs(), module.RowPlan)
        expected = reference(decoder, data, rows)
        natively = built(decoder, data, rows)
        if rows.op == "d":
            assert natively is None
            continue
        assert natively is not None, "declined an insert or update MariaDB wrote"
        assert natively == expected
        compared += len(natively)
    assert compared > 0


def image(values: list[bytes | None]) -> bytes:
    return bitmap([v is None for v in values]) + b"".join(v or b"" for v in values)


KEYS = st.one_of(
    st.tuples(st.just(column(ev.LONGLONG, unsigned=False)), st.binary(min_size=8, max_size=8)),
    st.tuples(st.just(column(ev.LONGLONG, unsigned=True)), st.binary(min_size=8, max_size=8)),
    st.tuples(st.just(column(ev.VARCHAR, 40, collation=UTF8MB4)),
              st.text(max_size=10).map(lambda t: bytes([len(t.encode())]) + t.encode())),
)


@settings(max_examples=600, deadline=None)
@given(KEYS, COLUMNS, st.binary(max_size=40), st.booleans(), st.sampled_from(["c", "u"]),
       st.booleans(), st.booleans())
def test_random_rows_are_built_as_the_builder_writes_them_or_declined(
        module: ModuleType, key: tuple[ev.MapColumn, bytes], col: ev.MapColumn, value: bytes,
        null: bool, op: str, key_first: bool, new_key: bool) -> None:
    key_column, key_value = key
    key_column = replace(key_column, name="id")
    columns = (key_column, col) if key_first else (col, key_column)
    table = ev.TableMap(1, "d", "t", columns, (0,) if key_first else (1,), True)
    decoder = RowDecoder(table, frozenset(), codecs(), module.RowPlan)
    values = [key_value, None if null else value]
    after = image(values if key_first else values[::-1])
    data = after
    if op == "u":
        old = [bytes(8) if len(key_value) == 8 else b"\x01k", values[1]] if new_key else values
        data = image(old if key_first else old[::-1]) + after
    header = ev.RowsHeader(1, op, 2, b"\x03", b"\x03", 0, len(data))
    natively = built(decoder, data, header)
    expected = reference(decoder, data, header)
    if col.real_type in (ev.FLOAT, ev.DOUBLE, ev.SET):
        assert natively is None
    assert natively is None or natively == expected


def bench_like() -> ev.TableMap:
    """The shape bench/pipeline.py updates: BIGINT key, VARCHAR, DECIMAL(10,2), INT,
    DATETIME(6)."""
    return ev.TableMap(1, "d", "t", (
        ev.MapColumn("id", ev.LONGLONG, ev.LONGLONG, 0, False, False, None, ()),
        ev.MapColumn("name", ev.VARCHAR, ev.VARCHAR, 160, False, False, UTF8MB4, ()),
        ev.MapColumn("price", ev.NEWDECIMAL, ev.NEWDECIMAL, 10 << 8 | 2, False, False, None,
                     ()),
        ev.MapColumn("qty", ev.LONG, ev.LONG, 0, False, False, None, ()),
        ev.MapColumn("updated_at", ev.DATETIME2, ev.DATETIME2, 6, False, False, None, ()),
    ), (0,), True)


def row(key: int, name: str, qty: int) -> bytes:
    return image([struct.pack("<q", key), bytes([len(name.encode())]) + name.encode(),
                  bytes.fromhex("8000000c32"), struct.pack("<i", qty),
                  bytes.fromhex("99b4a6e0f4") + (123456).to_bytes(3, "big")])


def test_updates_of_a_plain_table_are_built_and_a_new_key_or_a_delete_is_not(
        module: ModuleType) -> None:
    decoder = RowDecoder(bench_like(), frozenset(), codecs(), module.RowPlan)
    every = b"\x1f"
    update = row(7, 'product "7"\n', 0) + row(7, "produit é", 1)
    header = ev.RowsHeader(1, "u", 5, every, every, 0, len(update))
    natively = built(decoder, update, header)
    assert natively == reference(decoder, update, header)
    assert natively is not None and natively[0][0] == "7"
    assert natively[0][1].startswith(b'{"id":7,"name":"produit \xc3\xa9","price":"12.50",')
    moved = row(7, "a", 0) + row(8, "a", 0)
    assert built(decoder, moved, ev.RowsHeader(1, "u", 5, every, every, 0, len(moved))) is None
    gone = row(7, "a", 0)
    assert built(decoder, gone, ev.RowsHeader(1, "d", 5, every, every, 0, len(gone))) is None
    composite = ev.TableMap(1, "d", "t", bench_like().columns, (0, 3), True)
    both = RowDecoder(composite, frozenset(), codecs(), module.RowPlan)
    assert both.documents(gone, ev.RowsHeader(1, "c", 5, every, every, 0, len(gone))) is None

