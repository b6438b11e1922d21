"""Canonical JSON values for MySQL column types.

A Debezium event's logical types are decoded here. A row read from MySQL arrives already in
these forms: the server writes them (``indexer.source.mysql.value_sql``), and the reindex
tests check that both paths give the same document, byte for byte.

Representations (what a user sees in ``_source``):
  DECIMAL            exact string at the column's scale: "-12.50"
  FLOAT              the double its 32-bit value widens to, exactly: 123456.7 is stored as
                     123456.703125 (what ``SELECT f + 0e0`` shows); DOUBLE as is
  BIGINT UNSIGNED    integer (exact, up to 2^64-1)
  DATE               "2024-02-29"
  DATETIME(fsp)      "2024-01-02T03:04:05.123" with exactly fsp fraction digits, no zone
  TIMESTAMP(fsp)     "2024-01-02T03:04:05.123Z" (UTC), fsp fraction digits
  TIME(fsp)          "-838:59:59", "12:34:56.789012"
  BIT(1)             true/false;  BIT(n>1) unsigned integer
  BOOLEAN            0/1 like any TINYINT(1): MySQL cannot tell them apart
  YEAR               1901-2155, or 0 for 0000 (Debezium sends 1900)
  JSON               the parsed value;  SET  list of members;  ENUM  as is
  BLOB/BINARY        base64 string (Elasticsearch's ``binary`` type)
"""

from __future__ import annotations

import base64
import binascii
import functools
import reprlib
import struct
from datetime import UTC, date, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)


# The converters below take a JSON value of any shape (``Any``) and check it themselves, so a
# wrong shape is the same TypeError, in the same words, compiled or not: a typed parameter
# would be checked by mypyc in its own words, and only when compiled.
def integer(value: Any, what: str) -> int:
    if type(value) is not int:
        raise TypeError(f"expected {what} as an integer, got {_shape(value)}")
    return value


def text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise TypeError(f"expected {what} as a string, got {_shape(value)}")
    return value


def _shape(value: Any) -> str:
    return f"{type(value).__name__} {reprlib.repr(value)}"


def decimal_from_unscaled(unscaled: int, scale: int) -> str:
    """Formats unscaled * 10^-scale exactly, never in exponent notation."""
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled))
    if scale <= 0:
        return sign + digits + "0" * -scale
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"



