"""Every MariaDB column type, with edge values, through real Debezium into Elasticsearch."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from indexer.search.client import SearchClient
from tests.integration.conftest import running, sql, wait_for_documents, wait_for_topic

pytestmark = pytest.mark.servers

COLUMNS = """
  id INT PRIMARY KEY,
  ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT, i INT, iu INT UNSIGNED,
  bi BIGINT, bu BIGINT UNSIGNED, flag BOOLEAN,
  dec_small DECIMAL(5,2), dec_big DECIMAL(65,30), f FLOAT, d DOUBLE,
  bit1 BIT(1), bit12 BIT(12), bit64 BIT(64),
  dt DATE, dtm0 DATETIME, dtm3 DATETIME(3), dtm6 DATETIME(6),
  ts0 TIMESTAMP NULL DEFAULT NULL, ts6 TIMESTAMP(6) NULL DEFAULT NULL,
  tm TIME, tm3 TIME(3), yr YEAR,
  c CHAR(10), vc VARCHAR(100), tx TEXT, bn BINARY(4), vbn VARBINARY(10), bl BLOB,
  en ENUM('a','b','ü'), st SET('x','y','z'), js JSON,
  tt TINYTEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, mb MEDIUMBLOB, lb LONGBLOB
"""
NAMES = re.findall(r"(?:^|,)\s*(\w+) [A-Z]", COLUMNS.strip())

MAX_ROW = (
    1, 127, 255, 32767, 8388607, 2147483647, 4294967295, 9223372036854775807,
    18446744073709551615, True, "999.99", "99999999999999999999999999999999999." + "9" * 30,
    3.4e38, 1.7976931348623157e308, 1, 4095, 18446744073709551615,
    "9999-12-31", "9999-12-31 23:59:59", "9999-12-31 23:59:59.999", "9999-12-31 23:59:59.999999",
    "2038-01-19 03:14:07", "2038-01-19 03:14:07.999999", "838:59:59", "838:59:59.999", 2155,
    "日本語✓🎉", "ünïcødé " + "x" * 90, "long " * 1000, b"\x00\x01\x02\x03", b"\xff\x00",
    bytes(range(256)), "ü", "x,y,z", '{"nested": {"a": [1, 2.5, null, true]}, "u": "ü"}',
    "t" * 255, "ü" * 70_000, "l" * 70_000, b"\xff" * 255, bytes(range(256)) * 300,
    b"\x00" * 70_000,
)
MIN_ROW = (
    2, -128, 0, -32768, -8388608, -2147483648, 0, -9223372036854775808, 0, False,
    "-999.99", "-0.000000000000000000000000000001", -3.4e38, -2.2250738585072014e-308, 0, 0, 0,
    "1000-01-01", "1000-01-01 00:00:00", "1000-01-01 00:00:00.000", "1000-01-01 00:00:00.000001",
    "1970-01-01 00:00:01", "1970-01-01 00:00:01.000000", "-838:59:59", "-00:00:00.001", 1901,
    "", "", "", b"\x00\x00\x00\x00", b"", b"", "a", "", "[]", "", "", "", b"", b"", b"",
)

EXPECTED_MAX: dict[str, Any] = {
    "id": 1, "ti": 127, "tu": 255, "si": 32767, "mi": 8388607, "i": 2147483647,
    "iu": 4294967295, "bi": 9223372036854775807, "bu": 18446744073709551615, "flag": 1,
    "dec_small": "999.99", "dec_big": "99999999999999999999999999999999999." + "9" * 30,
    "f": 3.3999999521443642e38, "d": 1.7976931348623157e308, "bit1": True, "bit12": 4095,
    "bit64": 18446744073709551615,
    "dt": "9999-12-31", "dtm0": "9999-12-31T23:59:59", "dtm3": "9999-12-31T23:59:59.999",
    "dtm6": "9999-12-31T23:59:59.999999", "ts0": "2038-01-19T03:14:07Z",
    "ts6": "2038-01-19T03:14:07.999999Z", "tm": "838:59:59", "tm3": "838:59:59.999", "yr": 2155,
    "c": "日本語✓🎉", "vc": "ünïcødé " + "x" * 90, "tx": "long " * 1000, "bn": "AAECAw==",
    "vbn": "/wA=", "bl": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEy"
    "MzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dX"
    "Z3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5"
    "uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P"
    "3+/w==",
    "en": "ü", "st": ["x", "y", "z"],
    "js": {"nested": {"a": [1, 2.5, None, True]}, "u": "ü"},
    "tt": "t" * 255, "mt": "ü" * 70_000, "lt": "l" * 70_000,
    "tb": base64.b64encode(b"\xff" * 255).decode(),
    "mb": base64.b64encode(bytes(range(256)) * 300).decode(),
    "lb": base64.b64encode(b"\x00" * 70_000).decode(),
}
EXPECTED_MIN: dict[str, Any] = {
    "id": 2, "ti": -128, "tu": 0, "si": -32768, "mi": -8388608, "i": -2147483648, "iu": 0,
    "bi": -9223372036854775808, "bu": 0, "flag": 0, "dec_small": "-999.99",
    "dec_big": "-0.000000000000000000000000000001", "f": -3.3999999521443642e38,
    "d": -2.2250738585072014e-308, "bit1": False, "bit12": 0, "bit64": 0,
    "dt": "1000-01-01", "dtm0": "1000-01-01T00:00:00", "dtm3": "1000-01-01T00:00:00.000",
    "dtm6": "1000-01-01T00:00:00.000001", "ts0": "1970-01-01T00:00:01Z",
    "ts6": "1970-01-01T00:00:01.000000Z", "tm": "-838:59:59", "tm3": "-00:00:00.001",
    "yr": 1901, "c": "", "vc": "", "tx": "", "bn": "AAAAAA==", "vbn": "", "bl": "", "en": "a",
    "st": [], "js": [], "tt": "", "mt": "", "lt": "", "tb": "", "mb": "", "lb": "",
}
EXPECTED_NULLS: dict[str, Any] = {name: None for name in NAMES} | {"id": 3}
# FLOAT and DOUBLE values whose texts differ between MySQL, Java and Python: a FLOAT is the
# double its 32-bit value widens to (MySQL's own text of it keeps 6 digits).
FLOAT_ROWS = ((4, 123456.7, 1e20), (5, 1.17549435e-38, 5e-324), (6, 16777217.0, 0.00001),
              (7, 0.1, 1234567890123456.8), (8, -2.5e-7, -1e-16))
EXPECTED_FLOATS = {
    str(i): {name: None for name in NAMES} | {"id": i, "f": f, "d": d} for i, f, d in (
        (4, 123456.703125, 1e20), (5, 1.1754943508222875e-38, 5e-324), (6, 16777216.0, 1e-05),
        (7, 0.10000000149011612, 1234567890123456.8), (8, -2.499999993688107e-07, -1e-16))}
EXPECTED: dict[str, dict[str, Any]] = {
    "1": EXPECTED_MAX, "2": EXPECTED_MIN, "3": EXPECTED_NULLS} | EXPECTED_FLOATS

# Types the minimal test server lacks (unsigned_long, scaled_float) fall back to keyword here,
# and date_nanos cannot hold years outside 1970-2262, so these extremes use date;
# see mappings/README.md for the full-Elasticsearch choices.
MAPPING = {"mappings": {"dynamic": "strict", "properties": {
    "id": {"type": "integer"}, "ti": {"type": "byte"}, "tu": {"type": "short"},
    "si": {"type": "short"}, "mi": {"type": "integer"}, "i": {"type": "integer"},
    "iu": {"type": "long"}, "bi": {"type": "long"}, "bu": {"type": "keyword"},
    "flag": {"type": "byte"}, "dec_small": {"type": "double"}, "dec_big": {"type": "keyword"},
    "f": {"type": "float"}, "d": {"type": "double"}, "bit1": {"type": "boolean"},
    "bit12": {"type": "integer"}, "bit64": {"type": "keyword"}, "dt": {"type": "date"},
    "dtm0": {"type": "date"}, "dtm3": {"type": "date"}, "dtm6": {"type": "date"},
    "ts0": {"type": "date"}, "ts6": {"type": "date"}, "tm": {"type": "keyword"},
    "tm3": {"type": "keyword"}, "yr": {"type": "short"}, "c": {"type": "keyword"},
    "vc": {"type": "text"}, "tx": {"type": "text"}, "bn": {"type": "binary"},
    "vbn": {"type": "binary"}, "bl": {"type": "binary"}, "en": {"type": "keyword"},
    "st": {"type": "keyword"}, "js": {"type": "flattened"}, "tt": {"type": "text"},
    "mt": {"type": "text"}, "lt": {"type": "text"}, "tb": {"type": "binary"},
    "mb": {"type": "binary"}, "lb": {"type": "binary"},
}}}


def insert_every_type(db: Any, table: str) -> None:
    placeholders = ", ".join(["%s"] * len(NAMES))
    sql(db, "SET time_zone = '+00:00'")
    for row in (MAX_ROW, MIN_ROW):
        sql(db, f"INSERT INTO `{table}` ({', '.join(NAMES)}) VALUES ({placeholders})", *row)
    sql(db, f"INSERT INTO `{table}` (id) VALUES (3)")
    for floats in FLOAT_ROWS:
        sql(db, f"INSERT INTO `{table}` (id, f, d) VALUES (%s, %s, %s)", *floats)


async def test_every_column_type_arrives_exactly(db: Any, es: SearchClient,
                                                 make_table: Any, make_config: Any) -> None:
    assert len(NAMES) == len(MAX_ROW) == len(MIN_ROW) == len(EXPECTED_MAX)
    table = make_table(COLUMNS, MAPPING)
    insert_every_type(db, table.name)
    await wait_for_topic(table.topic)
    async with running(make_config(table.entry())):
        await wait_for_documents(es, table.alias, EXPECTED)


async def test_zero_dates_become_null(db: Any, es: SearchClient, make_table: Any,
                                      make_config: Any) -> None:
    table = make_table("id INT PRIMARY KEY, d DATE, dt DATETIME(3)")
    sql(db, "SET sql_mode = ''")
    sql(db, f"INSERT INTO `{table.name}` VALUES (1, '0000-00-00', '0000-00-00 00:00:00')")
    await wait_for_topic(table.topic)
    async with running(make_config(table.entry())):
        await wait_for_documents(es, table.alias, {"1": {"id": 1, "d": None, "dt": None}})
