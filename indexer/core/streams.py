"""Changes as a source delivers them: on streams (a Kafka topic's partition, a table's binlog),
in an order each stream's positions give (a Kafka offset; a binlog's coordinates). Plain data
the run wing's ports speak (:mod:`indexer.run.ports`) and adapters make."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from indexer.core.events import Change, Layout


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
    """One change as its source delivered it: Debezium's key and value, not decoded yet; or,
    from a source that reads rows itself (the binlog), the change with its row layout."""

    stream: Stream
    position: int
    key: bytes | None
    value: bytes | None
    size: int  # bytes on the wire: batches are bounded by it
    # A dead letter sent back: where its change was first delivered (stream key, position),
    # whose version epoch it keeps.
    replay_of: tuple[str, int] | None = None
    headers: Sequence[tuple[str, bytes]] = ()  # kept with a dead letter
    change: Change | None = None  # decoded by the source: key and value are not read
    layout: Layout | None = None  # the change's row layout, as decoders compare them
    error: tuple[str, str] | None = None  # (kind, reason): the source could not decode it

    def describe(self) -> str:
        return f"{self.stream.name}[{self.stream.part}]@{self.position}"


Deliveries = Mapping[Stream, list[Delivery]]
# Called with the streams a rebalance takes from this process, before it completes.
RevokeHook = Callable[[set[Stream]], Awaitable[None]]