# Bytes of a binary DECIMAL's leftover digits (fewer than the 9 a 4-byte group holds).
_DIGIT_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_binary_size(precision: int, scale: int) -> int:
    """Bytes of MySQL's binary DECIMAL(precision, scale)."""
    whole = precision - scale
    return (whole // 9 + scale // 9) * 4 + _DIGIT_BYTES[whole % 9] + _DIGIT_BYTES[scale % 9]


_INVERTED = bytes(range(255, -1, -1))  # each byte's bits inverted (a translate table)


def decimal_from_binary(data: bytes, precision: int, scale: int) -> str:
    """MySQL's binary DECIMAL (in a binlog row, in binary JSON): the integer and the fraction
    digits in groups of nine (four bytes each, big-endian) and their leftover digits in fewer
    bytes; the sign in the top bit (set: positive), every byte inverted when negative."""
    whole = precision - scale
    sizes = ([_DIGIT_BYTES[whole % 9]] if whole % 9 else []) + [4] * (whole // 9)
    sizes += [4] * (scale // 9) + ([_DIGIT_BYTES[scale % 9]] if scale % 9 else [])
    raw = bytearray(data[:sum(sizes)])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(raw.translate(_INVERTED))
    whole_groups = (1 if whole % 9 else 0) + whole // 9
    at, digits = 0, []
    for n, size in enumerate(sizes):
        group = int.from_bytes(raw[at:at + size], "big")
        if n == 0 and n < whole_groups:
            digits.append(str(group))
        elif n < whole_groups or n - whole_groups < scale // 9:
            digits.append(f"{group:09d}")
        else:
            digits.append(f"{group:0{scale % 9}d}")
        at += size
    unscaled = int("".join(digits) or "0")
    return decimal_from_unscaled(-unscaled if negative else unscaled, scale)


def decimal_from_base64(encoded: Any, scale: int) -> str:
    """Kafka Connect's Decimal: big-endian two's-complement bytes of the unscaled value."""
    return decimal_from_unscaled(unscaled_from_base64(encoded), scale)


def unscaled_from_base64(encoded: Any) -> int:
    try:
        raw = binascii.a2b_base64(text(encoded, "decimal bytes"), strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64 decimal bytes: {reprlib.repr(encoded)}") from exc
    return int.from_bytes(raw, "big", signed=True)



def date_from_days(days: Any) -> str:
    return (EPOCH_DATE + timedelta(days=integer(days, "days"))).isoformat()


def format_datetime(value: datetime, fsp: int) -> str:
    # isoformat's fixed-width "YYYY-MM-DDTHH:MM:SS.ffffff" cut to fsp digits (truncated, as
    # MySQL stores them); any zone suffix falls off too.
    return value.isoformat(timespec="microseconds")[: 19 + (fsp + 1 if fsp else 0)]


def datetime_from_micros(micros: Any, fsp: int) -> str:
    seconds, fraction = divmod(integer(micros, "a time"), 1_000_000)
    if fsp == 0:
        return _datetime_second(seconds)
    formatted = f"{_datetime_second(seconds)}.{fraction:06d}"
    return formatted if fsp == 6 else formatted[: 20 + fsp]


# Change streams carry runs of nearby timestamps (updated_at is close to "now"): formatting
# each second once and adding the fraction is a third of the cost of a datetime per value.
@functools.lru_cache(maxsize=4096)
def _datetime_second(seconds: int) -> str:
    return (EPOCH + timedelta(seconds=seconds)).isoformat()


def format_timestamp(value: datetime, fsp: int) -> str:
    """A TIMESTAMP column as UTC; a naive value is taken to be UTC already."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return format_datetime(value, fsp) + "Z"


def timestamp_from_iso(iso: Any, fsp: int) -> str:
    try:
        parsed = datetime.fromisoformat(text(iso, "a timestamp"))
    except ValueError as exc:
        raise ValueError(f"not an ISO-8601 timestamp: {reprlib.repr(iso)}") from exc
    return format_timestamp(parsed, fsp)


def time_from_micros(duration: Any, fsp: int) -> str:
    """MySQL TIME is a signed duration up to 838:59:59, not a time of day."""
    micros = integer(duration, "a time")
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    formatted = f"{sign}{hours:02d}:{mins:02d}:{secs:02d}"
    if fsp > 0:
        formatted += "." + f"{fraction:06d}"[:fsp]
    return formatted



def year(value: Any) -> int:
    """MySQL's YEAR: 1901-2155, or 0 for '0000', which Debezium sends as 1900 (no YEAR)."""
    number = integer(value, "a YEAR")
    return 0 if number == 1900 else number



def bits_from_base64_le(encoded: Any) -> int:
    """Debezium's Bits: the bit string as little-endian bytes."""
    return int.from_bytes(base64.b64decode(text(encoded, "bits")), "little")



def set_members(members: Any) -> list[str]:
    return members.split(",") if text(members, "set members") else []



def unsigned_from_signed_long(value: Any) -> int:
    """bigint.unsigned.handling.mode=long wraps values >= 2^63; undo the wrap."""
    number = integer(value, "a BIGINT UNSIGNED")
    return number + (1 << 64) if number < 0 else number


_FLOAT32 = struct.Struct("<f")


def float32(value: Any) -> float:
    """A FLOAT column's value as the double it widens to. Debezium writes Java's shortest
    text of the 32-bit value, which names a nearby double instead; MySQL's own text of a
    FLOAT keeps only 6 digits (the reindex reads ``f + 0e0``)."""
    if type(value) is not float and type(value) is not int:
        raise TypeError(f"expected a FLOAT as a number, got {_shape(value)}")
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
    except (struct.error, OverflowError) as exc:  # past a FLOAT's range
        raise ValueError(f"not a FLOAT: {value!r}") from exc
