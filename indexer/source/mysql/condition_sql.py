"""A table's row rule (``where``, ``deleted_when``) as SQL that answers every row as
:mod:`indexer.core.conditions` answers its canonical values: texts compared as their UTF-8
bytes (not by the column's collation, which ignores case and trailing spaces), numbers as
stored, NULL tests on the canonical value (a zero date and JSON's null are NULL there)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from indexer.core.conditions import TEXT_TYPES
from indexer.core.layout import Column, TableLayout
from indexer.settings import AllOf, Among, AnyOf, Compare, Condition, IsNull, Negation, RowRule
from indexer.source.mysql.connection import quote
from indexer.source.mysql.value_sql import value_sql

_BYTES = "CAST(CONVERT({} USING utf8mb4) AS BINARY)"


def rule_sql(rule: RowRule, layout: TableLayout) -> tuple[str, list[Any]]:
    """The rule as one SQL condition (true for the rows indexed) and its parameters."""
    by_name = {c.name: c for c in layout.columns}
    parts: list[str] = []
    args: list[Any] = []
    for condition, keep in ((rule.where, "IS TRUE"), (rule.deleted_when, "IS NOT TRUE")):
        if condition is not None:
            text = _sql(condition, by_name, args)
            parts.append(f"({text}) {keep}")
    return " AND ".join(parts), args


def with_rule(layout: TableLayout, where: str, args: Sequence[Any],
              ) -> tuple[str, list[Any]]:
    """A WHERE clause (``""`` or ``"WHERE ..."``) narrowed to the rows the layout's rule
    indexes."""
    if layout.rows is None:
        return where, list(args)
    text, more = rule_sql(layout.rows, layout)
    if not where:
        return f"WHERE {text}", more
    return f"{where} AND {text}", [*args, *more]


def _sql(condition: Condition, columns: Mapping[str, Column], args: list[Any]) -> str:
    if isinstance(condition, Compare):
        column = columns[condition.column]
        args.append(condition.value)
        return f"{_operand(column)} {condition.op} {_constant(column)}"
    if isinstance(condition, Among):
        column = columns[condition.column]
        args.extend(condition.values)
        marks = ", ".join(_constant(column) for _ in condition.values)
        return f"{_operand(column)} {'NOT IN' if condition.negated else 'IN'} ({marks})"
    if isinstance(condition, IsNull):
        column = columns[condition.column]
        test = f"{value_sql(column)} IS NULL"
        if column.data_type == "json":  # JSON's null is the document's null too
            test = f"({test} OR JSON_TYPE({quote(column.name)}) = 'NULL')"
        return f"NOT ({test})" if condition.negated else test
    if isinstance(condition, Negation):
        return f"NOT ({_sql(condition.part, columns, args)})"
    joiner = " AND " if isinstance(condition, AllOf) else " OR "
    assert isinstance(condition, AllOf | AnyOf)
    return "(" + joiner.join(_sql(part, columns, args) for part in condition.parts) + ")"


def _operand(column: Column) -> str:
    if column.data_type in TEXT_TYPES:
        return _BYTES.format(quote(column.name))
    return quote(column.name)


def _constant(column: Column) -> str:
    return _BYTES.format("%s") if column.data_type in TEXT_TYPES else "%s"
