"""The run loop driven with in-memory parts (the real servers are the integration tests'):
batches written and committed in order after their writes, stale versions settled, poison
dead-lettered and committed, a failed batch ending the daemon with nothing committed past it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from msgspec.structs import replace as replace_struct

from indexer.build import load_native
from indexer.config import build_config
from indexer.core import native as native_module
from indexer.core.documents import DocumentBuilder, file_number
from indexer.core.envelope import Position
from indexer.core.events import BuiltRows, Change, EnvelopeDecoder, LayoutChanged
from indexer.core.sources import Registry
from indexer.core.streams import ROW_STEP, Deliveries, Delivery, RevokeHook, Stream
from indexer.core.trees import Touch
from indexer.core.versions import pack
from indexer.core.writes import MAPPING_CONFLICT, Op, Outcome
from indexer.metrics import Metrics
from indexer.run.daemon import Daemon
from indexer.run.ports import Parts, Request
from indexer.search.dead_letters import letter_for
from indexer.settings import Config, TableConfig
from indexer.source.kafka.dead_letters import dead_letter_for
from tests.unit.corpus import POISON, messages

T = TypeVar("T")
TOPIC = "mysql.indexer_test.t1"
TP = Stream(TOPIC, 0)
CONFIG = build_config({"tables": [{"name": "indexer_test.t1", "topic": TOPIC}],
                       "batch": {"linger_ms": 0, "max_linger_ms": 0, "max_events": 2}},
                      Path())


def record(offset: int, key: bytes | None, value: bytes | None) -> Delivery:
    return Delivery(TP, offset, key, value, len(key or b"") + len(value or b""))


class MemorySource:
    """Hands out its changes once, in slices; keeps every commit."""

    def __init__(self, pairs: Sequence[tuple[bytes | None, bytes | None]]) -> None:
        self.pending = [record(i, k, v) for i, (k, v) in enumerate(pairs)]
        self.commits: list[dict[Stream, int]] = []

    async def fetch(self, max_records: int, timeout_ms: int) -> Deliveries:
        if not self.pending:
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        taken, self.pending = self.pending[:max_records], self.pending[max_records:]
        return {TP: taken}

    def assignment(self) -> set[Stream]:
        return {TP}

    async def commit(self, positions: dict[Stream, int]) -> None:
        self.commits.append(dict(positions))

    def lag(self, stream: Stream, next_position: int) -> int | None:
        return None


class MemorySink:
    """An index in a dict: a write wins with a higher version (external versioning)."""

    def __init__(self, fail_on_call: int = 0, slow_first_s: float = 0.0) -> None:
        self.versions: dict[str, int] = {}
        self.calls = 0
        self._fail_on_call = fail_on_call
        self._slow_first_s = slow_first_s

    async def write(self, ops: Sequence[Op]) -> None:
        self.calls += 1
        if self.calls == 1 and self._slow_first_s:
            await asyncio.sleep(self._slow_first_s)
        if self.calls == self._fail_on_call:
            raise RuntimeError("the search server refused the request for good")
        for op in ops:
            if op.write.version > self.versions.get(op.write.id, 0):
                self.versions[op.write.id] = op.write.version
                op.outcome = Outcome.WRITTEN
            else:
                op.outcome = Outcome.STALE


class MemoryDeadLetters:
    """Keeps each letter as the dead-letter topic would (topic, original value, headers)."""

    def __init__(self, topic: str = CONFIG.kafka.dead_letter_topic) -> None:
        self.topic = topic
        self.letters: list[tuple[str, bytes | None, dict[str, bytes]]] = []

    async def deliver(self, delivery: Delivery, kind: str, reason: str, attempts: int) -> None:
        letter = dead_letter_for(delivery, kind, reason, attempts)
        self.letters.append((self.topic, delivery.value,
                             dict([*delivery.headers, *letter.headers()])))


class MemoryRegistries:
    def __init__(self) -> None:
        self.stored: dict[str, Any] = {}

    async def load(self, alias: str) -> Registry:
        raw = self.stored.get(alias)
        return Registry.from_json(raw) if raw is not None else Registry()

    async def update(self, alias: str, change: Callable[[Registry], T]) -> tuple[Registry, T]:
        registry = await self.load(alias)
        result = change(registry)
        self.stored[alias] = registry.as_json()
        return registry, result


class AcceptingSchemas:
    """Accepts every layout; remembers, per layout change, whether it was a first one."""

    def __init__(self) -> None:
        self.firsts: list[bool] = []

    async def changed(self, table: TableConfig, decoder: EnvelopeDecoder,
                      change: LayoutChanged) -> None:
        self.firsts.append(change.previous is None)
        decoder.accept(change.current)


def parts_of(source: MemorySource, sink: MemorySink, letters: MemoryDeadLetters,
             schemas: AcceptingSchemas | None = None) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def factory(config: Config, metrics: Metrics, tables: dict[str, Any],
                      on_revoked: RevokeHook) -> AsyncIterator[Parts]:
        yield Parts(source, sink, letters, MemoryRegistries(), schemas or AcceptingSchemas())

    return factory


async def until(predicate: Callable[[], bool], task: asyncio.Task[None]) -> None:
    async with asyncio.timeout(10):
        while not predicate() and not task.done():  # noqa: ASYNC110 - in-memory parts
            await asyncio.sleep(0.01)


@pytest.fixture
def lifecycle_twice(lifecycle: list[tuple[bytes | None, bytes | None]]
                    ) -> list[tuple[bytes | None, bytes | None]]:
    return lifecycle + lifecycle  # a replay of the same changes: the second time all stale


async def test_batches_are_written_then_committed_in_order_and_replays_are_stale(
        lifecycle_twice: list[tuple[bytes | None, bytes | None]]) -> None:
    source, sink, letters = MemorySource(lifecycle_twice), MemorySink(), MemoryDeadLetters()
    daemon = Daemon(CONFIG, parts=parts_of(source, sink, letters))
    task = asyncio.create_task(daemon.run())
    n = len(lifecycle_twice)
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == n, task)
    daemon.stop()
    await task
    assert [c[TP] for c in source.commits] == sorted(c[TP] for c in source.commits)
    assert source.commits[-1] == {TP: n} and not letters.letters
    def counted(name: str) -> float | None:
        return daemon.metrics.registry.get_sample_value(name, {"table": "indexer_test.t1"})

    # Batches of two: [c, u] writes u (c lost to it in the batch), [d, tombstone] the delete;
    # the replay writes nothing: every change of it is older than what the index holds.
    assert (counted("indexer_indexed_total"), counted("indexer_deleted_total")) == (1, 1)
    assert counted("indexer_stale_total") == 4 and counted("indexer_skipped_total") == 2
    events = {op: daemon.metrics.registry.get_sample_value(
        "indexer_events_total", {"table": "indexer_test.t1", "op": op})
        for op in ("c", "u", "d", "tombstone")}
    assert events == {"c": 2, "u": 2, "d": 2, "tombstone": 2}


async def test_the_first_layout_after_a_start_and_after_a_rebalance_is_checked(
        lifecycle: list[tuple[bytes | None, bytes | None]]) -> None:
    source, sink, letters = MemorySource(lifecycle), MemorySink(), MemoryDeadLetters()
    schemas = AcceptingSchemas()
    daemon = Daemon(CONFIG, parts=parts_of(source, sink, letters, schemas))
    task = asyncio.create_task(daemon.run())
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == len(lifecycle), task)
    daemon.stop()
    await task
    assert schemas.firsts == [True]  # the lifecycle keeps one layout: checked once, at start
    await daemon._on_revoked({TP})
    table = daemon._tables[TP.name]
    assert table.decoder.layout is None  # the next owner's first row is checked again


async def test_poison_is_dead_lettered_with_its_reason_and_committed() -> None:
    source, sink, letters = MemorySource(POISON[:2]), MemorySink(), MemoryDeadLetters()
    daemon = Daemon(CONFIG, parts=parts_of(source, sink, letters))
    task = asyncio.create_task(daemon.run())
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == 2, task)
    daemon.stop()
    await task
    assert [topic for topic, _, _ in letters.letters] == [CONFIG.kafka.dead_letter_topic] * 2
    assert letters.letters[0][1] == POISON[0][1]  # the original bytes
    assert letters.letters[0][2]["indexer.error.kind"] == b"undecodable"


async def test_a_batch_that_fails_for_good_stops_the_daemon_and_nothing_past_it_commits(
        lifecycle: list[tuple[bytes | None, bytes | None]]) -> None:
    # Batches of two: the second batch's write fails while the first is slow to settle.
    source = MemorySource(lifecycle + lifecycle)
    sink, letters = MemorySink(fail_on_call=2, slow_first_s=0.2), MemoryDeadLetters()
    daemon = Daemon(CONFIG, parts=parts_of(source, sink, letters))
    with pytest.raises(RuntimeError, match="refused the request for good"):
        await asyncio.wait_for(daemon.run(), 10)
    assert all(c[TP] <= 2 for c in source.commits)  # the first batch only, after its write


async def test_a_daemon_after_one_that_failed_runs_clean(
        lifecycle: list[tuple[bytes | None, bytes | None]]) -> None:
    """Compiled by mypyc, an `await` inside a `finally` raised the previous failure again
    (mypyc#1114): a second daemon in the process ended with the first one's error."""
    failing = Daemon(CONFIG, parts=parts_of(MemorySource(lifecycle + lifecycle),
                                            MemorySink(fail_on_call=2), MemoryDeadLetters()))
    with pytest.raises(RuntimeError, match="refused the request for good"):
        await asyncio.wait_for(failing.run(), 10)
    source = MemorySource(lifecycle)
    daemon = Daemon(CONFIG, parts=parts_of(source, MemorySink(), MemoryDeadLetters()))
    task = asyncio.create_task(daemon.run())
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == len(lifecycle), task)
    daemon.stop()
    await task  # returns: nothing stale is raised


