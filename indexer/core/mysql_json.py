"""MySQL 8's binary JSON (the JSON column type as its binlog carries it) as the JSON value it
stands for. MariaDB stores JSON as text and never writes this.

Pure. The format (MySQL's json_binary.h): a type byte, then objects and arrays as an element
count and a size, entries pointing at (or, for small scalars, holding) their values, then the
keys and values; scalars as little-endian integers, a double, a length-prefixed UTF-8 string,
or an "opaque" MySQL value (a DECIMAL, a date or time inside a document), written here as
``CAST(json AS CHAR)`` writes it, which is what the reindex reads.
"""

from __future__ import annotations

import struct
from typing import Any

from indexer.core.values import decimal_from_binary

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0, 1, 2, 3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING = range(4, 13)
OPAQUE = 15
_LITERALS = {0: None, 1: True, 2: False}
# MySQL field types an opaque value can hold
_NEWDECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP = 246, 10, 11, 12, 7


class JsonError(ValueError):
    """Bytes that are no binary JSON document."""


def parse(data: bytes) -> Any:
    if not data:
        return None  # an empty value: JSON null (MySQL writes it for a JSON NULL literal)
    return _value(data[0], data, 1, len(data))


def _value(kind: int, data: bytes, at: int, end: int) -> Any:
    if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(kind, data[at:end])
    if kind == LITERAL:
        return _LITERALS[data[at]]
    if kind in (INT16, UINT16, INT32, UINT32, INT64, UINT64):
        size = {INT16: 2, UINT16: 2, INT32: 4, UINT32: 4, INT64: 8, UINT64: 8}[kind]
        return int.from_bytes(data[at:at + size], "little",
                              signed=kind in (INT16, INT32, INT64))
    if kind == DOUBLE:
        return struct.unpack_from("<d", data, at)[0]
    if kind == STRING:
        length, at = _varlen(data, at)
        return data[at:at + length].decode("utf-8")
    if kind == OPAQUE:
        field_type = data[at]
        length, at = _varlen(data, at + 1)
        return _opaque(field_type, data[at:at + length])
    raise JsonError(f"binary JSON type {kind} is unknown")


def _container(kind: int, data: bytes) -> Any:
    large = kind in (LARGE_OBJECT, LARGE_ARRAY)
    size = 4 if large else 2
    count = int.from_bytes(data[0:size], "little")
    at = 2 * size
    keys: list[str] = []
    if kind in (SMALL_OBJECT, LARGE_OBJECT):
        for _ in range(count):
            offset = int.from_bytes(data[at:at + size], "little")
            length = int.from_bytes(data[at + size:at + size + 2], "little")
            keys.append(data[offset:offset + length].decode("utf-8"))
            at += size + 2
    values = []
    for _ in range(count):
        element = data[at]
        inline = element == LITERAL or element in (INT16, UINT16) or (
            large and element in (INT32, UINT32))
        if inline:
            values.append(_value(element, data, at + 1, at + 1 + size))
        else:
            offset = int.from_bytes(data[at + 1:at + 1 + size], "little")
            values.append(_value(element, data, offset, len(data)))
        at += 1 + size
    if kind in (SMALL_ARRAY, LARGE_ARRAY):
        return values
    return dict(zip(keys, values, strict=True))


def _varlen(data: bytes, at: int) -> tuple[int, int]:
    """A length in 7-bit groups, low first; the high bit says another follows."""
    length = shift = 0
    while True:
        byte = data[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, at
        shift += 7


def _opaque(field_type: int, data: bytes) -> Any:
    if field_type == _NEWDECIMAL:  # precision, scale, then the binary DECIMAL
        precision, scale = data[0], data[1]
        return float(decimal_from_binary(data[2:], precision, scale))
    if field_type in (_DATE, _TIME, _DATETIME, _TIMESTAMP):
        (packed,) = struct.unpack_from("<q", data)
        return _temporal(field_type, packed)
    return data.decode("utf-8", "replace")  # anything else: its bytes, as MySQL prints them


def _temporal(field_type: int, packed: int) -> str:
    """A packed MySQL temporal value (int part << 24 | microseconds) as MySQL prints it in a
    JSON document."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micros, whole = packed & 0xFFFFFF, packed >> 24
    if field_type == _TIME:
        return (f"{sign}{whole >> 12 & 0x3FF:02d}:{whole >> 6 & 63:02d}:{whole & 63:02d}"
                f".{micros:06d}")
    ymd, hms = whole >> 17, whole & 0x1FFFF
    year, month = divmod(ymd >> 5, 13)
    date = f"{year:04d}-{month:02d}-{ymd & 31:02d}"
    if field_type == _DATE:
        return date
    return f"{date} {hms >> 12:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}.{micros:06d}"
