"""One binlog reader per deployment: a named lock in MySQL (``GET_LOCK``), held on a connection
of its own for as long as the daemon reads. Another daemon of the same deployment stands by,
asking for the lock every few seconds, and takes over when the reader's connection ends
(a clean stop, kill -9, a lost host: the server releases a connection's locks with it).

A reader whose lock connection is lost (MySQL restarted, the network) asks for the lock
again at once; if another daemon took it meanwhile, it stops reading with one line, so two
never read for longer than that.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from types import TracebackType
from typing import Any

import pymysql

from indexer.errors import Permanent
from indexer.outages import Outage
from indexer.settings import MySQLSettings
from indexer.source.mysql import connection
from indexer.source.mysql import retry as mysql_retry

log = logging.getLogger(__name__)

# A standby asks for the lock with this wait: it takes over at most this long after the
# reader is gone.
STANDBY_WAIT_S = 3
# The reader checks its lock connection this often.
CHECK_EVERY_S = 2.0
# MySQL's lock names are at most 64 characters.
_MAX_NAME = 64


class ReaderLost(Permanent):
    """Another daemon of the deployment reads the binlog now: this one stops (a supervisor
    starting it again makes it the standby)."""


def lock_name(source_name: str) -> str:
    name = f"indexer-binlog:{source_name}"
    if len(name) <= _MAX_NAME:
        return name
    return f"indexer-binlog:{hashlib.sha256(source_name.encode()).hexdigest()[:40]}"


def reader_connection(settings: MySQLSettings, source_name: str) -> int | None:
    """The MySQL connection id of the daemon reading the deployment's binlog (None: none)."""
    with connection.connect(settings, "") as conn, conn.cursor() as cur:
        cur.execute("SELECT IS_USED_LOCK(%s)", (lock_name(source_name),))
        row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else None


class ReaderLock:
    """``async with ReaderLock(...)``: waits (standing by) until this daemon is the reader."""

    def __init__(self, settings: MySQLSettings, source_name: str, outage: Outage) -> None:
        self._settings = settings
        self._source = source_name
        self._name = lock_name(source_name)
        self._outage = outage
        self._conn: Any = None
        self._watch: asyncio.Task[None] | None = None
        self.lost = asyncio.Event()  # set when another daemon took over

    async def __aenter__(self) -> ReaderLock:
        said = False
        while not await self._take(STANDBY_WAIT_S):
            if not said:
                log.info("binlog source %s: another daemon reads the binlog (MySQL lock %r); "
                         "standing by to take over", self._source, self._name)
                said = True
        if said:
            log.info("binlog source %s: taking over reading the binlog", self._source)
        self._watch = asyncio.create_task(self._keep())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.to_thread(_close, conn, self._name)

    def check(self) -> None:
        """Raises :class:`ReaderLost` once another daemon reads instead."""
        if self.lost.is_set():
            raise ReaderLost(f"binlog source {self._source}: another daemon took over reading "
                             "the binlog while this one's MySQL lock connection was lost; "
                             "stopping (started again, it stands by)")

    async def _take(self, wait_s: float) -> bool:
        """Whether this daemon holds the lock now (False: another does, or MySQL is away)."""
        try:
            if self._conn is None:
                self._conn = await asyncio.to_thread(connection.connect, self._settings, "")
            held = await asyncio.to_thread(_get_lock, self._conn, self._name, wait_s)
            self._outage.ok()
            return held
        except Exception as exc:
            if not mysql_retry.transient(exc):
                raise
            self._outage.failed(exc)
            conn, self._conn = self._conn, None
            if conn is not None:
                await asyncio.to_thread(_close, conn, None)
            await asyncio.sleep(wait_s)
            return False

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            try:
                await asyncio.to_thread(self._conn.ping, False)
                continue
            except Exception as exc:
                log.debug("binlog source %s: lock connection lost (%s)", self._source, exc)
            self._conn = None
            while True:  # held again, or another daemon has it: never both reading
                if await self._take(0):
                    break
                if self._conn is not None:  # MySQL answered: the lock is another's
                    self.lost.set()
                    return
                await asyncio.sleep(CHECK_EVERY_S)  # MySQL away: its outage is told


def _get_lock(conn: pymysql.connections.Connection[Any], name: str, wait_s: float) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, %s)", (name, wait_s))
        (held,) = cur.fetchone() or (None,)
    return held == 1


def _close(conn: pymysql.connections.Connection[Any], name: str | None) -> None:
    try:
        if name is not None:
            with conn.cursor() as cur:
                cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        conn.close()
    except Exception:  # gone already: the server released the lock with the connection
        pass
