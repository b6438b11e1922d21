import itertools
from dataclasses import replace
from decimal import Decimal

import pymysql

from indexer.condition_config import parse_rule
from indexer.core.layout import Column, TableLayout
from indexer.settings import MySQLSettings
from indexer.source.mysql import checksum_sql, connection, value_sql
from indexer.source.mysql.condition_sql import rule_sql, with_rule
from indexer.source.mysql.snapshots import RowReader, open_slices


def test_open_slices_cover_everything_once() -> None:
    assert open_slices(1, 100, 2) == [(None, 50), (51, None)]
    assert open_slices(0, 9, 3) == [(None, 3), (4, 7), (8, None)]
    assert open_slices(5, 5, 4) == [(None, None)]
    slices = open_slices(-7, 1000, 5)
    assert slices[0][0] is None and slices[-1][1] is None
    for (_, end), (start, _) in itertools.pairwise(slices):
        assert end is not None and start == end + 1


def _layout() -> TableLayout:
    return TableLayout("db", "t", (
        Column("id", "bigint", "bigint(20) unsigned", 0, 1),
        Column("born", "year", "year(4)", 0, 0),
        Column("ratio", "float", "float", 0, 0),
        Column("flag", "bit", "bit(1)", 0, 0),
        Column("mask", "bit", "bit(10)", 0, 0),
        Column("tags", "set", "set('a','b')", 0, 0),
        Column("doc", "json", "longtext", 0, 0),
        Column("at", "datetime", "datetime(3)", 3, 0),
        Column("price", "decimal", "decimal(10,2)", 2, 0),
    ))


def test_rows_arrive_as_one_json_array_of_canonical_values() -> None:
    reader = RowReader(_layout())
    sql, args = reader.select("WHERE `id` > %s", (5,))
    assert args == [5]
    assert sql.startswith("SELECT JSON_ARRAY(`id`, CAST(`born` AS SIGNED), "
                          "CAST(`ratio` + 0e0 AS CHAR)")
    assert sql.endswith("FROM `db`.`t` WHERE `id` > %s ORDER BY `id`")
    key, row = reader.row(('[18446744073709551615, 0, "0.1", 1, 682, "a,b", '
                           '"{\\"b\\": 1, \\"a\\": [1]}", "2024-01-02T03:04:05.120", "-1.50"]',))
    assert key == {"id": 18446744073709551615}
    assert row == {"id": 18446744073709551615, "born": 0, "ratio": 0.1, "flag": True,
                   "mask": 682, "tags": ["a", "b"], "doc": {"b": 1, "a": [1]},
                   "at": "2024-01-02T03:04:05.120", "price": "-1.50"}
    assert list(row["doc"]) == ["b", "a"]  # JSON keeps the stored order, like the event's


def test_zero_dates_are_null_and_nulls_stay_null() -> None:
    reader = RowReader(_layout())
    query, _ = reader.select()
    assert "IF(YEAR(`at`) = 0 OR MONTH(`at`) = 0 OR DAYOFMONTH(`at`) = 0, NULL" in query
    _, row = reader.row(("[1, null, null, null, null, null, null, null, null]",))
    assert set(row.values()) == {1, None}


def test_json_and_set_texts_follow_the_servers_rendering() -> None:
    doc = Column("doc", "json", "longtext", 0, 0)
    tags = Column("tags", "set", "set('a','b')", 0, 0)
    # MariaDB: objects and arrays normalized (JSON_COMPACT before 10.7), scalars as values
    assert "THEN JSON_NORMALIZE(`doc`)" in value_sql.text_sql(doc)
    assert "THEN JSON_COMPACT(`doc`)" in value_sql.text_sql(doc, normalize_json=False)
    assert "WHEN 'STRING' THEN JSON_UNQUOTE(`doc`)" in value_sql.text_sql(doc)
    assert value_sql.text_sql(doc, "mysql") == "CAST(`doc` AS CHAR)"  # MySQL 8 cannot compact
    assert "'\",\"'" in value_sql.text_sql(tags) and "'\", \"'" in value_sql.text_sql(tags, "mysql")


