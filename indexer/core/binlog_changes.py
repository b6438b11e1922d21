"""A binlog's events, in the order the server sends them, to the row changes of the tables
indexer reads: each with its before/after images as canonical values, its key, its layout and
its position (file, start of its rows event, row within it; GTID; commit time), and where a
restart must read from to see it again (the start of its transaction). For the tables the
caller names whose documents are their rows as they are, the native RowPlan builds the
documents of a rows event's inserts or updates instead, delivered as one change
(:class:`~indexer.core.events.BuiltRows`): no row image becomes a Python object, and no row an
object of its own; what it declines is read as images.

Pure: bytes in, :class:`RowChange` out. What only the server can say (which tables are read
and which of their columns hold JSON; how each collation's bytes decode) is given by the
caller. The positions are Debezium's, so a change read here gets the version it gets through
Debezium: ``pos`` is where the change's rows event starts, ``row`` its row in that event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from indexer.core import binlog_events as ev
from indexer.core.binlog_events import BinlogError, Header, TableMap
from indexer.core.binlog_rows import NativePlan, RowDecoder
from indexer.core.envelope import Position
from indexer.core.events import BuiltRows, Change

# A table's row as the table map shows it: (column, its type), as events.Layout.
Layout = frozenset[tuple[str, str]]
# A change's weight in a batch beside its row images' bytes (its objects, its position).
ROW_OVERHEAD = 64


@dataclass(frozen=True, slots=True)
class TableColumns:
    """What the server says of a table read (a table map cannot say which columns hold JSON
    on MariaDB, where JSON is LONGTEXT)."""

    names: frozenset[str]
    json: frozenset[str]


# "database.table" -> its columns, for the tables read (None: not read)
Wanted = Callable[[str], TableColumns | None]


class UnknownColumns(Exception):
    """A read table's map names columns the caller has not described (added since): it reads
    the table's columns again and feeds the same event again."""

    def __init__(self, table: str, names: frozenset[str]) -> None:
        super().__init__(f"{table}: columns not known yet: {', '.join(sorted(names))}")
        self.table = table
        self.names = names

_TRUNCATE = re.compile(r"^\s*TRUNCATE\s+(?:TABLE\s+)?(?:`?([^`.\s]+)`?\.)?`?([^`\s;]+)`?",
                       re.IGNORECASE)
_TYPE_NAMES = {
    ev.DECIMAL: "decimal", ev.TINY: "tinyint", ev.SHORT: "smallint", ev.LONG: "int",
    ev.FLOAT: "float", ev.DOUBLE: "double", ev.LONGLONG: "bigint", ev.INT24: "mediumint",
    ev.NEWDECIMAL: "decimal", ev.ENUM: "enum", ev.SET: "set", ev.JSON: "json",
    ev.GEOMETRY: "geometry", ev.VARCHAR: "varchar", ev.VAR_STRING: "varchar", ev.STRING: "char",
    ev.BLOB: "blob", ev.TINY_BLOB: "blob", ev.MEDIUM_BLOB: "blob", ev.LONG_BLOB: "blob",
    ev.BIT: "bit", ev.YEAR: "year", ev.DATE: "date", ev.NEWDATE: "date", ev.TIME: "time",
    ev.TIME2: "time", ev.DATETIME: "datetime", ev.DATETIME2: "datetime",
    ev.TIMESTAMP: "timestamp", ev.TIMESTAMP2: "timestamp",
}


