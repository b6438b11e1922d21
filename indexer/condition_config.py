"""A table's ``where`` and ``deleted_when`` settings: SQL conditions parsed (by sqlglot, as
MySQL writes them) into :class:`~indexer.settings.Condition` trees, of the few forms that the
stream (in Python) and the jobs reading MySQL (in SQL) evaluate alike: comparisons of a column
with a number or a text, ``[NOT] IN``, ``[NOT] BETWEEN``, ``IS [NOT] NULL``, ``AND``, ``OR``,
``NOT``. Anything else (functions, other columns, arithmetic) is refused here, with the part
that cannot be taken."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import sqlglot
from sqlglot import exp

from indexer.errors import ConfigError
from indexer.settings import (
    AllOf,
    Among,
    AnyOf,
    Compare,
    Comparison,
    Condition,
    IsNull,
    Literal_,
    Negation,
    RowRule,
)

_COMPARISONS: dict[type[exp.Expression], Comparison] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}
# The comparison seen from the other side: ``5 < price`` is ``price > 5``.
_FLIPPED: dict[Comparison, Comparison] = {
    "=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=",
}


def parse_rule(raw: dict[str, Any], where: str) -> RowRule | None:
    """The table's row rule from its ``where`` and ``deleted_when`` settings (None: neither)."""
    texts = {key: raw.get(key) for key in ("where", "deleted_when")}
    for key, text in texts.items():
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise ConfigError(f"{where}.{key}: expected an SQL condition as a string")
    if texts["where"] is None and texts["deleted_when"] is None:
        return None
    return RowRule(
        where=_parsed(texts["where"], f"{where}.where"),
        deleted_when=_parsed(texts["deleted_when"], f"{where}.deleted_when"),
        where_text=texts["where"] or "",
        deleted_when_text=texts["deleted_when"] or "",
    )


def _parsed(text: str | None, where: str) -> Condition | None:
    if text is None:
        return None
    try:
        tree = sqlglot.parse_one(text, read="mysql")
    except sqlglot.errors.ParseError as exc:
        raise ConfigError(f"{where}: {text!r} is not an SQL condition: "
                          f"{str(exc).splitlines()[0]}") from exc
    try:
        if not isinstance(tree, exp.Expression):
            raise ValueError(f"cannot take {text!r}")
        return condition(tree)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} in {text!r}; conditions compare columns with "
                          "numbers or texts (=, !=, <, <=, >, >=, IN, BETWEEN, IS NULL) joined "
                          "by AND, OR and NOT") from exc


def condition(node: exp.Expression) -> Condition:
    """The condition a parsed SQL expression says, or ValueError naming what it cannot take."""
    if isinstance(node, exp.Paren):
        return condition(node.this)
    if isinstance(node, exp.And | exp.Or):
        parts = tuple(_flatten(node, type(node)))
        return AllOf(parts) if isinstance(node, exp.And) else AnyOf(parts)
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Is):
            return IsNull(_null_test(inner), negated=True)
        if isinstance(inner, exp.In):
            return Among(*_among(inner), negated=True)
        return Negation(condition(inner))
    if isinstance(node, exp.Is):
        return IsNull(_null_test(node))
    if isinstance(node, exp.In):
        return Among(*_among(node))
    if isinstance(node, exp.Between):
        column = _column(node.this)
        return AllOf((Compare(column, ">=", _constant(node.args["low"])),
                      Compare(column, "<=", _constant(node.args["high"]))))
    op = _COMPARISONS.get(type(node))
    if op is not None:
        left, right = node.this, node.expression
        if isinstance(right, exp.Column):
            left, right, op = right, left, _FLIPPED[op]
        if isinstance(right, exp.Null):
            raise ValueError(f"{node.sql('mysql')} is never true: write IS NULL")
        return Compare(_column(left), op, _constant(right))
    raise ValueError(f"cannot take {node.sql('mysql')!r}")


def _flatten(node: exp.Expression, kind: type[exp.Expression]) -> list[Condition]:
    if isinstance(node, kind):
        return [*_flatten(node.this, kind), *_flatten(node.expression, kind)]
    return [condition(node)]


def _null_test(node: exp.Is) -> str:
    if not isinstance(node.expression, exp.Null):
        raise ValueError(f"cannot take {node.sql('mysql')!r} (only IS NULL and IS NOT NULL)")
    return _column(node.this)


def _among(node: exp.In) -> tuple[str, tuple[Literal_, ...]]:
    if node.args.get("query") is not None or not node.expressions:
        raise ValueError(f"cannot take {node.sql('mysql')!r} (IN takes a list of constants)")
    return _column(node.this), tuple(_constant(v) for v in node.expressions)


def _column(node: exp.Expression) -> str:
    if not isinstance(node, exp.Column) or node.table:
        raise ValueError(f"expected a column of the table, got {node.sql('mysql')!r}")
    return str(node.name)


def _constant(node: exp.Expression) -> Literal_:
    """A number (exact: an int or a Decimal), a text, or TRUE/FALSE as 1/0 as MySQL has them."""
    sign = 1
    if isinstance(node, exp.Neg):
        sign, node = -1, node.this
        if not (isinstance(node, exp.Literal) and not node.is_string):
            raise ValueError(f"cannot take -{node.sql('mysql')!r}")
    if isinstance(node, exp.Boolean):
        return 1 if node.this else 0
    if not isinstance(node, exp.Literal):
        raise ValueError(f"expected a number or a quoted text, got {node.sql('mysql')!r}")
    if node.is_string:
        return str(node.this)
    text = str(node.this)
    try:
        number = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"cannot read the number {text!r}") from exc
    if not number.is_finite() or "e" in text.lower():
        raise ValueError(f"write the number {text!r} in plain digits")
    if number == number.to_integral_value() and "." not in text:
        return sign * int(number)
    return sign * number
