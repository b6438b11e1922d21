"""The hand-over between the source's reader task and the daemon (no broker involved)."""

import logging
import re

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from indexer.core.streams import Deliveries, Delivery, Stream, deliveries_of
from indexer.outages import Outage
from indexer.settings import KafkaSettings
from indexer.source.kafka.consumer import (
    KafkaSource,
    library_errors_told,
    topics_pattern,
)
from indexer.source.kafka.dead_letters import REPLAY_HEADER, replayed_from

A, B = Stream("t", 0), Stream("t", 1)


def records(stream: Stream, start: int, n: int) -> list[Delivery]:
    """Records of a partition as the reader task hands them over: changes of a stream."""
    return deliveries_of(stream, [ConsumerRecord(stream.name, stream.part, o, 0, 0, b"k", b"v",
                                                 None, 1, 1, ())
                                  for o in range(start, start + n)], replayed_from)


def offsets(fetched: Deliveries) -> dict[Stream, list[int]]:
    return {stream: [d.position for d in batch] for stream, batch in fetched.items()}


async def no_hook(revoked: set[Stream]) -> None:
    pass


def test_a_record_is_a_change_of_its_partitions_stream_at_its_offset() -> None:
    record = ConsumerRecord("t", 1, 41, 0, 0, b"k", b"v", None, 1, 2, ())
    assert deliveries_of(B, [record], replayed_from) == [Delivery(B, 41, b"k", b"v", 3)]
    # a replayed dead letter says where its change was first delivered
    replayed = ConsumerRecord("t", 1, 42, 0, 0, b"k", b"v", None, 1, 2,
                              ((REPLAY_HEADER, b"t/0/7"),))
    assert deliveries_of(B, [replayed], replayed_from)[0].replay_of == ("t/0", 7)


async def test_a_fetch_is_handed_over_in_slices_in_partition_order() -> None:
    source = KafkaSource(KafkaSettings(), ["t"], no_hook)
    await source._fetched.put((0, {A: records(A, 0, 3), B: records(B, 10, 2)}))
    assert offsets(await source.fetch(2, 0)) == {A: [0, 1]}
    assert offsets(await source.fetch(2, 0)) == {A: [2], B: [10]}
    assert offsets(await source.fetch(5, 0)) == {B: [11]}
    assert await source.fetch(5, 0) == {}
    assert await source.fetch(5, 10) == {}  # waits 10 ms, then nothing


async def test_records_fetched_before_a_rebalance_are_dropped() -> None:
    revoked: list[set[Stream]] = []

    async def hook(streams: set[Stream]) -> None:
        revoked.append(streams)

    source = KafkaSource(KafkaSettings(), ["t"], hook)
    await source._fetched.put((0, {A: records(A, 0, 4)}))
    assert offsets(await source.fetch(1, 0)) == {A: [0]}
    await source._revoked({TopicPartition("t", 0)})
    assert revoked == [{A}]
    assert await source.fetch(10, 0) == {}  # the rest of the old fetch is gone
    await source._fetched.put((0, {A: records(A, 4, 1)}))  # fetched before, queued late
    assert await source.fetch(10, 0) == {}
    await source._fetched.put((1, {A: records(A, 1, 2)}))  # read again from the commit
    assert offsets(await source.fetch(10, 0)) == {A: [1, 2]}


async def test_a_reader_error_is_raised_by_the_next_fetch() -> None:
    source = KafkaSource(KafkaSettings(), ["t"], no_hook)
    await source._fetched.put(RuntimeError("broker says no"))
    with pytest.raises(RuntimeError, match="broker says no"):
        await source.fetch(10, 0)


def test_the_subscription_pattern_matches_exactly_the_topics() -> None:
    pattern = re.compile(topics_pattern(["db.shop.items", "db.shop.items_v2", "a+b"]))
    for topic in ("db.shop.items", "db.shop.items_v2", "a+b"):
        assert pattern.match(topic)
    for topic in ("db.shop.itemsX", "dbXshop.items", "db.shop.item", "aab", "x.db.shop.items"):
        assert not pattern.match(topic)


def test_aiokafkas_errors_while_a_broker_is_away_are_one_outage_at_debug(
        caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage("Kafka", "consuming")
    caplog.set_level(logging.INFO)
    with library_errors_told(outage):
        for _ in range(50):  # a broker restart: one of these per attempt, dozens a second
            logging.getLogger("aiokafka").error(
                "Unable connect to node with id %s: %s", 1, "[Errno 111] Connection refused")
            logging.getLogger("aiokafka").error("Unable to update metadata from [1]")
            logging.getLogger("aiokafka.consumer.fetcher").error(
                "Failed fetch messages from %s: %s", 1, "NodeNotReadyError")
        logging.getLogger("aiokafka.cluster").error("Topic %s not found in cluster metadata",
                                                    "dlq")  # not an outage: DEBUG alone
        logging.getLogger("aiokafka.consumer.fetcher").warning(
            "Not authorized to read from topic %s.", "t")  # wrong for good: kept
    assert outage.down
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("indexer.outages", "WARNING", "Kafka unreachable (Unable connect to node with id 1: "
                                       "[Errno 111] Connection refused); consuming wait for it"),
        ("aiokafka.consumer.fetcher", "WARNING", "Not authorized to read from topic t.")]
    # Outside the block (another process's client, the filter removed): as aiokafka says it.
    logging.getLogger("aiokafka").error("Unable to update metadata from [1]")
    assert caplog.records[-1].levelname == "ERROR"
