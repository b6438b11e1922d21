"""The only vocabulary `indexer run`'s loop speaks: changes as a source delivers them, on
streams with ordered positions; a sink that writes documents and settles each write; dead
letters; rebuilds of joined documents; what a new row layout does; where version epochs and
cursors are kept. Adapters implement these (Kafka's consumer, the search server's bulk sink,
...), and :mod:`indexer.run.wiring` is the one module that names them.

A **stream** is one ordered sequence of a source's changes (a Kafka topic's partition, a
table's binlog); a **position** orders changes within it (a Kafka offset; for a binlog, its
coordinates). Committing ``{stream: p}`` says every change of the stream before ``p`` is
written or dead-lettered: a restart, or the stream's next owner, starts there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from indexer.core.documents import DocumentBuilder
from indexer.core.events import EnvelopeDecoder, LayoutChanged
from indexer.core.sources import Registry
from indexer.core.streams import Deliveries, Delivery, RevokeHook, Stream
from indexer.core.trees import Touch, Values
from indexer.core.writes import Op
from indexer.metrics import Metrics
from indexer.settings import Config, TableConfig

T = TypeVar("T")


@dataclass(slots=True)
class Request:
    """One change's touch of one tree, and what became of it."""

    alias: str
    touch: Touch
    version: int
    ts_ms: int
    gtid: str | None
    holder: Any  # what waits for it (the daemon's stream, which commits after it)
    roots: set[Values] = field(default_factory=set)
    failure: tuple[str, str] | None = None  # (kind, reason): its documents were refused



class Source(Protocol):
    """Where changes come from, stream by stream, in order within each."""

    async def fetch(self, max_items: int, timeout_ms: int) -> Deliveries:
        """Up to ``max_items`` changes, waiting at most ``timeout_ms`` when none is there."""
        ...

    def assignment(self) -> set[Stream]:
        """The streams this process reads now (a group moves them between processes)."""
        ...

    async def commit(self, positions: dict[Stream, int]) -> None:
        """Every change before each stream's position is done."""
        ...

    def lag(self, stream: Stream, next_position: int) -> int | None:
        """Changes of the stream after ``next_position`` (None: not known)."""
        ...


class Sink(Protocol):
    """Where documents go: ``write`` settles every op as WRITTEN, STALE or FAILED, retrying
    what fails for now."""

    async def write(self, ops: Sequence[Op]) -> None: ...


class DeadLetters(Protocol):
    """Where changes that cannot be written go, with why, for a replay after a fix."""

    async def deliver(self, delivery: Delivery, kind: str, reason: str,
                      attempts: int) -> None: ...


class Rebuilder(Protocol):
    """What rebuilds joined documents (:class:`~indexer.run.rebuilds.Rebuilds`)."""

    def touch(self, alias: str, table: str, before: Mapping[str, Any] | None,
              after: Mapping[str, Any] | None) -> Touch: ...
    async def rebuild(self, requests: Sequence[Request]) -> dict[Any, list[Request]]: ...
    async def finish(self, requests: Sequence[Request]) -> None: ...
    async def reload(self, table: str) -> None: ...


class Schemas(Protocol):
    """What a new row layout does (:class:`~indexer.run.schema_changes.SchemaWatch`)."""

    async def changed(self, table: TableConfig, decoder: EnvelopeDecoder,
                      change: LayoutChanged) -> None: ...


class RegistryStore(Protocol):
    """Where tables' version epochs and stream cursors are kept, every daemon of a deployment
    reading the same (:class:`~indexer.search.state.StateStore`)."""

    async def load(self, alias: str) -> Registry: ...
    async def update(self, alias: str,
                     change: Callable[[Registry], T]) -> tuple[Registry, T]: ...


class TableParts(Protocol):
    """A table and what turns its changes into writes (the loop's own native class: every
    change reads these, and a compiled module reads its own classes' fields directly)."""

    @property
    def config(self) -> TableConfig: ...
    @property
    def decoder(self) -> EnvelopeDecoder: ...
    @property
    def builder(self) -> DocumentBuilder | None: ...
    @property
    def rows_are_documents(self) -> bool:
        """Its documents are its rows as they are, versioned by binlog position, and its
        changes touch no tree: a source may build them as it reads the rows."""


@dataclass
class Parts:
    """What the loop works with, opened (and closed) together by a factory."""

    source: Source
    sink: Sink
    dead_letters: DeadLetters
    registries: RegistryStore  # binlog-versioned tables' epochs and cursors
    schemas: Schemas
    rebuilds: Rebuilder | None = None  # tables with joins: their documents rebuilt


# (config, metrics, the tables' parts by stream name, the rebalance hook) -> the parts.
PartsFactory = Callable[[Config, Metrics, Mapping[str, TableParts], RevokeHook],
                        AbstractAsyncContextManager[Parts]]
