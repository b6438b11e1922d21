"""A table's joins from its ``[tables.lookups.<name>]`` and ``[tables.children.<name>]``
sections (nested to any depth), validated with one-line errors naming the setting.

What can be checked without MySQL is checked here: names, identifiers, composite ``on``
keys, projections, orders and caps, cycles and depth. What needs the tables (columns exist,
the join columns are indexed both ways) is checked at start against MySQL
(:func:`indexer.core.tree_checks.check`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from indexer.errors import ConfigError
from indexer.settings import (
    DEFAULT_CHILDREN_MAX,
    MAX_JOIN_DEPTH,
    ConnectorSettings,
    JoinKind,
    JoinSettings,
)

# A document field a join fills: a plain name (a dot would make it a path).
FIELD_NAME = re.compile(r"^[A-Za-z0-9_$-]{1,128}$")
_ORDER = re.compile(r"^\s*([A-Za-z0-9_$]{1,64})(?:\s+(asc|desc))?\s*$", re.IGNORECASE)
SECTIONS: tuple[tuple[str, JoinKind], ...] = (("lookups", "lookup"), ("children", "child"))
_ALLOWED = {"table", "topic", "on", "include", "exclude", "rename", "value", "allow_unindexed",
            "lookups", "children"}
_CHILD_ONLY = {"order_by", "max"}

Names = Callable[[Any, str], tuple[str, ...]]
Identifier = Callable[[str, str], None]


@dataclass(frozen=True)
class _Readers:
    """How the table's own settings are read, for its joins' alike: a list of column names,
    and a MySQL identifier (each raising ConfigError naming the setting)."""

    names: Names
    identifier: Identifier


def parse_joins(raw: dict[str, Any], where: str, database: str, table: str,
                connector: ConnectorSettings, names: Names,
                identifier: Identifier) -> tuple[JoinSettings, ...]:
    """The joins of a ``[[tables]]`` entry (``raw``), checked. ``names`` and ``identifier``
    read column lists and identifiers the way the table's own settings are read."""
    return _joins(raw, where, database, (f"{database}.{table}",), connector,
                  _Readers(names, identifier))


def _joins(raw: dict[str, Any], where: str, database: str, path: tuple[str, ...],
           connector: ConnectorSettings, read: _Readers) -> tuple[JoinSettings, ...]:
    found: list[JoinSettings] = []
    seen: set[str] = set()
    for section, kind in SECTIONS:
        entries = raw.get(section, {})
        if not isinstance(entries, dict):
            raise ConfigError(f"{where}.{section}: expected tables of joins, "
                              f"[{where}.{section}.<field>]")
        for name, entry in entries.items():
            here = f"{where}.{section}.{name}"
            if not FIELD_NAME.match(name) or name == "_indexer":
                raise ConfigError(f"{here}: {name!r} cannot name a document field (letters, "
                                  "digits, '_', '-' and '$'; '_indexer' is indexer's own)")
            if name in seen:
                raise ConfigError(f"{here}: another join of the same table fills the field "
                                  f"{name!r}")
            seen.add(name)
            found.append(_join(entry, here, name, kind, database, path, connector, read))
    return tuple(found)


