"""A MySQL or MariaDB server's binlog as raw events, read as a replica reads it.

PyMySQL connects and authenticates (TLS included); then the replication protocol is a few
packets of its own: the session says it understands checksums (and MariaDB's GTID events),
registers as a replica, asks for a dump from a (file, position), and the server sends every
event from there on, a heartbeat when it has none. A thread of its own waits on the socket
(PyMySQL is synchronous) and hands events over in order, stopping when a bounded buffer is
full until the loop takes them: the server waits on a slow reader, never the reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pymysql

from indexer.errors import BinlogPurged, ConfigError
from indexer.settings import MySQLSettings
from indexer.source.mysql import connection

log = logging.getLogger(__name__)

_COM_BINLOG_DUMP = 0x12
_COM_REGISTER_SLAVE = 0x15
# MariaDB sends its GTID events (not a BEGIN query standing for them) to replicas that say so.
_MARIADB_GTID_CAPABLE = 4
# An idle server sends a heartbeat this often, so a silent connection is a dead one.
HEARTBEAT_S = 5.0
# No event nor heartbeat for this long: the connection is dead (the server, or the network).
SILENCE_S = 3 * HEARTBEAT_S
# Events read ahead of the loop: enough to keep it busy through a bulk request, bounded so
# that a backlog of millions of rows waits in the server's binlog, not in memory.
BUFFER_BYTES = 32 << 20

# What recovers a position that cannot be read from: the next start loads every table again.
RELOAD_HINT = ("`indexer source reset` forgets the position, and the next `indexer run` loads "
               "every table from a snapshot, then reads on from the binlog's end")

# (variable, what it must be, why): checked before the dump, refused with the setting to fix.
_REQUIRED = (
    ("log_bin", "1", "the server writes no binlog: start it with log_bin"),
    ("binlog_format", "ROW", "row changes are logged as statements: set binlog_format = ROW"),
    ("binlog_row_image", "FULL", "updates log only changed columns: set binlog_row_image = "
     "FULL"),
    ("binlog_row_metadata", "FULL", "table maps do not name their columns: set "
     "binlog_row_metadata = FULL (MySQL 8.0.14+, MariaDB 10.5+)"),
)
# Settings that change what events look like in ways the decoder does not read.
_REFUSED = (
    ("log_bin_compress", "1", "MariaDB compresses row events: set log_bin_compress = OFF"),
    ("binlog_transaction_compression", "1", "MySQL compresses transactions: set "
     "binlog_transaction_compression = OFF"),
    ("binlog_row_value_options", "PARTIAL_JSON", "MySQL logs partial JSON updates: set "
     "binlog_row_value_options = ''"),
)


@dataclass(frozen=True, slots=True)
class Server:
    """What the source needs to know of the server it reads."""

    flavor: str  # "mariadb" or "mysql"
    version: str
    server_id: int
    checksummed: bool  # events end with a CRC32 (the first, a rotate, comes before any format)
    collations: dict[int, str]  # collation id -> its character set's name


def check_server(conn: pymysql.connections.Connection[Any], where: str) -> Server:
    """The server's settings the binlog source depends on, or one line saying what to set."""
    flavor = connection.server_flavor(conn)
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ("
                    + ", ".join(["%s"] * (len(_REQUIRED) + len(_REFUSED) + 3)) + ")",
                    [name for name, *_ in (*_REQUIRED, *_REFUSED)]
                    + ["server_id", "version", "binlog_checksum"])
        found = {str(name): str(value) for name, value in cur.fetchall()}
        problems = settings_problems(found)
        if problems:
            raise ConfigError(f"{where}: the binlog cannot be read as indexer needs: "
                              + "; ".join(problems))
        cur.execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                    "WHERE ID IS NOT NULL")
        collations = {int(i): str(name) for i, name in cur.fetchall()}
    return Server(flavor, found.get("version", ""), int(found.get("server_id", "0")),
                  found.get("binlog_checksum", "NONE").upper() == "CRC32", collations)


def settings_problems(variables: dict[str, str]) -> list[str]:
    """What to set, from the server's global variables (an absent one: a server too old)."""
    problems = [why for name, wanted, why in _REQUIRED
                if _normal(variables.get(name, "")) != wanted]
    return problems + [why for name, refused, why in _REFUSED
                       if _normal(variables.get(name, "")) == refused]


def _normal(value: str) -> str:
    upper = value.upper()
    return "1" if upper == "ON" else "0" if upper == "OFF" else upper