def test_the_row_checksum_sql_names_each_field_in_name_order() -> None:
    name = Column("name", "varchar", "varchar(10)", 0, 0)
    ratio = Column("ratio", "double", "double", 0, 0)
    sql = checksum_sql.hash_sql([("title", name), ("it's 50%", ratio)])
    # Queries are always formatted with arguments: '%' is written '%%'.
    assert sql == ("CRC32(CONCAT_WS('', CONCAT('#it\\'s 50%%=', CAST(`ratio` + 0e0 AS CHAR)), "
                   "CONCAT('#title=', CONVERT(`name` USING utf8mb4))))")


def test_texts_hash_as_the_document_holds_the_values() -> None:
    padded = Column("n", "int", "int(6) unsigned zerofill", 0, 0)
    year = Column("y", "year", "year(4)", 0, 0)
    latin = Column("l", "varchar", "varchar(10)", 0, 0)
    members = Column("s", "set", "set('a\"b','c')", 0, 0)
    # ZEROFILL and YEAR print padded ("000042", "0000"): numbers, as the document has them
    assert value_sql.text_sql(padded) == "CAST(`n` AS UNSIGNED)"
    assert value_sql.text_sql(year) == "CAST(`y` AS SIGNED)"
    # any character set read as UTF-8: columns of several sets can be concatenated
    assert value_sql.text_sql(latin) == value_sql.value_sql(latin) == \
        "CONVERT(`l` USING utf8mb4)"
    # SET members as JSON strings: '"' and '\' escaped as orjson escapes them
    assert "REPLACE(REPLACE(CONVERT(`s` USING utf8mb4), '\\\\', '\\\\\\\\'), '\"', '\\\\\"')" \
        in value_sql.text_sql(members)


def test_no_server_is_unreachable_but_a_refused_certificate_is_a_setting() -> None:
    settings = MySQLSettings(host="db", port=3306)
    refused = pymysql.err.OperationalError(
        2003, "Can't connect to MySQL server on 'db' ([Errno 111] Connection refused)")
    untrusted = pymysql.err.OperationalError(
        2003, "Can't connect to MySQL server on 'db' ([SSL: CERTIFICATE_VERIFY_FAILED] "
              "certificate verify failed: self-signed certificate in certificate chain)")
    assert connection._refusal(settings, refused) is None
    assert connection.unreachable(refused) and not connection.unreachable(untrusted)
    line = connection._refusal(settings, untrusted)
    assert line is not None and "mysql.ca_file" in line
    denied = pymysql.err.OperationalError(1045, "Access denied for user 'x'")
    assert "refused user" in str(connection._refusal(settings, denied))


def test_a_row_rule_narrows_every_read_with_its_constants_as_parameters() -> None:
    rule = parse_rule({"where": "flag = 1 AND tags IS NOT NULL AND doc IS NULL",
                       "deleted_when": "at IS NOT NULL OR price IN (1, 2.5)"}, "t")
    assert rule is not None
    layout = replace(_layout(), rows=rule)
    text, args = rule_sql(rule, layout)
    assert text == (
        "((`flag` = %s AND NOT (CONVERT(`tags` USING utf8mb4) IS NULL) AND (CAST(`doc` AS CHAR) "
        "IS NULL OR "
        "JSON_TYPE(`doc`) = 'NULL'))) IS TRUE AND ((NOT (IF(YEAR(`at`) = 0 OR MONTH(`at`) = 0 "
        "OR DAYOFMONTH(`at`) = 0, NULL, REPLACE(CAST(`at` AS CHAR), ' ', 'T')) IS NULL) OR "
        "`price` IN (%s, %s))) IS NOT TRUE")
    assert args == [1, 1, Decimal("2.5")]
    assert with_rule(layout, "WHERE `id` > %s", (5,)) == (f"WHERE `id` > %s AND {text}",
                                                         [5, *args])
    assert with_rule(layout, "", ()) == (f"WHERE {text}", args)
    assert with_rule(_layout(), "", ()) == ("", [])


def test_texts_are_compared_as_utf8_bytes_not_by_collation() -> None:
    layout = TableLayout("db", "t", (Column("id", "int", "int", 0, 1),
                                     Column("s", "varchar", "varchar(9)", 0, 0)))
    rule = parse_rule({"where": "s IN ('a', 'b')"}, "t")
    assert rule is not None
    assert rule_sql(rule, layout)[0] == (
        "(CAST(CONVERT(`s` USING utf8mb4) AS BINARY) IN (CAST(CONVERT(%s USING utf8mb4) AS "
        "BINARY), CAST(CONVERT(%s USING utf8mb4) AS BINARY))) IS TRUE")
