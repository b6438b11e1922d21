"""Read-only looks into Kafka for the operator's commands (status, explain, check): end and
committed offsets, the consumer group's members, the newest record of a topic, a bounded
backward scan of one partition, dead letters since a time. Nothing here joins the daemon's
group or commits anything."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeAlias

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord, TopicPartition

from indexer.core.streams import Stream
from indexer.settings import KafkaSettings
from indexer.source.kafka.clients import client_security, partition_numbers, probe

Record: TypeAlias = ConsumerRecord[bytes, bytes]
# One partition is read at a time: a megabyte per fetch keeps a scan's memory small (a
# larger record still comes whole: the broker sends the first batch whatever its size).
INSPECT_FETCH_BYTES = 1024 * 1024
# A fetch that brings nothing for this long means the range has been read.
READ_WAIT_MS = 1000


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    end: int
    committed: int | None  # None: the group has never committed here

    @property
    def lag(self) -> int:
        return self.end - (self.committed or 0)


class TopicReader:
    """An unassigned consumer (no group) plus an admin client, as one context manager."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None

    async def __aenter__(self) -> TopicReader:
        s = self._settings
        await probe(s)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers, client_id=f"{s.client_id}-inspect",
            group_id=None, enable_auto_commit=False, isolation_level="read_committed",
            max_partition_fetch_bytes=INSPECT_FETCH_BYTES, fetch_max_bytes=INSPECT_FETCH_BYTES,
            **client_security(s))
        await self._consumer.start()
        self._admin = AIOKafkaAdminClient(bootstrap_servers=s.bootstrap_servers,
                                          request_timeout_ms=10_000, **client_security(s))
        await self._admin.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "use the reader as an async context manager"
        return self._consumer

    @property
    def admin(self) -> AIOKafkaAdminClient:
        assert self._admin is not None, "use the reader as an async context manager"
        return self._admin

    async def partitions(self, topic: str) -> list[Stream]:
        """The topic's partitions; empty when it does not exist."""
        return [Stream(topic, p) for p in await partition_numbers(self.admin, topic)]

    async def bounds(self, partition: Stream) -> tuple[int, int]:
        """(first offset kept, next offset to be written)."""
        tp = _tp(partition)
        begin = (await self.consumer.beginning_offsets([tp]))[tp]
        return begin, (await self.consumer.end_offsets([tp]))[tp]

    async def lag(self, group: str, topics: list[str]) -> list[PartitionLag]:
        tps = [_tp(p) for topic in topics for p in await self.partitions(topic)]
        if not tps:
            return []
        ends = await self.consumer.end_offsets(tps)
        committed = await self.admin.list_consumer_group_offsets(group, partitions=tps)
        result = []
        for tp in tps:
            meta = committed.get(tp)
            offset = meta.offset if meta is not None and meta.offset >= 0 else None
            result.append(PartitionLag(tp.topic, tp.partition, ends[tp], offset))
        return result

    async def members(self, group: str) -> list[dict[str, Any]]:
        """The group's members (client id and host): who is consuming right now."""
        (response,) = await self.admin.describe_consumer_groups([group])
        groups = response.to_object()["groups"]
        return [{"client_id": m["client_id"], "host": m["client_host"]}
                for g in groups for m in g.get("members", [])]

    async def newest(self, topic: str) -> Record | None:
        """The topic's newest record (by its timestamp, over all partitions)."""
        newest: Record | None = None
        for tp in await self.partitions(topic):
            # The last offsets may be transaction markers: a few are looked at.
            last, _ = await self.scan_back(tp, lambda r: True, limit=1, budget=5)
            if last and (newest is None or last[0].timestamp > newest.timestamp):
                newest = last[0]
        return newest

    async def read(self, partition: Stream, start: int, stop: int) -> list[Record]:
        """Records with offsets in [start, stop) (fewer where compaction or transaction
        markers left gaps)."""
        return [r async for batch in self.batches(partition, start, stop) for r in batch]

    async def batches(self, partition: Stream, start: int,
                      stop: int) -> AsyncIterator[list[Record]]:
        """The records with offsets in [start, stop), fetch by fetch: one pass forward."""
        consumer, tp = self.consumer, _tp(partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        while True:
            fetched = await consumer.getmany(tp, timeout_ms=READ_WAIT_MS)
            batch = fetched.get(tp, [])
            if not batch:
                return
            yield [r for r in batch if r.offset < stop] if batch[-1].offset >= stop else batch
            if batch[-1].offset >= stop - 1 or await consumer.position(tp) >= stop:
                return

    async def scan_back(self, partition: Stream, match: Callable[[Record], bool], *,
                        limit: int, budget: int) -> tuple[list[Record], int]:
        """The newest ``limit`` records that ``match`` (newest first) among the last
        ``budget`` offsets of the partition, and the offsets covered. Read forward in one
        pass: each fetch brings megabytes, so stepping backwards would read them many times."""
        begin, end = await self.bounds(partition)
        start = max(begin, end - budget)
        found: deque[Record] = deque(maxlen=limit)
        async for batch in self.batches(partition, start, end):
            found.extend(r for r in batch if match(r))
        return list(reversed(found)), end - start

    async def since(self, topic: str, since_ms: int | None) -> AsyncIterator[list[Record]]:
        """The records of ``topic`` from ``since_ms`` (or its beginning), fetch by fetch."""
        for partition in await self.partitions(topic):
            start, end = await self.bounds(partition)
            if since_ms is not None:
                tp = _tp(partition)
                at = (await self.consumer.offsets_for_times({tp: since_ms}))[tp]
                start = at.offset if at is not None else end
            if start < end:
                async for batch in self.batches(partition, start, end):
                    yield batch


def _tp(partition: Stream) -> TopicPartition:
    return TopicPartition(partition.name, partition.part)


def iso_time(ms: int) -> str:
    """Epoch milliseconds (a record's timestamp, a source commit time) as ISO 8601 UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def age_s(record: Record, now: float | None = None) -> float:
    """Seconds since the record's timestamp (its producer's, for Debezium the time the
    connector sent it)."""
    return max(0.0, (now if now is not None else time.time()) - int(record.timestamp) / 1000)
