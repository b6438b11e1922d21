"""The one retry policy for the search server: which failures are worth another try, and how
long to wait before it. Every loop that retries a request to it (bulk writes, source
cursors and epochs, new fields) uses this; none commits past a failure meanwhile."""

from __future__ import annotations

from collections.abc import Callable

from tenacity import AsyncRetrying, RetryCallState

from indexer.errors import SearchBusy
from indexer.retrying import forever
from indexer.search.client import SearchError, TransportError

# Waits start around this many seconds and double, with jitter, up to the caller's ceiling
# (batch.max_backoff_s).
FIRST_WAIT_S = 0.1


def transient(exc: BaseException) -> bool:
    """Whether a request failed for now (the server away, busy with 429, failing with 5xx),
    as opposed to for good (a refused mapping or privilege)."""
    return isinstance(exc, SearchBusy | TransportError) or (
        isinstance(exc, SearchError) and (exc.status >= 500 or exc.status == 429))


def retrying(max_backoff_s: float, *, first_wait_s: float = FIRST_WAIT_S,
             before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    """``async for attempt in retrying(...): with attempt: ...``: forever while failures are
    transient; anything else is raised at once."""
    return forever(transient, first_wait_s=first_wait_s, max_backoff_s=max_backoff_s,
                   before_sleep=before_sleep)
