"""The native row image reader (``indexer._native.RowPlan``) against the Python decoder, its
reference: MariaDB's own bytes of every type it reads, then random bytes for each kind."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.core import binlog_events as ev
from indexer.core.binlog_rows import RowDecoder, _decoder, native_columns
from tests.unit.core.test_binlog import RECORDED, codecs, events

JSON_COLUMNS = frozenset(RECORDED["json_columns"])
UTF8MB4, LATIN1, ASCII = 45, 8, 11  # collation ids, as the fixture's server has them


def bitmap(bits: list[bool]) -> bytes:
    return bytes(sum(1 << n for n, on in enumerate(bits[at:at + 8]) if on)
                 for at in range(0, len(bits), 8))


def projected(table: ev.TableMap, event: bytes, header: ev.RowsHeader,
              keep: list[int]) -> tuple[ev.TableMap, ev.RowsHeader, bytes]:
    """The table and rows event as they would be with only the columns ``keep``: each
    value's own bytes, copied, under new present and null bitmaps."""
    decoders = [_decoder(c, c.name in JSON_COLUMNS, codecs()) for c in table.columns]
    reader = ev.Reader(event, header.rows_at, header.rows_end)
    images = [header.present, header.present_after] if header.op == "u" else [header.present]
    out = bytearray()
    while reader.left > 0:
        for present in images:
            shown = [i for i in range(len(table.columns)) if present[i // 8] >> (i % 8) & 1]
            nulls = reader.take((len(shown) + 7) // 8)
            values: dict[int, bytes | None] = {}
            for n, i in enumerate(shown):
                if nulls[n // 8] >> (n % 8) & 1:
                    values[i] = None
                else:
                    start = reader.at
                    decoders[i](reader)
                    values[i] = event[start:reader.at]
            kept = [i for i in keep if i in values]
            out += bitmap([values[i] is None for i in kept])
            out += b"".join(values[i] or b"" for i in kept)
    shown_after = [bool(header.present_after[i // 8] >> (i % 8) & 1) for i in keep]
    shown_before = [bool(header.present[i // 8] >> (i % 8) & 1) for i in keep]
    columns = tuple(table.columns[i] for i in keep)
    small = ev.TableMap(table.table_id, table.database, table.table, columns,
                        tuple(keep.index(i) for i in table.primary_key if i in keep), True)
    rows = ev.RowsHeader(table.table_id, header.op, len(keep), bitmap(shown_before),
                         bitmap(shown_after), 0, len(out))
    return small, rows, bytes(out)


def recorded_rows() -> Iterator[tuple[ev.TableMap, ev.RowsHeader, bytes]]:
    """Each rows event of MariaDB's recorded binlog, with the table map it follows."""
    checksummed, table = False, None
    for head, event in events():
        if head.type == ev.FORMAT_DESCRIPTION:
            checksummed = ev.format_description(event).checksummed
        elif head.type == ev.TABLE_MAP:
            table = ev.table_map(event, checksummed)
        elif head.type in ev.ROWS_EVENTS:
            assert table is not None
            yield table, ev.rows_header(event, head, checksummed), event


def test_every_recorded_value_of_the_kinds_it_reads_is_the_python_decoders(
        module: ModuleType) -> None:
    compared = 0
    for table, header, event in recorded_rows():
        # The whole table has a JSON (LONGTEXT) and a UTF-16 column: Python reads it all.
        assert native_columns(table, JSON_COLUMNS, codecs()) is None
        assert RowDecoder(table, JSON_COLUMNS, codecs(), module.RowPlan).native is None
        keep = [i for i, c in enumerate(table.columns) if c.name not in ("js", "u16")]
        small, rows, data = projected(table, event, header, keep)
        decoder = RowDecoder(small, JSON_COLUMNS, codecs(), module.RowPlan)
        assert decoder.native is not None
        natively = decoder.native.rows(data, 0, len(data), rows.op, rows.present,
                                       rows.present_after)
        assert natively is not None, "declined a value MariaDB wrote"
        assert repr(natively) == repr(decoder.decoded(data, rows))
        assert decoder.rows(data, rows) == natively
        compared += len(natively)
    assert compared == 13


def column(kind: int, meta: int = 0, unsigned: bool = False, collation: int | None = None,
           real: int | None = None, members: tuple[bytes, ...] = ()) -> ev.MapColumn:
    return ev.MapColumn("v", kind, kind if real is None else real, meta, True, unsigned,
                        collation, members)


MEMBERS = (b"a", b"b\\c", b"\xc3\xa9t\xc3\xa9", b"", b"x y")
COLUMNS = st.one_of(
    st.builds(column, st.sampled_from([ev.TINY, ev.SHORT, ev.INT24, ev.LONG, ev.LONGLONG]),
              unsigned=st.booleans()),
    st.builds(column, st.sampled_from([ev.YEAR, ev.FLOAT, ev.DOUBLE, ev.DATE])),
    st.builds(lambda p, s: column(ev.NEWDECIMAL, p << 8 | min(s, p)),
              st.integers(1, 65), st.integers(0, 30)),
    st.builds(column, st.sampled_from([ev.DATETIME2, ev.TIMESTAMP2, ev.TIME2]),
              st.integers(0, 6)),
    st.builds(column, st.just(ev.BIT), st.integers(1, 64)),
    st.builds(lambda real, size: column(ev.STRING, size, collation=UTF8MB4, real=real,
                                        members=MEMBERS),
              st.sampled_from([ev.ENUM, ev.SET]), st.integers(1, 2)),
    st.builds(lambda kind, meta, collation: column(kind, meta, collation=collation),
              st.sampled_from([ev.VARCHAR, ev.STRING]), st.sampled_from([10, 40, 300, 1020]),
              st.sampled_from([UTF8MB4, LATIN1, ASCII, ev.BINARY_COLLATION])),
    st.builds(lambda meta, collation: column(ev.BLOB, meta, collation=collation),
              st.integers(1, 4), st.sampled_from([UTF8MB4, LATIN1, ev.BINARY_COLLATION])),
)


@settings(max_examples=600, deadline=None)
@given(COLUMNS, st.binary(max_size=40), st.sampled_from(["c", "d", "u"]),
       st.booleans())
def test_random_bytes_read_natively_as_python_reads_them_or_declined(
        module: ModuleType, col: ev.MapColumn, value: bytes, op: str, null: bool) -> None:
    table = ev.TableMap(1, "d", "t", (col,), (), True)
    decoder = RowDecoder(table, frozenset(), codecs(), module.RowPlan)
    assert decoder.native is not None
    # One image, twice for an update: its null bitmap, then the value's bytes as given.
    image = bytes([1 if null else 0]) + (b"" if null else value)
    data = image * (2 if op == "u" else 1)
    header = ev.RowsHeader(1, op, 1, b"\x01", b"\x01", 0, len(data))
    try:
        expected: object = decoder.decoded(data, header)
    except (ev.BinlogError, ValueError, IndexError, OverflowError):
        expected = None
    natively = decoder.native.rows(data, 0, len(data), op, b"\x01", b"\x01")
    assert natively is None or repr(natively) == repr(expected)


@pytest.mark.parametrize(("kind", "meta", "value"), [
    (ev.DATETIME2, 6, bytes.fromhex("99b4a6e0f4") + (123456).to_bytes(3, "big")),
    (ev.TIMESTAMP2, 3, (2**31 - 1).to_bytes(4, "big") + (999).to_bytes(2, "big")),
    (ev.TIME2, 3, bytes.fromhex("7ffffe") + bytes.fromhex("fc18")),  # -00:00:01.000 + .5
    (ev.NEWDECIMAL, 65 << 8 | 30, bytes.fromhex("7f") + b"\xff" * 28 + b"\xfe"),
    # DECIMAL(10,2) 0.05, -0.05, 0.00, 12.50; DECIMAL(4,4) 0.0005; DECIMAL(5,0) 7
    (ev.NEWDECIMAL, 10 << 8 | 2, bytes.fromhex("8000000005")),
    (ev.NEWDECIMAL, 10 << 8 | 2, bytes.fromhex("7ffffffffa")),
    (ev.NEWDECIMAL, 10 << 8 | 2, bytes.fromhex("8000000000")),
    (ev.NEWDECIMAL, 10 << 8 | 2, bytes.fromhex("8000000c32")),
    (ev.NEWDECIMAL, 4 << 8 | 4, bytes.fromhex("8005")),
    (ev.NEWDECIMAL, 5 << 8 | 0, bytes.fromhex("800007")),
    (ev.DOUBLE, 0, struct.pack("<d", 1.7976931348623157e308)),
    (ev.FLOAT, 0, struct.pack("<f", -1.5e-10)),
])
def test_edge_values_are_taken_not_declined(module: ModuleType, kind: int, meta: int,
                                            value: bytes) -> None:
    table = ev.TableMap(1, "d", "t", (column(kind, meta),), (), True)
    decoder = RowDecoder(table, frozenset(), codecs(), module.RowPlan)
    data = b"\x00" + value
    header = ev.RowsHeader(1, "c", 1, b"\x01", b"\x01", 0, len(data))
    assert decoder.native is not None
    natively = decoder.native.rows(data, 0, len(data), "c", b"\x01", b"\x01")
    assert natively is not None and repr(natively) == repr(decoder.decoded(data, header))


def test_latin1_reads_every_byte_as_mysql_does(module: ModuleType) -> None:
    col = column(ev.VARCHAR, 300, collation=LATIN1)
    table = ev.TableMap(1, "d", "t", (col,), (), True)
    decoder = RowDecoder(table, frozenset(), codecs(), module.RowPlan)
    every = bytes(range(256))
    data = b"\x00" + len(every).to_bytes(2, "little") + every
    header = ev.RowsHeader(1, "c", 1, b"\x01", b"\x01", 0, len(data))
    assert decoder.native is not None
    natively = decoder.native.rows(data, 0, len(data), "c", b"\x01", b"\x01")
    assert natively == decoder.decoded(data, header)


def test_a_table_of_a_kind_it_lacks_is_read_by_python(module: ModuleType) -> None:
    spatial = ev.TableMap(1, "d", "t", (column(ev.GEOMETRY, 4),), (), True)
    utf16 = ev.TableMap(1, "d", "t", (column(ev.VARCHAR, 40, collation=54),), (), True)
    json_text = ev.TableMap(1, "d", "t", (column(ev.BLOB, 4, collation=UTF8MB4),), (), True)
    assert RowDecoder(spatial, frozenset(), codecs(), module.RowPlan).native is None
    assert RowDecoder(utf16, frozenset(), codecs(), module.RowPlan).native is None
    assert RowDecoder(json_text, frozenset({"v"}), codecs(), module.RowPlan).native is None
    assert RowDecoder(json_text, frozenset(), codecs(), module.RowPlan).native is not None
