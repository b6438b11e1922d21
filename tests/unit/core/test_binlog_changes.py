"""The binlog's events to row changes: MariaDB's own bytes of a table of every type (the
fixture of test_binlog), read as the binlog source reads them."""

from __future__ import annotations

import struct

import orjson
import pytest

from indexer.core import binlog_events as ev
from indexer.core.binlog_changes import (
    ChangeReader,
    RowChange,
    TableColumns,
    UnknownColumns,
    gtid_position,
    parse_gtid_position,
)
from tests.unit.core.test_binlog import RECORDED, codecs, events

TABLE = "binlog_fixture.t"
NAMES = frozenset(RECORDED["rows"]["1"])
COLUMNS = TableColumns(NAMES, frozenset(RECORDED["json_columns"]))


def read(wanted: dict[str, TableColumns] | None = None,
         replace: dict[int, bytes] | None = None) -> tuple[ChangeReader, list[RowChange]]:
    tables = {TABLE: COLUMNS} if wanted is None else wanted
    # a dump begins with a rotate naming the file; a file read from disk does not
    reader = ChangeReader(tables.get, codecs(), "mariadb", RECORDED["log"])
    found: list[RowChange] = []
    for n, (_, event) in enumerate(events()):
        found += reader.feed((replace or {}).get(n, event))
    return reader, found


def test_changes_replay_to_the_rows_the_reindex_reads() -> None:
    _, changes = read()
    assert [c.change.op for c in changes if c.change] == ["c"] * 11 + ["u", "d"]
    assert all(c.error is None for c in changes)
    table: dict[str, object] = {}
    for row in changes:
        change = row.change
        assert change is not None and list(change.key) == ["id"]
        if change.after is None:
            table.pop(str(change.key["id"]))
        else:
            table[str(change.key["id"])] = change.after
    assert orjson.loads(orjson.dumps(table)) == RECORDED["rows"]


def test_positions_are_debeziums_and_grow_in_commit_order() -> None:
    starts = {}
    for head, _ in events():
        if head.type in ev.ROWS_EVENTS:
            starts[head.next_position - head.size] = head
    _, changes = read()
    coordinates = [(c.position.file, c.position.pos, c.position.row) for c in changes]
    assert coordinates == sorted(coordinates) and len(set(coordinates)) == len(coordinates)
    for change in changes:
        position = change.position
        assert position.file == RECORDED["log"]
        assert position.pos in starts  # where its rows event starts
        assert position.ts_ms == starts[position.pos].timestamp * 1000
        assert position.gtid is not None and position.gtid.startswith("0-1-")
        assert position.snapshot == "false" and position.connector == "mariadb"
    # each row insert is a transaction of its own: its own GTID, rows numbered from 0
    assert len({c.position.gtid for c in changes}) == len(changes)
    assert {c.position.row for c in changes} == {0}


def test_a_change_resumes_at_its_transactions_start_and_the_reader_after_the_last() -> None:
    gtid_starts = [h.next_position - h.size for h, _ in events() if h.type == ev.MARIADB_GTID]
    reader, changes = read()
    for change in changes:
        file, position = change.resume
        assert file == RECORDED["log"] and position in gtid_starts
        assert position < change.position.pos
    # the fixture's file ends with a rotate to the next file, after the last commit
    last = [h for h, _ in events()][-1]
    assert last.type == ev.ROTATE
    assert reader.resume is not None and reader.resume[1] == 4


def test_each_change_carries_the_gtid_position_at_its_transactions_start() -> None:
    gtids = {h.next_position - h.size: ev.mariadb_gtid(e, h)[0]
             for h, e in events() if h.type == ev.MARIADB_GTID}
    order = sorted(gtids)
    reader, changes = read()
    # The first change's transaction follows the table's DDL, whose query event the fixture
    # does not hold: nothing was committed before it as far as the reader saw.
    assert changes[0].resume_gtids == ""
    for change in changes[1:]:
        # the transaction before this one's, the last committed when it began
        before = order[order.index(change.resume[1]) - 1]
        assert change.resume_gtids == gtids[before]
    assert reader.resume_gtids == gtids[order[-1]]
    assert parse_gtid_position("0-1-5, 2-3-9") == {0: "0-1-5", 2: "2-3-9"}
    assert gtid_position(parse_gtid_position("2-3-9,0-1-5")) == "0-1-5,2-3-9"
    with pytest.raises(ValueError, match="not a MariaDB GTID position"):
        parse_gtid_position("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")


