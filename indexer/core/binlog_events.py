"""MySQL's and MariaDB's binlog events as plain data: what the direct binlog source reads.

Pure. An event is the bytes the server sends for it (after the replication protocol's OK
byte): a 19-byte common header, a body, and, when the server checksums events, a CRC32 at the
end. Parsed here: the events that tell where the stream is (rotate, GTID, transaction ends,
statements such as DDL and TRUNCATE) and those that carry rows (the table map that names a
table's columns and types, and the write, update and delete rows events). Row images are
:mod:`indexer.core.binlog_rows`'.

The table map is only complete with ``binlog_row_metadata = FULL`` (MySQL 8.0.14+, MariaDB
10.5+): then it names each column, its signedness, character set and ENUM/SET members, and
the primary key, so no DDL has to be parsed to know a row.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# Event type codes (MySQL's binlog_event.h, MariaDB's log_event.h).
QUERY = 2
STOP = 3
ROTATE = 4
FORMAT_DESCRIPTION = 15
XID = 16
TABLE_MAP = 19
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
HEARTBEAT = 27
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
MYSQL_GTID = 33
MYSQL_ANONYMOUS_GTID = 34
MARIADB_ANNOTATE_ROWS = 160
MARIADB_GTID = 162
MARIADB_GTID_LIST = 163
MARIADB_QUERY_COMPRESSED = 165
MARIADB_WRITE_ROWS_COMPRESSED_V1 = 169
MARIADB_UPDATE_ROWS_COMPRESSED_V1 = 170
MARIADB_DELETE_ROWS_COMPRESSED_V1 = 171

ROWS_EVENTS = {WRITE_ROWS_V1: "c", UPDATE_ROWS_V1: "u", DELETE_ROWS_V1: "d",
               WRITE_ROWS_V2: "c", UPDATE_ROWS_V2: "u", DELETE_ROWS_V2: "d"}
COMPRESSED_ROWS_EVENTS = (MARIADB_WRITE_ROWS_COMPRESSED_V1, MARIADB_UPDATE_ROWS_COMPRESSED_V1,
                          MARIADB_DELETE_ROWS_COMPRESSED_V1, MARIADB_QUERY_COMPRESSED)

HEADER_SIZE = 19
CHECKSUM_SIZE = 4
CHECKSUM_CRC32 = 1

# Column type codes (MySQL's field_types.h).
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = range(10, 20)
JSON = 245
NEWDECIMAL = 246
ENUM = 247
SET = 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB = 249, 250, 251, 252
VAR_STRING = 253
STRING = 254
GEOMETRY = 255

# Whose signedness the table map's SIGNEDNESS metadata lists, one bit each, in column order.
NUMERIC_TYPES = frozenset({DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, LONGLONG, INT24,
                           NEWDECIMAL})
# Optional metadata of a table map (binlog_row_metadata).
_SIGNEDNESS, _DEFAULT_CHARSET, _COLUMN_CHARSET, _COLUMN_NAME = 1, 2, 3, 4
_SET_STR_VALUE, _ENUM_STR_VALUE, _GEOMETRY_TYPE, _SIMPLE_PRIMARY_KEY = 5, 6, 7, 8
_PRIMARY_KEY_WITH_PREFIX, _ENUM_AND_SET_DEFAULT_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET = 9, 10, 11

BINARY_COLLATION = 63  # the "binary" character set: bytes, not text


class BinlogError(ValueError):
    """Bytes that are not the event they claim to be."""


@dataclass(frozen=True, slots=True)
class Header:
    timestamp: int  # seconds: when the statement began on the server that first ran it
    type: int
    server_id: int
    size: int  # of the whole event, header and checksum included
    next_position: int  # where the next event starts in this binlog file (0: not in a file)
    flags: int


def header(event: bytes) -> Header:
    if len(event) < HEADER_SIZE:
        raise BinlogError(f"an event of {len(event)} bytes has no header")
    return Header(*struct.unpack_from("<IBIIIH", event))


class Reader:
    """Reads an event's body: little-endian integers, MySQL's length-encoded ones, strings."""

    __slots__ = ("at", "data", "end")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        self.data = data
        self.at = start
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        at = self.at
        if at + n > self.end:
            raise BinlogError(f"the event ends {at + n - self.end} bytes early")
        self.at = at + n
        return self.data[at:at + n]

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def packed(self) -> int:
        """A length-encoded integer."""
        first = self.uint(1)
        if first < 251:
            return first
        if first == 252:
            return self.uint(2)
        if first == 253:
            return self.uint(3)
        if first == 254:
            return self.uint(8)
        raise BinlogError(f"{first:#x} begins no length-encoded integer")

    def packed_bytes(self) -> bytes:
        return self.take(self.packed())

    def rest(self) -> bytes:
        return self.take(self.end - self.at)

    @property
    def left(self) -> int:
        return self.end - self.at


def body(event: bytes, checksummed: bool) -> Reader:
    """A reader of the event's body (the checksum, if any, left out)."""
    return Reader(event, HEADER_SIZE, len(event) - (CHECKSUM_SIZE if checksummed else 0))


