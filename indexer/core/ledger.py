"""The in-order offset ledger: batches are written side by side, but each partition's offsets
are committed strictly in the order its batches were read, so a commit never covers a batch
still being written, nor one that failed. A batch may finish some partitions before others
(a joined document's fan-out keeps only its own partition waiting). Pure: the daemon reports
what became of each batch and sends the offsets this hands out."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")  # a partition
T = TypeVar("T")  # what stands for a batch (the daemon's task writing it)


@dataclass
class _Entry(Generic[K, T]):
    tag: T
    offsets: dict[K, int]  # partition -> the next offset to read once this batch is done
    pending: set[K]  # partitions whose writes are not confirmed yet
    error: BaseException | None = None


@dataclass
class OffsetLedger(Generic[K, T]):
    _entries: deque[_Entry[K, T]] = field(default_factory=deque)
    _ready: dict[K, int] = field(default_factory=dict)  # done, in order, not handed out
    _given: dict[K, int] = field(default_factory=dict)  # the highest offset handed out
    # The error of the oldest batch that failed: nothing at or after it may be committed.
    failure: BaseException | None = None

    def add(self, tag: T, offsets: dict[K, int]) -> None:
        self._entries.append(_Entry(tag, dict(offsets), set(offsets)))

    def finish(self, tag: T, error: BaseException | None = None, *,
               partitions: Iterable[K] | None = None, keep: Iterable[K] = ()) -> None:
        """The batch ``tag`` stands for is written (or failed with ``error``): all of it, or
        only ``partitions``, or all but ``keep``."""
        for entry in self._entries:
            if entry.tag is tag:
                if error is not None:
                    entry.error = error
                elif partitions is not None:
                    entry.pending.difference_update(partitions)
                else:
                    entry.pending.intersection_update(keep)
                break
        self._settle()

    def _settle(self) -> None:
        """Hands out, per partition, the offsets of its batches done before the first of its
        batches still being written."""
        blocked: set[K] = set()
        settled = True  # every batch before this one is done
        for entry in self._entries:
            if entry.error is not None:
                if settled:  # earlier batches may still succeed and be committed first
                    self.failure = self.failure or entry.error
                break
            settled = settled and not entry.pending
            for partition, offset in entry.offsets.items():
                if partition in blocked:
                    continue
                if partition in entry.pending:
                    blocked.add(partition)
                elif offset > self._given.get(partition, -1):
                    self._ready[partition] = self._given[partition] = offset
        while self._entries and not self._entries[0].pending and self._entries[0].error is None:
            self._entries.popleft()

    def take(self) -> dict[K, int]:
        """The offsets to commit now (merged per partition), each handed out once."""
        ready, self._ready = self._ready, {}
        return ready

    def holds(self, tag: T) -> bool:
        """Whether the batch still has partitions being written."""
        return any(entry.tag is tag and entry.pending for entry in self._entries)

    @property
    def oldest(self) -> T | None:
        return self._entries[0].tag if self._entries else None

    def in_flight(self) -> list[T]:
        return [entry.tag for entry in self._entries]

    def abandon(self) -> list[T]:
        """Forgets every batch not yet committed (they are read again from the last commit)."""
        tags = [entry.tag for entry in self._entries]
        self._entries.clear()
        return tags

    def __len__(self) -> int:
        return len(self._entries)
