"""Outages logged as an operator wants them, per server: one WARNING when it becomes
unreachable (what, since when, what is held back), a reminder at most every ``REMIND_S``
while it lasts, one INFO when it is back with the outage's length. Every failed attempt in
between (a retry, a library's connection error) is a DEBUG line.

The adapter that owns a server's connections reports to its :class:`Outage`: failures as they
happen, successes as requests go through again. One process shares one per server
(:class:`Outages`), so a search server restart is one line however many clients wait on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("indexer.outages")

# A reminder while a server stays away: often enough to show it lasts, rarely enough to read.
REMIND_S = 60.0
# A server coming back answers some requests before others (a restarted search server serves
# its health while shards recover, answering 503 for a second or two): it is back once it has
# answered for this long with no failure between, and the outage lasted until its first answer.
SETTLE_S = 5.0


class Outage:
    """Whether one server is reachable, logged when that changes."""

    def __init__(self, server: str, holds: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.server = server  # "Kafka", "the search server", ...
        self.holds = holds  # what waits for it meanwhile
        self._clock = clock
        self._since: float | None = None  # monotonic time of the first failure
        self._since_wall = 0.0
        self._said = 0.0  # when the last WARNING was written
        self._answered: float | None = None  # its first answer since the last failure

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, reason: object, state: str = "unreachable") -> None:
        """An attempt failed for a reason that passes (no connection, busy, restarting)."""
        now = self._clock()
        self._answered = None
        if self._since is None:
            self._since, self._said, self._since_wall = now, now, time.time()
            log.warning("%s %s (%s); %s wait for it", self.server, state, _short(reason),
                        self.holds)
        elif now - self._said >= REMIND_S:
            self._said = now
            log.warning("%s still %s since %s (%.0f s; %s); %s wait for it", self.server, state,
                        time.strftime("%H:%M:%S", time.localtime(self._since_wall)),
                        now - self._since, _short(reason), self.holds)
        else:
            log.debug("%s %s: %s", self.server, state, reason)

    def ok(self) -> None:
        """A request went through: the outage, if any, is over once the server has answered
        for ``SETTLE_S`` without a failure."""
        if self._since is None:
            return
        now = self._clock()
        if self._answered is None:
            self._answered = now
        elif now - self._answered >= SETTLE_S:
            log.info("%s is back after %.1f s", self.server, self._answered - self._since)
            self._since = self._answered = None


def _short(reason: object) -> str:
    text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass
class Outages:
    """One :class:`Outage` per server a process talks to."""

    kafka: Outage = field(default_factory=lambda: Outage(
        "Kafka", "consuming, offset commits and dead letters"))
    search: Outage = field(default_factory=lambda: Outage(
        "the search server", "writes (nothing past them is committed)"))
    mysql: Outage = field(default_factory=lambda: Outage(
        "MySQL", "verification, joined documents' rebuilds and the canary's beats"))

    @classmethod
    def reading_binlog(cls) -> Outages:
        """A process that reads the binlog: every change waits for MySQL too."""
        return cls(mysql=Outage("MySQL", "the binlog's changes, verification, joined "
                                         "documents' rebuilds and the canary's beats"))