def test_the_recorded_lifecycle_is_what_these_tests_expect() -> None:
    pairs = messages("t1_lifecycle.tsv")
    assert len(pairs) == 4 and pairs[-1][1] is None  # c, u, d and Debezium's tombstone


# --- joined documents: a fan-out holds its own partition only -------------------------------

PRODUCTS, CATEGORIES = "mysql.shop.products", "mysql.shop.categories"
JOINED = build_config({"tables": [{
    "name": "shop.products", "topic": PRODUCTS,
    "lookups": {"category": {"table": "categories", "topic": CATEGORIES,
                             "on": {"category_id": "id"}}}}],
    "canary": {"enabled": False}, "verify": {"enabled": False},
    "batch": {"linger_ms": 0, "max_linger_ms": 0, "max_events": 2}}, Path())


def change(topic: str, partition: int, offset: int, row: dict[str, Any]) -> Delivery:
    value = {"op": "u", "before": row, "after": row, "source": {
        "file": "mysql-bin.000001", "pos": 1000 + offset, "row": 0, "ts_ms": 1}}
    key = orjson.dumps({"id": row["id"]})
    body = orjson.dumps(value)
    return Delivery(Stream(topic, partition), offset, key, body, len(key) + len(body))


class SliceSource(MemorySource):
    """Hands out one slice of one stream's deliveries per fetch, in the order given."""

    def __init__(self, slices: list[list[Delivery]]) -> None:
        super().__init__([])
        self.slices = slices

    async def fetch(self, max_records: int, timeout_ms: int) -> Deliveries:
        if not self.slices:
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        first = self.slices.pop(0)
        return {first[0].stream: first}


