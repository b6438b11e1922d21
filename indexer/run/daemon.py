"""The run loop: a source's changes -> documents -> bulk writes -> positions, committed after
success, over the ports of :mod:`indexer.run.ports`.

Positions advance only over changes whose every write was confirmed (written or found stale)
or which were dead-lettered. Batches are written concurrently (``in_flight``) but committed
strictly in order, so a commit never covers a batch still being written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from dataclasses import dataclass, field, replace

from indexer.build import current_build, load_native
from indexer.core import native, trees
from indexer.core.canary import Beat
from indexer.core.checksums import Hasher, content_hash
from indexer.core.documents import (
    DocumentBuilder,
    Write,
    leaving,
    pack_binlog_version,
    placed_at,
)
from indexer.core.envelope import Position
from indexer.core.events import BuiltRows, Change, EnvelopeDecoder, LayoutChanged
from indexer.core.ledger import OffsetLedger
from indexer.core.linger import Linger
from indexer.core.sources import EPOCH_ZERO
from indexer.core.streams import Deliveries, Delivery, Stream
from indexer.core.writes import MAPPING_CONFLICT, Op, Outcome
from indexer.errors import DecodeError
from indexer.metrics import Metrics
from indexer.run.follower import Follower, NotFollowed, SwitchFound
from indexer.run.ports import Parts, PartsFactory, Request
from indexer.run.wiring import open_parts
from indexer.search.retry import retrying, transient
from indexer.settings import Config, TableConfig

log = logging.getLogger(__name__)

IDLE_POLL_MS = 500  # how long an empty fetch waits; bounds how late stop() is noticed
# Changes decoded at a time (~1.5 ms of work) before yielding to the event loop. asyncio reads
# at most 256 KiB from a socket per loop turn: longer slices stretch each 4 MiB Kafka fetch and
# each bulk request over dozens of slices, and the pipeline runs dry (500 events per slice left
# both cores idle a fifth of the time).
DECODE_SLICE = 100
# Fan-outs finishing in the background at once; more wait before the next batch is read.
MAX_LATER = 8


@dataclass(slots=True)
class Message:
    """One delivered change and what became of it."""

    delivery: Delivery
    table: TableConfig
    op: Op | None = None
    op_kind: str = ""  # c/u/r/d, or "tombstone"
    ts_ms: int = 0
    error: tuple[str, str] | None = None  # (kind, reason) when it cannot be decoded
    requests: list[Request] | None = None  # joined documents it touches
    # instead of ``op``: a rows delivery's writes, one per row in row order (ts_ms: the event's)
    ops: list[Op] | None = None

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per change.
    def __init__(self, delivery: Delivery, table: TableConfig, op: Op | None = None,
                 op_kind: str = "", ts_ms: int = 0, error: tuple[str, str] | None = None,
                 requests: list[Request] | None = None, ops: list[Op] | None = None) -> None:
        self.delivery, self.table, self.op, self.op_kind = delivery, table, op, op_kind
        self.ts_ms, self.error, self.requests, self.ops = ts_ms, error, requests, ops


@dataclass
class _Place:
    """A tree (a table with joins) whose documents a topic's changes touch."""

    alias: str
    table: str  # the changed table, "database.table"
    follow: TableConfig  # the tree's table, its epochs followed on this stream


@dataclass
class _Table:
    """A table's parts (:class:`~indexer.run.wiring.TableParts`), a native class of the
    compiled loop: every event reads its fields."""

    config: TableConfig
    decoder: EnvelopeDecoder
    builder: DocumentBuilder | None  # None: no document of its own (a tree's table)
    places: list[_Place]
    preparer: native.SlicePreparer | None = None  # the native path, for a table it takes

    @property
    def rows_are_documents(self) -> bool:
        builder = self.builder
        return (self.preparer is not None and builder is not None and builder.identity
                and builder.binlog_versions)


@dataclass
class Batch:
    messages: list[Message] = field(default_factory=list)
    positions: dict[Stream, int] = field(default_factory=dict)  # stream -> the next to read
    size: int = 0
    changes: int = 0  # the messages' changes (a rows delivery's rows count one each)


