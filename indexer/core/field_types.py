"""Search-server field types for MySQL columns: the mapping `indexer mappings generate`
writes, and the check `indexer mappings validate` makes of a mapping against the live table.

Pure. Each column type gets the type that accepts exactly the canonical value indexer writes
for it (:mod:`indexer.core.values`: exact DECIMAL strings, unsigned 64-bit integers, ISO
date-times, TIME as a duration text, SET as arrays, base64 binaries, JSON as JSON), the best
the server has, with a safe fallback where it lacks one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from indexer.core.geometry import SPATIAL_TYPES
from indexer.core.layout import Column

# Every integer range a field type holds (JSON numbers beyond it are refused).
RANGES = {
    "byte": (-(2**7), 2**7 - 1), "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1),
    "unsigned_long": (0, 2**64 - 1),
}
# Decimal digits a double carries exactly through text and back.
DOUBLE_DIGITS = 15
# Longer texts are left out of a keyword sub-field (they stay searchable as text).
KEYWORD_IGNORE_ABOVE = 256
TEXT_TYPES = ("char", "varchar")
LONG_TEXT_TYPES = ("tinytext", "text", "mediumtext", "longtext")
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
# date_nanos holds 1970 to 2262; a TIMESTAMP (1970-2038) fits, a DATE or DATETIME does not.
NANOS_YEARS = (1970, 2262)
_PARAMS = re.compile(r"^\w+\((\d+)(?:,(\d+))?\)")


@dataclass(frozen=True)
class Capabilities:
    """The field types of one search server that a full distribution may lack."""

    name: str
    unsigned_long: bool = True
    scaled_float: bool = True
    geo_shape: bool = True  # a module (x-pack spatial, OpenSearch's geo) minimal builds lack
    object_type: str = "flattened"  # flat_object on OpenSearch


SERVERS = {
    "es9": Capabilities("es9"),
    "es8": Capabilities("es8"),
    "opensearch2": Capabilities("opensearch2", object_type="flat_object"),
    "opensearch3": Capabilities("opensearch3", object_type="flat_object"),
}


def _params(column: Column) -> tuple[int | None, int | None]:
    match = _PARAMS.match(column.column_type)
    if match is None:
        return None, None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


def integer_range(column: Column) -> tuple[int, int] | None:
    """The values an integer-valued column can hold (None: not integer-valued)."""
    t, unsigned = column.data_type, column.unsigned
    bits = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32,
            "bigint": 64}.get(t)
    if bits is not None:
        return (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if t == "year":
        return (0, 2155)
    if t == "bit":
        width = _params(column)[0] or 1
        return None if width == 1 else (0, 2**width - 1)
    if t == "decimal":
        precision, scale = _params(column)
        if not scale and precision is not None and precision <= 18:
            return (-(10**precision - 1), 10**precision - 1)
    return None


def _smallest_integer(low: int, high: int, caps: Capabilities) -> dict[str, Any]:
    for name in ("byte", "short", "integer", "long", "unsigned_long"):
        lo, hi = RANGES[name]
        if lo <= low and high <= hi and (name != "unsigned_long" or caps.unsigned_long):
            return {"type": name}
    return {"type": "keyword"}  # exact digits; sorts as text


def field_for(column: Column, caps: Capabilities) -> dict[str, Any]:
    """The field definition for one column."""
    t = column.data_type
    if t == "bit" and (_params(column)[0] or 1) == 1:
        return {"type": "boolean"}
    bounds = integer_range(column)
    if bounds is not None:
        return _smallest_integer(*bounds, caps)
    if t == "decimal":
        precision, scale = _params(column)
        if precision is not None and precision <= DOUBLE_DIGITS:
            if caps.scaled_float:
                return {"type": "scaled_float", "scaling_factor": 10 ** (scale or 0)}
            return {"type": "double"}
        # More digits than a double holds: the exact text, and a numeric view for ranges.
        return {"type": "keyword", "fields": {"number": {"type": "double"}}}
    if t == "float":
        return {"type": "float"}
    if t in ("double", "real"):
        return {"type": "double"}
    if t == "date":
        return {"type": "date", "format": "strict_date"}
    if t == "datetime":
        return {"type": "date"}  # milliseconds in the index; the _source keeps every digit
    if t == "timestamp":
        return {"type": "date_nanos" if column.scale > 3 else "date"}
    if t == "time":
        return {"type": "keyword"}  # a duration ("-838:59:59"), not a time of day
    if t in TEXT_TYPES:
        return {"type": "text", "fields": {
            "keyword": {"type": "keyword", "ignore_above": KEYWORD_IGNORE_ABOVE}}}
    if t in LONG_TEXT_TYPES:
        return {"type": "text"}
    if t in ("enum", "set"):
        return {"type": "keyword"}
    if t in BINARY_TYPES:
        return {"type": "binary"}
    if t == "json":
        return {"type": caps.object_type}
    if t == "point" or (t in SPATIAL_TYPES and caps.geo_shape):
        # GeoJSON (indexer.core.geometry); coordinates that are not WGS 84 longitude and
        # latitude (another SRID's metres) leave the field unindexed, not the row refused.
        return {"type": "geo_point" if t == "point" else "geo_shape", "ignore_malformed": True}
    # Other types: kept in _source, not indexed, never refused.
    return {"type": "object", "enabled": False}


def generate(columns: Sequence[Column], names: Mapping[str, str],
             caps: Capabilities) -> dict[str, Any]:
    """A mapping file's body for the projected columns (``names``: column -> field name).
    ``dynamic: false`` stores a column added later in ``_source`` without refusing it; run
    ``mappings generate`` and ``reindex`` to make it searchable."""
    properties = {names[c.name]: field_for(c, caps) for c in columns if c.name in names}
    return {"settings": {"index": {"number_of_shards": 1, "refresh_interval": "1s"}},
            "mappings": {"dynamic": False, "properties": properties}}


def column_problem(column: Column, spec: Mapping[str, Any]) -> str | None:
    """Why a field definition would refuse or lose this column's values (None: it fits)."""
    field_type = str(spec.get("type", "object"))
    t = column.data_type
    bounds = integer_range(column)
    if field_type in RANGES:
        lo, hi = RANGES[field_type]
        if bounds is None and t not in ("bit",):
            if t in ("float", "double", "real", "decimal"):
                return f"{field_type} drops the fraction of a {column.column_type}"
            return f"{field_type} refuses a {column.column_type}'s values"
        if bounds is not None and (bounds[0] < lo or bounds[1] > hi):
            return (f"{field_type} holds {lo}..{hi} but a {column.column_type} holds "
                    f"{bounds[0]}..{bounds[1]}")
        return None
    if field_type in ("float", "half_float"):
        if t in ("double", "real"):
            return f"{field_type} refuses a DOUBLE above 3.4e38 and keeps 7 of its 17 digits"
        if t == "decimal" or (bounds is not None and max(map(abs, bounds)) > 2**24):
            return f"{field_type} keeps about 7 digits of a {column.column_type}"
        return None if t == "float" or bounds is not None else _not_numeric(field_type, column)
    if field_type == "double":
        if t == "decimal" and (_params(column)[0] or 0) > DOUBLE_DIGITS:
            return f"double keeps {DOUBLE_DIGITS} of a {column.column_type}'s digits"
        if bounds is not None and max(map(abs, bounds)) > 2**53:
            return f"double rounds a {column.column_type} above 2^53"
        if t in ("float", "double", "real", "decimal") or bounds is not None:
            return None
        return _not_numeric(field_type, column)
    if field_type == "scaled_float":
        precision, scale = _params(column)
        factor = float(spec.get("scaling_factor", 1))
        if t == "decimal" and factor < 10 ** (scale or 0):
            return (f"scaled_float with scaling_factor {spec.get('scaling_factor')} rounds a "
                    f"{column.column_type} (needs 10^{scale})")
        if t == "decimal" and (precision or 0) > DOUBLE_DIGITS:
            return f"scaled_float keeps {DOUBLE_DIGITS} of a {column.column_type}'s digits"
        if t in ("float", "double", "real"):
            return f"scaled_float rounds a {column.column_type}"
        return None if t == "decimal" or bounds is not None else _not_numeric(field_type, column)
    if field_type == "boolean":
        if t == "bit" and (_params(column)[0] or 1) == 1:
            return None
        return (f"boolean refuses a {column.column_type}'s values (indexer writes it as "
                f"{'a number: 0/1' if bounds is not None else 'its value'})")
    if field_type in ("date", "date_nanos"):
        if t not in ("date", "datetime", "timestamp"):
            return f"{field_type} refuses a {column.column_type}'s values"
        if field_type == "date_nanos" and t != "timestamp":
            return (f"date_nanos refuses years outside {NANOS_YEARS[0]}-{NANOS_YEARS[1]}; a "
                    f"{column.column_type} holds 1000-9999 (use date)")
        return None
    if field_type == "binary" and t not in BINARY_TYPES:
        return f"binary refuses a {column.column_type}'s values (not base64)"
    if field_type in ("flattened", "flat_object", "object", "nested"):
        if field_type in ("object", "nested") and spec.get("enabled") is False:
            return None
        if t != "json":
            return f"{field_type} refuses a {column.column_type}'s values (not objects)"
        if field_type in ("object", "nested"):
            return (f"{field_type} maps a JSON column's keys as they come: a key holding a "
                    "number in one row and text in another is refused (use flattened)")
        return None
    if field_type in ("geo_point", "geo_shape") and t in SPATIAL_TYPES:
        if field_type == "geo_point" and t != "point":
            return f"geo_point refuses a {column.column_type}'s lines and shapes (use geo_shape)"
        return None
    if field_type in ("ip", "geo_point", "geo_shape", "point", "shape") and t != "json":
        return f"{field_type} refuses most {column.column_type} values"
    return None  # keyword, text and friends take any value's text


