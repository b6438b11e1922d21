"""Connections to MySQL/MariaDB: TLS, refusals as one line naming what to fix, one query on a
connection of its own, the server's flavor and GTID position.

pymysql is synchronous; callers run these functions in a worker thread
(``asyncio.to_thread``). Identifiers come from validated configuration and are quoted;
values are always parameters.
"""

from __future__ import annotations

import contextlib
import logging
import re
import ssl
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pymysql

from indexer.core.layout import Flavor, TableLayout
from indexer.errors import ConfigError, MySQLUnreachable
from indexer.security import tls_context, tls_reason
from indexer.settings import MySQLSettings

log = logging.getLogger(__name__)


# TIMESTAMPs are written in UTC, like Debezium's; a joined table's rows are grouped per
# parent into one value (GROUP_CONCAT), which max_allowed_packet bounds before this does.
INIT_COMMAND = "SET time_zone = '+00:00', group_concat_max_len = 1073741824"


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


# Client and server errors of a server that is not there now: no server at the address,
# gone away, connection lost, shutting down, too many connections. Waited out, never told
# as a configuration error.
UNREACHABLE_CODES = frozenset({1040, 1053, 2002, 2003, 2006, 2013, 2055})
# ... unless the connection failed in its TLS handshake (2003 too): a setting to fix.
_TLS_FAILURE = re.compile(r"SSL|TLS|certificate", re.IGNORECASE)


def unreachable(exc: BaseException | None) -> bool:
    """Whether an error (or what caused it) says MySQL cannot be reached now."""
    while exc is not None:
        if isinstance(exc, MySQLUnreachable | ConnectionError | TimeoutError):
            return True
        if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError) and (
                (exc.args and exc.args[0] in UNREACHABLE_CODES) or not exc.args
                or exc.args[0] == 0) and not _TLS_FAILURE.search(str(exc.args[-1:])):
            return True
        exc = exc.__cause__
    return False


def connect(settings: MySQLSettings, database: str) -> pymysql.connections.Connection[Any]:
    """A connection in autocommit mode; a refusal becomes one line naming what to fix."""
    try:
        return pymysql.connect(host=settings.host, port=settings.port, user=settings.user,
                               password=settings.password.reveal(), database=database,
                               charset="utf8mb4", autocommit=True,
                               init_command=INIT_COMMAND, **_tls(settings))
    except pymysql.err.OperationalError as exc:
        refused = _refusal(settings, exc)
        if refused is None:
            raise MySQLUnreachable(f"mysql {settings.host}:{settings.port} is unreachable "
                                   f"({exc.args[-1]}); if it is up, check mysql.host and "
                                   "mysql.port") from exc
        raise ConfigError(refused) from exc


def _refusal(settings: MySQLSettings, exc: pymysql.err.OperationalError) -> str | None:
    """The line naming what to fix when the server refused the settings; None when no server
    answered at all (the address is not listening, or it went away)."""
    code = exc.args[0] if exc.args else 0
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    where = f"mysql {settings.host}:{settings.port}"
    if code == 1045:
        hint = ("" if settings.uses_tls else "; if the account requires TLS, set mysql.tls = "
                "true and mysql.ca_file")
        return (f"{where} refused user {settings.user!r} (1045 access denied): check "
                f"mysql.user and mysql.password (or password_file){hint}")
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        if "match" in text or "mismatch" in text:
            return (f"{where}: its TLS certificate does not name {settings.host!r}; set "
                    "mysql.host to a name the certificate has, or mysql.verify_identity = "
                    "false")
        return (f"{where}: TLS certificate not trusted ({tls_reason(text)}); set "
                "mysql.ca_file to the CA that signed it")
    if "doesn't support" in text:
        return (f"{where} does not offer TLS ({text}): set mysql.tls = false, or point "
                "mysql.host and mysql.port at a server with TLS")
    if "SSL" in text or "TLS" in text or code == 2026:
        return f"{where}: TLS failed ({tls_reason(text)}); check mysql.tls and mysql.ca_file"
    if code in UNREACHABLE_CODES:
        return None
    return f"{where}: {text} (error {code}); check mysql.host and mysql.port"


