"""The binlog decoder against MariaDB's own bytes: a table of every type with edge values
(dev/record_binlog_fixture.py recorded the events, and what the reindex read of each row),
decoded to exactly the canonical values the reindex and Debezium's events give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from indexer.core import binlog_events as ev
from indexer.core import mysql_json
from indexer.core.binlog_rows import RowDecoder, latin1_text
from indexer.core.values import decimal_binary_size, decimal_from_binary

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORDED = orjson.loads((FIXTURES / "alltypes.binlog.json").read_bytes())


def events() -> list[tuple[ev.Header, bytes]]:
    data = (FIXTURES / "alltypes.binlog").read_bytes()
    assert data[:4] == b"\xfebin"
    found, at = [], 4
    while at < len(data):
        head = ev.header(data[at:at + ev.HEADER_SIZE])
        found.append((head, data[at:at + head.size]))
        at += head.size
    return found


def codecs() -> dict[int, str]:
    return {int(i): ev.CHARSET_CODECS[c] for i, c in RECORDED["charsets"].items()
            if c in ev.CHARSET_CODECS}


def replayed() -> tuple[dict[str, dict[str, Any]], list[str], ev.TableMap]:
    """The table as the binlog's changes leave it, and the ops they were."""
    checksummed = False
    maps: dict[int, ev.TableMap] = {}
    table: dict[str, dict[str, Any]] = {}
    ops = []
    last_map: ev.TableMap | None = None
    for head, event in events():
        if head.type == ev.FORMAT_DESCRIPTION:
            checksummed = ev.format_description(event).checksummed
        elif head.type == ev.TABLE_MAP:
            last_map = ev.table_map(event, checksummed)
            maps[last_map.table_id] = last_map
        elif head.type in ev.ROWS_EVENTS:
            rows = ev.rows_header(event, head, checksummed)
            decoder = RowDecoder(maps[rows.table_id], frozenset(RECORDED["json_columns"]),
                                 codecs())
            for before, after in decoder.rows(event, rows):
                ops.append(rows.op)
                if after is None:
                    assert before is not None
                    table.pop(str(before["id"]))
                else:
                    table[str(after["id"])] = after
    assert last_map is not None
    return table, ops, last_map


def test_every_type_decodes_to_what_the_reindex_reads() -> None:
    table, ops, _ = replayed()
    assert ops.count("c") == 11 and ops.count("u") == 1 and ops.count("d") == 1
    as_json = {i: orjson.loads(orjson.dumps(row)) for i, row in table.items()}
    expected = RECORDED["rows"]
    assert set(as_json) == set(expected)
    differing = [(i, name, as_json[i][name], value) for i, row in expected.items()
                 for name, value in row.items() if as_json[i].get(name) != value]
    assert not differing


def test_a_full_table_map_names_types_signedness_members_and_key() -> None:
    *_, table = replayed()
    assert table.database == "binlog_fixture" and table.table == "t" and table.names_known
    columns = {c.name: c for c in table.columns}
    assert table.primary_key == (0,) and not columns["id"].nullable
    assert columns["tu"].unsigned and not columns["ti"].unsigned and columns["bu"].unsigned
    assert columns["en"].real_type == ev.ENUM and columns["en"].members == (b"a", b"b",
                                                                            "ü".encode())
    assert columns["st"].real_type == ev.SET and columns["c"].meta == 40  # CHAR(10) utf8mb4
    assert columns["bn"].collation == ev.BINARY_COLLATION and columns["bn"].meta == 4
    assert columns["dec_big"].meta == 65 << 8 | 30 and columns["bit12"].meta == 12


def test_latin1_is_cp1252_with_c1_controls_as_mysql_reads_it() -> None:
    assert latin1_text(bytes([0x80, 0x81, 0xE9, 0x9D, 0x41])) == "\u20ac\x81\u00e9\x9dA"


@pytest.mark.parametrize(("hex_bytes", "precision", "scale", "text"), [
    ("810DFB38D204D2", 14, 4, "1234567890.1234"),  # MySQL's documented example
    ("7EF204C72DFB2D", 14, 4, "-1234567890.1234"),
    ("80", 2, 0, "0"), ("7FFE", 4, 2, "-0.01"),
])
def test_binary_decimals(hex_bytes: str, precision: int, scale: int, text: str) -> None:
    data = bytes.fromhex(hex_bytes)
    assert decimal_binary_size(precision, scale) == len(data)
    assert decimal_from_binary(data, precision, scale) == text


def test_mysql_binary_json() -> None:
    # {"a": [1, true, "x"], "b": 2.5} as MySQL 8 stores it: a small object (count, size, key
    # entries, value entries, keys, values), its array with 1 and true inlined and "x" at an
    # offset, the double at one.
    array = bytes.fromhex("0300 0f00 050100 040100 0c0d00 0178")
    obj = (bytes.fromhex("0200 2b00")  # two members, 43 bytes
           + bytes.fromhex("1200 0100 1300 0100")  # keys "a" at 18, "b" at 19
           + bytes.fromhex("02 1400 0b 2300")  # an array at 20, a double at 35
           + b"ab" + array + bytes.fromhex("0000000000000440"))
    assert len(obj) == 43
    assert mysql_json.parse(b"\x00" + obj) == {"a": [1, True, "x"], "b": 2.5}
    assert mysql_json.parse(bytes([4, 0])) is None
    assert mysql_json.parse(bytes([5, 0xFF, 0xFF])) == -1
