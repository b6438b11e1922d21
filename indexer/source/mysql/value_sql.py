"""How the server writes each column's value: as the canonical value of
:mod:`indexer.core.values` (or text a finisher ends) for rows read, as the text
:mod:`indexer.core.checksums` hashes for checksums, and the document id it computes."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson

from indexer.core import geometry, values
from indexer.core.geometry import SPATIAL_TYPES
from indexer.core.layout import Column, Flavor, TableLayout
from indexer.source.mysql.connection import quote

Converter = Callable[[Any], Any]


INTEGERS = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")


FLOATS = ("float", "double", "real")


TEXTS = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


BINARIES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


def _unless_zero_date(column: str, expression: str) -> str:
    """Dates with a zero part ('0000-00-00', '2024-02-00') are NULL, as Debezium sends them."""
    return (f"IF(YEAR({column}) = 0 OR MONTH({column}) = 0 OR DAYOFMONTH({column}) = 0, "
            f"NULL, {expression})")


def value_sql(column: Column) -> str:
    """SQL for one column's element of the row's JSON array: the canonical value of
    :mod:`indexer.core.values` where the server can write it, else text :func:`finisher` ends."""
    c, t = quote(column.name), column.data_type
    if t in INTEGERS:
        # YEAR 0 prints as 0000 and ZEROFILL pads: neither is a JSON number.
        zero_padded = t == "year" or "zerofill" in column.column_type
        return f"CAST({c} AS {'UNSIGNED' if column.unsigned else 'SIGNED'})" if zero_padded else c
    if t == "date":
        return _unless_zero_date(c, f"CAST({c} AS CHAR)")
    if t == "datetime":
        return _unless_zero_date(c, f"REPLACE(CAST({c} AS CHAR), ' ', 'T')")
    if t == "timestamp":  # the session's time zone is UTC (connect)
        return _unless_zero_date(c, f"CONCAT(REPLACE(CAST({c} AS CHAR), ' ', 'T'), 'Z')")
    if t in BINARIES:
        return f"REPLACE(TO_BASE64({c}), '\\n', '')"
    if t == "bit":
        return f"CAST({c} AS UNSIGNED)"
    if t in TEXTS:
        # Each column in its own character set: JSON_ARRAY and CONCAT refuse to mix sets
        # (a utf16 column beside utf8mb4 ones), and checksums must hash UTF-8's bytes.
        return f"CONVERT({c} USING utf8mb4)"
    if t == "float":  # its own text keeps 6 digits; the double it widens to is exact
        return f"CAST({c} + 0e0 AS CHAR)"
    if t in SPATIAL_TYPES:  # the stored bytes, as the binlog has them (MariaDB refuses CAST)
        return f"HEX({c})"
    # DECIMAL exact at its scale, TIME as MySQL prints it, doubles and JSON as their text.
    return f"CAST({c} AS CHAR)"


def finisher(column: Column) -> Converter | None:
    """Turns what :func:`value_sql` sent into the canonical value; None = already is."""
    t = column.data_type
    if t in FLOATS:
        return float  # the text a plain SELECT sends, parsed the same way
    if t == "json":
        return orjson.loads
    if t == "set":
        return values.set_members
    if t == "bit" and column.column_type in ("bit", "bit(1)"):
        return lambda v: v == 1
    if t in SPATIAL_TYPES:
        return geometry.from_hex
    return None


def text_sql(column: Column, flavor: Flavor = "mariadb", normalize_json: bool = True) -> str:
    """SQL giving the column as the text :func:`indexer.core.checksums.hash_text` gives its
    canonical value (NULL for NULL). JSON objects and arrays, and SET members, are JSON text
    as MariaDB's JSON_NORMALIZE writes it (``normalize_json``; MariaDB before 10.7 lacks it
    and compacts, which keeps numbers as written) and spaced on MySQL 8, which renders JSON
    that way and has neither function."""
    c, t = quote(column.name), column.data_type
    if t in FLOATS:
        # As a double, written the way checksums.double_text writes it (a FLOAT too: its
        # own text has only 6 digits; DOUBLE(M,D) would keep D decimals).
        return f"CAST({c} + 0e0 AS CHAR)"
    if t in ("date", "datetime", "timestamp", "bit") or t in BINARIES or t in SPATIAL_TYPES \
            or t in INTEGERS or (t in TEXTS and t != "set"):
        return value_sql(column)  # integers as numbers: ZEROFILL and YEAR's text pad them
    if t == "json":
        if flavor != "mariadb":
            return f"CAST({c} AS CHAR)"
        # A scalar is hashed as the value the document holds: a string unquoted (its
        # escapes decoded), a number as a number, true as 1.
        whole = f"JSON_NORMALIZE({c})" if normalize_json else f"JSON_COMPACT({c})"
        return (f"CASE JSON_TYPE({c}) WHEN 'OBJECT' THEN {whole} WHEN 'ARRAY' THEN {whole} "
                f"WHEN 'STRING' THEN JSON_UNQUOTE({c}) WHEN 'INTEGER' THEN TRIM({c}) "
                f"WHEN 'DOUBLE' THEN CAST(CAST(TRIM({c}) AS DOUBLE) AS CHAR) "
                f"WHEN 'BOOLEAN' THEN IF(TRIM({c}) = 'true', '1', '0') END")
    if t == "set":
        c = value_sql(column)
        # Members as JSON strings: '"' and '\\' escaped as orjson escapes them.
        c = f"REPLACE(REPLACE({c}, '\\\\', '\\\\\\\\'), '\"', '\\\\\"')"
        separator = "\",\"" if flavor == "mariadb" else "\", \""
        return f"IF({c} = '', '[]', CONCAT('[\"', REPLACE({c}, ',', '{separator}'), '\"]'))"
    return f"CAST({c} AS CHAR)"


def id_sql(layout: TableLayout) -> str:
    """The document id (documents.document_id) computed by the server."""
    key = layout.key
    if len(key) == 1:
        return text_sql(key[0], layout.flavor)
    escaped = [f"REPLACE(REPLACE({text_sql(c, layout.flavor)}, '\\\\', '\\\\\\\\'), '|', '\\\\|')"
               for c in key]
    return f"CONCAT_WS('|', {', '.join(escaped)})"


def sql_param(column: Column, value: Any) -> Any:
    """A canonical value (:mod:`indexer.core.values`, as documents and events carry it) as a
    query parameter matching the column's stored value: binaries from their base64, date-times
    without the ISO 'T' and 'Z'. Others are already what the server compares."""
    if value is None:
        return None
    t = column.data_type
    if t in BINARIES and isinstance(value, str):
        return base64.b64decode(value)
    if t in ("datetime", "timestamp") and isinstance(value, str):
        return value.replace("T", " ").removesuffix("Z")
    if t == "bit" and isinstance(value, bool):
        return int(value)
    return value
