"""The in-order offset ledger: batches are written side by side, but their offsets are
committed strictly in the order the batches were read, so a commit never covers a batch still
being written, nor one that failed. Pure: the daemon reports what became of each batch and
sends the offsets this hands out."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")  # a partition
T = TypeVar("T")  # what stands for a batch (the daemon's task writing it)


@dataclass
class _Entry(Generic[K, T]):
    tag: T
    offsets: dict[K, int]  # partition -> the next offset to read once this batch is done
    done: bool = False
    error: BaseException | None = None


@dataclass
class OffsetLedger(Generic[K, T]):
    _entries: deque[_Entry[K, T]] = field(default_factory=deque)
    _ready: dict[K, int] = field(default_factory=dict)  # done, in order, not handed out
    # The error of the oldest batch that failed: nothing at or after it may be committed.
    failure: BaseException | None = None

    def add(self, tag: T, offsets: dict[K, int]) -> None:
        self._entries.append(_Entry(tag, dict(offsets)))

    def finish(self, tag: T, error: BaseException | None = None) -> None:
        """The batch ``tag`` stands for is written (or failed with ``error``)."""
        for entry in self._entries:
            if entry.tag is tag:
                entry.done, entry.error = True, error
                break
        while self._entries and self._entries[0].done and self.failure is None:
            head = self._entries[0]
            if head.error is not None:
                self.failure = head.error
                break
            self._entries.popleft()
            self._ready.update(head.offsets)

    def take(self) -> dict[K, int]:
        """The offsets to commit now: those of every batch done before the oldest one still
        being written (merged per partition), each handed out once."""
        ready, self._ready = self._ready, {}
        return ready

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
