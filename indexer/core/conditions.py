"""A table's row rule (``where``, ``deleted_when``) evaluated on a row's canonical values, as
:mod:`indexer.source.mysql.condition_sql` evaluates it in the server: SQL's three-valued
logic (a comparison with NULL is unknown; unknown is neither kept by ``where`` nor deleted by
``deleted_when``), numbers compared exactly, texts compared by code point (the server
compares their UTF-8 bytes, which order the same), never by the column's collation.

Pure. :func:`check` refuses at start what the two sides could answer differently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

from indexer.core.layout import Column, TableLayout
from indexer.errors import ConfigError, DecodeError
from indexer.settings import (
    AllOf,
    Among,
    AnyOf,
    Compare,
    Condition,
    IsNull,
    Literal_,
    Negation,
    RowRule,
)

# Columns a condition may compare, by how their canonical values compare. Others (floats:
# inexact; dates and times: zero dates and zones; JSON, SET, BIT, binary, spatial) only take
# IS [NOT] NULL.
NUMBER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "year",
                          "decimal"})
TEXT_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext",
                        "enum"})


def keeps(rule: RowRule, row: Mapping[str, Any]) -> bool:
    """Whether the row is indexed: ``where`` is true and ``deleted_when`` is not."""
    if rule.where is not None and evaluate(rule.where, row) is not True:
        return False
    return rule.deleted_when is None or evaluate(rule.deleted_when, row) is not True


def left_out_by(rule: RowRule, row: Mapping[str, Any]) -> str | None:
    """Why the rule leaves the row out, in the user's words; None: it is indexed."""
    if rule.where is not None:
        answer = evaluate(rule.where, row)
        if answer is not True:
            return f"where ({rule.where_text}) is {'unknown' if answer is None else 'false'}"
    if rule.deleted_when is not None and evaluate(rule.deleted_when, row) is True:
        return f"deleted_when ({rule.deleted_when_text}) is true"
    return None


def evaluate(condition: Condition, row: Mapping[str, Any]) -> bool | None:
    """True, False or None (unknown), as SQL answers it."""
    if isinstance(condition, Compare):
        value = _value(row, condition.column, condition.value)
        return None if value is None else _compare(value, condition.op, condition.value)
    if isinstance(condition, Among):
        value = _value(row, condition.column, condition.values[0])
        if value is None:
            return None
        return any(value == v for v in condition.values) != condition.negated
    if isinstance(condition, IsNull):
        if condition.column not in row:
            raise _missing(condition.column)
        return (row[condition.column] is None) != condition.negated
    if isinstance(condition, Negation):
        inner = evaluate(condition.part, row)
        return None if inner is None else not inner
    answers = [evaluate(part, row) for part in condition.parts]
    if isinstance(condition, AllOf):
        return False if False in answers else None if None in answers else True
    return True if True in answers else None if None in answers else False


def _value(row: Mapping[str, Any], column: str, like: Literal_) -> Any:
    """The row's value in the constant's terms: a DECIMAL's canonical text as a number."""
    try:
        value = row[column]
    except KeyError:
        raise _missing(column) from None
    if value is None:
        return None
    if isinstance(like, str):
        if type(value) is not str:
            raise DecodeError("bad-value", f"column {column!r} holds {type(value).__name__}, "
                              "not the text its condition compares")
        return value
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return Decimal(value)
        except ArithmeticError:
            pass
    raise DecodeError("bad-value", f"column {column!r} holds {value!r}, not the number its "
                      "condition compares")


def _compare(value: Any, op: str, constant: Literal_) -> bool:
    if op == "=":
        return bool(value == constant)
    if op == "!=":
        return bool(value != constant)
    if op == "<":
        return bool(value < constant)
    if op == "<=":
        return bool(value <= constant)
    if op == ">":
        return bool(value > constant)
    return bool(value >= constant)


def _missing(column: str) -> DecodeError:
    return DecodeError("bad-value", f"the row has no column {column!r}, which the table's "
                       "where or deleted_when names")


def columns(condition: Condition) -> Iterator[str]:
    if isinstance(condition, Compare | Among | IsNull):
        yield condition.column
    elif isinstance(condition, Negation):
        yield from columns(condition.part)
    else:
        for part in condition.parts:
            yield from columns(part)


def bind(rule: RowRule | None, layout: TableLayout, table: str) -> TableLayout:
    """The layout with the table's rule (for the SQL reading its rows), once :func:`check`
    finds nothing; ConfigError naming the setting otherwise."""
    if rule is None:
        return layout
    problem = check(rule, layout)
    if problem is not None:
        raise ConfigError(f"tables[{table}].{problem}")
    return replace(layout, rows=rule)


def check(rule: RowRule, layout: TableLayout) -> str | None:
    """What in the rule the table's columns cannot answer alike in Python and in SQL (a
    missing column, a type compared, a constant of the wrong kind); None: nothing."""
    by_name = {c.name: c for c in layout.columns}
    for setting, condition in (("where", rule.where), ("deleted_when", rule.deleted_when)):
        if condition is None:
            continue
        for problem in _problems(condition, by_name):
            return f"{setting}: {problem}"
    return None


def _problems(condition: Condition, by_name: Mapping[str, Column]) -> Iterator[str]:
    if isinstance(condition, Negation):
        yield from _problems(condition.part, by_name)
        return
    if isinstance(condition, AllOf | AnyOf):
        for part in condition.parts:
            yield from _problems(part, by_name)
        return
    column = by_name.get(condition.column)
    if column is None:
        yield f"the table has no column {condition.column!r}"
        return
    if isinstance(condition, IsNull):
        return
    constants = condition.values if isinstance(condition, Among) else (condition.value,)
    wanted: tuple[type, ...]
    if column.data_type in NUMBER_TYPES:
        wanted, kind = (int, Decimal), "number"
    elif column.data_type in TEXT_TYPES:
        wanted, kind = (str,), "text"
    else:
        yield (f"column {column.name!r} is {column.data_type}: conditions compare only "
               "integers, decimals and texts (any column takes IS NULL / IS NOT NULL)")
        return
    for constant in constants:
        if not isinstance(constant, wanted):
            yield (f"column {column.name!r} is {column.data_type}: compare it with a {kind}, "
                   f"not {constant!r}")
