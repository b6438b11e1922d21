"""Continuous verification inside `indexer run`: proof of sync that runs by itself.

For each table, the daemon that consumes its topic's first partition (one per group; it moves
with the partitions):

* a rolling pass of the chunk checksums `indexer reconcile` uses, a slice of chunks at a time
  spread over ``verify.period_s``, so every row is compared once per period; each slice's
  queries keep MySQL and the search server busy at most ``max_load_share`` of the time;
* where the table has a column saying when a row last changed (``changed_column``, or one
  set ON UPDATE CURRENT_TIMESTAMP, with an index), a quick pass over the rows changed since
  the last one, every ``recent_every_s``: what upstream lost shows within minutes.

A difference is only believed after a second look, taken once the pipeline has delivered
everything committed before the first (a canary beat written after it has been indexed, and
the group has committed its partitions up to their ends as of then), and only for rows
MySQL still holds unchanged. Then it is counted, logged with its ids, recorded for `check`,
and, with ``verify.repair``, rewritten as `reconcile --repair` does (snapshot versions, so
a newer change from the stream still wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from indexer.core.sources import binlog_order, gtid_set_reached
from indexer.errors import ConnectUnavailable
from indexer.jobs import chunk_check
from indexer.jobs.chunk_check import Differences, Plan
from indexer.jobs.ownership import claim
from indexer.metrics import Metrics
from indexer.outages import Outages
from indexer.search.client import SearchClient, quote
from indexer.search.retry import transient
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.binlog.replication import binlog_end_of
from indexer.source.kafka.clients import transient as kafka_transient
from indexer.source.kafka.connect import ConnectClient
from indexer.source.kafka.topics import TopicReader
from indexer.source.mysql import checksum_sql, connection, schema
from indexer.source.mysql import retry as mysql_retry
from indexer.source.mysql.connection import unreachable

log = logging.getLogger(__name__)

# Chunks per slice of the rolling pass: ~32,000 rows at 2,000 a chunk, a few tens of ms of
# each server's time, so that even large tables are sliced fine enough to pace.
SLICE_CHUNKS = 16
# A pass cut short is taken up where it stopped for this many periods: under a storm of
# restarts every pass still goes forward to the table's end, instead of starting over at its
# first key each time (bench.soak: the upper half of a table went unverified for 10 minutes).
RESUME_PERIODS = 10
# A daemon that does not look after a table asks again this often (partitions move).
OWNERSHIP_POLL_S = 10.0
# After an error (a server away), the table's verification resumes after this long.
RETRY_S = 30.0
# How long a second look waits for the pipeline to deliver what preceded the first.
BARRIER_TIMEOUT_S = 300.0
BARRIER_POLL_S = 1.0
# Rows one quick pass compares; more changed rows are taken in later passes, oldest first.
RECENT_ROWS = 20_000
# Each quick pass starts this far before the newest change the last one read: a transaction
# that commits later than that after setting its time is left to the rolling pass.
RECENT_OVERLAP_S = 10.0
IDS_LOGGED = 20  # ids named in a drift line; the record for `check` keeps more
IDS_RECORDED = 200


def slices(plan: Plan, per_slice: int = SLICE_CHUNKS) -> list[tuple[int | None, int | None]]:
    """Chunk ranges (inclusive) that cover the table, the first and last open-ended so rows
    beyond the bounds read at the start of the pass fall into one too. Buckets of crc32(id)
    are one slice: their chunk sums take one scan of the table whatever their number."""
    if not plan.width or plan.low is None or plan.high is None:
        return [(None, None)]
    first, last = plan.low // plan.width, plan.high // plan.width
    starts = list(range(first, last + 1, per_slice))
    return [(None if i == 0 else start,
             None if i == len(starts) - 1 else start + per_slice - 1)
            for i, start in enumerate(starts)]


def pause_s(busy_s: float, interval_s: float, share: float) -> float:
    """How long to wait after a step that kept the servers busy ``busy_s``: to the next step
    of the period's even spread, and at least long enough for the share bound."""
    return max(interval_s - busy_s, busy_s * (1 - share) / share, 0.0)


def believed(first: Differences, second: Differences) -> Differences:
    """Differences seen in both looks, of the same kind, for rows MySQL left unchanged
    between them (a row that changed is on its way through the pipeline)."""
    return {i: d for i, d in second.items() if first.get(i) == d}


