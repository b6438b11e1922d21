"""The dead-letter topic: the original message plus why it failed (the run wing's dead letters
port on Kafka), and its replay after a fix.

A dead letter keeps the original key, value and headers, and adds ``indexer.*`` headers:
error kind and reason, source topic/partition/offset, attempts and the time it failed.
Replay sends the original key, value and headers back to the source topic with a header
naming where the change was first delivered; versions make a replayed event harmless if a
newer change was indexed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from indexer.core.streams import Delivery
from indexer.settings import KafkaSettings
from indexer.source.kafka.clients import client_security, topic_partitions
from indexer.source.kafka.producer import Producer

log = logging.getLogger(__name__)

PREFIX = "indexer."
# On a replayed dead letter: "topic/partition/offset" of the original message, whose version
# epoch the change keeps (indexer.run.follower).
REPLAY_HEADER = PREFIX + "replay.of"
# Reasons longer than this are cut: a header is no place for a 1 MB document echo.
MAX_REASON = 4000


@dataclass(frozen=True)
class DeadLetter:
    """What the dead-letter topic says about one message (parsed back from its headers)."""

    kind: str
    reason: str
    topic: str
    partition: int
    offset: int
    attempts: int
    failed_at: str

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            (PREFIX + "error.kind", self.kind.encode()),
            (PREFIX + "error.reason", self.reason[:MAX_REASON].encode()),
            (PREFIX + "source.topic", self.topic.encode()),
            (PREFIX + "source.partition", str(self.partition).encode()),
            (PREFIX + "source.offset", str(self.offset).encode()),
            (PREFIX + "attempts", str(self.attempts).encode()),
            (PREFIX + "failed_at", self.failed_at.encode()),
        ]

    @classmethod
    def from_headers(cls, headers: Sequence[tuple[str, bytes]]) -> DeadLetter | None:
        own = {k.removeprefix(PREFIX): v.decode(errors="replace") for k, v in headers
               if k.startswith(PREFIX)}
        try:
            return cls(own["error.kind"], own.get("error.reason", ""), own["source.topic"],
                       int(own["source.partition"]), int(own["source.offset"]),
                       int(own.get("attempts", "1")), own.get("failed_at", ""))
        except (KeyError, ValueError):
            return None


def dead_letter_for(delivery: Delivery, kind: str, reason: str, attempts: int,
                    now: datetime | None = None) -> DeadLetter:
    stream = delivery.stream
    return DeadLetter(kind, reason, stream.name, stream.part, delivery.position, attempts,
                      (now or datetime.now(UTC)).isoformat(timespec="milliseconds"))


def replayed_from(headers: Sequence[tuple[str, bytes]]) -> tuple[str, int] | None:
    """Where a replayed dead letter's change was first delivered: ("topic/partition",
    offset); None for any other message."""
    for name, value in headers:
        if name == REPLAY_HEADER:
            key, _, offset = value.decode().rpartition("/")
            return key, int(offset)
    return None


class KafkaDeadLetters:
    """The dead letters port on Kafka: each letter sent to the dead-letter topic until Kafka
    has it (Kafka's retry policy: a letter is never lost)."""

    def __init__(self, producer: Producer, topic: str, max_backoff_s: float) -> None:
        self._producer = producer
        self._topic = topic
        self._max_backoff_s = max_backoff_s

    async def deliver(self, delivery: Delivery, kind: str, reason: str, attempts: int) -> None:
        letter = dead_letter_for(delivery, kind, reason, attempts)
        await self._producer.deliver(self._topic, delivery.key, delivery.value,
                                     [*delivery.headers, *letter.headers()],
                                     max_backoff_s=self._max_backoff_s)


def original_headers(headers: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    return [(k, v) for k, v in headers if not k.startswith(PREFIX)]


def _original(letter: DeadLetter, headers: Sequence[tuple[str, bytes]]) -> bytes:
    """Where the dead letter's change first came from: itself, or the original it replayed."""
    for name, value in headers:
        if name == REPLAY_HEADER:
            return value
    return f"{letter.topic}/{letter.partition}/{letter.offset}".encode()


@dataclass(frozen=True)
class ReplayFilter:
    topics: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()
    since: datetime | None = None

    def matches(self, letter: DeadLetter) -> bool:
        if self.topics and letter.topic not in self.topics:
            return False
        if self.kinds and letter.kind not in self.kinds:
            return False
        if self.since is not None:
            try:
                failed_at = datetime.fromisoformat(letter.failed_at)
            except ValueError:
                return False
            return failed_at >= self.since
        return True


@dataclass
class ReplayReport:
    read: int = 0
    matched: int = 0
    replayed: int = 0
    unreadable: int = 0


async def replay(settings: KafkaSettings, selection: ReplayFilter, *,
                 dry_run: bool) -> ReplayReport:
    """Re-delivers the matching dead letters, from the start of the topic to its end now."""
    report = ReplayReport()
    tps = [TopicPartition(settings.dead_letter_topic, p)
           for p in await topic_partitions(settings, settings.dead_letter_topic)]
    if not tps:
        return report
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers,
                                enable_auto_commit=False, group_id=None,
                                isolation_level="read_committed",
                                **client_security(settings))
    await consumer.start()
    await asyncio.sleep(0)  # aiokafka's stop() raises if its group-less task never ran
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        remaining = {tp for tp in tps if ends[tp] > 0}
        async with Producer(settings) as producer:
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=1000)
                for tp, records in batch.items():
                    for record in records:
                        if record.offset >= ends[tp]:
                            remaining.discard(tp)
                            break
                        report.read += 1
                        letter = DeadLetter.from_headers(list(record.headers))
                        if letter is None:
                            report.unreadable += 1
                            continue
                        if not selection.matches(letter):
                            continue
                        report.matched += 1
                        log.info("dead letter %s[%d]@%d (%s: %s)%s", letter.topic,
                                 letter.partition, letter.offset, letter.kind, letter.reason,
                                 "" if dry_run else " -> replayed")
                        if not dry_run:
                            await producer.send(letter.topic, record.key, record.value, [
                                *original_headers(list(record.headers)),
                                (REPLAY_HEADER, _original(letter, record.headers))])
                            report.replayed += 1
                    if records and records[-1].offset >= ends[tp] - 1:
                        remaining.discard(tp)
    finally:
        await consumer.stop()
    return report
