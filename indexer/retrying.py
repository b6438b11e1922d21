"""The shape every server's retry policy shares: try again for as long as the policy's test
says the failure passes, waiting a jittered exponential time (from ``first_wait_s``, doubling,
up to the caller's ceiling) between tries; anything else is raised at once. Each server says
which failures pass (:mod:`indexer.search.retry`, :mod:`indexer.source.mysql.retry`,
:mod:`indexer.source.kafka.clients`)."""

from __future__ import annotations

from collections.abc import Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_never,
    wait_random_exponential,
)


def forever(passes: Callable[[BaseException], bool], *, first_wait_s: float,
            max_backoff_s: float,
            before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    """``async for attempt in forever(...): with attempt: ...``"""
    return AsyncRetrying(retry=retry_if_exception(passes),
                         wait=wait_random_exponential(multiplier=first_wait_s,
                                                      max=max_backoff_s),
                         stop=stop_never, reraise=True, before_sleep=before_sleep)