# --- where the stream is ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FormatDescription:
    binlog_version: int
    server_version: str
    checksummed: bool  # every later event ends with a CRC32


def format_description(event: bytes) -> FormatDescription:
    """The first event of every binlog file (and of every dump): its server's version, and
    whether events carry checksums (the byte before this event's own checksum)."""
    r = Reader(event, HEADER_SIZE)
    version = r.uint(2)
    server = r.take(50).split(b"\0", 1)[0].decode("ascii", "replace")
    # Servers that checksum (MySQL 5.6.1+, MariaDB 5.3+) end this event with the algorithm
    # byte and a CRC32, whatever the algorithm: the byte is 5 from the end.
    algorithm = event[-5] if len(event) >= HEADER_SIZE + 57 + 5 else 0
    return FormatDescription(version, server, algorithm == CHECKSUM_CRC32)


def rotate(event: bytes, checksummed: bool) -> tuple[str, int]:
    """(the binlog file the stream continues in, the position it continues at)."""
    r = body(event, checksummed)
    position = r.uint(8)
    return r.rest().decode("utf-8", "replace"), position


def mariadb_gtid(event: bytes, head: Header) -> tuple[str, bool]:
    """MariaDB's GTID event: "domain-server-sequence", and whether the transaction stands
    alone (a DDL statement: no BEGIN, no XID)."""
    sequence, domain, flags = struct.unpack_from("<QIB", event, HEADER_SIZE)
    return f"{domain}-{head.server_id}-{sequence}", bool(flags & 1)


def mysql_gtid(event: bytes) -> str:
    """MySQL's GTID event: "uuid:number"."""
    sid = event[HEADER_SIZE + 1:HEADER_SIZE + 17].hex()
    (number,) = struct.unpack_from("<q", event, HEADER_SIZE + 17)
    return f"{sid[:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:]}:{number}"


def query(event: bytes, checksummed: bool) -> tuple[str, str]:
    """(the default database, the statement) of a query event: BEGIN, DDL, TRUNCATE, ..."""
    r = body(event, checksummed)
    r.take(8)  # thread id, execution time
    database_length = r.uint(1)
    r.take(2)  # error code
    status_length = r.uint(2)
    r.take(status_length)
    database = r.take(database_length).decode("utf-8", "replace")
    r.take(1)
    return database, r.rest().decode("utf-8", "replace")


# --- tables and rows ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MapColumn:
    """A column as a table map describes it (with full row metadata)."""

    name: str
    type: int  # the type code rows carry (STRING also for ENUM and SET: see real_type)
    real_type: int  # ENUM or SET for those; else ``type``
    meta: int  # the type's metadata: length bytes, precision and scale, fsp, ...
    nullable: bool
    unsigned: bool
    collation: int | None  # of a character column (ENUM/SET included); None: not one
    members: tuple[bytes, ...] = ()  # an ENUM's or SET's, in their order, in its charset


@dataclass(frozen=True, slots=True)
class TableMap:
    table_id: int
    database: str
    table: str
    columns: tuple[MapColumn, ...]
    primary_key: tuple[int, ...]  # column indexes, in key order (empty: not known)
    names_known: bool  # the server wrote column names (binlog_row_metadata = FULL)

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


