"""The run wing's source on Kafka: an aiokafka consumer of the tables' topics that delivers
their records as changes (a partition a stream, an offset its position), commits explicitly,
calls a hook on rebalances, and folds aiokafka's per-attempt errors into one outage."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import (
    KafkaError,
)
from aiokafka.structs import TopicPartition

from indexer.core.streams import Deliveries, Delivery, RevokeHook, Stream, deliveries_of
from indexer.outages import Outage
from indexer.settings import KafkaSettings
from indexer.source.kafka.clients import client_security, probe
from indexer.source.kafka.dead_letters import replayed_from

log = logging.getLogger(__name__)

# A table's topic appears with its first change; notice it within 30 s rather than 5 min.
METADATA_MAX_AGE_MS = 30_000
# How long the reader's fetch waits when there is nothing to read; bounds how late it stops.
READ_POLL_MS = 500
# While Kafka is away and nothing arrives, whether it is back is asked this often.
PROBE_S = 5.0
# aiokafka's loggers. While a broker is away each connection attempt, metadata refresh, fetch,
# heartbeat and commit that fails is a WARNING or ERROR line of its own (~540 per broker
# restart, up to 70 a second): the consumer's outage tells it once instead.
AIOKAFKA_LOGGERS = ("aiokafka", "aiokafka.conn", "aiokafka.cluster", "aiokafka.admin.client",
                    "aiokafka.consumer.consumer", "aiokafka.consumer.fetcher",
                    "aiokafka.consumer.group_coordinator", "aiokafka.producer.producer",
                    "aiokafka.producer.sender")
# What says a broker cannot be reached now (as opposed to a topic not there yet, a rebalance).
_UNREACHABLE = re.compile(r"unable (?:to )?(?:connect|update metadata|request metadata)|"
                          r"failed fetch|cannot send|could not send|connection|not ?ready|"
                          r"timed ?out|coordinator|heartbeat (?:send|session)", re.IGNORECASE)
# What is wrong for good, or a bug: said as aiokafka says it.
_KEPT = re.compile(r"not authorized|unexpected|sasl|fatal|unrecognized", re.IGNORECASE)


class LibraryErrors(logging.Filter):
    """aiokafka's own warnings and errors: DEBUG lines, those saying a broker cannot be
    reached told to the Kafka :class:`~indexer.outages.Outage`; those that say something is
    wrong for good (authorization, a bug) kept as they are."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self._outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        text = record.getMessage()
        if _KEPT.search(text):
            return True
        if _UNREACHABLE.search(text):
            self._outage.failed(text)
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


@contextlib.contextmanager
def library_errors_told(outage: Outage) -> Iterator[None]:
    """aiokafka's errors go to ``outage`` (and DEBUG) while the block runs."""
    quiet = LibraryErrors(outage)
    loggers = [logging.getLogger(name) for name in AIOKAFKA_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, on_revoked: Callable[[set[TopicPartition]], Awaitable[None]]) -> None:
        self._on_revoked = on_revoked

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            log.info("partitions revoked: %s", sorted(map(str, revoked)))
            await self._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("partitions assigned: %s", sorted(map(str, assigned)))


def topics_pattern(topics: Sequence[str]) -> str:
    """A regular expression that matches exactly these topics."""
    return "^(?:" + "|".join(re.escape(t) for t in sorted(topics)) + ")$"


