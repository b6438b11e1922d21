"""Where a document lives: its ``_routing``, from a column of its row or a field of its joined
document. Pure.

A routed table's every write names a routing (its index requires one), tombstones included:
a write lands on one shard, and a tombstone elsewhere would not outrank the document it is
meant to remove. A row without a routing value (NULL, empty, absent) is routed by its id,
which is where an unrouted document would be. A row whose routing value changes leaves the
shard it was on: a tombstone there at the change's version, beside its write at the new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer.core.layout import TableLayout
from indexer.errors import ConfigError, DecodeError

# Column types whose values are objects or arrays in a document, not one routing value.
UNROUTABLE_TYPES = frozenset({"json", "geometry", "point", "linestring", "polygon", "multipoint",
                              "multilinestring", "multipolygon", "geometrycollection",
                              "geomcollection", "set"})


def value_at(document: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at a dotted path (a column, or a lookup's field); None where it stops."""
    found: Any = document
    for part in path:
        if not isinstance(found, Mapping):
            return None
        found = found.get(part)
    return found


def scalar_text(value: Any) -> str | None:
    """A single value as ids and routings spell it (None: not a single value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value)
    return None


def routing_of(value: Any, doc_id: str, name: str) -> str:
    """The routing text for a value (None or empty: the id's)."""
    if value is None or value == "":
        return doc_id
    text = scalar_text(value)
    if text is not None:
        return text
    raise DecodeError("invalid-routing", f"the routing field {name!r} holds a "
                      f"{type(value).__name__}; routing takes a single value")


def check_column(routing: str, layout: TableLayout, table: str) -> None:
    """ConfigError when a table's routing names no column of it, or one whose values are
    objects (a joined document's path is checked with its joins,
    :mod:`indexer.core.tree_checks`)."""
    if not routing or "." in routing:
        return
    column = next((c for c in layout.columns if c.name == routing), None)
    if column is None:
        raise ConfigError(f"tables[{table}].routing: the table has no column {routing!r}")
    if column.data_type in UNROUTABLE_TYPES:
        raise ConfigError(f"tables[{table}].routing: column {routing!r} is {column.data_type}; "
                          "route by a column of single values (a number, a text, a date)")
