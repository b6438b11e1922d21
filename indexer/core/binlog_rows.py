"""A rows event's row images as the canonical values documents hold (:mod:`indexer.core.values`):
the same values Debezium's events give and the reindex reads, for every column type.

Pure. A :class:`RowDecoder` is made once per table map (its columns' types, metadata,
signedness, character sets, ENUM/SET members) and the few things a table map cannot say
(which of MariaDB's LONGTEXT columns are JSON; how each character set's bytes decode).

The native module's ``RowPlan`` (``native/src/binlog.rs``, where built) reads the row images
of a table whose columns are all of kinds it has (:func:`native_columns`), this module being
its reference: an event it cannot read exactly it declines, and it is read here.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

import orjson

from indexer.core import binlog_events as ev
from indexer.core import geometry, mysql_json
from indexer.core.binlog_events import BinlogError, MapColumn, Reader, RowsHeader, TableMap
from indexer.core.values import decimal_binary_size, decimal_from_binary

Row = dict[str, object]
Rows = list[tuple[Row | None, Row | None]]
# (the reader at the value, the column) -> its canonical value
Decode = Callable[[Reader], object]
# A column as the native RowPlan takes it: (kind code, a, b, ENUM/SET members).
NativeColumn = tuple[int, int, int, list[str]]


class NativeRows(Protocol):
    def rows(self, event: bytes, start: int, end: int, op: str, present: bytes,
             present_after: bytes) -> Rows | None: ...

    def documents(self, event: bytes, start: int, end: int, op: str, present: bytes,
                  present_after: bytes, key: int) -> list[tuple[str, bytes]] | None: ...


# The native module's RowPlan(names, columns), where it is built.
NativePlan = Callable[[list[str], list[NativeColumn]], NativeRows]

# The native side's column kinds and character sets (native/src/binlog.rs).
(N_INT, N_YEAR, N_FLOAT, N_DOUBLE, N_DECIMAL, N_DATE, N_DATETIME, N_TIMESTAMP, N_TIME, N_BOOL,
 N_BITS, N_ENUM, N_SET, N_TEXT, N_BINARY) = range(15)
_NATIVE_CODECS = {"utf-8": 0, "ascii": 1, "latin1-mysql": 2}
_INT_SIZES = {ev.TINY: 1, ev.SHORT: 2, ev.INT24: 3, ev.LONG: 4, ev.LONGLONG: 8}
_NATIVE_SIMPLE = {ev.YEAR: N_YEAR, ev.FLOAT: N_FLOAT, ev.DOUBLE: N_DOUBLE, ev.DATE: N_DATE}
_NATIVE_TEMPORAL = {ev.DATETIME2: N_DATETIME, ev.TIMESTAMP2: N_TIMESTAMP, ev.TIME2: N_TIME}

_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
# MySQL's latin1 is cp1252, with the five bytes cp1252 leaves undefined read as C1 controls.
_CP1252 = {b: bytes([b]).decode("cp1252", "ignore") or chr(b) for b in range(0x80, 0xA0)}
_LATIN1_MYSQL = {b: ord(c) if len(c) == 1 else b for b, c in _CP1252.items()}


def latin1_text(data: bytes) -> str:
    return data.decode("latin-1").translate(_LATIN1_MYSQL)


class RowDecoder:
    """Decodes a table's row images: one decoder per column, made once per table map."""

    def __init__(self, table: TableMap, json_columns: frozenset[str],
                 codecs: Mapping[int, str], native: NativePlan | None = None) -> None:
        self.table = table
        self.names = tuple(c.name for c in table.columns)
        self.key = tuple(self.names[i] for i in table.primary_key)
        self._decoders = tuple(_decoder(c, c.name in json_columns, codecs)
                               for c in table.columns)
        columns = native_columns(table, json_columns, codecs) if native is not None else None
        self.native = (native(list(self.names), columns)
                       if native is not None and columns is not None else None)

    def rows(self, event: bytes, header: RowsHeader) -> Rows:
        """(before, after) of each row: after alone for an insert, before for a delete."""
        if self.native is not None:
            found = self.native.rows(event, header.rows_at, header.rows_end, header.op,
                                     header.present, header.present_after)
            if found is not None:
                return found
        return self.decoded(event, header)

    def documents(self, event: bytes, header: RowsHeader) -> list[tuple[str, bytes]] | None:
        """Each row's (id, document) as :class:`~indexer.core.documents.DocumentBuilder` writes
        it for a table whose documents are its rows as they are, built natively; None where
        the native side does not build them (no RowPlan, a key of several columns, a delete,
        a key updated, a float or SET column, a value it declines): :meth:`rows` then."""
        if self.native is None or len(self.table.primary_key) != 1:
            return None
        return self.native.documents(event, header.rows_at, header.rows_end, header.op,
                                     header.present, header.present_after,
                                     self.table.primary_key[0])

    def decoded(self, event: bytes, header: RowsHeader) -> Rows:
        """:meth:`rows`, read here (the reference)."""
        reader = Reader(event, header.rows_at, header.rows_end)
        found: Rows = []
        while reader.left > 0:
            first = self._image(reader, header.present)
            if header.op == "u":
                found.append((first, self._image(reader, header.present_after)))
            elif header.op == "d":
                found.append((first, None))
            else:
                found.append((None, first))
        return found

    def _image(self, reader: Reader, present: bytes) -> Row:
        columns = [i for i in range(len(self.names)) if present[i // 8] >> (i % 8) & 1]
        nulls = reader.take((len(columns) + 7) // 8)
        row: Row = {}
        for n, i in enumerate(columns):
            if nulls[n // 8] >> (n % 8) & 1:
                row[self.names[i]] = None
            else:
                row[self.names[i]] = self._decoders[i](reader)
        return row


def native_columns(table: TableMap, json_columns: frozenset[str],
                   codecs: Mapping[int, str]) -> list[NativeColumn] | None:
    """The table's columns as the native RowPlan takes them, or None when one is of a kind
    it does not have (JSON, spatial, a character set other than UTF-8, ASCII or latin1)."""
    found: list[NativeColumn] = []
    for column in table.columns:
        native = _native_column(column, column.name in json_columns, codecs)
        if native is None:
            return None
        found.append(native)
    return found


def _native_column(column: MapColumn, is_json: bool,
                   codecs: Mapping[int, str]) -> NativeColumn | None:
    t, meta = column.type, column.meta
    if t in _INT_SIZES:
        return N_INT, _INT_SIZES[t], int(not column.unsigned), []
    if t in _NATIVE_SIMPLE:
        return _NATIVE_SIMPLE[t], 0, 0, []
    if t == ev.NEWDECIMAL:
        return N_DECIMAL, meta >> 8, meta & 0xFF, []
    if t in _NATIVE_TEMPORAL:
        return _NATIVE_TEMPORAL[t], meta, 0, []
    if t == ev.BIT:
        return (N_BOOL, 0, 0, []) if meta == 1 else (N_BITS, (meta + 7) // 8, 0, [])
    binary = column.collation == ev.BINARY_COLLATION
    codec = _NATIVE_CODECS.get(codecs.get(column.collation if column.collation is not None
                                          else -1, ""))
    if column.real_type in (ev.ENUM, ev.SET):
        if codec is None:
            return None
        members = [_text(column, codecs)(m) for m in column.members]
        return N_ENUM if column.real_type == ev.ENUM else N_SET, meta, 0, members
    if t in (ev.VARCHAR, ev.VAR_STRING, ev.STRING):
        prefix = 1 if meta < 256 else 2
        if binary:
            return N_BINARY, prefix, meta if t == ev.STRING else 0, []
        return (N_TEXT, prefix, codec, []) if codec is not None else None
    if t in (ev.BLOB, ev.TINY_BLOB, ev.MEDIUM_BLOB, ev.LONG_BLOB):
        if binary:
            return N_BINARY, meta, 0, []
        return (N_TEXT, meta, codec, []) if codec is not None and not is_json else None
    return None  # binary JSON, spatial, and what the Python decoder refuses itself


def _decoder(column: MapColumn, is_json: bool, codecs: Mapping[int, str]) -> Decode:
    t, meta = column.type, column.meta
    signed = not column.unsigned
    if t in _INT_SIZES:
        size = _INT_SIZES[t]
        return lambda r: int.from_bytes(r.take(size), "little", signed=signed)
    if t == ev.YEAR:
        return lambda r: _year(r.uint(1))
    if t == ev.FLOAT:  # the double its 32-bit value widens to
        return lambda r: _FLOAT.unpack(r.take(4))[0]
    if t == ev.DOUBLE:
        return lambda r: _DOUBLE.unpack(r.take(8))[0]
    if t == ev.NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        return lambda r: _decimal(r, precision, scale)
    if t == ev.DATE:
        return lambda r: _date(r.uint(3))
    if t == ev.DATETIME2:
        return lambda r: _datetime2(r, meta)
    if t == ev.TIMESTAMP2:
        return lambda r: _timestamp2(r, meta)
    if t == ev.TIME2:
        return lambda r: _time2(r, meta)
    if t == ev.BIT:
        size = (meta + 7) // 8
        if meta == 1:
            return lambda r: r.uint(1) != 0
        return lambda r: int.from_bytes(r.take(size), "big")
    if column.real_type in (ev.ENUM, ev.SET):
        text = _text(column, codecs)
        members = tuple(text(m) for m in column.members)
        if column.real_type == ev.ENUM:
            return lambda r: _enum(r.uint(meta), members)
        return lambda r: _set(r.uint(meta), members)
    if t in (ev.VARCHAR, ev.VAR_STRING, ev.STRING):
        prefix = 1 if meta < 256 else 2
        binary = column.collation == ev.BINARY_COLLATION
        if binary and t == ev.STRING:  # BINARY(n): the binlog drops trailing zero bytes
            return lambda r: _base64(r.take(r.uint(prefix)).ljust(meta, b"\0"))
        if binary:
            return lambda r: _base64(r.take(r.uint(prefix)))
        text = _text(column, codecs)
        return lambda r: text(r.take(r.uint(prefix)))
    if t in (ev.BLOB, ev.TINY_BLOB, ev.MEDIUM_BLOB, ev.LONG_BLOB):
        if column.collation == ev.BINARY_COLLATION:
            return lambda r: _base64(r.take(r.uint(meta)))
        text = _text(column, codecs)
        if is_json:  # MariaDB's JSON: LONGTEXT checked by json_valid()
            return lambda r: orjson.loads(text(r.take(r.uint(meta))))
        return lambda r: text(r.take(r.uint(meta)))
    if t == ev.JSON:  # MySQL's binary JSON
        return lambda r: mysql_json.parse(r.take(r.uint(meta)))
    if t == ev.GEOMETRY:
        return lambda r: geometry.from_stored(r.take(r.uint(meta)))
    raise BinlogError(f"column {column.name}: type {t} is not one indexer reads from the "
                      "binlog (MariaDB's temporal types from before 10.1 need "
                      "mysql56_temporal_format = ON and the table rebuilt)")


def _text(column: MapColumn, codecs: Mapping[int, str]) -> Callable[[bytes], str]:
    codec = codecs.get(column.collation if column.collation is not None else -1)
    if codec is None:
        raise BinlogError(f"column {column.name}: collation {column.collation} is not one "
                          "indexer decodes")
    if codec == "latin1-mysql":
        return latin1_text
    return lambda data: data.decode(codec)


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _year(value: int) -> int:
    return value + 1900 if value else 0


def _enum(index: int, members: tuple[str, ...]) -> str:
    return members[index - 1] if 0 < index <= len(members) else ""


def _set(bits: int, members: tuple[str, ...]) -> list[str]:
    return [m for i, m in enumerate(members) if bits >> i & 1]


def _decimal(r: Reader, precision: int, scale: int) -> str:
    return decimal_from_binary(r.take(decimal_binary_size(precision, scale)), precision, scale)


def _fraction(r: Reader, fsp: int) -> int:
    """The fraction of a second stored after a temporal value, as microseconds (signed, as
    DATETIME2 stores it)."""
    if fsp == 0:
        return 0
    size = (fsp + 1) // 2
    value = int.from_bytes(r.take(size), "big", signed=True)
    return value * (10_000 if size == 1 else 100 if size == 2 else 1)


def _digits(micros: int, fsp: int) -> str:
    return f".{micros:06d}"[:fsp + 1] if fsp else ""


def _date(value: int) -> str | None:
    day, month, year = value & 31, value >> 5 & 15, value >> 9
    if not (year and month and day):
        return None  # a zero date, or one with a zero part: null, as Debezium sends it
    return f"{year:04d}-{month:02d}-{day:02d}"


def _datetime2(r: Reader, fsp: int) -> str | None:
    packed = int.from_bytes(r.take(5), "big") - 0x8000000000
    micros = _fraction(r, fsp)
    if micros < 0:  # stored with the fraction's sign (never, for a valid DATETIME)
        packed, micros = packed - 1, micros + 1_000_000
    ymd, hms = packed >> 17, packed & 0x1FFFF
    year_month, day = ymd >> 5, ymd & 31
    year, month = divmod(year_month, 13)
    if not (year and month and day):
        return None
    return (f"{year:04d}-{month:02d}-{day:02d}T{hms >> 12:02d}:{hms >> 6 & 63:02d}:"
            f"{hms & 63:02d}{_digits(micros, fsp)}")


def _timestamp2(r: Reader, fsp: int) -> str | None:
    seconds = int.from_bytes(r.take(4), "big")
    micros = _fraction(r, fsp)
    if seconds == 0 and micros == 0:
        return None  # '0000-00-00 00:00:00'
    moment = datetime.fromtimestamp(seconds, UTC)
    return f"{moment.isoformat()[:19]}{_digits(micros, fsp)}Z"


def _time2(r: Reader, fsp: int) -> str:
    """MySQL's TIME2: a signed duration. Stored as (hours, minutes, seconds) with an offset,
    and for negative values the fraction counted back from the next whole second."""
    if fsp >= 5:
        packed = int.from_bytes(r.take(6), "big") - 0x800000000000
    else:
        whole = int.from_bytes(r.take(3), "big") - 0x800000
        fraction = 0
        if fsp:
            size = (fsp + 1) // 2
            fraction = int.from_bytes(r.take(size), "big")
            if whole < 0 and fraction:
                whole += 1
                fraction -= 1 << (8 * size)
            fraction *= 10_000 if size == 1 else 100
        packed = (whole << 24) + fraction
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    hms, micros = packed >> 24, packed & 0xFFFFFF
    return (f"{sign}{hms >> 12 & 0x3FF:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}"
            f"{_digits(micros, fsp)}")