@dataclass(slots=True)
class RowChange:
    """One row's change (``change``: as a Debezium event of it decodes), or, with ``error``
    instead, a change of a read table that cannot be applied: its row images could not be
    read, or it is a statement (TRUNCATE) rows cannot express."""

    table: str  # "database.table"
    position: Position
    layout: Layout
    resume: tuple[str, int]  # (file, position) a restart reads from to see this change again
    change: Change | None
    error: tuple[str, str] | None = None  # (kind, reason), as a DecodeError's
    # 1: the insert half of an update that changed the primary key (Debezium sends it as a
    # delete of the old key and an insert of the new one, both at the row's position).
    half: int = 0
    # MariaDB's GTID position at ``resume`` ("domain-server-seq" per domain, as
    # @gtid_binlog_pos writes it): where another server of the replication group reads from.
    resume_gtids: str = ""
    size: int = ROW_OVERHEAD  # its weight in a batch: its share of its rows event's bytes
    # instead of ``change``: the documents of its rows event's rows from ``position`` on,
    # built natively (``size`` is then theirs together)
    built_rows: BuiltRows | None = None

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per event.
    def __init__(self, table: str, position: Position, layout: Layout, resume: tuple[str, int],
                 change: Change | None, error: tuple[str, str] | None = None, half: int = 0,
                 resume_gtids: str = "", size: int = ROW_OVERHEAD,
                 built_rows: BuiltRows | None = None) -> None:
        self.table, self.position, self.layout, self.resume = table, position, layout, resume
        self.change, self.error, self.half = change, error, half
        self.resume_gtids, self.size, self.built_rows = resume_gtids, size, built_rows


@dataclass
class _Place:
    """Where the stream is: the file, the transaction being read and where it began."""

    file: str = ""
    checksummed: bool = False
    server_version: str = ""
    gtid: str | None = None
    begin: tuple[str, int] | None = None  # the transaction's first event (GTID or BEGIN)
    done: tuple[str, int] | None = None  # after the last whole transaction: a clean restart
    # MariaDB's GTIDs: the last committed per domain, and the position at ``begin``
    gtids: dict[int, str] = field(default_factory=dict)
    begin_gtids: str = ""
    # False while a stream started from a GTID position has not reached its first
    # transaction: the events before it (a rotate, the format) are not a place to resume at.
    anchored: bool = True


@dataclass(slots=True)
class _Mapped:
    """A table map as last seen for its table id, and what reads its rows."""

    body: bytes
    table: TableMap
    read: bool  # a table indexer reads
    decoder: RowDecoder | None  # None: not read, or its map names no columns
    layout: Layout