def binlog_end(conn: pymysql.connections.Connection[Any]) -> tuple[str, int]:
    """Where the binlog ends now: the next change is written there."""
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW MASTER STATUS")
        except pymysql.err.ProgrammingError:  # MySQL 8.4 has only the new name
            cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
    if not row:
        raise ConfigError("the server reports no binlog position (SHOW MASTER STATUS is "
                          "empty): is log_bin on, and does the user have REPLICATION CLIENT "
                          "(MariaDB: BINLOG MONITOR)?")
    return str(row[0]), int(row[1])


def binlog_files(settings: MySQLSettings) -> tuple[int, list[tuple[str, int]]]:
    """The server's server_id (whose binlog coordinates these are) and its binlog files with
    their sizes, oldest first (SHOW BINARY LOGS)."""
    with connection.connect(settings, "") as conn, conn.cursor() as cur:
        server_id = _server_id(cur)
        cur.execute("SHOW BINARY LOGS")
        return server_id, [(str(row[0]), int(row[1])) for row in cur.fetchall()]


def server_id_of(settings: MySQLSettings) -> int:
    """The server's server_id: which server's binlog coordinates it speaks."""
    with connection.connect(settings, "") as conn, conn.cursor() as cur:
        return _server_id(cur)


def _server_id(cur: Any) -> int:
    cur.execute("SELECT @@server_id")
    row = cur.fetchone()
    return int(row[0]) if row else 0


def bytes_behind(files: list[tuple[str, int]], file: str, pos: int) -> int | None:
    """Bytes of binlog after (file, pos); None when the server no longer has that file."""
    names = [name for name, _ in files]
    if file not in names:
        return None
    at = names.index(file)
    return max(0, files[at][1] - pos) + sum(size for _, size in files[at + 1:])


def binlog_end_of(settings: MySQLSettings) -> tuple[str, int]:
    """:func:`binlog_end` on a connection of its own."""
    with connection.connect(settings, "") as conn:
        return binlog_end(conn)


