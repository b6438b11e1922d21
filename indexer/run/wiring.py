"""What `indexer run`'s loop works with: the parts it is given (Kafka source, bulk sink,
dead-letter producer, follower, schema watch), each table's decoder and document builder, and
the factory that opens the real ones beside the canary's writer and continuous verification.

Apart from the loop (indexer.run.daemon, compiled): a factory is an async generator, which
mypyc does not compile, and a test gives the loop parts of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.structs import TopicPartition

from indexer.core.documents import DocumentBuilder
from indexer.core.events import EnvelopeDecoder, LayoutChanged
from indexer.core.trees import Touch
from indexer.jobs.ownership import claim
from indexer.metrics import Metrics
from indexer.outages import Outages
from indexer.run.follower import Follower
from indexer.run.rebuilds import Rebuilds, Request
from indexer.run.schema_changes import SchemaWatch
from indexer.run.verify import Verifier
from indexer.search.admin import ensure_table_index
from indexer.search.sink import ElasticsearchSink, Op
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.canary_table import CanaryWriter, writer_name
from indexer.source.kafka.consumer import (
    TOPIC_HINT,
    KafkaSource,
    Producer,
    Records,
    RevokeHook,
    missing_topics,
)

log = logging.getLogger(__name__)


class TableParts(Protocol):
    """A table and what turns its events into writes (the loop's own native class: every
    event reads these, and a compiled module reads its own classes' fields directly)."""

    @property
    def config(self) -> TableConfig: ...
    @property
    def decoder(self) -> EnvelopeDecoder: ...
    @property
    def builder(self) -> DocumentBuilder | None: ...


class Source(Protocol):
    """Where the records come from (:class:`~indexer.source.kafka.KafkaSource`)."""

    async def fetch(self, max_records: int, timeout_ms: int) -> Records: ...
    def assignment(self) -> set[TopicPartition]: ...
    async def commit(self, offsets: dict[TopicPartition, int]) -> None: ...
    def lag(self, tp: TopicPartition, next_offset: int) -> int | None: ...


class Sink(Protocol):
    """Where the writes go (:class:`~indexer.search.sink.ElasticsearchSink`): each op ends
    WRITTEN, STALE or FAILED."""

    async def write(self, ops: Sequence[Op]) -> None: ...


class DeadLetters(Protocol):
    """Where undeliverable messages go (:class:`~indexer.source.kafka.Producer`)."""

    async def deliver(self, topic: str, key: bytes | None, value: bytes | None,
                      headers: Sequence[tuple[str, bytes]], *, max_backoff_s: float) -> None: ...


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


@dataclass
class Parts:
    """What the loop works with, opened (and closed) together by a factory."""

    source: Source
    sink: Sink
    dead_letters: DeadLetters
    follower: Follower  # binlog-versioned tables' sources, stored in a state store
    schemas: Schemas
    rebuilds: Rebuilder | None = None  # tables with joins: their documents rebuilt


# (config, metrics, the tables' decoders, the rebalance hook) -> the parts, as a context.
PartsFactory = Callable[[Config, Metrics, Mapping[str, TableParts], RevokeHook],
                        AbstractAsyncContextManager[Parts]]


@contextlib.asynccontextmanager
async def open_parts(cfg: Config, metrics: Metrics, tables: Mapping[str, TableParts],
                     on_revoked: RevokeHook) -> AsyncIterator[Parts]:
    """The real parts: the search server's sink, the dead-letter producer, the follower and
    the schema watch on the search server's state, every table's index created if absent,
    the Kafka source, and beside them the canary's writer and continuous verification."""
    outages = Outages()  # one line per outage of each server, whoever waits on it
    async with (
        ElasticsearchSink(cfg.elasticsearch, metrics, max_backoff_s=cfg.batch.max_backoff_s,
                          outage=outages.search) as sink,
        Producer(cfg.kafka, outages.kafka) as producer,
    ):
        follower = Follower(StateStore(sink.client), metrics)
        schemas = SchemaWatch(cfg, sink.client, metrics)
        # First: a table MySQL does not have (a misspelt name), or joins that cannot work,
        # stop the start, indexless.
        await asyncio.gather(*(schemas.start(t.config, t.decoder)
                               for t in tables.values() if not t.config.canary))
        async with (
            _rebuilds(cfg, sink, metrics, outages) as rebuilds,
            contextlib.AsyncExitStack() as checks,
        ):
            indexed = [*cfg.tables, *((cfg.canary_table,) if cfg.canary_table else ())]
            for table_config in indexed:  # another table's index refuses the start, untouched
                await claim(cfg, sink.client, table_config)
            for table_config in indexed:  # tables read only for others' documents: no index
                await ensure_table_index(sink.client, cfg, table_config)
                if table_config.version.kind == "binlog":
                    await follower.load(table_config)
            if rebuilds is not None:
                await rebuilds.ensure_meta()
            for topic in await missing_topics(cfg.kafka, list(tables)):
                if tables[topic].config.canary:  # made by the first beat, a moment from now
                    continue
                log.warning("table %s: topic %s does not exist yet; it is read once it appears "
                            "(%s)", tables[topic].config.name, topic, TOPIC_HINT)
            source = await checks.enter_async_context(
                KafkaSource(cfg.kafka, list(tables), on_revoked, outages.kafka))
            await _start_checks(cfg, metrics, checks, source, outages)
            yield Parts(source, sink, producer, follower, schemas, rebuilds)


@contextlib.asynccontextmanager
async def _rebuilds(cfg: Config, sink: ElasticsearchSink, metrics: Metrics,
                    outages: Outages) -> AsyncIterator[Rebuilds | None]:
    """The rebuilds of joined documents, when a table has joins: their trees are read from
    MySQL and checked first (a join that cannot work stops the start with its reason)."""
    if not any(t.joins for t in cfg.tables):
        yield None
        return
    async with Rebuilds(cfg, sink.client, sink, metrics, outages.mysql) as rebuilds:
        yield rebuilds


async def _start_checks(cfg: Config, metrics: Metrics, checks: contextlib.AsyncExitStack,
                        source: KafkaSource, outages: Outages) -> None:
    """The canary's writer and continuous verification, beside the loop. Each table is looked
    after by the member that consumes its topic's first partition, so the work is done once
    per group and moves with the partitions."""

    def owns(topic: str) -> bool:
        # A topic that does not exist yet (an empty table's; the canary's before Debezium has
        # seen a beat) is looked after by the owner of the first existing topic's partition 0.
        present = source.topics()
        if topic not in present:
            if not present:
                return False
            topic = min(present)
        return TopicPartition(topic, 0) in source.assignment()

    if cfg.canary_table is not None:
        canary = cfg.canary_table
        metrics.canary_from(int(time.time() * 1000))
        await checks.enter_async_context(CanaryWriter(
            cfg.canary_mysql, canary, cfg.kafka.group_id, writer_name(cfg.kafka.client_id),
            cfg.canary.interval_s, lambda: owns(canary.topic), metrics,
            outages.mysql if cfg.canary_mysql == cfg.mysql else None))
    if cfg.verify.enabled:
        await checks.enter_async_context(Verifier(cfg, metrics, lambda table: owns(table.topic),
                                                  outages))
