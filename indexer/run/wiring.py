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
from collections.abc import AsyncIterator, Mapping

from indexer.core.streams import RevokeHook, Stream
from indexer.jobs.ownership import claim
from indexer.metrics import Metrics
from indexer.outages import Outages
from indexer.run.ports import Parts, TableParts
from indexer.run.rebuilds import Rebuilds
from indexer.run.schema_changes import SchemaWatch
from indexer.run.verify import Verifier
from indexer.search.admin import ensure_table_index
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config
from indexer.source.canary_table import CanaryWriter, writer_name
from indexer.source.kafka.clients import TOPIC_HINT, missing_topics
from indexer.source.kafka.consumer import KafkaSource
from indexer.source.kafka.dead_letters import KafkaDeadLetters
from indexer.source.kafka.producer import Producer

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def open_parts(cfg: Config, metrics: Metrics, tables: Mapping[str, TableParts],
                     on_revoked: RevokeHook) -> AsyncIterator[Parts]:
    """The real parts: the search server's sink, the dead-letter topic, the state store and
    the schema watch, every table's index created if absent (and refused if another table's),
    the Kafka source, and beside them the canary's writer and continuous verification."""
    outages = Outages()  # one line per outage of each server, whoever waits on it
    async with (
        ElasticsearchSink(cfg.elasticsearch, metrics, max_backoff_s=cfg.batch.max_backoff_s,
                          outage=outages.search) as sink,
        Producer(cfg.kafka, outages.kafka) as producer,
    ):
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
            dead_letters = KafkaDeadLetters(producer, cfg.kafka.dead_letter_topic,
                                            cfg.batch.max_backoff_s)
            yield Parts(source, sink, dead_letters, StateStore(sink.client), schemas, rebuilds)


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
        return Stream(topic, 0) in source.assignment()

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
