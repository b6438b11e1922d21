"""Rows and changes to Elasticsearch writes: document id, external version, document body.

Pure. The daemon (from a :class:`~indexer.core.events.Change`) and the reindex (from a MySQL row
already in canonical values) both go through :class:`DocumentBuilder`, so the same row
becomes the same bytes whichever way it arrives.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from indexer import transforms
from indexer.core import conditions
from indexer.core.checksums import Hasher, content_hash
from indexer.core.events import Change
from indexer.core.routing import routing_of, scalar_text
from indexer.core.sources import EPOCH_ZERO, Epoch, binlog_file_number
from indexer.core.versions import (
    FILE_BITS,
    MAX_FILE,
    MAX_POS,
    MAX_ROW,
    MAX_VERSION,
    POS_BITS,
    ROW_BITS,
    pack,
)
from indexer.errors import DecodeError, SourceError, VersionError
from indexer.settings import ServerKind, TableConfig, VersionSource

META_FIELD = "_indexer"  # the indexer's own fields inside every document
_META_NAME = META_FIELD.encode()
# Elasticsearch refuses ids over 512 bytes.
MAX_ID_BYTES = 512

MIN_LONG = -(1 << 63)
# Documents of tables without a single integer key are grouped by crc32(id) % KEY_BUCKETS.
KEY_BUCKETS = 1024

def file_number(file: str) -> int:
    try:
        return binlog_file_number(file)
    except SourceError as exc:
        raise VersionError(str(exc)) from exc


def pack_binlog_version(file: str, pos: int, row: int, epoch: Epoch = EPOCH_ZERO) -> int:
    """A version that grows with the commit order of row changes in one server's binlog.

    Another server's coordinates (a fail-over, RESET MASTER) are unrelated: changes from
    there take a later ``epoch``, whose versions are all above the earlier ones'
    (:mod:`indexer.core.sources` notices the switch and records the epoch).
    """
    number = file_number(file)
    if epoch.number:
        number = epoch.field(number)
    if not 0 < number <= MAX_FILE:
        raise VersionError(f"binlog file number {number} does not fit {FILE_BITS} bits "
                           f"(max {MAX_FILE}); use a column version or reset and reindex")
    if not 0 <= pos <= MAX_POS:
        raise VersionError(f"binlog position {pos} does not fit {POS_BITS} bits")
    if not 0 <= row <= MAX_ROW:
        raise VersionError(f"row {row} of one binlog event does not fit {ROW_BITS} bits "
                           f"(max {MAX_ROW}); lower binlog_row_event_max_size")
    return pack(number, pos, row)


def column_version(value: Any, column: str) -> int:
    """A BIGINT as is, or a DATETIME/TIMESTAMP (canonical ISO text) as epoch microseconds."""
    if isinstance(value, bool) or value is None:
        raise VersionError(f"version column {column!r} is {value!r}")
    if isinstance(value, int):
        version = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise VersionError(f"version column {column!r} holds {value!r}, neither an "
                               "integer nor a date-time") from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
        version = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    else:
        raise VersionError(f"version column {column!r} holds a {type(value).__name__}")
    if not 0 < version <= MAX_VERSION:
        raise VersionError(f"version column {column!r}: {version} is not a positive long")
    return version


def id_part(value: Any) -> str:
    text = scalar_text(value)
    return text if text is not None else orjson.dumps(value).decode()


def document_id(key: Mapping[str, Any]) -> str:
    """The primary key as ``_id``: one column as its text; several joined by ``|`` with ``\\``
    escaping ``|`` and ``\\`` inside values, so distinct keys never share an id."""
    if len(key) == 1:
        (value,) = key.values()
        text = str(value) if type(value) is int else id_part(value)
    else:
        text = "|".join(
            id_part(v).replace("\\", "\\\\").replace("|", "\\|") for v in key.values()
        )
    # A character takes at most 4 bytes in UTF-8: only long ids need encoding to check.
    if len(text) * 4 > MAX_ID_BYTES and len(text.encode()) > MAX_ID_BYTES:
        raise DecodeError("invalid-id", f"the primary key is {len(text.encode())} bytes as an "
                          f"id; Elasticsearch allows {MAX_ID_BYTES}")
    if not text:
        raise DecodeError("invalid-id", "the primary key is empty")
    return text


@dataclass(slots=True)
class Write:
    """One Elasticsearch write: a document, or a tombstone for a deleted row."""

    id: str
    version: int
    source: bytes
    deleted: bool
    routing: str | None = None  # the table's routing (None: the table is not routed)
    # Tombstones on the other routings the document leaves (its routing value changed).
    leaves: tuple[Write, ...] = ()

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per change.
    def __init__(self, id: str, version: int, source: bytes, deleted: bool,
                 routing: str | None = None, leaves: tuple[Write, ...] = ()) -> None:
        self.id, self.version, self.source, self.deleted = id, version, source, deleted
        self.routing, self.leaves = routing, leaves


class DocumentBuilder:
    """Per table: projection (include/exclude/rename), id, version and body."""

    def __init__(self, table: TableConfig, server: ServerKind = "auto",
                 hasher: Hasher = content_hash) -> None:
        self._hash = hasher  # the reference's, or the native module's (checksums.NativeHasher)
        # MySQL's JSON texts hash spaced (hash_text); "auto": as each event's connector says.
        self._spaced = server == "mysql"
        self._by_connector = server == "auto"
        self._version: VersionSource = table.version
        self.binlog_versions = table.version.kind == "binlog"
        self._include = frozenset(table.include)
        self._exclude = frozenset(table.exclude)
        self._rename = dict(table.rename)
        self._rows = table.rows
        self._identity = not (self._include or self._exclude or self._rename)
        self._spec = table.transform
        self._transform = transforms.load(table.transform) if table.transform else None
        # A joined document's routing is its tree's (trees.write_for): here, a column's.
        self._routing = table.routing if not table.joins else ""

    @property
    def identity(self) -> bool:
        """Documents are the rows as they are, every row: no include, exclude, rename, where,
        deleted_when, transform or routing."""
        return (self._identity and self._rows is None and self._transform is None
                and not self._routing)

    def includes(self, column: str) -> bool:
        return not ((self._include and column not in self._include) or column in self._exclude)

    def field_names(self, columns: Iterable[str]) -> dict[str, str]:
        """column -> document field, for the columns the documents hold."""
        return {c: self._rename.get(c, c) for c in columns if self.includes(c)}

    def document(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        if self._identity:
            return row
        doc: dict[str, Any] = {}
        for name, value in row.items():
            if self.includes(name):
                doc[self._rename.get(name, name)] = value
        return doc

    def shaped(self, doc_id: str, row: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The document indexed for this row: projected, then transformed (None: no document;
        what the transform raises is a :class:`DecodeError`)."""
        document = row if self._identity else self.document(row)
        if self._transform is None:
            return document
        return transforms.apply(self._transform, self._spec, doc_id, document)

    def row_hash(self, key: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[str, int] | None:
        """(id, content hash) of the row's document as written, None when it has none."""
        doc_id = document_id(key)
        document = self.shaped(doc_id, row)
        return None if document is None else (doc_id, self._hash(document, self._spaced))

    def body(self, key: Mapping[str, Any], doc_id: str, document: Mapping[str, Any],
             spaced: bool) -> bytes:
        """The document, plus ``_indexer``: its content hash and chunk for reconciliation."""
        try:
            doc = orjson.dumps(document)
        except orjson.JSONEncodeError as exc:  # a malformed event: an integer past 64 bits
            raise DecodeError("bad-value", f"the row cannot be written as JSON: {exc}") from exc
        chunk, number = chunk_field(key, doc_id)
        # Spliced in by hand rather than merged: the row may be the decoder's own dict, left
        # untouched, and this runs once per document.
        return b'%b%b"%b":{"hash":%d,"%b":%d}}' % (
            doc[:-1], b"," if len(doc) > 2 else b"", _META_NAME, self._hash(document, spaced),
            chunk, number)

    def row_version(self, row: Mapping[str, Any]) -> int:
        """A column version read straight from the row (reindex and reconcile)."""
        assert self._version.column is not None
        return column_version(row.get(self._version.column), self._version.column)

    def routing(self, doc_id: str, row: Mapping[str, Any]) -> str | None:
        """The row's ``_routing`` (None: the table is not routed)."""
        if not self._routing:
            return None
        return routing_of(row.get(self._routing), doc_id, self._routing)

    def write_for_change(self, change: Change, epoch: Epoch = EPOCH_ZERO) -> Write:
        doc_id = document_id(change.key)
        ts_ms = change.position.ts_ms
        if change.op == "d":
            assert change.before is not None
            version = self._change_version(change, change.before, epoch, deleted=True)
            return Write(doc_id, version, tombstone(ts_ms), True,
                         self.routing(doc_id, change.before))
        assert change.after is not None
        version = self._change_version(change, change.after, epoch, deleted=False)
        if self._rows is not None and not conditions.keeps(self._rows, change.after):
            # Left out by where, or soft-deleted: gone from the index at this change's
            # version, back at a later one's when the row is indexed again.
            write = Write(doc_id, version, tombstone(ts_ms), True,
                          self.routing(doc_id, change.after))
        else:
            spaced = self._spaced or (self._by_connector
                                      and change.position.connector == "mysql")
            write = self._write(change.key, doc_id, change.after, version, spaced, ts_ms)
        if self._routing and change.before is not None:  # its routing value may have changed
            was = routing_of(change.before.get(self._routing), doc_id, self._routing)
            return leaving(write, (was,), ts_ms)
        return write

    def stays_out(self, change: Change) -> bool:
        """The table's where or deleted_when left the row out before this change and still
        does (or it is deleted): no document to write or remove, since the change that left
        it out wrote its tombstone. A filter that drops most rows then costs no write."""
        rule = self._rows
        if rule is None:
            return False
        # An insert had no row before it; a snapshot's read (no before) may follow anything.
        was_out = change.op == "c" or (change.before is not None
                                       and not conditions.keeps(rule, change.before))
        return was_out and (change.op == "d" or (change.after is not None
                                                 and not conditions.keeps(rule, change.after)))

    def write_for_row(self, key: Mapping[str, Any], row: Mapping[str, Any], version: int) -> Write:
        """The row's write (reindex, repairs)."""
        return self._write(key, document_id(key), row, version, self._spaced, 0)

    def _write(self, key: Mapping[str, Any], doc_id: str, row: Mapping[str, Any], version: int,
               spaced: bool, deleted_at_ms: int) -> Write:
        document = self.shaped(doc_id, row)
        routing = self.routing(doc_id, row)
        if document is None:  # the transform's no: a tombstone, as for a row a where leaves out
            return Write(doc_id, version, tombstone(deleted_at_ms), True, routing)
        return Write(doc_id, version, self.body(key, doc_id, document, spaced), False, routing)

    def _change_version(self, change: Change, row: Mapping[str, Any], epoch: Epoch, *,
                        deleted: bool) -> int:
        if self._version.kind == "binlog":
            position = change.position
            return pack_binlog_version(position.file, position.pos, position.row, epoch)
        version = self.row_version(row)
        # A delete leaves the version column as it was: it must outrank the row it removes.
        return version + 1 if deleted else version


def chunk_field(key: Mapping[str, Any], doc_id: str) -> tuple[bytes, int]:
    """Where reconciliation finds the document: ``key`` (a single integer key's value) or
    ``bucket`` (crc32 of the id)."""
    single = next(iter(key.values())) if len(key) == 1 else None
    if type(single) is int and MIN_LONG <= single <= MAX_VERSION:
        return b"key", single
    return b"bucket", key_bucket(doc_id)


def key_bucket(doc_id: str) -> int:
    return zlib.crc32(doc_id.encode()) % KEY_BUCKETS


def tombstone(deleted_at_ms: int) -> bytes:
    """A deleted row's stand-in: it keeps the delete's version past ``index.gc_deletes`` and
    node restarts, and the read alias's filter hides it from searches."""
    return orjson.dumps({META_FIELD: {"deleted": True, "deleted_at": deleted_at_ms}})


def leaving(write: Write, elsewhere: Iterable[str], deleted_at_ms: int) -> Write:
    """The write with a tombstone, at its version, on every other routing the document is
    found under (a row whose routing value changed, or copies left by drift)."""
    have = {write.routing or write.id, *(s.routing for s in write.leaves)}
    others = sorted(set(elsewhere) - have)
    if not others:
        return write
    stone = tombstone(deleted_at_ms)
    return Write(write.id, write.version, write.source, write.deleted, write.routing,
                 (*write.leaves, *(Write(write.id, write.version, stone, True, routing)
                                   for routing in others)))


def placed_at(write: Write) -> list[str]:
    """The routings a write touches: its own and those it leaves (none: not routed)."""
    if write.routing is None:
        return []
    return [write.routing, *(s.routing for s in write.leaves if s.routing is not None)]
