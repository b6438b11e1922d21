"""The one module that names the concrete adapters `indexer run` works with: it opens the real
parts of :mod:`indexer.run.ports` (Kafka source, bulk sink, dead-letter topic, state store,
schema watch, joined documents' rebuilds) beside the canary's writer and continuous
verification, sharing one outage record per server.

Apart from the loop (indexer.run.daemon, compiled): a factory is an async generator, which
mypyc does not compile, and a test gives the loop parts of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from indexer.build import load_native
from indexer.core.binlog_rows import NativePlan
from indexer.core.streams import RevokeHook, Stream
from indexer.errors import ConfigError
from indexer.jobs.ownership import claim
from indexer.jobs.reindex import reindex
from indexer.metrics import Metrics
from indexer.outages import Outages
from indexer.run.ports import DeadLetters, Parts, Source, TableParts
from indexer.run.rebuilds import Rebuilds
from indexer.run.schema_changes import SchemaWatch
from indexer.run.verify import Verifier
from indexer.search import pipelines, routing
from indexer.search.admin import ensure_table_index
from indexer.search.dead_letters import SearchDeadLetters
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config
from indexer.source.binlog.lock import ReaderLock
from indexer.source.binlog.replication import binlog_end_of, server_id_of
from indexer.source.binlog.source import BinlogSource, position_base, replica_id
from indexer.source.canary_table import CanaryWriter, writer_name
from indexer.source.kafka.clients import TOPIC_HINT, missing_topics
from indexer.source.kafka.consumer import KafkaSource
from indexer.source.kafka.dead_letters import KafkaDeadLetters
from indexer.source.kafka.producer import Producer

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def open_parts(cfg: Config, metrics: Metrics, tables: Mapping[str, TableParts],
                     on_revoked: RevokeHook) -> AsyncIterator[Parts]:
    """The real parts: the search server's sink, the state store and the schema watch, every
    table's index created if absent (and refused if another table's), the source (Kafka's
    topics, or the binlog itself) with its dead letters, and beside them the canary's writer
    and continuous verification."""
    # one line per outage of each server, whoever waits on it
    outages = Outages.reading_binlog() if cfg.source.kind == "binlog" else Outages()
    async with ElasticsearchSink(cfg.elasticsearch, metrics,
                                 max_backoff_s=cfg.batch.max_backoff_s,
                                 outage=outages.search, pipelines=cfg.pipelines) as sink:
        schemas = SchemaWatch(cfg, sink.client, metrics)
        # First: a table MySQL does not have (a misspelt name), or joins that cannot work,
        # stop the start, indexless.
        await asyncio.gather(*(schemas.start(t.config, t.decoder)
                               for t in tables.values() if not t.config.canary))
        state = StateStore(sink.client)
        async with (
            _rebuilds(cfg, sink, metrics, outages) as rebuilds,
            contextlib.AsyncExitStack() as stack,
        ):
            indexed = [*cfg.tables, *((cfg.canary_table,) if cfg.canary_table else ())]
            for table_config in indexed:  # another table's index refuses the start, untouched
                await claim(cfg, sink.client, table_config)
            await pipelines.require(sink.client, cfg.tables)
            if misplaced := await routing.misrouted(sink.client, cfg.tables):
                raise ConfigError(misplaced[0])
            start = lock = None
            if cfg.source.kind == "binlog":  # one reader per deployment; others stand by
                lock = await stack.enter_async_context(
                    ReaderLock(cfg.mysql, cfg.source.name, outages.mysql))
                start = await binlog_start(cfg, state)
            read_through = None
            if lock is not None and start is not None:
                binlog = await stack.enter_async_context(BinlogSource(
                    cfg.mysql, replica_id(cfg.source.name, cfg.source.replica_id),
                    {name: t.config for name, t in tables.items()}, start.position,
                    lambda record: state.save_binlog_position(cfg.source.name, record),
                    outages.mysql, cfg.batch.max_backoff_s, lock.check, start.server_id,
                    start.base, _native_rows(cfg), start.gtids, start.above,
                    frozenset(name for name, t in tables.items() if t.rows_are_documents)))
                source: Source = binlog
                read_through = binlog.read_through
                dead_letters: DeadLetters = SearchDeadLetters(sink.client, cfg.source.name,
                                                              cfg.batch.max_backoff_s)
                owns: Callable[[str], bool] = lambda topic: True  # noqa: E731 (reads them all)
            else:
                source, dead_letters, owns = await _kafka(cfg, tables, on_revoked, stack,
                                                          outages)
            # After the source: a Kafka setting it refuses stops the start, indexless.
            for table_config in indexed:  # tables read only for others' documents: no index
                await ensure_table_index(sink.client, cfg, table_config)
            if rebuilds is not None:
                await rebuilds.ensure_meta()
            await _start_checks(cfg, metrics, stack, owns, outages, read_through)
            yield Parts(source, sink, dead_letters, state, schemas, rebuilds)


def _native_rows(cfg: Config) -> NativePlan | None:
    """The native module's row image reader, where built and not turned off."""
    module = load_native() if cfg.batch.native else None
    plan: NativePlan | None = getattr(module, "RowPlan", None)
    return plan