class Partitions(SliceSource):
    """Changes of several streams, handed out one at a time in the order given."""

    def __init__(self, records: list[Delivery]) -> None:
        super().__init__([[record] for record in records])

    def assignment(self) -> set[Stream]:
        return {Stream(PRODUCTS, 0), Stream(CATEGORIES, 0)}

    def committed(self, topic: str) -> int:
        offsets = [c[s] for c in self.commits for s in c if s.name == topic]
        return max(offsets, default=0)


class SlowFanOut:
    """Rebuilds products at once; a category's change touches "many" and is finished later,
    once released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.rebuilt: list[int] = []
        self.finished: list[Request] = []

    def touch(self, alias: str, table: str, before: Any, after: Any) -> Touch:
        if table == "shop.categories":
            return Touch(starts={1: {(after["id"],)}})
        return Touch(roots=[{"id": after["id"]}])

    async def rebuild(self, requests: Sequence[Request]) -> dict[Any, list[Request]]:
        later: dict[Any, list[Request]] = {}
        for request in requests:
            if request.touch.starts:
                later.setdefault(request.holder, []).append(request)
            else:
                self.rebuilt.extend(k["id"] for k in request.touch.roots)
        return later

    async def finish(self, requests: Sequence[Request]) -> None:
        await self.release.wait()
        self.finished.extend(requests)

    async def reload(self, table: str) -> None:
        pass


async def test_a_fan_out_holds_back_its_own_partition_only() -> None:
    records = [change(CATEGORIES, 0, 0, {"id": 1, "name": "Tea"})]
    records += [change(PRODUCTS, 0, i, {"id": i, "category_id": 1}) for i in range(6)]
    source, letters = Partitions(records), MemoryDeadLetters()
    rebuilds = SlowFanOut()

    @contextlib.asynccontextmanager
    async def factory(config: Config, metrics: Metrics, tables: Mapping[str, Any],
                      on_revoked: RevokeHook) -> AsyncIterator[Parts]:
        yield Parts(source, MemorySink(), letters, MemoryRegistries(), AcceptingSchemas(),
                    rebuilds)

    daemon = Daemon(JOINED, parts=factory)
    task = asyncio.create_task(daemon.run())
    # Every product's change is rebuilt and committed while the category's fan-out waits.
    await until(lambda: source.committed(PRODUCTS) == 6, task)
    assert rebuilds.rebuilt == list(range(6)) and source.committed(CATEGORIES) == 0
    rebuilds.release.set()
    await until(lambda: source.committed(CATEGORIES) == 1, task)
    assert [r.holder for r in rebuilds.finished] == [Stream(CATEGORIES, 0)]
    daemon.stop()
    await task
    assert not letters.letters


class RecordingSink(MemorySink):
    """Also keeps each id's document (or tombstone) as the winning write carried it."""

    def __init__(self) -> None:
        super().__init__()
        self.documents: dict[str, tuple[int, bytes, bool]] = {}

    async def write(self, ops: Sequence[Op]) -> None:
        await super().write(ops)
        for op in ops:
            if op.outcome is Outcome.WRITTEN:
                self.documents[op.write.id] = (op.write.version, op.write.source,
                                               op.write.deleted)


