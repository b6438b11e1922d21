"""The hand-over between the source's reader task and the daemon (no broker involved)."""

import logging
import re

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from indexer.outages import Outage
from indexer.settings import KafkaSettings
from indexer.source.kafka.consumer import KafkaSource, Records, library_errors_told, topics_pattern

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def records(tp: TopicPartition, start: int, n: int) -> list[ConsumerRecord[bytes, bytes]]:
    return [ConsumerRecord(tp.topic, tp.partition, o, 0, 0, b"k", b"v", None, 1, 1, ())
            for o in range(start, start + n)]


def offsets(fetched: Records) -> dict[TopicPartition, list[int]]:
    return {tp: [r.offset for r in batch] for tp, batch in fetched.items()}


async def no_hook(revoked: set[TopicPartition]) -> None:
    pass


async def test_a_fetch_is_handed_over_in_slices_in_partition_order() -> None:
    source = KafkaSource(KafkaSettings(), ["t"], no_hook)
    await source._fetched.put((0, {A: records(A, 0, 3), B: records(B, 10, 2)}))
    assert offsets(await source.fetch(2, 0)) == {A: [0, 1]}
    assert offsets(await source.fetch(2, 0)) == {A: [2], B: [10]}
    assert offsets(await source.fetch(5, 0)) == {B: [11]}
    assert await source.fetch(5, 0) == {}
    assert await source.fetch(5, 10) == {}  # waits 10 ms, then nothing


async def test_records_fetched_before_a_rebalance_are_dropped() -> None:
    revoked: list[set[TopicPartition]] = []

    async def hook(tps: set[TopicPartition]) -> None:
        revoked.append(tps)

    source = KafkaSource(KafkaSettings(), ["t"], hook)
    await source._fetched.put((0, {A: records(A, 0, 4)}))
    assert offsets(await source.fetch(1, 0)) == {A: [0]}
    await source._revoked({A})
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
