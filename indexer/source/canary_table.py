"""The canary's table in MySQL: created if absent, one row per consumer group, a beat written
at an interval by the daemon that consumes the canary's topic.

Only the group member assigned the canary topic's partition writes (so several daemons of one
group never race, and the writer is the reader: one clock). Each beat is one atomic upsert
that adds one to ``seq``, so even two writers during a rebalance never lose a count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pymysql

from indexer.core.canary import Beat
from indexer.errors import ConfigError, IntoReplica, MySQLUnreachable
from indexer.metrics import Metrics
from indexer.outages import Outage
from indexer.settings import MySQLSettings, TableConfig
from indexer.source.mysql.connection import connect, quote, replicates_from, unreachable

log = logging.getLogger(__name__)

COLUMNS = ("group_id VARCHAR(255) NOT NULL PRIMARY KEY, seq BIGINT NOT NULL, "
           "beat_ms BIGINT NOT NULL, writer VARCHAR(255) NOT NULL")


def _qualified(table: TableConfig) -> str:
    return f"{quote(table.database)}.{quote(table.table)}"


def ensure(conn: pymysql.connections.Connection[Any], table: TableConfig) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {_qualified(table)} ({COLUMNS})")


def write_beat(conn: pymysql.connections.Connection[Any], table: TableConfig, group: str,
               writer: str, now_ms: int) -> None:
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {_qualified(table)} (group_id, seq, beat_ms, writer) "
                    "VALUES (%s, 1, %s, %s) ON DUPLICATE KEY UPDATE seq = seq + 1, "
                    "beat_ms = %s, writer = %s", (group, now_ms, writer, now_ms, writer))


def read_beat(settings: MySQLSettings, table: TableConfig,
              group: str) -> tuple[Beat | None, str | None]:
    """The group's newest beat as MySQL has it (None: none written, or no table yet), and the
    primary the server replicates from (None: it is no replica), when beats are refused."""
    with connect(settings, table.database) as conn:
        primary = replicates_from(conn)
        with conn.cursor() as cur:
            try:
                cur.execute(f"SELECT group_id, seq, beat_ms, writer FROM {_qualified(table)} "
                            "WHERE group_id = %s", (group,))
            except pymysql.err.ProgrammingError as exc:
                if exc.args and exc.args[0] == 1146:  # no such table: no daemon has run yet
                    return None, primary
                raise
            row = cur.fetchone()
    beat = None if row is None else Beat(str(row[0]), int(row[1]), int(row[2]), str(row[3]))
    return beat, primary


def writer_name(client_id: str) -> str:
    return f"{client_id}@{socket.gethostname()}:{os.getpid()}"


class CanaryWriter:
    """Writes a beat every ``interval_s`` while ``owns()`` says this daemon consumes the
    canary's partition; one beat at start whatever it owns, so that Debezium makes the topic
    the group then subscribes to. Failures are logged (once until it works again) and counted;
    they never stop the daemon."""

    def __init__(self, settings: MySQLSettings, table: TableConfig, group: str, writer: str,
                 interval_s: float, owns: Callable[[], bool], metrics: Metrics,
                 outage: Outage | None = None) -> None:
        self._settings = settings
        self._outage = outage  # the daemon's MySQL's, when the beats go there too
        self._table = table
        self._group = group
        self._writer = writer
        self._interval_s = interval_s
        self._owns = owns
        self._metrics = metrics
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing: str | None = None

    async def __aenter__(self) -> CanaryWriter:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()

    async def _run(self) -> None:
        first = True
        while True:
            if first or self._owns():
                first = not await asyncio.to_thread(self._beat)
            await asyncio.sleep(self._interval_s)

    def _beat(self) -> bool:
        try:
            if self._conn is None:
                conn = connect(self._settings, self._table.database)
                try:
                    primary = replicates_from(conn)
                    if primary is not None:
                        raise IntoReplica(
                            f"{self._settings.host}:{self._settings.port} is a replica of "
                            f"{primary}; set [canary] mysql_host and mysql_port to the primary")
                    ensure(conn, self._table)
                except BaseException:
                    conn.close()
                    raise
                self._conn = conn
            write_beat(self._conn, self._table, self._group, self._writer,
                       int(time.time() * 1000))
        except (pymysql.err.MySQLError, ConfigError, OSError, IntoReplica,
                MySQLUnreachable) as exc:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            self._metrics.canary_write_failures.inc()
            reason = f"{type(exc).__name__}: {exc}"
            if self._outage is not None and unreachable(exc):
                self._outage.failed(exc)  # told once for everything that waits on MySQL
            elif reason != self._failing:
                needs = ("" if isinstance(exc, IntoReplica) else
                         "; the MySQL user needs CREATE, INSERT and UPDATE on it")
                log.warning("cannot write the canary's beat into %s (%s)%s ([canary] enabled "
                            "= false turns the canary off); trying again every %g s",
                            self._table.name, reason, needs, self._interval_s)
                self._failing = reason
            return False
        if self._outage is not None:
            self._outage.ok()
        if self._failing is not None:
            log.info("the canary's beats are written into %s again", self._table.name)
            self._failing = None
        self._metrics.canaries_written.inc()
        return True