def schemaless_stream() -> list[tuple[bytes | None, bytes | None]]:
    """Inserts, updates and deletes without schemas; a column added half-way (a new layout
    in the middle of a slice), poison, a tombstone, and the first half replayed (stale)."""
    pairs: list[tuple[bytes | None, bytes | None]] = []
    for i in range(300):
        key = orjson.dumps({"id": i % 40})
        row: dict[str, Any] = {"id": i % 40, "name": f"n\u00e9 {i}\n", "qty": i * 7 - 900}
        if i >= 150:
            row["added"] = i % 3 == 0
        op = "d" if i % 50 == 49 else "u" if i >= 40 else "c"
        source = {"file": "mysql-bin.000002", "pos": 1000 + i * 10, "row": 0, "ts_ms": i,
                  "snapshot": "false", "connector": "mariadb"}
        envelope = {"op": op, "before": row if op == "d" else None,
                    "after": None if op == "d" else row, "source": source}
        pairs.append((key, orjson.dumps(envelope)))
        if op == "d":
            pairs.append((key, None))
        if i % 97 == 0:
            pairs.append(POISON[i % len(POISON)])
    return pairs + pairs[:len(pairs) // 2]


class CountingPreparer(native_module.SlicePreparer):
    """Counts the messages the native side took."""

    taken = 0

    def prepare(self, plan: native_module.SlicePlan | None, keys: list[bytes | None],
                messages: list[bytes | None]) -> list[native_module.Prepared | None]:
        found = super().prepare(plan, keys, messages)
        self.taken += sum(result is not None for result in found)
        return found


async def drained(config: Config, stream: list[tuple[bytes | None, bytes | None]],
                  preparer: CountingPreparer | None) -> tuple[Any, ...]:
    """What a daemon made of ``stream``: documents, dead letters and the last commit."""
    source, sink, letters = MemorySource(stream), RecordingSink(), MemoryDeadLetters()
    daemon = Daemon(config, parts=parts_of(source, sink, letters))
    table = daemon._tables[TOPIC]
    assert (table.preparer is not None) == (preparer is not None)
    table.preparer = preparer
    task = asyncio.create_task(daemon.run())
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == len(stream), task)
    daemon.stop()
    await task
    dead = [(value, {k: v for k, v in headers.items() if k != "indexer.failed_at"})
            for _, value, headers in letters.letters]
    return sink.documents, dead, source.commits[-1]