# SRIDs whose coordinates are WGS 84 longitude and latitude as Elasticsearch reads them (0:
# none declared, which MariaDB and MySQL default to).
WGS84_SRIDS = (0, 4326)


def _geo_note(label: str, column: Column, spec: Mapping[str, Any]) -> str:
    """How a geo field reads the column's coordinates, and what it does with others."""
    kept = (" (ignore_malformed): the row is written, the value kept in _source"
            if spec.get("ignore_malformed") else
            ": such rows are refused unless ignore_malformed is true")
    if column.srid not in WGS84_SRIDS:
        return (f"{label}: declares SRID {column.srid}, which {spec['type']} cannot represent "
                "(it takes WGS 84 longitude and latitude, SRID 4326): values whose coordinates "
                "are not degrees within ±180/±90 are not indexed" + kept)
    return (f"{label}: {spec['type']} reads coordinates as WGS 84 longitude and latitude "
            "(SRID 4326, or degrees under SRID 0); another SRID's (metres) are not indexed"
            + kept)


def _not_numeric(field_type: str, column: Column) -> str:
    return f"{field_type} refuses a {column.column_type}'s non-numeric values"


def check(columns: Sequence[Column], names: Mapping[str, str], mappings: Mapping[str, Any],
          new_columns: str = "keep") -> tuple[list[str], list[str]]:
    """(problems, notes) of a mapping against the table: fields that refuse or lose values,
    columns without a field under ``dynamic: strict`` or ``new_columns = "map"`` (problems);
    columns left to dynamic mapping, fields for no column, how geo fields read coordinates
    (notes)."""
    properties: Mapping[str, Any] = mappings.get("properties", {})
    dynamic = str(mappings.get("dynamic", True)).lower()
    problems: list[str] = []
    notes: list[str] = []
    fields = set()
    for column in columns:
        name = names.get(column.name)
        if name is None:
            continue
        fields.add(name)
        label = name if name == column.name else f"{name} (column {column.name})"
        spec = properties.get(name)
        if spec is None:
            if dynamic == "strict":
                problems.append(f"{label}: no field, and dynamic is strict: every row is refused")
            elif new_columns == "map" and dynamic != "true":
                problems.append(f"{label}: no field, although new_columns = \"map\": the "
                                "daemon maps it in the live index, but an index made from this "
                                "file (a reindex) leaves it unsearchable: `indexer mappings "
                                "generate`")
            elif dynamic == "true":
                notes.append(f"{label}: no field; the server guesses its type from the first "
                             "value (a DOUBLE may become float): `indexer mappings generate`")
            else:
                notes.append(f"{label}: no field; stored in _source but not searchable")
            continue
        problem = column_problem(column, spec)
        if problem is not None:
            problems.append(f"{label}: {problem}")
        elif spec.get("type") in ("geo_point", "geo_shape"):
            notes.append(_geo_note(label, column, spec))
    for name in sorted(set(properties) - fields - {"_indexer"}):
        notes.append(f"{name}: a field for no column of the table (dropped or renamed?)")
    return problems, notes
