"""`indexer run`'s loop over a source that is not Kafka: its streams' positions are binlog
coordinates (large, sparse, not counting from 0), and it rebalances as it likes. The same
changes (a new column half-way, a fail-over to a server whose binlog starts again, poison,
a rebalance that re-delivers what was not committed) give the same documents, versions, dead
letters, epochs and final commits as through positions counted like Kafka offsets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from indexer.config import build_config
from indexer.core.streams import Deliveries, Delivery, RevokeHook, Stream
from indexer.core.versions import unpack_binlog_version
from indexer.metrics import Metrics
from indexer.run.daemon import Daemon
from indexer.run.ports import Parts, TableParts
from indexer.settings import Config
from tests.unit.corpus import POISON
from tests.unit.run.test_daemon import (
    AcceptingSchemas,
    MemoryDeadLetters,
    MemoryRegistries,
    RecordingSink,
    until,
)

TOPIC = "mysql.shop.items"
CONFIG = build_config({"tables": [{"name": "shop.items", "topic": TOPIC}],
                       "canary": {"enabled": False}, "verify": {"enabled": False},
                       "batch": {"linger_ms": 0, "max_linger_ms": 0, "max_events": 16}},
                      Path())
Pair = tuple[bytes | None, bytes | None]


def changes() -> list[Pair]:
    """Inserts, updates and deletes (each with Debezium's tombstone); a column added at the
    100th change; at the 150th a fail-over to a server whose binlog starts again (lower
    coordinates, later commit times, its own GTIDs); poison here and there."""
    pairs: list[Pair] = []
    for i in range(240):
        row: dict[str, Any] = {"id": i % 30, "name": f"n {i}"}
        if i >= 100:
            row["qty"] = i
        op = "d" if i % 37 == 36 else "c" if i < 30 else "u"
        failed_over = i >= 150
        source = {"file": "other-bin.000001" if failed_over else "mysql-bin.000009",
                  "pos": 4000 + i * 100 if failed_over else 900_000 + i * 100, "row": 0,
                  "ts_ms": 1_000_000 + i * 1000, "snapshot": "false", "connector": "mariadb",
                  "gtid": f"0-{2 if failed_over else 1}-{i + 1}"}
        envelope = {"op": op, "before": row if op == "d" else None,
                    "after": None if op == "d" else row, "source": source}
        key = orjson.dumps({"id": row["id"]})
        pairs.append((key, orjson.dumps(envelope)))
        if op == "d":
            pairs.append((key, None))
        if i % 61 == 0:
            pairs.append(POISON[i % len(POISON)])
    return pairs


class ListSource:
    """Hands out ``pairs`` on one stream at the given positions, in small slices; once, after
    ``rebalance_after`` changes, takes the stream away and gives it back, delivering again
    from the last commit as a group's next owner would."""

    def __init__(self, stream: Stream, pairs: list[Pair], positions: list[int],
                 rebalance_after: int) -> None:
        self.stream = stream
        self.all = [Delivery(stream, p, k, v, len(k or b"") + len(v or b""))
                    for p, (k, v) in zip(positions, pairs, strict=True)]
        self.next = 0
        self.committed = -1
        self.commits: list[int] = []
        self.rebalance_after = rebalance_after
        self.on_revoked: RevokeHook | None = None
        self.revoked = 0

    async def fetch(self, max_items: int, timeout_ms: int) -> Deliveries:
        if self.revoked == 0 and self.next >= self.rebalance_after:
            self.revoked += 1
            assert self.on_revoked is not None
            await self.on_revoked({self.stream})
            self.next = next((i for i, d in enumerate(self.all) if d.position >= self.committed),
                             0)
        if self.next >= len(self.all):
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        taken = self.all[self.next:self.next + min(max_items, 7)]
        self.next += len(taken)
        return {self.stream: taken}

    def assignment(self) -> set[Stream]:
        return {self.stream}

    async def commit(self, positions: dict[Stream, int]) -> None:
        self.committed = positions[self.stream]
        self.commits.append(self.committed)

    def lag(self, stream: Stream, next_position: int) -> int | None:
        return None


async def outcomes(source: ListSource) -> tuple[Any, ...]:
    sink, letters, registries = RecordingSink(), MemoryDeadLetters(), MemoryRegistries()

    @contextlib.asynccontextmanager
    async def factory(config: Config, metrics: Metrics, tables: Mapping[str, TableParts],
                      on_revoked: RevokeHook) -> AsyncIterator[Parts]:
        source.on_revoked = on_revoked
        yield Parts(source, sink, letters, registries, AcceptingSchemas())

    daemon = Daemon(CONFIG, parts=factory)
    task = asyncio.create_task(daemon.run())
    last = source.all[-1].position + 1
    await until(lambda: bool(source.commits) and source.commits[-1] == last, task)
    daemon.stop()
    await task
    registry = await registries.load("items")
    return (sink.documents, [(value, headers["indexer.error.kind"])
                             for _, value, headers in letters.letters],
            [e.number for e in registry.epochs], len(registry.switches), source.revoked)


async def test_positions_that_are_binlog_coordinates_give_what_offsets_give() -> None:
    pairs = changes()
    offsets = list(range(len(pairs)))  # as Kafka numbers a partition's records
    # As a binlog numbers its changes: file 9, large and sparse positions, growing
    coordinates = [(9 << 32) + 1_000_000 + i * 379 for i in range(len(pairs))]
    through_offsets = await outcomes(ListSource(Stream(TOPIC, 0), pairs, offsets, 120))
    through_binlog = await outcomes(ListSource(Stream(TOPIC, 3), pairs, coordinates, 120))
    assert through_binlog == through_offsets
    documents, letters, epochs, switches, rebalances = through_binlog
    assert len(documents) == 30 and len(letters) == 4 and rebalances == 1
    assert epochs == [0, 1] and switches == 1  # the fail-over: one new epoch, once
    # Every row changed after the fail-over: each version is of the new epoch, whose file
    # field is above every version of the old server's file 9.
    assert min(unpack_binlog_version(v)[0] for v, _, _ in documents.values()) > 9


def test_the_changes_are_what_the_test_says() -> None:
    pairs = changes()
    assert sum(v is None for _, v in pairs) == 6 and len(pairs) == 240 + 6 + 4