async def test_the_native_path_writes_and_commits_what_the_python_path_does() -> None:
    config = build_config({"tables": [{"name": "indexer_test.t1", "topic": TOPIC}],
                           "batch": {"linger_ms": 0, "max_linger_ms": 0, "max_events": 64}},
                          Path())
    stream = schemaless_stream()
    module = load_native()
    counting = CountingPreparer(module) if module is not None else None
    python = await drained(replace(config, batch=replace(config.batch, native=False)), stream,
                           None)
    accelerated = await drained(config, stream, counting)
    assert accelerated == python
    assert len(python[0]) == 40 and len(python[1]) == 6  # (poison, and its replay)
    if counting is not None:  # (dev/test.sh requires the native build)
        assert counting.taken > len(stream) / 2


# --- a rows event's documents built by the source: one delivery, one write per row ----------

class FailingSink(RecordingSink):
    """Refuses one document for good, as a mapping conflict."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    async def write(self, ops: Sequence[Op]) -> None:
        for op in ops:
            if op.write.id == self.refused:
                op.outcome = Outcome.FAILED
                op.error_kind, op.error_reason = MAPPING_CONFLICT, "t1: no such field"
        await super().write([op for op in ops if op.outcome is None])


class KeptLetters(MemoryDeadLetters):
    """Keeps what each letter is about: its position, kind, and the row's id and version."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[tuple[int, str, dict[str, Any]]] = []

    async def deliver(self, delivery: Delivery, kind: str, reason: str, attempts: int) -> None:
        letter = letter_for("binlog", delivery, kind, reason, attempts)
        self.kept.append((delivery.position, kind, {"change": letter["change"],
                                                    "binlog": letter["binlog"]}))


def rows_events() -> list[list[Change]]:
    """Rows events of one to five inserts or updates each, ids repeating within and across
    batches (the older of two in one batch is stale)."""
    events = []
    for event in range(30):
        position = Position("mysql-bin.000003", 1000 + event * 100, 0, 5000 + event, None,
                            "false", "mariadb")
        op = "c" if event < 4 else "u"
        events.append([Change(op, {"id": (event * 3 + row) % 11}, None,
                              {"id": (event * 3 + row) % 11, "qty": event * 10 + row},
                              replace_struct(position, row=row))
                       for row in range(1 + event % 5)])
    return events


