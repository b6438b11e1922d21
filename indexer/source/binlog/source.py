"""The run wing's source on the binlog itself: the server's row changes of the tables read,
one stream per table, each change decoded here (:mod:`indexer.core.binlog_changes`) and
delivered with its row layout.

A stream's positions are the changes' binlog coordinates packed as versions are
(:mod:`indexer.core.binlog_outstanding`), plus a base fixed at the deployment's first start
above every position its streams were seen at before (a reload after a fail-over or RESET
MASTER, whose coordinates start lower): positions never go back, so the version epochs
recorded against them keep meaning what they meant.

The binlog has one place to resume from, not one per stream: the start of the transaction
of the oldest change delivered and not yet committed (or, with none outstanding, the end of
the last whole transaction read).
It is saved where every daemon of the deployment reads it (the search server's
``indexer-state``), at most every ``SAVE_EVERY_S`` and when the source closes, and only ever
for changes the loop committed: a restart reads again at most what was in flight, and
replaying a change is harmless (its version is not above the one written).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from indexer.core import binlog_events as ev
from indexer.core.binlog_changes import ChangeReader, TableColumns, UnknownColumns
from indexer.core.binlog_outstanding import Outstanding, Resume
from indexer.core.binlog_rows import NativePlan
from indexer.core.streams import Deliveries, Delivery, Stream
from indexer.errors import BinlogPurged, MissingTable
from indexer.outages import Outage
from indexer.settings import MySQLSettings, TableConfig
from indexer.source.binlog.replication import BinlogStream, Server
from indexer.source.mysql import retry as mysql_retry
from indexer.source.mysql import schema

log = logging.getLogger(__name__)

# A table's binlog stream: its cursors and epochs kept apart from its Kafka partitions'.
BINLOG_PART = -1
# The resume point is saved at most this often: a crash re-reads at most that much more.
SAVE_EVERY_S = 1.0
# A second failure in a row waits this long before the next try, then twice as long, ...
FIRST_RETRY_S = 0.2
# Events taken from the stream per fetch, at most (each turns into 0..n changes).
FETCH_EVENTS = 2000
# Replica ids derived from source.name fall in [base, base + span): apart from the small ids
# servers are usually given.
_REPLICA_ID_BASE, _REPLICA_ID_SPAN = 1 << 30, 1 << 30

SavePosition = Callable[[dict[str, Any]], Awaitable[None]]


def position_base(cursors: Mapping[str, int]) -> int:
    """A first start's base: above every position a binlog stream was seen at (cursors: stream
    key -> position, of every stream the registries follow; Kafka partitions' are not
    binlog positions)."""
    return max((position + 1 for key, position in cursors.items()
                if key.endswith(f"/{BINLOG_PART}")), default=0)


def replica_id(name: str, configured: int) -> int:
    """The server id the binlog is read as: configured, or one derived from the deployment's
    name (one id per deployment: a server drops a replica's older connection of the same id)."""
    return configured or _REPLICA_ID_BASE + zlib.crc32(name.encode()) % _REPLICA_ID_SPAN


class BinlogSource:
    """Reads the binlog from ``start`` (a whole transaction's start) for the tables given by
    stream name; reconnects from the resume point while MySQL is away."""

    def __init__(self, settings: MySQLSettings, replica: int, tables: Mapping[str, TableConfig],
                 start: Resume, save: SavePosition, outage: Outage,
                 max_backoff_s: float, still_reader: Callable[[], None] = lambda: None,
                 server_id: int | None = None, base: int = 0,
                 native: NativePlan | None = None, gtids: str = "",
                 switch_base: int = 0, built: frozenset[str] = frozenset()) -> None:
        self._settings = settings
        self._native = native  # reads row images natively where built
        # The tables (by stream name) whose documents are their rows as they are: with
        # ``native``, their inserts' and updates' documents are built as the rows are read.
        self._built = frozenset(tables[name].name for name in built if native is not None)
        self._replica = replica
        self._streams = {t.name: Stream(name, BINLOG_PART) for name, t in tables.items()}
        # delivered and not committed yet; their positions, each above ``base``
        self._out = Outstanding(self._streams, base)
        self._tables = {t.name: t for t in tables.values()}
        self._columns: dict[str, TableColumns] = {}
        self._save = save
        self.outage = outage
        self._max_backoff_s = max_backoff_s
        self._still_reader = still_reader  # raises once another daemon reads instead
        self._start = start
        self._start_gtids = gtids  # MariaDB's GTID position at ``start`` (saved with it)
        # The server the positions belong to: another one behind the address is followed
        # from the GTID position (MariaDB), else it stops the source.
        self._server_id = server_id
        # Above every position of the streams followed before: a new server's base
        self._switch_base = switch_base
        self._stream: BinlogStream | None = None
        self._reader: ChangeReader | None = None
        self._server: Server | None = None
        self._read: deque[bytes] = deque()  # events read, not decoded yet
        self._ready: deque[Delivery] = deque()  # decoded, not handed out yet
        self._ready_changes = 0  # the changes they carry (a rows event's built rows are one)
        self._saved: Resume | None = None
        self._saved_at = 0.0

    @property
    def server(self) -> Server | None:
        return self._server

    async def __aenter__(self) -> BinlogSource:
        for name, table in self._tables.items():
            self._columns[name] = await self._read_columns(table)
        self._saved = self._start
        await self._open(self._start, self._start_gtids)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            await self._save_resume(force=True)
        finally:
            if self._stream is not None:
                await self._stream.close()

    async def _read_columns(self, table: TableConfig) -> TableColumns:
        try:
            layout = await asyncio.to_thread(schema.read_layout, self._settings, table.database,
                                             table.table)
        except MissingTable:
            # Not made yet (the canary's, made by its first beat; a joined table created
            # later): its first table map names columns unknown here, and it is read then.
            return TableColumns(frozenset(), frozenset())
        return TableColumns(frozenset(c.name for c in layout.columns),
                            frozenset(c.name for c in layout.columns if c.data_type == "json"))

    async def _open(self, start: Resume, gtids: str) -> None:
        stream = BinlogStream(self._settings, self._replica, start, server_id=self._server_id,
                              gtids=gtids)
        await stream.__aenter__()
        self._stream = stream
        server = stream.server
        assert server is not None
        self._server = server
        if self._server_id is not None and server.server_id != self._server_id:
            self._switched(start, gtids, server.server_id)
        self._server_id = server.server_id
        codecs = {i: ev.CHARSET_CODECS[name] for i, name in server.collations.items()
                  if name in ev.CHARSET_CODECS}
        self._reader = ChangeReader(self._columns.get, codecs, server.flavor,
                                    "" if stream.by_gtid else start[0], start[1],
                                    server.checksummed, self._native, stream.gtids,
                                    stream.by_gtid, self._built)

    def _switched(self, start: Resume, gtids: str, server_id: int) -> None:
        """Another server of the replication group (a promoted replica) is read from the
        GTID position: its coordinates are a new series, above every position before."""
        self._out.base = max(self._switch_base, self._out.last + 1)
        # Changes not committed yet are read again from the GTID position; their coordinates
        # are the old server's and must not be saved as the new one's.
        self._out.forget()
        # Until its first transaction is read, a reconnect asks for the GTID position again.
        self._start, self._start_gtids = ("", 4), gtids
        log.warning("binlog source: %s:%d is server_id %d's position, and the server is now "
                    "server_id %d (a fail-over?): reading on from GTID position %s, as a new "
                    "series of versions", *start, self._server_id, server_id, gtids)

    # --- the source port -------------------------------------------------------------------

    def assignment(self) -> set[Stream]:
        return set(self._streams.values())

    def lag(self, stream: Stream, next_position: int) -> int | None:
        return None  # bytes of binlog behind are not changes: not known

    async def fetch(self, max_items: int, timeout_ms: int) -> Deliveries:
        self._still_reader()
        ready, events = self._ready, self._read
        deadline = time.monotonic() + timeout_ms / 1000
        read = False
        # Decoded only as far as asked: a rows event holds up to hundreds of changes, and a
        # backlog waits in the server's binlog, not in memory. A rows event's built documents
        # are one delivery, never split: a fetch may hand out up to an event's rows more.
        while self._ready_changes < max_items:
            if not events:
                now = time.monotonic()
                if read and not ready and now >= deadline:
                    break  # the time asked for went on other tables' events
                events.extend(await self._events(FETCH_EVENTS,
                                                 0.0 if ready else deadline - now))
                read = True
                if not events:
                    break
            reader = self._reader  # a new one after a reconnect
            assert reader is not None
            try:
                changes = reader.feed(events[0])
            except UnknownColumns as unknown:  # added since: read the table again
                await self._learn(unknown)
                continue
            events.popleft()
            self._ready_changes += self._out.deliver(changes, ready)
        found: dict[Stream, list[Delivery]] = {}
        taken = 0
        while ready and taken < max_items:
            delivery = ready.popleft()
            taken += delivery.changes
            found.setdefault(delivery.stream, []).append(delivery)
        self._ready_changes -= taken
        if not self._out:
            # Nothing delivered waits for a commit, which is what saves the resume point: while
            # only other tables change, it is saved here, or a restart would read all of their
            # binlog again and could find it purged.
            await self._save_resume()
        return found

    async def _learn(self, unknown: UnknownColumns) -> None:
        table = self._tables[unknown.table]
        columns = await self._read_columns(table)
        if not unknown.names <= columns.names:  # dropped again since: read them as text
            columns = TableColumns(columns.names | unknown.names, columns.json)
        self._columns[unknown.table] = columns

    async def _events(self, max_events: int, timeout_s: float) -> list[bytes]:
        """The next events; while MySQL is away, reconnects from where a restart would (at
        once after a lost connection, then less and less often)."""
        wait = 0.0
        while True:
            stream = self._stream
            try:
                if stream is None:
                    await self._open(*self._resume_point())
                    continue
                events = await stream.read(max_events, timeout_s)
                self.outage.ok()
                return events
            except BinlogPurged:
                raise
            except Exception as exc:
                if not mysql_retry.transient(exc):
                    raise
                self.outage.failed(exc)
                if stream is not None:
                    await stream.close()
                self._stream = None
                await asyncio.sleep(wait)
                wait = min(self._max_backoff_s, max(FIRST_RETRY_S, wait * 2))

    async def commit(self, positions: dict[Stream, int]) -> None:
        self._out.commit(positions)
        await self._save_resume()

    def read_through(self) -> Resume:
        """Every change before this point of the binlog is committed (written or
        dead-lettered)."""
        return self._resume()

    def _resume(self) -> Resume:
        return self._resume_point()[0]

    def _resume_point(self) -> tuple[Resume, str]:
        """Where a restart reads from: the oldest outstanding change's transaction, else the
        end of the last whole transaction read; with MariaDB's GTID position there."""
        oldest = self._out.oldest()
        if oldest is not None:
            return oldest
        reader = self._reader
        if reader is not None and reader.resume is not None:
            return reader.resume, reader.resume_gtids
        return self._start, self._start_gtids

    async def _save_resume(self, *, force: bool = False) -> None:
        resume, gtids = self._resume_point()
        now = time.monotonic()
        if (resume == self._saved or not resume[0]  # not past a GTID start's first transaction
                or (not force and now - self._saved_at < SAVE_EVERY_S)):
            return
        record: dict[str, Any] = {"file": resume[0], "pos": resume[1],
                                  "server_id": self._server_id, "base": self._out.base,
                                  "saved_at": datetime.now(UTC).isoformat(timespec="seconds")}
        if gtids:
            record["gtid"] = gtids
        await self._save(record)
        self._saved, self._saved_at = resume, now

