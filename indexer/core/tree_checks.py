"""Whether a table's joins can work against the tables MySQL has: checked at start (`indexer
run`, `reindex`, `reconcile`, `check`), before any index is made, each problem one line
naming the setting.

Pure: the tables' layouts and indexes are read by :mod:`indexer.source.mysql.trees`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from indexer.core import conditions
from indexer.core.layout import Index, TableLayout
from indexer.settings import JoinSettings, TableConfig

# Column types whose values cannot be matched across tables as the server matches them.
UNJOINABLE_TYPES = ("float", "double", "real", "json", "bit", "set", "tinyblob", "blob",
                    "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext",
                    "point", "linestring", "polygon", "geometry", "multipoint",
                    "multilinestring", "multipolygon", "geometrycollection", "geomcollection")


def check(table: TableConfig, layouts: Mapping[str, TableLayout],
          indexes: Mapping[str, Sequence[Index]]) -> list[str]:
    """Why a table's joins cannot work as configured (empty: they can): columns that do not
    exist, fields that clash, join columns of types that cannot be matched, lookups that can
    match several rows, and joins without an index in either direction unless allowed."""
    problems: list[str] = []
    where = f"tables[{table.name}]"

    def visit(parent: TableLayout, parent_where: str, shown: set[str],
              joins: tuple[JoinSettings, ...]) -> None:
        for join in joins:
            here = f"{parent_where}.{'lookups' if join.kind == 'lookup' else 'children'}." \
                   f"{join.name}"
            layout = layouts[join.full_name]
            names = {c.name for c in layout.columns}
            columns = {c.name: c for c in layout.columns}
            parent_columns = {c.name: c for c in parent.columns}
            if join.name in shown:
                problems.append(f"{here}: the field {join.name!r} is also a column of "
                                f"{parent.database}.{parent.table}: rename or exclude one")
            for parent_column, column in join.on:
                for name, found, table_name in ((parent_column, parent_columns, parent.table),
                                                (column, columns, join.table)):
                    if name not in found:
                        problems.append(f"{here}.on: {table_name} has no column {name!r}")
                    elif found[name].data_type in UNJOINABLE_TYPES:
                        problems.append(f"{here}.on: {table_name}.{name} is a "
                                        f"{found[name].column_type}, whose values cannot be "
                                        "matched as MySQL matches them: join on a key column")
            for setting, listed in (("include", join.include or ()), ("exclude", join.exclude),
                                    ("rename", tuple(join.rename)),
                                    ("order_by", tuple(c for c, _ in join.order_by))):
                for name in listed:
                    if name not in names:
                        problems.append(f"{here}.{setting}: {join.table} has no column {name!r}")
            if problems:
                continue
            own = tuple(c for _, c in join.on)
            theirs = tuple(p for p, _ in join.on)
            if join.kind == "lookup" and not _unique(own, layout, indexes.get(join.full_name)):
                problems.append(f"{here}.on: {join.table}({', '.join(own)}) is neither its "
                                "primary key nor a unique key: a lookup must match at most one "
                                "row (make it a child to embed every match)")
            if not join.allow_unindexed:
                for cols, tbl, full, why in (
                        (own, join.table, join.full_name, "reading documents"),
                        (theirs, parent.table, f"{parent.database}.{parent.table}",
                         "finding the documents a change touches")):
                    if not _indexed(cols, layouts[full], indexes.get(full)):
                        problems.append(
                            f"{here}: no index on {tbl}({', '.join(cols)}), so {why} would scan "
                            f"the table for every batch: add one (CREATE INDEX ... ON "
                            f"{tbl} ({', '.join(cols)})) or set allow_unindexed = true")
            fields = _shown(join, layout)
            if join.value is not None and not _value_exists(join, layouts):
                problems.append(f"{here}.value: no field {'.'.join(join.value)!r} in the "
                                "joined object")
            visit(layout, here, fields, join.joins)

    root = layouts[table.name]
    names = {c.name for c in root.columns}
    if table.rows is not None and (problem := conditions.check(table.rows, root)) is not None:
        problems.append(f"{where}.{problem}")
    visit(root, where, {f for c, f in _fields(table, root) if c in names}, table.joins)
    if table.routing and not table.transform and (problem := _routing_problem(table, root)):
        problems.append(f"{where}.routing: {problem}")
    return problems


def _routing_problem(table: TableConfig, root: TableLayout) -> str | None:
    """Why the routing path names no single value of the document (a transform's fields are
    the function's to say)."""
    first, *rest = table.routing.split(".")
    lookups = {j.name: j for j in table.joins if j.kind == "lookup"}
    join = lookups.get(first)
    if not rest:
        if first in {f for _, f in _fields(table, root)} or (join and join.value is not None):
            return None
        return f"the document has no field {first!r}"
    if join is None:
        return f"{first!r} is no lookup of the document (a child's values are an array)"
    return None if join.value is None else f"lookup {first!r} embeds one value: name it {first!r}"


def _fields(table: TableConfig, layout: TableLayout) -> list[tuple[str, str]]:
    return [(c.name, table.rename.get(c.name, c.name)) for c in layout.columns
            if (not table.include or c.name in table.include) and c.name not in table.exclude]


def _shown(join: JoinSettings, layout: TableLayout) -> set[str]:
    return {join.rename.get(c.name, c.name) for c in layout.columns
            if (join.include is None or c.name in join.include) and c.name not in join.exclude}


def _value_exists(join: JoinSettings, layouts: Mapping[str, TableLayout]) -> bool:
    assert join.value is not None
    node = join
    for part in join.value[:-1]:
        node = next(j for j in node.joins if j.name == part)
    last = join.value[-1]
    return last in _shown(node, layouts[node.full_name]) or any(
        j.name == last for j in node.joins)


def _unique(columns: tuple[str, ...], layout: TableLayout, indexes: Sequence[Index] | None,
            ) -> bool:
    wanted = set(columns)
    if {c.name for c in layout.key} <= wanted:
        return True
    return any(i.unique and set(i.columns) <= wanted for i in indexes or ())


def _indexed(columns: tuple[str, ...], layout: TableLayout,
             indexes: Sequence[Index] | None) -> bool:
    """An index (or the primary key) whose leading columns are these, in any order."""
    wanted = set(columns)
    keys = [tuple(c.name for c in layout.key), *(i.columns for i in indexes or ())]
    return any(set(k[:len(wanted)]) == wanted for k in keys)
