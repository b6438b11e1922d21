"""How long a batch waits for more events once it has one: longer as the stream gets faster.

Every bulk has a fixed cost (a request, its bookkeeping in indexer, a write round in
Elasticsearch), so with a fixed wait the number of bulks per second, not the number of events,
sets that cost: at 20 ms a steady 5k rows/s went out as bulks of ~100 and cost indexer 3x,
and Elasticsearch 5x, the CPU per event of a backlog. Here each batch waits for about
``target_events`` at the rate seen so far, between ``min_ms`` and ``max_ms``:

- a slow stream (the wait would gather at most one more event) waits ``min_ms``: waiting
  longer would only delay each event;
- a steady stream waits as long as it takes to gather ``target_events``, up to ``max_ms``;
- a backlog fills batches from what is already fetched, which never waits.

Pure: the caller passes the clock.
"""

from __future__ import annotations

# The rate follows the last few batches: a burst lengthens the wait within a second or two.
RATE_WEIGHT = 0.3
# Waiting is worth it only when it gathers at least this many more events.
MIN_GAIN_EVENTS = 2.0


class Linger:
    def __init__(self, min_ms: int, max_ms: int, target_events: int) -> None:
        self.min_ms = min_ms
        self.max_ms = max(min_ms, max_ms)
        self.target = target_events
        self.rate = 0.0  # events per second, smoothed
        self._last: float | None = None

    def wait_ms(self) -> int:
        """How long the batch being filled may wait for more events."""
        rate = self.rate
        if rate * self.max_ms / 1000 < MIN_GAIN_EVENTS:
            return self.min_ms
        return int(min(self.max_ms, max(self.min_ms, 1000 * self.target / rate)))

    def closed(self, events: int, now: float) -> None:
        """A batch of ``events`` was closed at ``now`` (seconds, monotonic)."""
        last, self._last = self._last, now
        if last is None or now <= last:
            return
        sample = events / (now - last)
        self.rate = sample if self.rate == 0 else (
            RATE_WEIGHT * sample + (1 - RATE_WEIGHT) * self.rate)
