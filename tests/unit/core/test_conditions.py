"""Row rules on canonical values: SQL's three-valued logic, exact numbers, texts by code
point, and what :func:`check` refuses before the stream and the server could disagree."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from indexer.condition_config import parse_rule
from indexer.core.conditions import check, evaluate, keeps, left_out_by
from indexer.core.layout import Column, TableLayout
from indexer.errors import ConfigError, DecodeError
from indexer.settings import RowRule

LAYOUT = TableLayout("db", "t", (
    Column("id", "int", "int(11)", 0, 1),
    Column("status", "varchar", "varchar(20)", 0, 0),
    Column("kind", "enum", "enum('a','b')", 0, 0),
    Column("price", "decimal", "decimal(10,2)", 2, 0),
    Column("qty", "bigint", "bigint(20) unsigned", 0, 0),
    Column("deleted_at", "datetime", "datetime", 0, 0),
    Column("score", "double", "double", 0, 0),
))


def rule(where: str | None = None, deleted_when: str | None = None) -> RowRule:
    raw = {k: v for k, v in (("where", where), ("deleted_when", deleted_when)) if v}
    found = parse_rule(raw, "tables[db.t]")
    assert found is not None
    return found


def row(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": 1, "status": "published", "kind": "a", "price": "12.50",
                            "qty": 3, "deleted_at": None, "score": 1.5}
    return {**base, **values}


@pytest.mark.parametrize(("where", "values", "expected"), [
    ("status = 'published'", {}, True),
    ("status = 'published'", {"status": "Published"}, False),  # not the collation's answer
    ("status = 'published'", {"status": "published "}, False),  # nor its padding
    ("status = 'published'", {"status": None}, None),
    ("status != 'published'", {"status": None}, None),
    ("price >= 12.5", {}, True),
    ("price > 12.5", {}, False),
    ("price BETWEEN 10 AND 12.50", {}, True),
    ("price < 0", {"price": "-0.01"}, True),
    ("qty IN (1, 2, 3)", {}, True),
    ("qty NOT IN (1, 2)", {}, True),
    ("qty NOT IN (1, 2)", {"qty": None}, None),
    ("qty > 18446744073709551614", {"qty": 18446744073709551615}, True),
    ("kind = 'b' OR qty = 3", {}, True),
    ("kind = 'b' OR qty = 3", {"qty": None}, None),
    ("kind = 'a' AND qty = 3", {"qty": None}, None),
    ("kind = 'b' AND qty = 3", {"qty": None}, False),
    ("NOT (kind = 'b')", {}, True),
    ("NOT (kind = 'b')", {"kind": None}, None),
    ("deleted_at IS NULL", {}, True),
    ("deleted_at IS NOT NULL", {"deleted_at": "2024-01-01T00:00:00"}, True),
    ("status > 'pub'", {}, True),
    ("status < 'zzz'", {"status": "\U0001f600"}, False),  # by code point, as UTF-8 bytes order
])
def test_three_valued_answers(where: str, values: dict[str, Any], expected: bool | None,
                              ) -> None:
    condition = rule(where).where
    assert condition is not None
    assert evaluate(condition, row(**values)) is expected


def test_where_keeps_only_true_and_deleted_when_removes_only_true() -> None:
    both = rule("status = 'published'", "deleted_at IS NOT NULL")
    assert keeps(both, row())
    assert not keeps(both, row(status="draft"))
    assert not keeps(both, row(status=None))  # unknown: not kept
    assert not keeps(both, row(deleted_at="2024-01-01T00:00:00"))
    soft = rule(deleted_when="qty = 0")
    assert keeps(soft, row(qty=None))  # unknown: not deleted
    assert not keeps(soft, row(qty=0))


def test_left_out_by_says_which_setting_and_how() -> None:
    both = rule("status = 'published'", "deleted_at IS NOT NULL")
    assert left_out_by(both, row()) is None
    assert left_out_by(both, row(status=None)) == "where (status = 'published') is unknown"
    assert left_out_by(both, row(status="x")) == "where (status = 'published') is false"
    assert left_out_by(both, row(deleted_at="2024-01-01T00:00:00")) == (
        "deleted_when (deleted_at IS NOT NULL) is true")


def test_a_value_of_another_kind_or_a_missing_column_is_a_clear_error() -> None:
    with pytest.raises(DecodeError, match="not the number"):
        keeps(rule("price > 1"), row(price=[1]))
    with pytest.raises(DecodeError, match="no column 'status'"):
        keeps(rule("status = 'x'"), {"id": 1})


@pytest.mark.parametrize(("where", "problem"), [
    ("nope = 1", "no column 'nope'"),
    ("score > 1", "score' is double"),
    ("deleted_at > '2024-01-01'", "deleted_at' is datetime"),
    ("price = 'cheap'", "compare it with a number"),
    ("status IN ('a', 2)", "compare it with a text"),
])
def test_check_refuses_what_python_and_sql_could_answer_differently(where: str,
                                                                   problem: str) -> None:
    found = check(rule(where), LAYOUT)
    assert found is not None and problem in found and found.startswith("where: ")


def test_check_takes_null_tests_on_any_column() -> None:
    assert check(rule("score IS NULL", "deleted_at IS NOT NULL"), LAYOUT) is None


@pytest.mark.parametrize(("text", "message"), [
    ("a = NULL", "write IS NULL"),
    ("a > NOW()", "a number or a quoted text"),
    ("a LIKE 'x%'", "cannot take"),
    ("a IN (SELECT 1)", "a list of constants"),
    ("a = 1e3", "plain digits"),
    ("a = ", "is not an SQL condition"),
])
def test_parse_refuses_with_the_part_it_cannot_take(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rule({"where": text}, "tables[db.t]")


def test_parse_reads_constants_exactly() -> None:
    parsed = rule("a = -3 AND b = 2.50 AND c = TRUE AND 5 < d AND e = \"x\"").where
    assert parsed is not None
    assert [(p.column, p.op, p.value) for p in parsed.parts] == [  # type: ignore[union-attr]
        ("a", "=", -3), ("b", "=", Decimal("2.50")), ("c", "=", 1), ("d", ">", 5),
        ("e", "=", "x")]


def test_no_rule_when_neither_is_set_and_a_blank_one_is_refused() -> None:
    assert parse_rule({}, "tables[db.t]") is None
    with pytest.raises(ConfigError, match="an SQL condition"):
        parse_rule({"where": " "}, "tables[db.t]")