def as_deliveries(events: list[list[Change]], together: bool) -> list[list[Delivery]]:
    """Each change its own delivery (the per-row path), or each event's documents as the
    binlog source delivers them (built by the builder here: the native RowPlan's equal)."""
    builder = DocumentBuilder(CONFIG.tables[0])

    def at(change: Change) -> int:
        p = change.position
        return pack(file_number(p.file), p.pos, p.row) * ROW_STEP

    if not together:
        return [[Delivery(TP, at(c), None, None, 50, change=c) for c in changes]
                for changes in events]
    found = []
    for changes in events:
        documents = [(w.id, w.source) for w in map(builder.write_for_change, changes)]
        rows = BuiltRows(changes[0].op, changes[0].position, documents, "id")
        found.append([Delivery(TP, at(changes[-1]), None, None, 50 * len(changes), rows=rows)])
    return found


async def through_daemon(events: list[list[Delivery]]) -> tuple[Any, ...]:
    source = SliceSource(events)  # one rows event's deliveries per fetch, as a binlog source
    sink, letters = FailingSink(refused="7"), KeptLetters()
    config = replace(CONFIG, batch=replace(CONFIG.batch, max_events=8))
    daemon = Daemon(config, parts=parts_of(source, sink, letters))
    task = asyncio.create_task(daemon.run())
    end = events[-1][-1].position + 1
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == end, task)
    daemon.stop()
    await task
    samples = {(s.name, tuple(sorted(s.labels.items())), s.value)
               for metric in daemon.metrics.registry.collect() for s in metric.samples
               if s.name.startswith(("indexer_events", "indexer_indexed", "indexer_stale",
                                     "indexer_dead_lettered", "indexer_native"))
               and s.name.endswith("_total")}
    return sink.documents, letters.kept, source.commits[-1], samples


async def test_a_rows_event_s_documents_are_written_as_each_row_s_change_would_be() -> None:
    events = rows_events()
    rows = await through_daemon(as_deliveries(events, together=True))
    each = await through_daemon(as_deliveries(events, together=False))
    documents, letters, commit, samples = rows
    assert (documents, letters, commit) == each[:3]
    # The same counts, and the rows' changes counted as taken natively.
    changes = sum(len(c) for c in events)
    assert samples - each[3] == {("indexer_native_events_total",
                                  (("table", "indexer_test.t1"),), changes)}
    assert len(documents) == 10 and "7" not in documents  # ids 0-10, 7 refused
    assert {name for name, _, _ in samples} >= {"indexer_stale_total", "indexer_indexed_total"}
    # Each letter is one row's, at its own position, though its event was one delivery.
    refused = [c for changes in events for c in changes if c.key["id"] == 7]
    assert [(kind, letter["change"]["after"], letter["binlog"]["row"])
            for _, kind, letter in letters] == [
        (MAPPING_CONFLICT, c.after, c.position.row) for c in refused]


async def test_a_rows_event_that_cannot_be_versioned_is_dead_lettered_row_by_row() -> None:
    changes = rows_events()[3]  # four rows
    (delivery,), = as_deliveries([changes], together=True)
    assert delivery.rows is not None
    # A binlog file number 0 cannot be packed into a version: every row is refused alone.
    rows = delivery.rows
    rows.position = replace_struct(rows.position, file="mysql-bin.000000")
    events = [[delivery]]
    source, sink, letters = SliceSource(events), RecordingSink(), KeptLetters()
    daemon = Daemon(CONFIG, parts=parts_of(source, sink, letters))
    task = asyncio.create_task(daemon.run())
    end = events[-1][-1].position + 1
    await until(lambda: bool(source.commits) and source.commits[-1][TP] == end, task)
    daemon.stop()
    await task
    assert not sink.documents
    assert [(position, kind, letter["binlog"]["row"], letter["change"]["after"])
            for position, kind, letter in letters.kept] == [
        (end - 1 - ROW_STEP * (len(changes) - 1 - i), "bad-version", i, c.after)
        for i, c in enumerate(changes)]