class Daemon:
    """The run loop over its parts: ``run()`` until ``stop()`` (or SIGTERM/SIGINT). The parts
    come from ``parts`` (the real servers by default; a test gives others)."""

    def __init__(self, config: Config, metrics: Metrics | None = None,
                 parts: PartsFactory | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self._open_parts = parts or open_parts
        self._canary = config.canary_table
        module = load_native() if config.batch.native else None
        self._tables = consumed_tables(config, native.content_hasher(module))
        if module is not None:
            for table in self._tables.values():
                if table.builder is not None and not table.places:
                    table.preparer = native.SlicePreparer(module)
        batch = config.batch
        self._linger = Linger(batch.linger_ms, batch.max_linger_ms,
                              min(batch.target_events, batch.max_events))
        self._stopping = asyncio.Event()
        self._ledger: OffsetLedger[Stream, asyncio.Task[None]] = OffsetLedger()
        self._parts: Parts | None = None  # while run() runs
        self._follower: Follower | None = None  # binlog versions' epochs, while run() runs
        self._running: dict[asyncio.Task[None], None] = {}  # batches being written, in order
        # Rebuilds finished in the background (fan-outs), each holding its batch's partitions.
        self._later: dict[asyncio.Task[None], asyncio.Task[None]] = {}  # job -> its batch
        self._holding: dict[asyncio.Task[None], set[Stream]] = {}  # batch -> held
        self._saving: asyncio.Task[None] | None = None
        self._committing: asyncio.Task[None] | None = None
        self.started = asyncio.Event()
        self._starting: asyncio.Task[None] | None = None  # run(), until it has started

    def stop(self) -> None:
        """Asks the loop to finish: in-flight batches get ``shutdown_grace_s`` to complete.
        Before it runs (standing by for the binlog, a first load), the start is abandoned."""
        self._stopping.set()
        if not self.started.is_set() and self._starting is not None:
            self._starting.cancel()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    async def run(self) -> None:
        self._starting = asyncio.current_task()
        try:
            await self._run()
        except asyncio.CancelledError:
            if self.started.is_set() or not self._stopping.is_set():
                raise
            log.info("indexer stopped before it started")

    async def _run(self) -> None:
        cfg = self.config
        async with self._open_parts(cfg, self.metrics, self._tables, self._on_revoked) as parts:
            self._parts = parts
            self._follower = Follower(parts.registries, self.metrics)
            for table in (*cfg.tables, *((self._canary,) if self._canary else ())):
                if table.version.kind == "binlog":
                    await self._follower.load(table)
            log.info("indexer running: %d tables, %s %s; %s", len(cfg.tables),
                     "binlog source" if cfg.source.kind == "binlog" else "group",
                     cfg.deployment, current_build().describe)
            self.started.set()
            # Not `try/finally`: compiled by mypyc, an `await` inside `finally` mishandles the
            # exception in flight and may raise a stale one instead (mypyc#1114; seen here as
            # a daemon re-raising the previous daemon's failure in the same process).
            failure: BaseException | None = None
            try:
                await self._loop()
            except BaseException as exc:  # Ctrl-C and cancellation shut down cleanly too
                failure = exc
            await self._shutdown()
            self._parts = self._follower = None
            if failure is not None:
                raise failure
        log.info("indexer stopped")

    @property
    def _p(self) -> Parts:
        assert self._parts is not None, "the parts exist while run() runs"
        return self._parts

    @property
    def _f(self) -> Follower:
        assert self._follower is not None, "the follower exists while run() runs"
        return self._follower

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            await self._commit_done()
            oldest = next(iter(self._running), None)
            if oldest is not None and len(self._running) >= self.config.batch.in_flight:
                await self._wait_for(oldest)
                continue
            if len(self._later) >= MAX_LATER:  # fan-outs pile up: let one end first
                await self._wait_for(next(iter(self._later)))
                continue
            batch = await self._next_batch()
            if batch.messages:
                task = asyncio.create_task(self._process(batch))
                self._running[task] = None
                self._ledger.add(task, batch.positions)
                task.add_done_callback(self._finished)

    async def _wait_for(self, task: asyncio.Task[None]) -> None:
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()

    async def _next_batch(self) -> Batch:
        """Fills a batch up to max events/bytes, waiting for more once it has one as long as
        :class:`Linger` says for the rate seen."""
        source = self._p.source
        limits = self.config.batch
        batch = Batch()
        found = await source.fetch(min(limits.max_events, DECODE_SLICE), IDLE_POLL_MS)
        deadline = time.monotonic() + self._linger.wait_ms() / 1000
        while found:
            await self._add(batch, found)
            room = limits.max_events - batch.changes
            if room <= 0 or batch.size >= limits.max_bytes or self._stopping.is_set():
                break
            # Changes already fetched are taken at once; the linger bounds only the wait.
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            found = await source.fetch(min(room, DECODE_SLICE), max(0, remaining_ms))
        # A rebalance during the linger may have taken streams away: leave their changes to
        # the new owner, who reads them from the last commit.
        assigned = source.assignment()
        if any(stream not in assigned for stream in batch.positions):
            batch.messages = [m for m in batch.messages if m.delivery.stream in assigned]
            batch.positions = {s: p for s, p in batch.positions.items() if s in assigned}
            batch.changes = sum(m.delivery.changes for m in batch.messages)
        if batch.messages:
            self._linger.closed(batch.changes, time.monotonic())
        return batch

    async def _add(self, batch: Batch, found: Deliveries) -> None:
        for stream, deliveries in found.items():
            prepared = self._prepared_natively(stream.name, deliveries)
            natively = 0
            for i, delivery in enumerate(deliveries):
                done = prepared[i] if prepared else None
                changes = delivery.changes
                try:
                    message = self._prepare(delivery, done)
                    natively += done is not None
                except (SwitchFound, NotFollowed, LayoutChanged) as needed:
                    message = await self._prepare_after_io(delivery, needed)
                    prepared = []  # the layout may have changed: the rest is Python's
                if delivery.rows is not None:  # (built natively by its source)
                    natively += changes
                batch.messages.append(message)
                batch.size += delivery.size
                batch.changes += changes
            if deliveries:
                batch.positions[stream] = deliveries[-1].position + 1
            if natively:
                table = self._tables[stream.name].config.name
                self.metrics.native_events.labels(table).inc(natively)
        await asyncio.sleep(0)  # let the bulks in flight send and settle between slices

    async def _prepare_after_io(self, delivery: Delivery,
                                needed: SwitchFound | NotFollowed | LayoutChanged) -> Message:
        """Prepares a change that needs I/O first, all rare: a new row layout (the table is
        read again), the first change of a stream (its cursor is loaded) or a switch (its
        epoch is stored)."""
        for _ in range(4):  # a stream's first change may also be a switch, or a new layout
            if isinstance(needed, LayoutChanged):
                table = self._tables[delivery.stream.name]
                await self._p.schemas.changed(table.config, table.decoder, needed)
                rebuilds = self._p.rebuilds
                if table.places and needed.previous is not None and rebuilds is not None:
                    await rebuilds.reload(table.places[0].table)  # the trees read it anew
            else:
                await self._follow(needed)
            try:
                return self._prepare(delivery)
            except (SwitchFound, NotFollowed, LayoutChanged) as again:
                needed = again
        raise RuntimeError(f"{delivery.describe()}: could not be prepared ({needed!r})")

    async def _follow(self, needed: SwitchFound | NotFollowed) -> None:
        follower = self._f
        # Stored in the search server: retried like a bulk while it is away.
        async for attempt in retrying(  # the search server's outage is its client's to tell
                self.config.batch.max_backoff_s,
                before_sleep=lambda s: log.debug("cannot store a source cursor or epoch yet "
                                                 "(%s); retrying", s.outcome and
                                                 s.outcome.exception())):
            with attempt:
                if isinstance(needed, NotFollowed):
                    await follower.follow(needed)
                else:
                    await follower.enter(needed)

    def _prepared_natively(self, name: str, deliveries: list[Delivery],
                           ) -> list[native.Prepared | None]:
        """The native path's results for one stream's slice ([]: all Python's)."""
        table = self._tables[name]
        preparer = table.preparer
        if preparer is None or table.builder is None:
            return []
        first = deliveries[0] if deliveries else None
        if first is None or (first.key is None and first.value is None):
            return []  # (a source that reads rows itself)
        return preparer.prepare(native.slice_plan(table.decoder, table.builder),
                                [d.key for d in deliveries], [d.value for d in deliveries])

    def _prepare(self, delivery: Delivery,
                 prepared: native.Prepared | None = None) -> Message:
        table = self._tables[delivery.stream.name]
        message = Message(delivery, table.config)
        try:
            if prepared is not None:  # decoded and built natively, as below would
                return self._built(message, table, prepared.op, prepared.position(),
                                   prepared.id, prepared.document)
            rows = delivery.rows
            if rows is not None:  # built by its source (the binlog's rows), as below would
                if delivery.layout is not None:
                    table.decoder.check(delivery.layout, "the binlog's table map")
                return self._built_rows(message, table, rows)
            change = delivery.change
            if change is not None:  # decoded by its source (a binlog's rows)
                if delivery.layout is not None:
                    table.decoder.check(delivery.layout, "the binlog's table map")
            elif delivery.error is not None:
                message.error = delivery.error
                return message
            else:
                change = table.decoder.decode(delivery.key, delivery.value)
                if change is None:
                    message.op_kind = "tombstone"
                    return message
            message.op_kind = change.op
            message.ts_ms = change.position.ts_ms
            builder = table.builder
            if builder is not None:
                epoch = EPOCH_ZERO
                if builder.binlog_versions:
                    epoch = self._f.epoch(table.config, delivery, change.position)
                if not builder.stays_out(change):
                    message.op = Op(table.config.alias, builder.write_for_change(change, epoch))
            if table.places:
                message.requests = self._requests(table, delivery, change)
        except (SwitchFound, NotFollowed, LayoutChanged):
            raise
        except DecodeError as exc:
            message.error = (exc.kind, exc.reason)
        except Exception as exc:  # a bug must not lose the message either
            log.exception("unexpected error decoding %s", delivery.describe())
            message.error = ("internal-error", f"{type(exc).__name__}: {exc}")
        return message

    def _built(self, message: Message, table: _Table, op: str, position: Position, doc_id: str,
               document: bytes) -> Message:
        """A message whose document was built natively: its write at its version."""
        message.op_kind = op
        message.ts_ms = position.ts_ms
        epoch = self._f.epoch(table.config, message.delivery, position)
        version = pack_binlog_version(position.file, position.pos, position.row, epoch)
        message.op = Op(table.config.alias, Write(doc_id, version, document, deleted=False))
        return message

    def _built_rows(self, message: Message, table: _Table, rows: BuiltRows) -> Message:
        """A message of a rows event's documents built by the source: a write per row at its
        version, the rows' versions consecutive as their positions are."""
        documents = rows.documents
        last = len(documents) - 1
        position = rows.at(last) if last else rows.position
        message.op_kind = rows.op
        message.ts_ms = position.ts_ms
        epoch = self._f.epoch(table.config, message.delivery, position)
        # packed with the row in its lowest bits: the first row's is the last's minus its row
        first = pack_binlog_version(position.file, position.pos, last, epoch) - last
        alias = table.config.alias
        message.ops = [Op(alias, Write(doc_id, first + row, document, deleted=False))
                       for row, (doc_id, document) in enumerate(documents)]
        return message

    def _requests(self, table: _Table, delivery: Delivery, change: Change) -> list[Request]:
        """What the change touches in each tree its table is part of, versioned in the
        tree's epoch (one record of epochs per tree, across all its tables' partitions)."""
        found = []
        rebuilds = self._p.rebuilds
        assert rebuilds is not None, "tables with joins have their rebuilds"
        position = change.position
        for place in table.places:
            epoch = self._f.epoch(place.follow, delivery, position)
            version = pack_binlog_version(position.file, position.pos, position.row, epoch)
            touch = rebuilds.touch(place.alias, place.table, change.before, change.after)
            if touch.roots or touch.starts or touch.refs:
                found.append(Request(place.alias, touch, version, position.ts_ms, position.gtid,
                                     delivery.stream))
        return found

    async def _process(self, batch: Batch) -> None:
        sink = self._p.sink
        # Only the highest version per document can win; the rest are stale already.
        latest: dict[tuple[str, str], Op] = {}
        for message in batch.messages:
            op = message.op
            if op is not None:
                _keep_newest(latest, op, message.ts_ms)
            elif message.ops is not None:
                for op in message.ops:
                    _keep_newest(latest, op, message.ts_ms)
        if latest:
            await sink.write(list(latest.values()))
        requests = [r for m in batch.messages if m.requests for r in m.requests]
        later: dict[Stream, list[Request]] = {}
        if requests:
            rebuilds = self._p.rebuilds
            assert rebuilds is not None
            later = await rebuilds.rebuild(requests)
        if later:  # each finished in the background, its partition held meanwhile
            batch_task = asyncio.current_task()
            assert batch_task is not None
            self._holding[batch_task] = set(later)
            for stream, waiting in later.items():
                job = asyncio.create_task(self._finish_later(batch, waiting))
                self._later[job] = batch_task
                job.add_done_callback(functools.partial(self._finished_later, stream))
            # Messages whose rebuilds are held are dead-lettered (if refused) when those end.
            held = {id(r) for waiting in later.values() for r in waiting}
            batch = Batch([m for m in batch.messages if not _holds(m, held)])
        await self._dead_letter(batch)
        self._count(batch)

    async def _finish_later(self, batch: Batch, requests: list[Request]) -> None:
        """A partition's fan-outs (and removed lookup rows) of a batch, rebuilt in the
        background; then the messages that touched them are dead-lettered if refused."""
        rebuilds = self._p.rebuilds
        assert rebuilds is not None
        await rebuilds.finish(requests)
        ids = {id(r) for r in requests}
        held = Batch([m for m in batch.messages if _holds(m, ids)])
        await self._dead_letter(held)
        self._count(held)

    def _finished_later(self, stream: Stream, job: asyncio.Task[None]) -> None:
        batch_task = self._later.pop(job)
        error = asyncio.CancelledError() if job.cancelled() else job.exception()
        held = self._holding.get(batch_task, set())
        held.discard(stream)
        if not held:
            self._holding.pop(batch_task, None)
        if error is not None:
            self._ledger.finish(batch_task, error)
        elif batch_task.done():  # else the batch's own end settles it, minus what is held
            self._ledger.finish(batch_task, partitions={stream})
        self._advance()

    async def _dead_letter(self, batch: Batch) -> None:
        for message in batch.messages:
            if message.ops is not None:  # a rows delivery: each row failed is its own letter
                for row, written in enumerate(message.ops):
                    if written.outcome is Outcome.FAILED:
                        await self._send_letter(message, message.delivery.row(row),
                                                (written.error_kind, written.error_reason),
                                                written.attempts)
                continue
            error = message.error
            attempts = 1
            op = message.op
            if op is not None and op.outcome is Outcome.FAILED:
                error = (op.error_kind, op.error_reason)
                attempts = op.attempts
            elif error is None and message.requests:
                error = next((r.failure for r in message.requests if r.failure), None)
            if error is None:
                continue
            delivery = message.delivery
            if delivery.rows is not None:  # a rows delivery that made no writes: each row's
                for row in range(delivery.changes):
                    await self._send_letter(message, delivery.row(row), error, attempts)
            else:
                await self._send_letter(message, delivery, error, attempts)

    async def _send_letter(self, message: Message, delivery: Delivery, error: tuple[str, str],
                           attempts: int) -> None:
        if error[0] == MAPPING_CONFLICT and (message.op is not None or message.ops is not None):
            error = (error[0], f"{error[1]}; {mapping_hint(message.table)}")
        log.error("dead-lettering %s: %s: %s", delivery.describe(), error[0], error[1])
        await self._p.dead_letters.deliver(delivery, error[0], error[1], attempts)
        self.metrics.dead_lettered.labels(message.table.name, error[0]).inc()

    def _count(self, batch: Batch) -> None:
        """Metrics for a written batch, counted locally first: labels() is not cheap."""
        counts: dict[tuple[str, str, str], int] = {}
        # Runs of alike messages (most of a batch) are counted before a key is made for them.
        run_name, run_kind, run_outcome, run = "", "", "", 0
        for message in batch.messages:
            name, kind, ops = message.table.name, message.op_kind or "invalid", message.ops
            for op in ops if ops is not None else (message.op,):  # a rows delivery's each
                outcome = self._outcome(message, op)
                if name == run_name and kind == run_kind and outcome == run_outcome:
                    run += 1
                    continue
                if run:
                    key = (run_name, run_kind, run_outcome)
                    counts[key] = counts.get(key, 0) + run
                run_name, run_kind, run_outcome, run = name, kind, outcome, 1
        if run:
            key = (run_name, run_kind, run_outcome)
            counts[key] = counts.get(key, 0) + run
        m = self.metrics
        results = {"skipped": m.skipped, "deleted": m.deleted, "indexed": m.indexed,
                   "stale": m.stale}
        for (table, op_kind, outcome), n in counts.items():
            m.events.labels(table, op_kind).inc(n)
            if outcome:
                results[outcome].labels(table).inc(n)
        # Per stream, changes come in commit order: the first is the oldest.
        oldest: dict[str, int] = {}
        newest: dict[str, int] = {}
        for first, last in _ends_per_stream(batch.messages):
            table = first.table.name
            if first.ts_ms:
                oldest[table] = min(oldest.get(table, first.ts_ms), first.ts_ms)
            if last.ts_ms:
                newest[table] = max(newest.get(table, 0), last.ts_ms)
        now_ms = time.time() * 1000
        for table, ts in oldest.items():
            m.event_age.labels(table).observe(max(0.0, (now_ms - ts) / 1000))
        for table, ts in newest.items():
            m.written_up_to(table, ts)

    def _outcome(self, message: Message, op: Op | None) -> str:
        """The metric a change's write counts under ("": dead letters are counted where they
        are sent); a canary's beat is timed as its write is counted."""
        if op is None:
            return "skipped" if message.op_kind == "tombstone" else ""
        if op.outcome is Outcome.WRITTEN:
            if op.write.deleted:
                return "deleted"
            if message.table is self._canary:
                beat = Beat.from_document(op.write.source)
                if beat is not None:
                    self.metrics.canary_indexed(beat.beat_ms)
            return "indexed"
        return "stale" if op.outcome is Outcome.STALE else ""

    def _finished(self, task: asyncio.Task[None]) -> None:
        """A batch's task ended: the ledger hands the batches done at its head to the commit,
        in order; a fatal error (transient ones are retried inside) lets nothing at or after
        its batch be committed, and the loop raises it, which stops the daemon."""
        self._running.pop(task, None)
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        # The rest of the batch is written; partitions held by its fan-outs wait for them.
        self._ledger.finish(task, error, keep=self._holding.get(task, ()))
        self._advance()

    def _advance(self) -> None:
        """Sends what the ledger has ready, one commit request at a time in the background:
        positions committed without waiting for the loop (which may be waiting for new
        messages); those completed meanwhile go into the next request, sent when it ends."""
        if self._committing is None or self._committing.done():
            positions = self._ledger.take()
            if positions:
                self._committing = asyncio.create_task(self._commit(positions))

    async def _commit_done(self, *, wait: bool = False) -> None:
        """Commits what has completed; ``wait`` sends everything completed and waits for it
        (shutdown, rebalance). Raises the failure of a batch, if any."""
        self._advance()
        while wait and self._committing is not None and not self._committing.done():
            await self._committing
            self._advance()
        if self._ledger.failure is not None:
            raise self._ledger.failure

    async def _commit(self, positions: dict[Stream, int]) -> None:
        source = self._p.source
        try:
            await source.commit(positions)
        except Exception as exc:
            # Uncommitted work is read again after a restart or rebalance: duplicates, no loss.
            # Kafka away is its outage's to tell, once.
            log.log(logging.DEBUG if getattr(exc, "retriable", False) else logging.WARNING,
                    "offset commit failed (%s); the messages will be read again", exc)
            return
        finally:
            self._committing = None
            self._advance()  # what completed during this request
        self.metrics.committed.inc()
        for stream, position in positions.items():
            lag = source.lag(stream, position)
            if lag is not None:
                self.metrics.lag.labels(stream.name, str(stream.part)).set(lag)
        if self._saving is None or self._saving.done():  # beside the commits, never before
            self._saving = asyncio.create_task(self._save_cursors())

    async def _save_cursors(self, *, force: bool = False) -> None:
        """Stores where each followed stream's source stands (every few seconds)."""
        if self._follower is None:
            return
        try:
            await self._follower.save(force=force)
        except Exception as exc:  # the next save catches up; a lost one costs nothing
            log.log(logging.DEBUG if transient(exc) else logging.WARNING,
                    "could not save the source cursors (%s: %s)", type(exc).__name__, exc)

    async def _drain(self, grace_s: float) -> None:
        """Waits for in-flight batches (abandoning them after ``grace_s``) and commits the
        completed prefix."""
        tasks = [*self._ledger.in_flight(), *self._later]  # batches and their fan-outs
        if tasks and self._ledger.failure is None:
            await asyncio.wait(tasks, timeout=grace_s)
        with contextlib.suppress(Exception):  # a failure is kept in the ledger
            await self._commit_done(wait=True)
        if len(self._ledger) or self._later:
            log.warning("abandoning %d unfinished batches; they will be read again",
                        len(self._ledger))
            abandoned = [*self._ledger.abandon(), *self._later]  # a cancelled one is no failure
            for task in abandoned:
                task.cancel()
            for task in abandoned:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _on_revoked(self, revoked: set[Stream]) -> None:
        await self._drain(self.config.batch.shutdown_grace_s)
        await self._save_cursors(force=True)  # the next owner follows on from here
        if self._follower is not None:
            for stream in revoked:
                self._follower.forget(stream)
        for name in {stream.name for stream in revoked}:
            if name in self._tables:  # its next row's layout is checked as after a start
                self._tables[name].decoder.forget()

    async def _shutdown(self) -> None:
        await self._drain(self.config.batch.shutdown_grace_s)
        if self._saving is not None:
            await self._saving
        await self._save_cursors(force=True)
        if self._ledger.failure is not None:
            raise self._ledger.failure


def mapping_hint(table: TableConfig) -> str:
    return (f"the mapping refuses the document: `indexer mappings validate` names the fields, "
            f"`indexer mappings generate {table.table} --write` makes one that fits the table, "
            f"`indexer reindex {table.table}` applies it, then `indexer dlq replay --table "
            f"{table.table}`")


def _ends_per_stream(messages: list[Message]) -> list[tuple[Message, Message]]:
    """(first, last) message of each stream in a batch."""
    ends: dict[Stream, list[Message]] = {}
    for message in messages:
        stream = message.delivery.stream
        pair = ends.get(stream)
        if pair is None:
            ends[stream] = [message, message]
        else:
            pair[1] = message
    return [(first, last) for first, last in ends.values()]


def _keep_newest(latest: dict[tuple[str, str], Op], op: Op, ts_ms: int) -> None:
    """Keeps ``op`` in ``latest`` if it is its document's newest write so far; the other one
    of the two is stale."""
    key = (op.alias, op.write.id)
    current = latest.get(key)
    # The write kept also leaves the routings the one it supersedes wrote or left (a routed
    # row moved twice in one batch): only that one knew them.
    if current is None or op.write.version > current.write.version:
        if current is not None:
            current.outcome = Outcome.STALE
            op.write = leaving(op.write, placed_at(current.write), ts_ms)
        latest[key] = op
    else:
        op.outcome = Outcome.STALE
        current.write = leaving(current.write, placed_at(op.write), ts_ms)


def _holds(message: Message, requests: set[int]) -> bool:
    return bool(message.requests) and any(id(r) in requests for r in message.requests or ())


def consumed_tables(config: Config, hasher: Hasher = content_hash) -> dict[str, _Table]:
    """Every stream name (topic) the daemon reads: each table's (its own documents, or a
    tree's root), the canary's, and those of every table joined into a document, each with
    the trees its changes touch."""
    tables: dict[str, _Table] = {}
    canary = (config.canary_table,) if config.canary_table else ()
    for t in (*config.tables, *canary):
        builder = None if t.joins else DocumentBuilder(t, config.mysql.server, hasher)
        tables[t.topic] = _Table(t, EnvelopeDecoder(config.connector, t.column_types,
                                                    watch_layouts=True), builder, [])
    for root in config.tables:
        if not root.joins:
            continue
        for topic, table in trees.tree_topics(root).items():
            if topic not in tables:
                database, name = table.split(".")
                # A table read only for documents of others: no index of its own, and its new
                # columns are not mapped at the top of a document (they are nested).
                config_of = TableConfig(database, name, topic, root.alias, "", root.version,
                                        new_columns="keep")
                tables[topic] = _Table(config_of, EnvelopeDecoder(
                    config.connector, {}, watch_layouts=True), None, [])
            tables[topic].places.append(_Place(root.alias, table, replace(root, topic=topic)))
    return tables