class ChangeReader:
    """Reads a binlog's events in order (:meth:`feed`), keeping what later events need: the
    file, the checksum setting, the table maps, the transaction's GTID and start."""

    def __init__(self, wanted: Wanted, codecs: Mapping[int, str], flavor: str,
                 file: str = "", position: int = 4, checksummed: bool = False,
                 native: NativePlan | None = None, gtids: str = "",
                 by_gtid: bool = False, built: frozenset[str] = frozenset()) -> None:
        self._wanted = wanted
        self._codecs = codecs
        self._native = native  # the native module's RowPlan, where built
        # Tables whose documents are their rows as they are: the RowPlan builds those
        self._built = built
        self._connector = flavor  # "mariadb" or "mysql", as Debezium's source block says
        # ``checksummed``: as the server's binlog_checksum says, until a format description
        # ``gtids``: MariaDB's GTID position at the start; ``by_gtid``: the server was asked
        # for the events after it (another server than the coordinates' own)
        self._place = _Place(file=file, checksummed=checksummed,
                             done=(file, position) if file and not by_gtid else None,
                             gtids=parse_gtid_position(gtids), anchored=not by_gtid)
        # Every rows event follows its table's map in the same transaction; the next
        # transaction's map of the same table id reuses the decoder while its bytes match.
        self._maps: dict[int, _Mapped] = {}

    @property
    def resume(self) -> tuple[str, int] | None:
        """Where a restart reads from to see every change after the last whole transaction."""
        return self._place.done

    @property
    def resume_gtids(self) -> str:
        """MariaDB's GTID position at :attr:`resume`."""
        return gtid_position(self._place.gtids)

    @property
    def server_version(self) -> str:
        return self._place.server_version

    def feed(self, event: bytes) -> list[RowChange]:
        """The row changes of the tables read in one event (most events have none)."""
        head = ev.header(event)
        kind = head.type
        place = self._place
        if kind in ev.ROWS_EVENTS:
            return self._rows(event, head)
        if kind == ev.TABLE_MAP:
            self._table_map(event, head)
        elif kind == ev.XID:
            self._commit(head)
        elif kind == ev.MARIADB_GTID:
            # A DDL's stands alone (no BEGIN, no XID): its query event ends it.
            self._begin(head, ev.mariadb_gtid(event, head)[0])
        elif kind in (ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID):
            self._begin(head, ev.mysql_gtid(event) if kind == ev.MYSQL_GTID else None)
        elif kind == ev.QUERY:
            return self._query(event, head)
        elif kind == ev.ROTATE:
            file, position = ev.rotate(event, place.checksummed)
            place.file = file
            if place.begin is None and place.anchored:
                place.done = (file, position)
        elif kind == ev.FORMAT_DESCRIPTION:
            described = ev.format_description(event)
            place.checksummed = described.checksummed
            place.server_version = described.server_version
        elif kind in ev.COMPRESSED_ROWS_EVENTS:
            raise BinlogError("the binlog holds compressed row events (MariaDB's "
                              "log_bin_compress = ON): set log_bin_compress = OFF")
        elif place.begin is None and place.anchored:  # between transactions (a file's
            self._passed(head)  # header, a heartbeat)
        return []

    def _passed(self, head: Header) -> None:
        """Past an event outside any transaction: a restart may begin after it."""
        place = self._place
        done = place.done
        at = head.next_position
        if at and (done is None or done[0] != place.file or at > done[1]):
            place.done = (place.file, at)

    # --- transactions ----------------------------------------------------------------------

    def _start(self, head: Header) -> int:
        return head.next_position - head.size if head.next_position else 0

    def _begin(self, head: Header, gtid: str | None) -> None:
        place = self._place
        place.gtid = gtid
        place.begin = (place.file, self._start(head))
        place.begin_gtids = gtid_position(place.gtids)
        if not place.anchored:
            place.anchored = True
            place.done = place.begin

    def _commit(self, head: Header) -> None:
        place = self._place
        if place.gtid is not None and self._connector == "mariadb":
            place.gtids[int(place.gtid.split("-", 1)[0])] = place.gtid
        place.begin = None
        self._passed(head)

    def _query(self, event: bytes, head: Header) -> list[RowChange]:
        place = self._place
        database, statement = ev.query(event, place.checksummed)
        word = statement[:8].upper()
        if word.startswith("BEGIN"):
            if place.begin is None:  # no GTID event before it (MySQL without GTIDs)
                place.begin = (place.file, self._start(head))
            return []
        found: list[RowChange] = []
        if not word.startswith("XA "):
            truncated = _TRUNCATE.match(statement)
            if truncated:
                name = f"{truncated.group(1) or database}.{truncated.group(2)}"
                if self._wanted(name) is not None:
                    found.append(RowChange(
                        name, self._position(head, 0), frozenset(), self._resume(head), None,
                        ("unsupported-op", "a TRUNCATE cannot be applied row by row: run "
                         "`indexer reindex`"), resume_gtids=self._resume_gtids()))
        # COMMIT (a transaction of a non-transactional engine), DDL, anything standing alone
        self._commit(head)
        return found

    def _resume(self, head: Header) -> tuple[str, int]:
        place = self._place
        return place.begin or (place.file, self._start(head))

    def _resume_gtids(self) -> str:
        place = self._place
        return place.begin_gtids if place.begin is not None else gtid_position(place.gtids)

    def _position(self, head: Header, row: int) -> Position:
        return Position(self._place.file, self._start(head), row, head.timestamp * 1000,
                        self._place.gtid, "false", self._connector)

    # --- tables and rows -------------------------------------------------------------------

    def _table_map(self, event: bytes, head: Header) -> None:
        body = event[ev.HEADER_SIZE:len(event) - (ev.CHECKSUM_SIZE if self._place.checksummed
                                                  else 0)]
        known = self._maps.get(_table_id(event))
        if known is not None and known.body == body:
            return
        table = ev.table_map(event, self._place.checksummed)
        columns = self._wanted(table.name)
        decoder = None
        if columns is not None and table.names_known:
            unknown = frozenset(c.name for c in table.columns) - columns.names
            if unknown:
                raise UnknownColumns(table.name, unknown)
            decoder = RowDecoder(table, columns.json, self._codecs, self._native)
        layout = frozenset((c.name, _type_name(c)) for c in table.columns)
        self._maps[table.table_id] = _Mapped(body, table, columns is not None, decoder, layout)

    def _rows(self, event: bytes, head: Header) -> list[RowChange]:
        header = ev.rows_header(event, head, self._place.checksummed)
        known = self._maps.get(header.table_id)
        if known is None:
            raise BinlogError(f"a rows event of table id {header.table_id} without its table "
                              "map (the stream did not start at a transaction's start)")
        table, decoder, layout = known.table, known.decoder, known.layout
        if not known.read:
            return []
        resume, gtids = self._resume(head), self._resume_gtids()
        if decoder is None:
            return [RowChange(table.name, self._position(head, 0), frozenset(), resume, None,
                              ("no-column-names", "the table map names no columns: the session "
                               "that wrote it began before binlog_row_metadata = FULL was set; "
                               f"run `indexer reindex` for {table.name}"), resume_gtids=gtids)]
        if table.name in self._built:
            documents = decoder.documents(event, header)
            if documents is not None:
                return self._built_rows(table.name, head, header, layout, decoder.key[0],
                                        documents)
        try:
            rows = decoder.rows(event, header)
        except (BinlogError, ValueError, IndexError) as exc:
            return [RowChange(table.name, self._position(head, 0), layout, resume, None,
                              ("undecodable", f"a rows event of {table.name} could not be "
                               f"read: {type(exc).__name__}: {exc}"), resume_gtids=gtids)]
        key_names = decoder.key
        if not key_names:
            return [RowChange(table.name, self._position(head, row), layout, resume, None,
                              ("undecodable", f"{table.name} has no primary key (a table "
                               "without one cannot be indexed by id)"), resume_gtids=gtids)
                    for row in range(len(rows))]
        op = header.op
        changes = []
        size = ROW_OVERHEAD + (header.rows_end - header.rows_at) // max(1, len(rows))
        for row, (before, after) in enumerate(rows):
            image = after if after is not None else before
            assert image is not None
            position = self._position(head, row)
            key = {name: image[name] for name in key_names}
            if before is not None and after is not None and any(
                    before[name] != key[name] for name in key_names):
                old = {name: before[name] for name in key_names}
                changes.append(RowChange(table.name, position, layout, resume,
                                         Change("d", old, before, None, position),
                                         resume_gtids=gtids, size=size))
                changes.append(RowChange(table.name, position, layout, resume,
                                         Change("c", key, None, after, position), half=1,
                                         resume_gtids=gtids, size=size))
                continue
            changes.append(RowChange(table.name, position, layout, resume,
                                     Change(op, key, before, after, position),
                                     resume_gtids=gtids, size=size))
        return changes

    def _built_rows(self, name: str, head: Header, header: ev.RowsHeader, layout: Layout,
                    key: str, documents: list[tuple[str, bytes]]) -> list[RowChange]:
        """A rows event's changes whose documents the RowPlan built: one change for them."""
        if not documents:
            return []
        size = ROW_OVERHEAD * len(documents) + header.rows_end - header.rows_at
        position = self._position(head, 0)
        return [RowChange(name, position, layout, self._resume(head), None,
                          resume_gtids=self._resume_gtids(), size=size,
                          built_rows=BuiltRows(header.op, position, documents, key))]


def _table_id(event: bytes) -> int:
    return int.from_bytes(event[ev.HEADER_SIZE:ev.HEADER_SIZE + 6], "little")


def _type_name(column: ev.MapColumn) -> str:
    name = _TYPE_NAMES.get(column.real_type, f"type {column.real_type}")
    return f"{name} unsigned" if column.unsigned else name


def parse_gtid_position(text: str) -> dict[int, str]:
    """MariaDB's GTID position ("0-1-100,1-2-7": domain-server-seq, one per domain) by
    domain."""
    found: dict[int, str] = {}
    for gtid in text.replace(" ", "").split(","):
        parts = gtid.split("-")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            if gtid:
                raise ValueError(f"not a MariaDB GTID position: {text!r}")
            continue
        found[int(parts[0])] = gtid
    return found


def gtid_position(gtids: Mapping[int, str]) -> str:
    """The GTID position of the last GTIDs per domain, as MariaDB writes it."""
    return ",".join(gtids[domain] for domain in sorted(gtids))
