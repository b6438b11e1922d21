"""Per-row content checksums, the Python twin of the SQL that `indexer reconcile` runs.

Pure. A document's checksum is the CRC32 of ``#name=value`` for each field, in the order of
the field names, with NULL fields left out; :func:`indexer.source.mysql.hash_sql` computes
the same text inside the server from the table's current columns. So:

- a document whose fields differ from the table's columns (a column added with a value,
  dropped or renamed) has another checksum, even when every shared value matches;
- a column that is NULL and a field that is absent count as equal: a nullable column added
  with no default leaves older documents in sync;
- the order of the columns does not matter (moving one is not a change of content).

Each value is written as the server writes it: FLOAT and DOUBLE as MySQL's shortest
round-trip text of the double (:func:`double_text`), objects, arrays and SET members as
MariaDB's JSON_NORMALIZE writes them (:func:`normal_json`) or spaced as MySQL 8 renders JSON,
a geometry as the hex of its stored bytes (``HEX(column)``).

The texts can still differ where the server keeps what the document cannot (MariaDB keeps a
JSON string's escapes as stored: "\\u00e9" where the document holds "é"); reconciliation
therefore never calls a row stale on its checksum alone, only once the documents themselves
differ (:mod:`indexer.core.compare`).
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from indexer.core.geometry import Geometry

# Stored in each index's mapping ``_meta`` (:data:`CHECKSUM_META`): documents of an index
# created by an older version carry checksums that no longer match the SQL's.
# 3: objects and arrays hash as JSON_NORMALIZE writes them (numbers in exponent form, keys
# sorted), no longer as compact text, which MariaDB keeps as it was written ("1.50", "1e2").
CHECKSUM_FORMAT = 3
CHECKSUM_META = "indexer_checksum"
# A document's content hash, as :func:`content_hash` takes it (the document, spaced).
Hasher = Callable[[Mapping[str, Any], bool], int]
# The native module's content_hash(doc, spaced, hash_text): the CRC32, or None (declined).
NativeHash = Callable[[dict[str, Any], bool, Callable[[Any, bool], str]], int | None]

# Distinct field lists seen (one per table layout): more than any deployment has live.
LAYOUTS_CACHED = 256

# MySQL's double-to-text (my_gcvt for CAST(... AS CHAR)) writes plain digits while the
# decimal point's position (as in 0.DIGITS x 10^decpt) is within these bounds, exponent
# notation beyond them; a number with digits after the point stays plain up to 17 digits.
# Measured on MariaDB 11 against 38,000 doubles of every magnitude (tests/integration).
_PLAIN_MIN_DECPT = -14
_PLAIN_MAX_DECPT = 15


def _digits(value: float) -> tuple[str, str, int]:
    """(sign, significant digits, decimal point position) of a non-zero double's shortest
    round-trip text: 0.DIGITS x 10^decpt."""
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    decpt = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(digits))
    return sign, digits.rstrip("0"), decpt


def double_text(value: float) -> str:
    """A double as MySQL's ``CAST(x AS CHAR)`` writes it: the same shortest round-trip
    digits as Python's ``repr``, laid out the server's way (``1e20``, ``0.00001``, ``100``)."""
    if value == 0:
        return "0"  # the server has no negative zero in text
    sign, digits, decpt = _digits(value)
    count = len(digits)
    if decpt >= _PLAIN_MIN_DECPT and (decpt <= _PLAIN_MAX_DECPT or count > decpt):
        if decpt <= 0:
            return f"{sign}0.{'0' * -decpt}{digits}"
        if decpt < count:
            return f"{sign}{digits[:decpt]}.{digits[decpt:]}"
        return sign + digits + "0" * (decpt - count)
    point = f"{digits[0]}.{digits[1:]}" if count > 1 else digits
    return f"{sign}{point}e{decpt - 1}"


def normal_number(value: int | float) -> str:
    """A JSON number as JSON_NORMALIZE writes it: its significant digits as d.ddd and an
    exponent (``1.5E300``, ``1.0E2``, ``-2.5E-7``, ``0.0E0``), whatever the text it came as."""
    if value == 0:
        return "0.0E0"
    if type(value) is int:
        sign, text = ("-", str(-value)) if value < 0 else ("", str(value))
        digits, decpt = text.rstrip("0"), len(text)
    else:
        sign, digits, decpt = _digits(value)
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{decpt - 1}"


def normal_json(value: Any) -> str:
    """A JSON value as MariaDB's JSON_NORMALIZE writes it: no spaces, object keys sorted by
    their bytes, numbers as :func:`normal_number`; strings as orjson escapes them."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int | float):
        return normal_number(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if isinstance(value, list):
        return "[" + ",".join([normal_json(v) for v in value]) + "]"
    if isinstance(value, dict):
        keys = sorted((orjson.dumps(k)[1:-1], k) for k in value)
        return "{" + ",".join([f'"{lexeme.decode()}":{normal_json(value[k])}'
                               for lexeme, k in keys]) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def hash_text(value: Any, spaced: bool = False) -> str:
    """A non-NULL value as the text the reconciliation's SQL computes for the same column.

    Objects, arrays and SET members (a list) are JSON text: as MariaDB's JSON_NORMALIZE
    writes it, or ``spaced`` after each ',' and ':' as MySQL 8 renders JSON (it has neither
    function). A JSON column holding a scalar hashes as that scalar.
    """
    if value is True or value is False:
        return "1" if value else "0"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return double_text(value)
    if isinstance(value, Geometry):
        return value.text
    if spaced:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return normal_json(value)


def content_hash(doc: Mapping[str, Any], spaced: bool = False) -> int:
    """CRC32 of ``#name=value`` for each non-NULL field, in the order of the names."""
    # A loop of appends, the strings and integers skipping the call: this runs once per
    # document, and formatting each pair would cost half as much again.
    parts: list[str] = []
    append = parts.append
    for name, prefix in _prefixes(tuple(doc)):
        value = doc[name]
        if value is None:
            continue
        append(prefix)
        kind = type(value)
        append(value if kind is str else str(value) if kind is int else hash_text(value, spaced))
    return zlib.crc32("".join(parts).encode())


@functools.lru_cache(maxsize=LAYOUTS_CACHED)
def _prefixes(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, f"#{name}=") for name in sorted(names))


class NativeHasher:
    """:func:`content_hash` through the native module's (``native/src/checksum.rs``), which
    writes strings and integers itself, every other value through :func:`hash_text`, and
    declines a document it cannot hash exactly: the reference hashes that one."""

    def __init__(self, native: NativeHash) -> None:
        self._native = native

    def __call__(self, doc: Mapping[str, Any], spaced: bool = False) -> int:
        if type(doc) is dict:
            found = self._native(doc, spaced, hash_text)
            if found is not None:
                return found
        return content_hash(doc, spaced)
