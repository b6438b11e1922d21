"""Changes as a source delivers them: on streams (a Kafka topic's partition, a table's binlog),
in an order each stream's positions give (a Kafka offset; a binlog's coordinates). Plain data
the run wing's ports speak (:mod:`indexer.run.ports`) and adapters make."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stream:
    """One ordered sequence of a source's changes: its name (the table's topic) and part."""

    name: str
    part: int = 0

    @property
    def key(self) -> str:
        """As version epochs and cursors are stored: ``name/part``."""
        return f"{self.name}/{self.part}"


@dataclass(slots=True)
class Delivery:
    """One change as its source delivered it, not decoded yet (Debezium's key and value)."""

    stream: Stream
    position: int
    key: bytes | None
    value: bytes | None
    size: int  # bytes on the wire: batches are bounded by it
    # A dead letter sent back: where its change was first delivered (stream key, position),
    # whose version epoch it keeps.
    replay_of: tuple[str, int] | None = None
    headers: Sequence[tuple[str, bytes]] = ()  # kept with a dead letter

    def describe(self) -> str:
        return f"{self.stream.name}[{self.stream.part}]@{self.position}"


Deliveries = Mapping[Stream, list[Delivery]]
# Called with the streams a rebalance takes from this process, before it completes.
RevokeHook = Callable[[set[Stream]], Awaitable[None]]
