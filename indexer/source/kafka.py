"""aiokafka consumer with explicit commits and a rebalance hook, and the dead-letter producer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord, TopicPartition

from indexer.config import KafkaSettings

log = logging.getLogger(__name__)

Records = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
RevokeHook = Callable[[set[TopicPartition]], Awaitable[None]]
# A table's topic appears with its first change; notice it within 30 s rather than 5 min.
METADATA_MAX_AGE_MS = 30_000


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, on_revoked: RevokeHook) -> None:
        self._on_revoked = on_revoked

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            log.info("partitions revoked: %s", sorted(map(str, revoked)))
            await self._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("partitions assigned: %s", sorted(map(str, assigned)))


class KafkaSource:
    """Subscribes to the tables' topics; commits only offsets it is given."""

    def __init__(self, settings: KafkaSettings, topics: Sequence[str],
                 on_revoked: RevokeHook) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._listener = _Listener(on_revoked)
        self._consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> KafkaSource:
        s = self._settings
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
        )
        self._consumer.subscribe(self._topics, listener=self._listener)
        await self._consumer.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "use the source as an async context manager"
        return self._consumer

    async def fetch(self, max_records: int, timeout_ms: int) -> Records:
        result: Records = await self.consumer.getmany(timeout_ms=timeout_ms,
                                                      max_records=max_records)
        return result

    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commits ``{tp: next offset to read}`` for the partitions still assigned."""
        assigned = self.assignment()
        owned = {tp: offset for tp, offset in offsets.items() if tp in assigned}
        if owned:
            await self.consumer.commit(owned)

    def lag(self, tp: TopicPartition, next_offset: int) -> int | None:
        highwater = self.consumer.highwater(tp)
        return None if highwater is None else max(0, highwater - next_offset)


class Producer:
    """An idempotent producer for dead letters and replays; every send waits for the ack."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def __aenter__(self) -> Producer:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.bootstrap_servers,
            client_id=f"{self._settings.client_id}-producer",
            acks="all",
            enable_idempotence=True,
            max_request_size=16 * 1024 * 1024,
        )
        await self._producer.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def send(self, topic: str, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes]], partition: int | None = None) -> None:
        assert self._producer is not None, "use the producer as an async context manager"
        await self._producer.send_and_wait(topic, value=value, key=key, headers=list(headers),
                                           partition=partition)


async def topic_partitions(settings: KafkaSettings, topic: str) -> list[int]:
    """The partition numbers of a topic; empty when it does not exist."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(int(p["partition"]) for p in description.get("partitions", []))