def summary(found: Differences) -> str:
    kinds = {"missing": 0, "extra": 0, "stale": 0}
    for d in found.values():
        kinds[d.kind] += 1
    ids = sorted(found)
    more = f" and {len(ids) - IDS_LOGGED:,} more" if len(ids) > IDS_LOGGED else ""
    return (", ".join(f"{k} {n:,}" for k, n in kinds.items()) + ": "
            + ", ".join(f"{i} ({found[i].kind})" for i in ids[:IDS_LOGGED]) + more)


def resumable(record: dict[str, Any], period_s: float, now_s: float) -> int | None:
    """The key a pass cut short stopped at, when it started less than RESUME_PERIODS
    periods ago (else a new pass begins)."""
    next_key, started = record.get("next_key"), record.get("pass_started_at")
    if next_key is None or not started:
        return None
    if now_s - datetime.fromisoformat(started).timestamp() > RESUME_PERIODS * period_s:
        return None
    return int(next_key)


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


class _Table:
    """One table's verification state in the daemon that looks after it."""

    def __init__(self, config: TableConfig) -> None:
        self.config = config
        self.unrepaired: dict[str, str] = {}  # id -> kind, as last seen
        self.record: dict[str, Any] = {}
        self.loaded = False


class Verifier:
    """Verifies every configured table for as long as the daemon runs. ``owns(table)`` says
    whether this daemon looks after the table now."""

    def __init__(self, config: Config, metrics: Metrics,
                 owns: Callable[[TableConfig], bool], outages: Outages | None = None,
                 read_through: Callable[[], tuple[str, int]] | None = None) -> None:
        self._config = config
        # On the binlog source: where it has committed every change before (not Kafka's).
        self._read_through = read_through
        self._outages = outages or Outages()
        self._settings = config.verify
        self._metrics = metrics
        self._owns = owns
        self._stack = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._sink: ElasticsearchSink | None = None
        self._reader: TopicReader | None = None
        self._state: StateStore | None = None
        self._connect: ConnectClient | None = None  # for the exact barrier, when configured

    async def __aenter__(self) -> Verifier:
        cfg = self._config
        try:
            self._sink = await self._stack.enter_async_context(ElasticsearchSink(
                cfg.elasticsearch, self._metrics, max_backoff_s=cfg.batch.max_backoff_s,
                outage=self._outages.search, pipelines=cfg.pipelines))
            if self._read_through is None:
                self._reader = await self._stack.enter_async_context(TopicReader(cfg.kafka))
            if cfg.connect.url is not None and self._read_through is None:
                self._connect = await self._stack.enter_async_context(
                    ConnectClient(cfg.connect))
        except BaseException:
            await self._stack.aclose()
            raise
        self._state = StateStore(self._sink.client)
        for table in cfg.tables:
            state = _Table(table)
            self._tasks.append(asyncio.create_task(self._forever(state, self._rolling)))
            self._tasks.append(asyncio.create_task(self._forever(state, self._recent)))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stack.aclose()

    @property
    def _client(self) -> SearchClient:
        assert self._sink is not None, "use the verifier as an async context manager"
        return self._sink.client

    async def _forever(self, table: _Table,
                       job: Callable[[_Table], Awaitable[bool]]) -> None:
        """Runs ``job`` while this daemon looks after the table; a job that has nothing to do
        (False) is not run again."""
        # Daemons started together do not all look at once.
        await asyncio.sleep(random.uniform(1.0, 1.0 + min(30.0, self._settings.settle_s * 2)))
        said = ""  # why it paused, as last logged: a reason is logged once, not every retry
        while True:
            if not self._owns(table.config):
                await asyncio.sleep(OWNERSHIP_POLL_S)
                continue
            try:
                if not await job(table):
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next attempt picks up
                said = self._paused(table.config, exc, said)
                await asyncio.sleep(RETRY_S)

    def _paused(self, table: TableConfig, exc: Exception, said: str) -> str:
        """Tells why a table's verification paused: a server away is its outage's to tell
        (once, for all that wait on it); anything else once per reason."""
        if unreachable(exc):
            self._outages.mysql.failed(exc)
            return said
        if transient(exc) or kafka_transient(exc):
            log.debug("verification of %s paused (%s: %s)", table.name, type(exc).__name__,
                      exc)  # its client told the outage
            return said
        reason = f"{type(exc).__name__}: {exc}"
        if reason != said:
            log.warning("verification of %s paused (%s); trying again every %g s", table.name,
                        reason, RETRY_S)
        return reason

    # --- the rolling pass --------------------------------------------------------------------

    async def _rolling(self, table: _Table) -> bool:
        """One whole pass over the table, spread over the period; a pass cut short (a restart,
        partitions moved) is taken up where it stopped by whichever daemon verifies next."""
        cfg, settings = self._config, self._settings
        await claim(cfg, self._client, table.config)  # the alias may have moved since the start
        await self._load(table)
        name = table.config.name
        now_s = time.time()
        resume = resumable(table.record, settings.period_s, now_s)
        if resume is None:
            table.record["pass_started_at"] = _iso(now_s * 1000)
            table.record.pop("next_key", None)
        es_bounds = await chunk_check.es_key_bounds(self._client, table.config.alias)
        plan = await asyncio.to_thread(chunk_check.make_plan, cfg, table.config, es_bounds)
        # Documents without the indexer's chunk field (written behind its back) are in no
        # chunk's sums: one query finds them, and each slice's look takes them in.
        loose = await self._timed(name, "search", self._loose(table, plan))
        steps = slices(plan)
        interval = settings.period_s / len(steps)
        for first, last in steps:
            if last is not None and resume is not None and (last + 1) * plan.width <= resume:
                continue  # checked before the pass was cut short
            if not self._owns(table.config):
                return True  # another daemon takes over, from the record
            began = time.monotonic()
            chunks, looked_ms = await self._differing(table, plan, first, last)
            waited = 0.0
            if chunks:
                # Sums that differ are most often changes on their way (a backlog after an
                # outage): the rows are only compared once the pipeline has delivered what
                # preceded this look, and the sums still differ.
                waiting = time.monotonic()
                if await self._delivered(table.config, looked_ms, await self._source_gtids()):
                    await self._client.refresh(table.config.alias)
                    chunks, looked_ms = await self._differing(table, plan, first, last)
                waited = time.monotonic() - waiting
            covers = _in_slice(plan, first, last)
            with_loose = any(covers(i) for i in loose)

            async def look(chunks: list[int] = chunks, with_loose: bool = with_loose,
                           covers: Callable[[str], bool] = covers) -> Differences:
                found = await chunk_check.compare_chunks(cfg, self._client, table.config,
                                                         plan, chunks)
                if with_loose:
                    found.update(await self._loose(table, plan, covers))
                return found

            found = await self._timed(name, "mysql", look()) if chunks or with_loose else {}

            # The second look reads only the rows the first found differing: after a loss
            # upstream a slice can hold thousands, and its whole chunks many times more.
            async def look_again(found: Differences = found, with_loose: bool = with_loose,
                                 covers: Callable[[str], bool] = covers) -> Differences:
                seen = await chunk_check.compare_ids(cfg, self._client, table.config, plan,
                                                     [i for i in found if i not in loose])
                if with_loose:
                    seen.update(await self._loose(table, plan, covers))
                return seen

            waited += await self._judge(table, plan, found, look_again, looked_ms, covers)
            if last is not None:
                table.record["next_key"] = (last + 1) * plan.width
                await self._save(table)
            await asyncio.sleep(pause_s(time.monotonic() - began - waited, interval,
                                        settings.max_load_share))
        # Those whose id is no integer key are in no slice.
        if outside := {i: d for i, d in loose.items()
                       if plan.chunk_of(i) == chunk_check.UNCHUNKED}:
            async def again() -> Differences:
                return {i: d for i, d in (await self._loose(table, plan)).items()
                        if plan.chunk_of(i) == chunk_check.UNCHUNKED}

            await self._judge(table, plan, outside, again, time.time() * 1000,
                              lambda i: plan.chunk_of(i) == chunk_check.UNCHUNKED)
        took = time.time() - datetime.fromisoformat(table.record["pass_started_at"]).timestamp()
        self._metrics.verify_pass_seconds.labels(name).set(took)
        self._metrics.verify_passed.labels(name).set(time.time())
        table.record["last_pass_at"] = _iso(time.time() * 1000)
        table.record["last_pass_s"] = round(took, 1)
        table.record.pop("next_key", None)
        await self._save(table)
        if took > 1.5 * settings.period_s:
            log.warning("verification of %s: a pass took %.0f s, longer than verify.period_s "
                        "(%g s) at verify.max_load_share %g: raise one of them", name, took,
                        settings.period_s, settings.max_load_share)
        return True

    async def _differing(self, table: _Table, plan: Plan, first: int | None,
                         last: int | None) -> tuple[list[int], float]:
        """The slice's chunks whose sums differ, and when they were looked at."""
        name = table.config.name
        looked_ms = time.time() * 1000
        sql_sums, es_sums = await asyncio.gather(
            self._timed(name, "mysql", chunk_check.sql_sums(self._config, plan, 1, first,
                                                            last)),
            self._timed(name, "search", chunk_check.es_sums(
                self._client, table.config.alias, plan, first, last)))
        self._metrics.verify_rows.labels(name, "rolling").inc(
            sum(s.rows for s in sql_sums.values()))
        return chunk_check.differing(sql_sums, es_sums), looked_ms

    # --- the quick pass over recent rows ------------------------------------------------------

    async def _recent(self, table: _Table) -> bool:
        cfg, settings = self._config, self._settings
        if table.config.joins:  # a document's rows change in many tables: the rolling pass
            log.info("verification of %s: joined documents are checked by the rolling pass",
                     table.config.name)
            return False
        if table.config.transform:  # the server cannot hash what a Python function makes
            log.info("verification of %s: documents made by transform %s are checked by the "
                     "rolling pass", table.config.name, table.config.transform)
            return False
        layout = await asyncio.to_thread(schema.read_layout, cfg.mysql, table.config.database,
                                         table.config.table)
        column: str | None
        column, why = await asyncio.to_thread(schema.changed_column, cfg.mysql, layout,
                                              table.config.changed_column)
        if column is None:
            if table.config.changed_column != "":
                log.info("verification of %s: no quick pass over recent rows (%s); the "
                         "rolling pass covers every row each verify.period_s",
                         table.config.name, why)
            return False
        log.info("verification of %s: recent rows by %s every %g s", table.config.name, column,
                 settings.recent_every_s)
        since: str | None = None
        name = table.config.name
        # Rows the last pass found equal, with their hashes: the next one reads them again
        # (it starts an interval back) but need not ask the search server about them.
        equal: dict[str, int] = {}
        while self._owns(table.config):
            began = time.monotonic()
            plan = await asyncio.to_thread(chunk_check.row_plan, cfg, table.config)
            looked_ms = time.time() * 1000
            hashes, newest = await self._timed(name, "mysql", asyncio.to_thread(
                checksum_sql.changed_since, cfg.mysql, plan.layout, plan.reads.fields, column,
                since, 2 * settings.recent_every_s, RECENT_ROWS))
            self._metrics.verify_rows.labels(name, "recent").inc(len(hashes))
            waited = 0.0
            ask = {i: h for i, h in hashes.items() if equal.get(i) != h}
            equal = {i: h for i, h in hashes.items() if equal.get(i) == h}
            if ask:
                docs = await self._timed(name, "search", chunk_check.es_hashes_for_ids(
                    self._client, table.config.alias, list(ask)))
                found = chunk_check.compare_hashes(ask, docs)
                equal.update({i: h for i, h in ask.items() if i not in found})
                ids = list(found)

                def look(ids: list[str] = ids, plan: Plan = plan) -> Awaitable[Differences]:
                    return chunk_check.compare_ids(cfg, self._client, table.config, plan, ids)

                waited = await self._judge(table, plan, found, look, looked_ms, None)
            since = next_since(since, newest, len(hashes) >= RECENT_ROWS,
                               min(RECENT_OVERLAP_S, settings.recent_every_s))
            await asyncio.sleep(pause_s(time.monotonic() - began - waited,
                                        settings.recent_every_s, settings.max_load_share))
        return True

    # --- judging what differs ----------------------------------------------------------------

    async def _loose(self, table: _Table, plan: Plan,
                     covers: Callable[[str], bool] | None = None) -> Differences:
        found = await chunk_check.unchunked(self._config, self._client, table.config, plan)
        return found if covers is None else {i: d for i, d in found.items() if covers(i)}

    async def _judge(self, table: _Table, plan: Plan, found: Differences,
                     look_again: Callable[[], Awaitable[Differences]], looked_ms: float,
                     checked: Callable[[str], bool] | None) -> float:
        """Looks again once the pipeline has delivered what preceded the first look; reports,
        records and (``verify.repair``) repairs what still differs. ``checked`` says which
        recorded ids the look covered (they are dropped unless found again). Returns how
        long it waited for the pipeline or repaired: time the load share does not count."""
        name = table.config.name
        drift: Differences = {}
        waiting = time.monotonic()
        delivered = bool(found) and await self._delivered(table.config, looked_ms,
                                                          await self._source_gtids())
        waited = time.monotonic() - waiting
        if delivered:
            await self._client.refresh(table.config.alias)
            drift = believed(found, await self._timed(name, "mysql", look_again()))
            if drift:  # what only a checksum says differs is in sync (indexer.core.compare)
                drift = (await self._timed(name, "mysql", chunk_check.confirmed(
                    self._client, table.config, plan, drift))).found
        elif found:
            log.info("verification of %s: %d rows differ, but the pipeline has not delivered "
                     "what was committed before the look within %g s; they are looked at "
                     "again later", name, len(found), BARRIER_TIMEOUT_S)
        before = dict(table.unrepaired)
        if checked is not None:
            table.unrepaired = {i: k for i, k in table.unrepaired.items() if not checked(i)}
        # Counted and logged once: rows left unrepaired are found again at every look.
        new = {i: d for i, d in drift.items() if before.get(i) != d.kind}
        for d in new.values():
            self._metrics.verify_drift.labels(name, d.kind).inc()
        if new:
            log.warning("verification of %s: %d rows differ from MySQL (%s)", name, len(new),
                        summary(new))
        if drift:
            if self._settings.repair:
                # Writes, not verification's reads: they do not count against the share, so
                # the rest of the table is looked at on time.
                repairing = time.monotonic()
                await self._repair(table, plan, drift)
                waited += time.monotonic() - repairing
            else:
                table.unrepaired.update({i: d.kind for i, d in drift.items()})
                table.record["found_at"] = _iso(time.time() * 1000)
        self._metrics.verify_unrepaired.labels(name).set(len(table.unrepaired))
        if table.unrepaired != before:
            await self._save(table)
        return waited

    async def _repair(self, table: _Table, plan: Plan, drift: Differences) -> None:
        assert self._sink is not None
        await claim(self._config, self._client, table.config)
        counts = await chunk_check.repair(self._config, self._sink, table.config, plan, drift)
        self._metrics.verify_repaired.labels(table.config.name).inc(
            counts["rewritten"] + counts["tombstoned"])
        # Refused rows still differ: the next look finds them again.
        table.unrepaired = {i: k for i, k in table.unrepaired.items() if i not in drift}
        log.warning("verification of %s: repaired %d of %d rows: %d rewritten, %d tombstoned, "
                    "%d newer in the index, %d refused (logged above)", table.config.name,
                    counts["rewritten"] + counts["tombstoned"], len(drift), counts["rewritten"],
                    counts["tombstoned"], counts["refused_as_newer"], counts["refused"])

    async def _delivered(self, table: TableConfig, since_ms: float,
                         source_gtids: str | None) -> bool:
        """Waits until the pipeline has delivered what was committed before the first look
        (at ``since_ms``, when MySQL had committed ``source_gtids``), then until the group has
        committed the table's partitions up to their ends as of that moment.

        Into Kafka: with ``[connect]``, the connector's committed source offset has reached
        those GTIDs, which Kafka Connect commits only once Kafka acknowledged every record
        before it: exact. Otherwise a canary beat written after the look has been indexed
        (binlog order); only nearly exact, since Kafka Connect's producer may deliver the
        canary's small topic ahead of a backlog of other topics after Kafka was away (a
        row then looks different when it is only late, and a repair of it is harmless)."""
        await asyncio.sleep(self._settings.settle_s)
        if self._read_through is not None:
            return await self._read_binlog()
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        exact: bool | None = None  # None: the connector's offsets cannot tell
        if source_gtids is not None:
            exact = await self._connector_reached(source_gtids)
            while exact is False and time.monotonic() < deadline:
                await asyncio.sleep(BARRIER_POLL_S)
                exact = await self._connector_reached(source_gtids)
        canary = self._config.canary_table
        while exact is None and canary is not None and time.monotonic() < deadline:
            if await self._indexed_beat_ms(canary) > since_ms:
                break
            await asyncio.sleep(BARRIER_POLL_S)
        if time.monotonic() >= deadline:
            # Nothing arrives (`check` says why): a row that still differs, unchanged in
            # MySQL all this time, is not on its way.
            log.info("verification of %s: the connector delivered nothing past the look for "
                     "%g s; the rows that differ are judged without it", table.name,
                     BARRIER_TIMEOUT_S)
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        assert self._reader is not None
        group = self._config.kafka.group_id
        ends = {p.partition: p.end for p in await self._reader.lag(group, [table.topic])}
        while any((p.committed or 0) < ends.get(p.partition, 0)
                  for p in await self._reader.lag(group, [table.topic])):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(BARRIER_POLL_S)
        return True

    async def _read_binlog(self) -> bool:
        """On the binlog source: waits until it has committed every change the binlog holds
        now (exact: one server, one ordered stream)."""
        assert self._read_through is not None
        end = binlog_order(await asyncio.to_thread(binlog_end_of, self._config.mysql))
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        while binlog_order(self._read_through()) < end:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(BARRIER_POLL_S)
        return True

    async def _source_gtids(self) -> str | None:
        """What MySQL has committed now, for the exact barrier (None: no [connect], no
        GTIDs, or MySQL would not say)."""
        if self._connect is None:
            return None
        try:
            return await asyncio.to_thread(connection.gtid_position, self._config.mysql,
                                           self._config.tables[0].database)
        except mysql_retry.FAILURES:
            return None

    async def _connector_reached(self, gtids: str) -> bool | None:
        """Whether a watched connector of this topic prefix has committed a source offset
        at or past ``gtids`` (None: none has GTIDs in its offsets, or Connect's API is away)."""
        assert self._connect is not None
        prefix = self._config.connector.topic_prefix
        try:
            names = self._config.connect.connectors or tuple(await self._connect.names())
            reached = [gtid_set_reached(done, gtids) for name in names
                       if (done := await self._connect.committed_gtids(name, prefix))]
        except ConnectUnavailable:
            return None
        known = [r for r in reached if r is not None]
        return any(known) if known else None

    async def _indexed_beat_ms(self, canary: TableConfig) -> int:
        found = await self._client.request(
            "GET", f"/{canary.alias}/_doc/{quote(self._config.deployment)}", ok=(404,))
        source = found.get("_source") if found and found.get("found") else None
        return int(source.get("beat_ms", 0)) if isinstance(source, dict) else 0

    async def _timed(self, table: str, server: str, work: Awaitable[Any]) -> Any:
        began = time.monotonic()
        try:
            done = await work
        finally:
            self._metrics.verify_busy.labels(table, server).inc(time.monotonic() - began)
        if server == "mysql":
            self._outages.mysql.ok()
        return done

    # --- the record `indexer check` reads ----------------------------------------------------

    async def _load(self, table: _Table) -> None:
        if table.loaded:
            return
        assert self._state is not None
        record = await self._state.verification(table.config.alias) or {}
        table.record = record
        table.unrepaired = {i: str(k) for i, k in record.get("unrepaired", {}).items()}
        table.loaded = True

    async def _save(self, table: _Table) -> None:
        assert self._state is not None
        record = table.record
        record["table"] = table.config.name
        record["updated_at"] = _iso(time.time() * 1000)
        record["repair"] = self._settings.repair
        record["unrepaired_count"] = len(table.unrepaired)
        record["unrepaired"] = dict(sorted(table.unrepaired.items())[:IDS_RECORDED])
        await self._state.record_verification(table.config.alias, record)


def _in_slice(plan: Plan, first: int | None,
              last: int | None) -> Callable[[str], bool]:
    def covers(doc_id: str) -> bool:
        chunk = plan.chunk_of(doc_id)
        if chunk == chunk_check.UNCHUNKED:
            return False
        return (first is None or chunk >= first) and (last is None or chunk <= last)
    return covers


def next_since(since: str | None, newest: str | None, full: bool, back_s: float) -> str | None:
    """Where the next quick pass starts: ``back_s`` before the newest change read, so rows
    that committed late are seen again; right at it when the pass was cut at its row limit
    (the rest come next), or from scratch when a cut pass did not move (more changed rows share
    one time than a pass takes)."""
    if newest is None:
        return since
    if full:
        return None if newest == since else newest
    moment = datetime.fromisoformat(newest) - timedelta(seconds=back_s)
    return moment.isoformat(sep=" ")