def _tls(settings: MySQLSettings) -> dict[str, Any]:
    """TLS when configured (and then required: no silent fallback to plain text); pymysql's
    own default would try TLS without verifying anything."""
    if not settings.uses_tls:
        return {"ssl_disabled": True}
    if not settings.verify_certs:
        log.warning("TLS certificates of MySQL are NOT verified (mysql.verify_certs = false)")
    try:
        context = tls_context(ca_file=settings.ca_file, cert_file=settings.cert_file,
                              key_file=settings.key_file, verify=settings.verify_certs,
                              check_hostname=settings.verify_identity)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"mysql: cannot load the TLS files (ca_file, cert_file, key_file): "
                          f"{exc}") from exc
    return {"ssl": context}


def fetch_all(settings: MySQLSettings, database: str, query: str,
               args: Sequence[Any] | None = None) -> tuple[tuple[Any, ...], ...]:
    """One query on a connection of its own: callers run in worker threads, side by side.
    Always formatted (no arguments is an empty tuple), so a literal '%' is written '%%'."""
    with connect(settings, database) as conn, conn.cursor() as cur:
        cur.execute(query, tuple(args or ()))
        return tuple(cur.fetchall())


def server_flavor(conn: pymysql.connections.Connection[Any]) -> Flavor:
    """MariaDB or MySQL, from the version string (MariaDB's says so)."""
    return server_version(conn)[0]


def server_version(conn: pymysql.connections.Connection[Any]) -> tuple[Flavor, tuple[int, ...]]:
    """MariaDB or MySQL, and its version's numbers ("10.11.19-MariaDB-0+deb12u1" -> 10, 11, 19)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        ((version,),) = cur.fetchall()
    text = str(version)
    numbers = tuple(int(n) for n in re.findall(r"\d+", text.split("-")[0])[:3])
    return ("mariadb" if "mariadb" in text.lower() else "mysql"), numbers


def gtid_position(settings: MySQLSettings, database: str) -> str | None:
    """The GTIDs the server has committed so far (MariaDB's @@gtid_binlog_pos, MySQL's
    @@gtid_executed); None without GTIDs. No privilege is needed to read them."""
    with connect(settings, database) as conn:
        flavor = server_flavor(conn) if settings.server == "auto" else settings.server
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos" if flavor == "mariadb"
                        else "SELECT @@gtid_executed")
            ((found,),) = cur.fetchall()
    return str(found) if found else None


def qualified(layout: TableLayout) -> str:
    return f"{quote(layout.database)}.{quote(layout.table)}"


def replicates_from(conn: pymysql.connections.Connection[Any]) -> str | None:
    """The primary this server replicates from ("host:port"), None when it is none's replica
    or the user may not ask (then read_only is the only guard left)."""
    with conn.cursor() as cur:
        for statement in ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS"):  # MySQL 8.4 / older
            try:
                cur.execute(statement)
            except pymysql.err.ProgrammingError as exc:
                if exc.args and exc.args[0] == 1064:  # syntax this server does not know
                    continue
                raise
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in (1227, 1045):  # needs SLAVE MONITOR or similar
                    return None
                raise
            row = cur.fetchone()
            if row is None:
                return None
            names = [d[0] for d in cur.description or ()]
            status = dict(zip(names, row, strict=False))
            host = status.get("Source_Host", status.get("Master_Host", "?"))
            port = status.get("Source_Port", status.get("Master_Port", "?"))
            return f"{host}:{port}"
    return None


class Pool:
    """Connections for worker threads, each used by one thread at a time and kept for the
    next; one that failed mid-use is closed, not reused."""

    def __init__(self, settings: MySQLSettings, database: str) -> None:
        self._settings = settings
        self._database = database
        self._idle: list[pymysql.connections.Connection[Any]] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection[Any]]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(self._settings, self._database)
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()