def _metadata_sizes(column_type: int) -> int:
    """Bytes of the type's metadata in a table map."""
    if column_type in (FLOAT, DOUBLE, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY, JSON,
                       TIMESTAMP2, DATETIME2, TIME2):
        return 1
    if column_type in (VARCHAR, VAR_STRING, STRING, NEWDECIMAL, BIT, ENUM, SET, DECIMAL):
        return 2
    return 0


def table_map(event: bytes, checksummed: bool) -> TableMap:
    r = body(event, checksummed)
    table_id = r.uint(6)
    r.take(2)  # flags
    database = r.take(r.uint(1)).decode("utf-8", "replace")
    r.take(1)
    table = r.take(r.uint(1)).decode("utf-8", "replace")
    r.take(1)
    count = r.packed()
    types = r.take(count)
    meta_reader = Reader(r.packed_bytes())
    metas: list[int] = []
    real_types: list[int] = []
    for column_type in types:
        size = _metadata_sizes(column_type)
        if column_type == STRING:  # (real type, length) of CHAR, or ENUM/SET as a string
            first, second = meta_reader.uint(1), meta_reader.uint(1)
            if first & 0x30 != 0x30:  # a length over 255 borrows two bits of the type
                real_types.append(first | 0x30)
                metas.append(second | ((first & 0x30) ^ 0x30) << 4)
            else:  # the length, or the bytes of an ENUM's index or a SET's bitmap
                real_types.append(first)
                metas.append(second)
            continue
        real_types.append(column_type)
        if column_type in (NEWDECIMAL, DECIMAL):  # (precision, scale): big end first
            precision, scale = meta_reader.uint(1), meta_reader.uint(1)
            metas.append(precision << 8 | scale)
        elif column_type == BIT:  # (bits beyond whole bytes, whole bytes)
            bits, whole = meta_reader.uint(1), meta_reader.uint(1)
            metas.append(whole * 8 + bits)
        else:
            metas.append(meta_reader.uint(size) if size else 0)
    nulls = r.take((count + 7) // 8)
    optional = _optional_metadata(r, types, real_types)
    names = optional.names
    signed_bits = optional.unsigned
    columns = []
    numeric = character = enum_set = 0
    for i, column_type in enumerate(types):
        real = real_types[i]
        unsigned = False
        if column_type in NUMERIC_TYPES:
            unsigned = bool(signed_bits and numeric < len(signed_bits) and signed_bits[numeric])
            numeric += 1
        collation: int | None = None
        members: tuple[bytes, ...] = ()
        if real in (ENUM, SET):
            collation = optional.enum_set_collation(enum_set)
            members = optional.members.get(i, ())
            enum_set += 1
        elif column_type in (VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB,
                             LONG_BLOB):
            collation = optional.collation(character)
            character += 1
        columns.append(MapColumn(names[i] if i < len(names) else "", column_type, real,
                                 metas[i], bool(nulls[i // 8] >> (i % 8) & 1), unsigned,
                                 collation, members))
    return TableMap(table_id, database, table, tuple(columns), optional.primary_key,
                    len(names) == count)


@dataclass
class _Optional:
    names: list[str] = field(default_factory=list)
    unsigned: list[bool] = field(default_factory=list)
    default_collation: int | None = None
    collation_exceptions: dict[int, int] = field(default_factory=dict)
    collations: list[int] = field(default_factory=list)
    enum_set_default: int | None = None
    enum_set_exceptions: dict[int, int] = field(default_factory=dict)
    enum_set_collations: list[int] = field(default_factory=list)
    members: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    primary_key: tuple[int, ...] = ()

    def collation(self, n: int) -> int | None:
        """The collation of the ``n``-th character column."""
        if self.collations:
            return self.collations[n] if n < len(self.collations) else None
        return self.collation_exceptions.get(n, self.default_collation)

    def enum_set_collation(self, n: int) -> int | None:
        if self.enum_set_collations:
            return self.enum_set_collations[n] if n < len(self.enum_set_collations) else None
        return self.enum_set_exceptions.get(n, self.enum_set_default)


def _optional_metadata(r: Reader, types: bytes, real_types: list[int]) -> _Optional:
    found = _Optional()
    while r.left > 0:
        kind = r.uint(1)
        value = Reader(r.packed_bytes())
        if kind == _SIGNEDNESS:
            numeric = sum(1 for t in types if t in NUMERIC_TYPES)
            bits = value.rest()
            found.unsigned = [bool(bits[i // 8] & (0x80 >> (i % 8))) for i in range(numeric)]
        elif kind in (_DEFAULT_CHARSET, _ENUM_AND_SET_DEFAULT_CHARSET):
            default = value.packed()
            exceptions = {}
            while value.left > 0:
                index = value.packed()
                exceptions[index] = value.packed()
            if kind == _DEFAULT_CHARSET:
                found.default_collation, found.collation_exceptions = default, exceptions
            else:
                found.enum_set_default, found.enum_set_exceptions = default, exceptions
        elif kind in (_COLUMN_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET):
            collations = []
            while value.left > 0:
                collations.append(value.packed())
            if kind == _COLUMN_CHARSET:
                found.collations = collations
            else:
                found.enum_set_collations = collations
        elif kind == _COLUMN_NAME:
            while value.left > 0:
                found.names.append(value.packed_bytes().decode("utf-8", "replace"))
        elif kind in (_SET_STR_VALUE, _ENUM_STR_VALUE):
            wanted = SET if kind == _SET_STR_VALUE else ENUM
            columns = [i for i, t in enumerate(real_types) if t == wanted]
            for column in columns:
                if value.left <= 0:
                    break
                count = value.packed()
                found.members[column] = tuple(value.packed_bytes() for _ in range(count))
        elif kind == _SIMPLE_PRIMARY_KEY:
            key = []
            while value.left > 0:
                key.append(value.packed())
            found.primary_key = tuple(key)
        elif kind == _PRIMARY_KEY_WITH_PREFIX:
            key = []
            while value.left > 0:
                key.append(value.packed())
                value.packed()  # the prefix length (0: the whole column)
            found.primary_key = tuple(key)
    return found


@dataclass(frozen=True, slots=True)
class RowsHeader:
    table_id: int
    op: str  # c, u or d
    columns: int
    present: bytes  # the bitmap of columns the row images hold
    present_after: bytes  # ... of an update's after image (else ``present``)
    rows_at: int  # where the row images start in the event
    rows_end: int  # where they end (the checksum, if any, left out)


def rows_header(event: bytes, head: Header, checksummed: bool) -> RowsHeader:
    r = body(event, checksummed)
    table_id = r.uint(6)
    r.take(2)  # flags
    if head.type in (WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2):
        extra = r.uint(2)
        r.take(extra - 2)
    columns = r.packed()
    present = r.take((columns + 7) // 8)
    op = ROWS_EVENTS[head.type]
    after = r.take((columns + 7) // 8) if op == "u" else present
    return RowsHeader(table_id, op, columns, present, after, r.at, r.end)


# --- character sets -------------------------------------------------------------------------

# A character set (as information_schema.COLLATIONS names the one of each collation id, asked
# of the server: ids differ between MySQL and MariaDB) -> the Python codec of its bytes.
# MySQL's latin1 is cp1252 with its five undefined bytes read as C1 controls (latin1_text).
CHARSET_CODECS = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "ascii": "ascii",
    "latin1": "latin1-mysql", "utf16": "utf-16-be", "utf16le": "utf-16-le",
    "utf32": "utf-32-be", "ucs2": "utf-16-be", "cp1250": "cp1250", "cp1251": "cp1251",
    "cp1256": "cp1256", "cp1257": "cp1257", "latin2": "iso8859-2", "greek": "iso8859-7",
    "hebrew": "iso8859-8", "latin5": "iso8859-9", "latin7": "iso8859-13", "koi8r": "koi8-r",
    "koi8u": "koi8-u", "cp850": "cp850", "cp852": "cp852", "cp866": "cp866", "sjis": "shift_jis",
    "cp932": "cp932", "ujis": "euc-jp", "eucjpms": "euc-jp", "euckr": "euc-kr", "gbk": "gbk",
    "gb2312": "gb2312", "gb18030": "gb18030", "big5": "big5", "tis620": "tis-620",
    "binary": "binary",
}
