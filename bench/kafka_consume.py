"""What consuming one message costs the daemon's core, before anything is decoded.

    .venv/bin/python -m bench.kafka_consume --messages 200000 --sizes 569 3823 --fetch-kib 4096 1024

N messages of each value size are pre-loaded into a one-partition topic; aiokafka's consumer,
configured as ``indexer run`` configures it (CRC checks off, read_committed, the fetch sizes
given), drains the topic on the client core, alone in its process. Printed per size and
fetch size: the CPU per message, and the same drain with aiokafka's per-record step (the
``ConsumerRecord`` it builds for each record, the one Python object per message this path
makes) skipped, which is what reading record batches whole could save. Rounds take turns
and the medians are printed: the machine's speed drifts within minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.consumer import fetcher

from bench.common import CLIENT_CORE, KAFKA, chunks, delete_topic, unique
from indexer.settings import KafkaSettings

# aiokafka's per-record step, replaced for the second drain of each pair (a benchmark's
# measurement only: the daemon never patches aiokafka).
_RECORD_STEP: Callable[..., Any] = fetcher.PartitionRecords._consumer_record


def _record_as_is(self: Any, tp: Any, record: Any) -> Any:
    return record


async def load(topic: str, messages: int, size: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=KAFKA, acks=1, linger_ms=20,
                                max_batch_size=1 << 20, max_request_size=16 << 20)
    await producer.start()
    try:
        value = b"x" * size
        for part in chunks(messages, 20_000):
            futures = [await producer.send(topic, key=orjson.dumps({"id": i}), value=value,
                                           partition=0) for i in part]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def drain(topic: str, messages: int, fetch_bytes: int, records: bool) -> float:
    """CPU microseconds per message to consume the whole topic."""
    defaults = KafkaSettings()
    fetcher.PartitionRecords._consumer_record = _RECORD_STEP if records else _record_as_is
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=KAFKA, auto_offset_reset="earliest",
                                enable_auto_commit=False, check_crcs=defaults.check_crcs,
                                isolation_level="read_committed",
                                max_partition_fetch_bytes=fetch_bytes,
                                fetch_max_bytes=defaults.fetch_max_bytes)
    await consumer.start()
    try:
        seen = 0
        started = time.process_time()
        while seen < messages:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                seen += len(batch)
        return (time.process_time() - started) / messages * 1e6
    finally:
        await consumer.stop()
        fetcher.PartitionRecords._consumer_record = _RECORD_STEP


async def main(messages: int, sizes: list[int], fetches_kib: list[int], rounds: int) -> None:
    os.sched_setaffinity(0, {int(CLIENT_CORE)})
    print(f"defaults: max_partition_fetch_bytes {KafkaSettings().max_partition_fetch_bytes}")
    for size in sizes:
        topic = unique("bench-consume")
        await load(topic, messages, size)
        runs: dict[tuple[int, bool], list[float]] = {}
        try:
            for _ in range(rounds):
                for kib in fetches_kib:
                    for records in (True, False):
                        cpu = await drain(topic, messages, kib << 10, records)
                        runs.setdefault((kib, records), []).append(cpu)
        finally:
            await delete_topic(topic)
        for kib in fetches_kib:
            full = statistics.median(runs[(kib, True)])
            bare = statistics.median(runs[(kib, False)])
            print(f"{size:6d} B values, fetch {kib:5d} KiB: {full:5.2f} µs/message (runs "
                  f"{', '.join(f'{s:.2f}' for s in runs[(kib, True)])}); without the "
                  f"per-record step {bare:5.2f} µs: that step {full - bare:4.2f} µs")


def parse(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[569, 3823])
    parser.add_argument("--fetch-kib", type=int, nargs="+", default=[4096, 1024])
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    asyncio.run(main(args.messages, args.sizes, args.fetch_kib, args.rounds))
