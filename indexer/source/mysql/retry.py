"""MySQL's retry policy: which failures are worth another try, and how long to wait before
it. Every loop that retries a MySQL read (joined documents' rebuilds, their layouts) uses
this; callers above the adapters ask these functions about an error instead of naming the
driver's classes.

pymysql's classes do not say which failure is which (an unknown column is an
OperationalError, like a lost connection): the server's error code does.
"""

from __future__ import annotations

from collections.abc import Callable

import pymysql
from tenacity import AsyncRetrying, RetryCallState

from indexer.errors import ConfigError, MySQLUnreachable, ReplicaBehind
from indexer.retrying import forever
from indexer.source.mysql.connection import unreachable

# Waits start around this many seconds and double, with jitter, up to the caller's ceiling.
FIRST_WAIT_S = 0.1
# A column or table a query names is not there: the layouts changed (read them again).
SCHEMA_ERRORS = (1054, 1146)  # unknown column, unknown table
# Errors about a value that another try will not mend (incorrect value, truncated value,
# illegal mix of collations, invalid string, a query MySQL will not parse).
PERMANENT_ERRORS = (1366, 1292, 1267, 1270, 1271, 1300, 1064)


# What a query can raise, whatever the failure (for ``except`` clauses above the adapter).
QUERY_ERRORS: tuple[type[Exception], ...] = (pymysql.err.MySQLError,)
# ... and what connecting, reading a layout or waiting for a replica can raise too.
FAILURES: tuple[type[Exception], ...] = (*QUERY_ERRORS, OSError, ConfigError, MySQLUnreachable,
                                         ReplicaBehind)


def failure(exc: BaseException) -> bool:
    """Whether an error came from MySQL or from talking to it (any kind)."""
    return isinstance(exc, FAILURES)


def code(exc: BaseException) -> int:
    """The server's error code (0: none)."""
    found = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else 0
    return found if isinstance(found, int) else 0


def schema_changed(exc: BaseException) -> bool:
    """A column or table the query names is not there (any more)."""
    return code(exc) in SCHEMA_ERRORS


def transient(exc: BaseException) -> bool:
    """Whether another try may succeed: MySQL away or restarting, a replica behind, a lock or
    a deadlock, a refused login (credentials rotating); not a value it refuses, a query it
    cannot run, nor a column or table that is gone."""
    if unreachable(exc) or isinstance(exc, ReplicaBehind | ConfigError | OSError):
        return True
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError):
        return code(exc) not in SCHEMA_ERRORS + PERMANENT_ERRORS
    return False


def retrying(max_backoff_s: float, *, retry_on: Callable[[BaseException], bool] = transient,
             before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    """``async for attempt in retrying(...): with attempt: ...``: again and again while
    ``retry_on`` says so, anything else raised at once."""
    return forever(retry_on, first_wait_s=FIRST_WAIT_S, max_backoff_s=max_backoff_s,
                   before_sleep=before_sleep)
