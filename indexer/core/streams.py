"""Changes as a source delivers them: on streams (a Kafka topic's partition, a table's binlog),
in an order each stream's positions give (a Kafka offset; a binlog's coordinates). Plain data
the run wing's ports speak (:mod:`indexer.run.ports`) and adapters make."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from indexer.core.events import Built, BuiltRows, Change, Layout


class Stream(NamedTuple):
    """One ordered sequence of a source's changes: its name (the table's topic) and part.
    A tuple: the loop looks streams up in dicts several times per change, and a tuple's hash
    is C's where a frozen dataclass's is a Python function."""

    name: str
    part: int = 0

    @property
    def key(self) -> str:
        """As version epochs and cursors are stored: ``name/part``."""
        return f"{self.name}/{self.part}"


# A binlog stream's positions between one row and the next of a rows event (the step
# between is the insert half of an update that changed the key).
ROW_STEP = 2


@dataclass(slots=True)
class Delivery:
    """One change as its source delivered it: Debezium's key and value, not decoded yet; or,
    from a source that reads rows itself (the binlog), the change with its row layout (or,
    where the source built its document, that; or a rows event's built documents together,
    delivered at the position of the last: ``rows``)."""

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
    built: Built | None = None  # its document, built by the source (no change kept)
    rows: BuiltRows | None = None  # a rows event's documents, built by the source

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per change.
    def __init__(self, stream: Stream, position: int, key: bytes | None, value: bytes | None,
                 size: int, replay_of: tuple[str, int] | None = None,
                 headers: Sequence[tuple[str, bytes]] = (), change: Change | None = None,
                 layout: Layout | None = None, error: tuple[str, str] | None = None,
                 built: Built | None = None, rows: BuiltRows | None = None) -> None:
        self.stream, self.position, self.key, self.value = stream, position, key, value
        self.size, self.replay_of, self.headers = size, replay_of, headers
        self.change, self.layout, self.error, self.built = change, layout, error, built
        self.rows = rows

    @property
    def changes(self) -> int:
        """How many changes it carries: a rows event's rows, else one."""
        rows = self.rows
        return 1 if rows is None else len(rows.documents)

    def row(self, row: int) -> Delivery:
        """Row ``row`` of a rows delivery as a delivery of its own (a dead letter is one
        row's), at its own position."""
        rows = self.rows
        assert rows is not None, "only a rows delivery has rows"
        count = len(rows.documents)
        return Delivery(self.stream, self.position - ROW_STEP * (count - 1 - row), None, None,
                        self.size // count, layout=self.layout, built=rows.row(row))

    def describe(self) -> str:
        return f"{self.stream.name}[{self.stream.part}]@{self.position}"


Deliveries = Mapping[Stream, list[Delivery]]
# Called with the streams a rebalance takes from this process, before it completes.
RevokeHook = Callable[[set[Stream]], Awaitable[None]]


class Record(Protocol):
    """A Kafka record as the consumer hands it over (aiokafka's ConsumerRecord)."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def serialized_key_size(self) -> int: ...
    @property
    def serialized_value_size(self) -> int: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


def deliveries_of(stream: Stream, records: Iterable[Record],
                  replayed: Callable[[Sequence[tuple[str, bytes]]], tuple[str, int] | None],
                  ) -> list[Delivery]:
    """One partition's fetched records as deliveries (compiled: this runs once per record;
    ``replayed`` reads a replayed dead letter's origin from its headers)."""
    found = []
    for record in records:
        headers = record.headers
        found.append(Delivery(stream, record.offset, record.key, record.value,
                              record.serialized_key_size + record.serialized_value_size,
                              replayed(headers) if headers else None, headers))
    return found