class KafkaSource:
    """The run wing's source on Kafka: subscribes to the tables' topics and delivers their
    records as changes, a partition a stream and an offset its position; commits only the
    positions it is given.

    aiokafka sends the next fetch for a partition only once everything fetched for it has
    been taken, so a consumer that takes records as it decodes them waits a full fetch round
    trip every few thousand records. A reader task takes each fetch whole as it arrives and
    hands it over in slices: the next fetch travels while this one is decoded. At most one
    fetch waits in the hand-over, so memory stays bounded by a few fetches whatever the
    backlog. Prefetched records of a generation ended by a rebalance are dropped: the new
    owner of each partition reads it again from its last commit.
    """

    def __init__(self, settings: KafkaSettings, topics: Sequence[str],
                 on_revoked: RevokeHook, outage: Outage | None = None) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._on_revoked = on_revoked
        self.outage = outage or Outage("Kafka", "consuming and offset commits")
        self._told = contextlib.ExitStack()
        self._consumer: AIOKafkaConsumer | None = None
        self._fetched: asyncio.Queue[tuple[int, Deliveries] | BaseException] = asyncio.Queue(1)
        self._generation = 0  # bumped by every rebalance
        self._current: list[tuple[Stream, list[Delivery]]] = []
        self._streams: dict[TopicPartition, Stream] = {}  # one of each, made once
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> KafkaSource:
        s = self._settings
        await probe(s)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset=s.auto_offset_reset,
            max_partition_fetch_bytes=s.max_partition_fetch_bytes,
            fetch_max_bytes=s.fetch_max_bytes,
            check_crcs=s.check_crcs,
            isolation_level="read_committed",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            **client_security(s),
        )
        # By pattern, not by name: asking the broker for a topic by name creates it when
        # auto.create.topics.enable is on (a misspelt table would get an empty topic, and a
        # table's real topic the wrong partition count). A topic that appears later is
        # picked up at the next metadata refresh.
        self._consumer.subscribe(pattern=topics_pattern(self._topics),
                                 listener=_Listener(self._revoked))
        self._told.enter_context(library_errors_told(self.outage))
        try:
            await self._consumer.start()
        except BaseException:
            self._told.close()
            raise
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            if self._consumer is not None:
                await self._consumer.stop()
        finally:
            self._told.close()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "use the source as an async context manager"
        return self._consumer

    async def _read(self) -> None:
        consumer = self.consumer
        probed = 0.0
        try:
            while True:
                records = await consumer.getmany(timeout_ms=READ_POLL_MS)
                if records:
                    self.outage.ok()
                    found = {}
                    for tp, batch in records.items():
                        stream = self._stream(tp)
                        found[stream] = deliveries_of(stream, batch, replayed_from)
                    await self._fetched.put((self._generation, found))
                elif self.outage.down and time.monotonic() - probed >= PROBE_S:
                    probed = time.monotonic()  # nothing to read: is it back?
                    with contextlib.suppress(KafkaError):
                        await consumer.topics()
                        self.outage.ok()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the next fetch(), which raises it
            await self._fetched.put(exc)

    def _stream(self, tp: TopicPartition) -> Stream:
        found = self._streams.get(tp)
        if found is None:
            found = self._streams[tp] = Stream(tp.topic, tp.partition)
        return found

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        self._generation += 1
        self._current = []
        await self._on_revoked({self._stream(tp) for tp in revoked})

    async def fetch(self, max_records: int, timeout_ms: int) -> Deliveries:
        """Up to ``max_records`` changes in partition order, waiting at most ``timeout_ms``
        when none are fetched yet."""
        while not self._current:  # a rebalance empties it
            try:
                if timeout_ms <= 0:
                    fetched = self._fetched.get_nowait()
                else:
                    async with asyncio.timeout(timeout_ms / 1000):
                        fetched = await self._fetched.get()
            except (asyncio.QueueEmpty, TimeoutError):
                return {}
            if isinstance(fetched, BaseException):
                raise fetched
            generation, records = fetched
            if generation == self._generation:  # else fetched before a rebalance: dropped
                self._current = [(stream, batch) for stream, batch in records.items() if batch]
                self._current.reverse()  # taken from the end
        result: dict[Stream, list[Delivery]] = {}
        while self._current and max_records > 0:
            tp, batch = self._current[-1]
            if len(batch) <= max_records:
                self._current.pop()
                result[tp] = batch
            else:
                result[tp], self._current[-1] = batch[:max_records], (tp, batch[max_records:])
            max_records -= len(result[tp])
        return result

    def assignment(self) -> set[Stream]:
        return {self._stream(tp) for tp in self.consumer.assignment()}

    def topics(self) -> set[str]:
        """The tables' topics that exist (the subscription's pattern matched them)."""
        return set(self.consumer.subscription())

    async def commit(self, positions: dict[Stream, int]) -> None:
        """Commits ``{stream: next offset to read}`` for the partitions still assigned."""
        assigned = self.consumer.assignment()
        owned = {tp: offset for stream, offset in positions.items()
                 if (tp := TopicPartition(stream.name, stream.part)) in assigned}
        if owned:
            try:
                await self.consumer.commit(owned)
            except KafkaError as exc:
                if exc.retriable:
                    self.outage.failed(exc)
                raise
            self.outage.ok()

    def lag(self, stream: Stream, next_position: int) -> int | None:
        highwater = self.consumer.highwater(TopicPartition(stream.name, stream.part))
        return None if highwater is None else max(0, highwater - next_position)