class BinlogStream:
    """Events from ``start`` on, until closed: ``async with BinlogStream(...) as stream``,
    then :meth:`read` in a loop. A failure of the connection is raised by the read after the
    events before it (resume from the last whole transaction on a new stream)."""

    def __init__(self, settings: MySQLSettings, replica_id: int, start: tuple[str, int],
                 buffer_bytes: int = BUFFER_BYTES, server_id: int | None = None,
                 gtids: str = "") -> None:
        self._settings = settings
        self._replica_id = replica_id
        self._start = start  # ("", 4): from ``gtids`` instead
        self._server_id = server_id  # the server ``start`` belongs to (None: not known)
        # MariaDB's GTID position at ``start``: where another server of its replication
        # group (a promoted replica) is read from instead of coordinates it does not have
        self.gtids = gtids
        self.by_gtid = False  # the dump was asked from ``gtids``
        self._limit = buffer_bytes
        self._where = f"mysql {settings.host}:{settings.port}"
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self._events: deque[bytes] = deque()
        self._bytes = 0
        self._failure: BaseException | None = None
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = asyncio.Event()
        self._waiting = False
        self.server: Server | None = None

    async def __aenter__(self) -> BinlogStream:
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._open)
        except BaseException:
            conn: Any = self._conn
            self._conn = None
            if conn is not None:  # refused after it connected: nothing else closes it
                conn._force_close()
            raise
        self._thread = threading.Thread(target=self._pump, name="binlog-reader", daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        conn: Any = self._conn
        self._conn = None
        if conn is not None:
            sock = conn._sock  # unblocks the thread's read; closing the connection would
            if sock is not None:  # write a QUIT packet the dump does not expect
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, SILENCE_S)
        if conn is not None:
            conn._force_close()

    def _open(self) -> None:
        conn = connection.connect(self._settings, "")
        self._conn = conn
        self.server = check_server(conn, self._where)
        file, position = self._start
        other = self._server_id is not None and self.server.server_id != self._server_id
        self.by_gtid = not file or other
        if self.by_gtid and not (self.gtids and self.server.flavor == "mariadb"):
            raise BinlogPurged(
                f"{self._where} is another server (server_id {self.server.server_id}) than the "
                f"one the position {file}:{position} belongs to (server_id {self._server_id}; "
                "a fail-over, or a replica behind the same address?): its binlog coordinates "
                "mean nothing here, and no GTID position was saved with them to follow "
                f"instead (MariaDB's only); {RELOAD_HINT}")
        with conn.cursor() as cur:
            if not self.by_gtid and not self.gtids and self.server.flavor == "mariadb":
                # The GTID position at the start (a position saved without one: a first
                # start, or one saved before they were): what a fail-over is followed from.
                try:
                    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, position))
                    row = cur.fetchone()
                except pymysql.err.MySQLError as exc:  # none to follow: a fail-over stops
                    log.debug("no GTID position at %s:%d (%s)", file, position, exc)
                    row = None
                self.gtids = str(row[0] or "") if row else ""
            # Both names, as servers differ: events with their checksums, heartbeats.
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum, "
                        "@source_binlog_checksum = @@global.binlog_checksum, "
                        "@master_heartbeat_period = %s, @source_heartbeat_period = %s, "
                        "@mariadb_slave_capability = %s",
                        (int(HEARTBEAT_S * 1e9), int(HEARTBEAT_S * 1e9), _MARIADB_GTID_CAPABLE))
            if self.by_gtid:
                # The transactions after these GTIDs, from whichever file holds them; strict:
                # a position the server's binlog has not reached is refused, not skipped.
                cur.execute("SET @slave_connect_state = %s, @slave_gtid_strict_mode = 1, "
                            "@slave_gtid_ignore_duplicates = 0", (self.gtids,))
                file, position = "", 4
        wire: Any = conn  # PyMySQL's packets, below its public API
        try:
            # listed in SHOW SLAVE HOSTS as "indexer"
            wire._execute_command(_COM_REGISTER_SLAVE, struct.pack("<I", self._replica_id)
                                  + _short(b"indexer") + _short(b"") + _short(b"")
                                  + struct.pack("<HII", 0, 0, 0))
            wire._read_packet()  # OK
            wire._execute_command(_COM_BINLOG_DUMP, struct.pack(
                "<IHI", position, 0, self._replica_id) + file.encode())
        except pymysql.err.MySQLError as exc:
            raise self._refused(exc) from exc
        wire._read_timeout = SILENCE_S  # heartbeats keep a live connection talking

    def _refused(self, exc: BaseException) -> BaseException:
        if isinstance(exc, pymysql.err.MySQLError) and exc.args:
            code = exc.args[0]
            if code == 1236 and self.by_gtid:
                return BinlogPurged(
                    f"{self._where} cannot send the binlog after GTID position {self.gtids} "
                    f"({exc.args[-1]}): its binlog does not hold those transactions (purged, "
                    f"or lost in the fail-over); {RELOAD_HINT}")
            if code == 1236:
                file, position = self._start
                return BinlogPurged(
                    f"{self._where} no longer has the binlog at {file}:{position} "
                    f"({exc.args[-1]}): changes since the saved position are gone from the "
                    f"binlog; {RELOAD_HINT}")
            if code in (1045, 1227):
                return ConfigError(f"{self._where} refused to send its binlog ({exc.args[-1]}):"
                                   f" grant the user REPLICATION SLAVE and REPLICATION CLIENT "
                                   "(MariaDB: BINLOG MONITOR)")
        return exc

    def _pump(self) -> None:
        conn: Any = self._conn
        try:
            while conn is not None and not self._closing:
                data = conn._read_packet().get_all_data()
                if data[:1] == b"\xfe" and len(data) < 9:  # EOF: the server ended the dump
                    raise pymysql.err.OperationalError(2013, "the server ended the binlog dump")
                event = data[1:]
                with self._lock:
                    while self._bytes > self._limit and not self._closing:
                        self._lock.wait()
                    self._events.append(event)
                    self._bytes += len(event)
                    self._wake()
        except BaseException as exc:  # the read raises it, after the events before it
            with self._lock:
                self._failure = None if self._closing else self._refused(exc)
                self._wake()

    def _wake(self) -> None:
        if self._waiting and self._loop is not None:
            self._waiting = False
            self._loop.call_soon_threadsafe(self._ready.set)

    async def read(self, max_events: int, timeout_s: float) -> list[bytes]:
        """Up to ``max_events`` events, waiting at most ``timeout_s`` when none is there."""
        found = self._take(max_events)
        if found or timeout_s <= 0:
            return found
        with self._lock:
            if not self._events and self._failure is None:
                self._ready.clear()
                self._waiting = True
        if self._waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout_s)
        return self._take(max_events)

    def _take(self, max_events: int) -> list[bytes]:
        with self._lock:
            events = self._events
            if not events:
                self._waiting = False
                if self._failure is not None:
                    raise self._failure
                return []
            n = min(max_events, len(events))
            found = [events.popleft() for _ in range(n)]
            self._bytes -= sum(len(e) for e in found)
            self._lock.notify()
            return found


def _short(text: bytes) -> bytes:
    return bytes([len(text)]) + text