def _join(raw: Any, where: str, name: str, kind: JoinKind, database: str,
          path: tuple[str, ...], connector: ConnectorSettings, read: _Readers) -> JoinSettings:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table of settings")
    allowed = _ALLOWED | (_CHILD_ONLY if kind == "child" else set())
    for key in raw:
        if key not in allowed:
            extra = (f" ({key} is for children)" if key in _CHILD_ONLY else "")
            raise ConfigError(f"{where}.{key}: unknown setting{extra}; known: "
                              f"{', '.join(sorted(allowed))}")
    table_name = raw.get("table")
    if not isinstance(table_name, str) or table_name.count(".") > 1 or not table_name:
        raise ConfigError(f"{where}.table: expected '<database>.<table>' or '<table>', got "
                          f"{table_name!r}")
    db, _, table = table_name.rpartition(".")
    db = db or database
    for part in (db, table):
        read.identifier(part, f"{where}.table")
    full = f"{db}.{table}"
    if full in path:
        cycle = " -> ".join((*path[path.index(full):], full))
        raise ConfigError(f"{where}: the join comes back to {full} ({cycle}); a document "
                          "cannot hold a cycle: join the table a fixed number of times "
                          "under another name instead, or index it on its own")
    if len(path) > MAX_JOIN_DEPTH:
        raise ConfigError(f"{where}: joins nest at most {MAX_JOIN_DEPTH} levels below the "
                          "document's table (each level costs a query per change and per "
                          "batch of documents)")
    on = raw.get("on")
    if not isinstance(on, dict) or not on or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in on.items()):
        raise ConfigError(f"{where}.on: expected {{ <the parent's column> = \"<this table's "
                          "column>\" }, one pair per column of the key")
    for parent_column, column in on.items():
        read.identifier(parent_column, f"{where}.on")
        read.identifier(column, f"{where}.on")
    include = read.names(raw["include"], f"{where}.include") if "include" in raw else None
    exclude = read.names(raw.get("exclude", []), f"{where}.exclude")
    if include is not None and exclude:
        raise ConfigError(f"{where}: set include or exclude, not both")
    rename = raw.get("rename", {})
    if not isinstance(rename, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and FIELD_NAME.match(v)
            for k, v in rename.items()):
        raise ConfigError(f"{where}.rename: expected a table of column = \"new name\"")
    if "_indexer" in rename.values():
        raise ConfigError(f"{where}.rename: '_indexer' is reserved for the indexer's own fields")
    value = raw.get("value")
    if value is not None and (not isinstance(value, str)
                              or not all(FIELD_NAME.match(p) for p in value.split("."))):
        raise ConfigError(f"{where}.value: expected a field of the joined object, or a path "
                          f"through its lookups like \"tag.name\", got {value!r}")
    allow = raw.get("allow_unindexed", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"{where}.allow_unindexed: expected true or false")
    join = JoinSettings(
        name=name, kind=kind, database=db, table=table,
        topic=str(raw.get("topic", f"{connector.topic_prefix}.{full}")),
        on=tuple(on.items()), include=include, exclude=exclude, rename=dict(rename),
        order_by=_order(raw.get("order_by", []), f"{where}.order_by"),
        max=_max(raw.get("max", DEFAULT_CHILDREN_MAX), f"{where}.max"),
        value=tuple(value.split(".")) if value else None, allow_unindexed=allow,
        joins=_joins(raw, where, db, (*path, full), connector, read))
    if join.value is not None:
        _check_value_path(join, where)
    return join


def _check_value_path(join: JoinSettings, where: str) -> None:
    """A value path runs through lookups only (a child's array has no one value), ending at
    a field of the last one."""
    node = join
    for part in join.value[:-1] if join.value else ():
        step = next((j for j in node.joins if j.name == part), None)
        if step is None or step.kind != "lookup":
            raise ConfigError(f"{where}.value: {part!r} is not a lookup of {node.full_name} "
                              "(a value path goes through lookups only)")
        node = step


def _order(raw: Any, where: str) -> tuple[tuple[str, bool], ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ConfigError(f"{where}: expected a list of columns, each optionally followed by "
                          "asc or desc")
    order = []
    for text in raw:
        match = _ORDER.match(text)
        if not match:
            raise ConfigError(f"{where}: cannot read {text!r} (\"<column>\" or \"<column> "
                              "desc\")")
        order.append((match.group(1), (match.group(2) or "").lower() == "desc"))
    return tuple(order)


def _max(raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ConfigError(f"{where}: expected a number of children")
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}: expected a number of children, got {raw!r}") from exc
    if value < 1:
        raise ConfigError(f"{where}: must be at least 1")
    return value