async def _kafka(cfg: Config, tables: Mapping[str, TableParts], on_revoked: RevokeHook,
                 stack: contextlib.AsyncExitStack, outages: Outages,
                 ) -> tuple[Source, DeadLetters, Callable[[str], bool]]:
    """The Kafka source and dead-letter topic, and which tables this member looks after: the
    ones whose topic's first partition it consumes, so the canary and verification run once
    per group and move with the partitions."""
    producer = await stack.enter_async_context(Producer(cfg.kafka, outages.kafka))
    for topic in await missing_topics(cfg.kafka, list(tables)):
        if tables[topic].config.canary:  # made by the first beat, a moment from now
            continue
        log.warning("table %s: topic %s does not exist yet; it is read once it appears "
                    "(%s)", tables[topic].config.name, topic, TOPIC_HINT)
    source = await stack.enter_async_context(
        KafkaSource(cfg.kafka, list(tables), on_revoked, outages.kafka))

    def owns(topic: str) -> bool:
        # A topic that does not exist yet (an empty table's; the canary's before Debezium has
        # seen a beat) is looked after by the owner of the first existing topic's partition 0.
        present = source.topics()
        if topic not in present:
            if not present:
                return False
            topic = min(present)
        return Stream(topic, 0) in source.assignment()

    return (source, KafkaDeadLetters(producer, cfg.kafka.dead_letter_topic,
                                     cfg.batch.max_backoff_s), owns)


@dataclass(frozen=True)
class BinlogStart:
    """Where the binlog source starts reading."""

    position: tuple[str, int]
    server_id: int | None  # whose coordinates (None: a position saved before they were kept)
    base: int  # added to the position of every change (saved with the position)
    gtids: str  # MariaDB's GTID position there ("": none saved)
    above: int  # above every position followed before: the base of another server's


async def binlog_start(cfg: Config, state: StateStore) -> BinlogStart:
    """As saved; on the first start, the end of the binlog before every table is loaded from a
    snapshot (the reindex), so no change between the load and the stream is lost (the ones
    read twice are older than the load's versions and refused as stale)."""
    indexed = [*cfg.tables, *((cfg.canary_table,) if cfg.canary_table else ())]
    # Streams followed before (a reset, a fail-over): another server's positions go on above.
    above = position_base({key: cursor.position for table in indexed
                           for key, cursor in (await state.load(table.alias)).cursors.items()})
    saved = await state.binlog_position(cfg.source.name)
    if saved is not None:
        server_id = saved.get("server_id")
        return BinlogStart((str(saved["file"]), int(saved["pos"])),
                           int(server_id) if server_id is not None else None,
                           int(saved.get("base", 0)), str(saved.get("gtid") or ""), above)
    end = await asyncio.to_thread(binlog_end_of, cfg.mysql)
    server_id = await asyncio.to_thread(server_id_of, cfg.mysql)
    log.info("binlog source %s: no saved position; loading %d tables from a snapshot, then "
             "reading the binlog from %s:%d", cfg.source.name, len(cfg.tables), *end)
    for table in cfg.tables:
        result = await reindex(cfg, table)
        log.info("table %s: %d rows loaded into %s in %.1f s", table.name, result.written,
                 result.index, result.seconds)
    await state.save_binlog_position(cfg.source.name, {
        "file": end[0], "pos": end[1], "server_id": server_id, "base": above,
        "loaded": [t.name for t in cfg.tables],
        "saved_at": datetime.now(UTC).isoformat(timespec="seconds")})
    return BinlogStart(end, server_id, above, "", above)


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
                        owns: Callable[[str], bool], outages: Outages,
                        read_through: Callable[[], tuple[str, int]] | None) -> None:
    """The canary's writer and continuous verification, beside the loop, for the tables this
    process looks after (``owns`` their topic); ``read_through``: the binlog source's."""
    if cfg.canary_table is not None:
        canary = cfg.canary_table
        metrics.canary_from(int(time.time() * 1000))
        await checks.enter_async_context(CanaryWriter(
            cfg.canary_mysql, canary, cfg.deployment, writer_name(cfg.kafka.client_id),
            cfg.canary.interval_s, lambda: owns(canary.topic), metrics,
            outages.mysql if cfg.canary_mysql == cfg.mysql else None))
    if cfg.verify.enabled:
        await checks.enter_async_context(Verifier(cfg, metrics, lambda table: owns(table.topic),
                                                  outages, read_through))