def test_a_stream_from_a_gtid_position_resumes_from_its_first_transaction_on() -> None:
    """Another server read from a GTID position: the events before its first transaction
    (the format, a rotate) are no place to resume at, and the position moves on from there."""
    reader = ChangeReader({TABLE: COLUMNS}.get, codecs(), "mariadb", "", 4, gtids="0-1-70",
                          by_gtid=True)
    heads = events()
    first_gtid = next(n for n, (h, _) in enumerate(heads) if h.type == ev.MARIADB_GTID)
    for _, event in heads[:first_gtid]:
        reader.feed(event)
    assert reader.resume is None and reader.resume_gtids == "0-1-70"
    head, event = heads[first_gtid]
    reader.feed(event)
    assert reader.resume == ("", head.next_position - head.size)
    for _, event in heads[first_gtid + 1:]:
        reader.feed(event)
    assert reader.resume is not None and reader.resume_gtids == "0-1-78"


def test_tables_not_read_give_nothing() -> None:
    _, changes = read({"binlog_fixture.other": COLUMNS})
    assert changes == []


def test_a_map_naming_columns_not_described_asks_for_them_and_reads_on() -> None:
    described = {TABLE: TableColumns(NAMES - {"js", "vc"}, frozenset())}
    reader = ChangeReader(described.get, codecs(), "mariadb", RECORDED["log"])
    found, asked = [], 0
    for _, event in events():
        try:
            found += reader.feed(event)
        except UnknownColumns as exc:
            assert exc.table == TABLE and exc.names == {"js", "vc"}
            asked += 1
            described[TABLE] = COLUMNS  # read again from the server
            found += reader.feed(event)
    assert asked == 1 and len(found) == 13 and all(c.error is None for c in found)
    after = found[0].change.after if found[0].change else None
    assert after is not None and isinstance(after["js"], dict | list)


def test_a_table_map_without_names_dead_letters_its_rows_with_the_fix() -> None:
    maps = [n for n, (h, _) in enumerate(events()) if h.type == ev.TABLE_MAP]
    first = maps[0]
    _, changes = read(replace={first: without_metadata(events()[first][1])})
    assert changes[0].error is not None and changes[0].error[0] == "no-column-names"
    assert "binlog_row_metadata = FULL" in changes[0].error[1]
    assert "indexer reindex" in changes[0].error[1]
    assert all(c.error is None for c in changes[1:])  # the next maps name their columns


def test_a_rows_event_that_cannot_be_read_is_one_error_not_a_crash() -> None:
    rows = [n for n, (h, _) in enumerate(events()) if h.type in ev.ROWS_EVENTS]
    head, event = events()[rows[0]]
    cut = event[:head.size - 20] + event[-4:]  # its last value cut short
    cut = cut[:9] + struct.pack("<I", len(cut)) + cut[13:]
    _, changes = read(replace={rows[0]: cut})
    assert changes[0].error is not None and changes[0].error[0] == "undecodable"
    assert TABLE in changes[0].error[1]
    assert len(changes) == 13 and all(c.error is None for c in changes[1:])


def test_a_truncate_of_a_table_read_is_an_unsupported_op() -> None:
    query = query_event("binlog_fixture", "TRUNCATE TABLE t")
    reader = ChangeReader({TABLE: COLUMNS}.get, codecs(), "mariadb", "mysql-bin.000007")
    (change,) = reader.feed(query)
    assert change.change is None and change.table == TABLE
    assert change.error is not None and change.error[0] == "unsupported-op"
    assert reader.resume == ("mysql-bin.000007", 1000)  # a statement stands alone
    assert reader.feed(query_event("other", "TRUNCATE `binlog_fixture`.`t`"))[0].error
    assert reader.feed(query_event("binlog_fixture", "TRUNCATE TABLE t2")) == []


def query_event(database: str, statement: str, next_position: int = 1000) -> bytes:
    body = (struct.pack("<IIBHH", 1, 0, len(database), 0, 0) + database.encode() + b"\0"
            + statement.encode())
    size = ev.HEADER_SIZE + len(body)
    return struct.pack("<IBIIIH", 1_700_000_000, ev.QUERY, 1, size, next_position, 0) + body


def without_metadata(event: bytes) -> bytes:
    """The table map as a session that began before binlog_row_metadata = FULL writes it."""
    r = ev.body(event, checksummed=True)
    r.take(8)
    r.take(r.uint(1) + 1)
    r.take(r.uint(1) + 1)
    count = r.packed()
    r.take(count)
    r.packed_bytes()
    r.take((count + 7) // 8)
    cut = event[:r.at] + event[-4:]
    return cut[:9] + struct.pack("<I", len(cut)) + cut[13:]
