"""`indexer reindex`: rebuild a table's index from MySQL while the daemon keeps streaming.

1. Create ``<alias>-v<timestamp>`` (refresh off, no replicas) and add it to the sync alias:
   from then on the daemon writes every change it consumes into it as well.
2. Read the table inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` (one per parallel
   reader) and write each row with the daemon's document builder. Under binlog versions
   every row carries the snapshot's binlog position as its version, so any change committed
   later (a higher version) wins whichever writer gets there first; under column versions
   the row's own column decides, as in the stream.
3. Copy the live index's tombstones (deleted rows keep their delete versions), restore the
   index settings, refresh, check that every row read was written or found newer, and swap
   the read alias in one ``_aliases`` request. The old index stays in the sync alias, kept
   current, for ``--rollback`` until ``--delete-old``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field

import orjson

from indexer.core.documents import META_FIELD, Write
from indexer.core.layout import TableLayout
from indexer.core.mappings import alias_of_index, swap_actions, sync_alias
from indexer.core.ownership import owner_of
from indexer.core.writes import Op, Outcome
from indexer.errors import ReindexError
from indexer.jobs.ownership import claim
from indexer.jobs.table_reads import Reads, reads_for
from indexer.metrics import Metrics
from indexer.progress import Progress, no_progress
from indexer.search import pipelines
from indexer.search.admin import (
    alias_state,
    create_index,
    definition_for,
    index_owners,
    missed_writes,
)
from indexer.search.client import SearchClient
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.mysql import schema, snapshots
from indexer.source.mysql.trees import PAGE_ROOTS

log = logging.getLogger(__name__)

# Pages of rows waiting for the writers: bounds memory whatever the table's size.
QUEUE_PAGES = 4


@dataclass
class ReindexResult:
    table: str
    index: str
    read: int = 0  # rows the readers read
    rows: int = 0  # rows the writers settled (written + stale + failed)
    written: int = 0
    stale: int = 0
    failed: int = 0
    tombstones: int = 0
    seconds: float = 0.0
    replaced: list[str] = field(default_factory=list)
    positions: list[str] = field(default_factory=list)


async def reindex(config: Config, table: TableConfig, *, parallel: int = 1,
                  progress: Progress = no_progress) -> ReindexResult:
    started = time.monotonic()
    reads = await asyncio.to_thread(reads_for, config, table)
    layout = reads.layout
    definition = definition_for(config, table)
    metrics = Metrics()
    async with ElasticsearchSink(config.elasticsearch, metrics,
                                 max_backoff_s=config.batch.max_backoff_s,
                                 pipelines=config.pipelines) as sink:
        client = sink.client
        await claim(config, client, table)  # another table's alias is not swapped
        await pipelines.require(client, [table])
        before = await alias_state(client, table.alias)
        index = await create_index(client, definition, owner_of(config, table), live=False,
                                   bulk_load=True)
        result = ReindexResult(table.name, index)
        try:
            estimate = await asyncio.to_thread(schema.row_count_estimate, config.mysql, layout)
            progress("load", 0, estimate)
            await _load(config, table, reads, sink, index, parallel, result, progress)
            progress("load", result.rows, result.rows)
            if result.failed:
                raise ReindexError(f"{result.failed} rows were refused by Elasticsearch "
                                   "(see the log); the live index is unchanged")
            if result.written + result.stale != result.rows or result.rows != result.read:
                raise ReindexError(f"{result.read} rows read but {result.written} written and "
                                   f"{result.stale} found newer")
            result.tombstones = await _copy_tombstones(sink, before.live, index, progress)
            progress("refresh", 0, 1)
            await client.put_settings(index, definition.live_settings())
            await client.refresh(index)
            progress("refresh", 1, 1)
            progress("swap", 0, 1)
            missed = await missed_writes(client, index)
            if missed:
                raise ReindexError(f"{index} refused changes the live index took while it was "
                                   f"built ({missed.get('reason')}); the live alias is "
                                   "unchanged: fix the mapping and reindex again")
            await client.update_aliases(swap_actions(table.alias, index, before.live))
            result.replaced = before.live
            progress("swap", 1, 1)
        except BaseException:
            await _abandon(client, table.alias, index)
            raise
    result.seconds = time.monotonic() - started
    return result


async def _load(config: Config, table: TableConfig, reads: Reads, sink: ElasticsearchSink,
                index: str, parallel: int, result: ReindexResult, progress: Progress) -> None:
    """Readers (threads, one snapshot each) feed pages through a bounded queue to writers."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[list[Op] | None] = asyncio.Queue(QUEUE_PAGES)
    stop = threading.Event()
    ranges = await asyncio.to_thread(_ranges, config, reads.layout, parallel)
    page_rows = config.batch.max_events if not table.joins else PAGE_ROOTS

    def read(low: int | None, high: int | None) -> int:
        """Reads one key range into the queue; returns the number of rows read."""
        snapshot = reads.snapshot()
        rows = 0
        try:
            position = snapshot.position
            result.positions.append(f"{position.file}:{position.pos}")
            version = None
            if table.version.kind == "binlog":
                version = asyncio.run_coroutine_threadsafe(StateStore(sink.client).snapshot_version(
                    table.alias, position.file, position.pos, position.ts_ms, "reindex"),
                    loop).result()
            for page in snapshot.pages(low, high, page_rows, version):
                if stop.is_set():
                    return rows
                ops = [Op(table.alias, write, index=index) for write in page]
                asyncio.run_coroutine_threadsafe(queue.put(ops), loop).result()
                rows += len(ops)
        finally:
            snapshot.close()
        return rows

    async def read_all() -> None:
        counts = await asyncio.gather(*(asyncio.to_thread(read, low, high)
                                        for low, high in ranges))
        result.read = sum(counts)
        # Only now may the writers stop: one end marker each, behind every page.
        for _ in writers:
            await queue.put(None)

    async def writer() -> None:
        while (ops := await queue.get()) is not None:
            await sink.write(ops)
            outcomes = [op.outcome for op in ops]
            written, stale = outcomes.count(Outcome.WRITTEN), outcomes.count(Outcome.STALE)
            result.rows += len(ops)
            result.written += written
            result.stale += stale
            if written + stale < len(ops):
                for op in ops:
                    if op.outcome is not Outcome.WRITTEN and op.outcome is not Outcome.STALE:
                        result.failed += 1
                        log.error("row %s refused: %s: %s", op.write.id, op.error_kind,
                                  op.error_reason)
            progress("load", result.rows, 0)

    writers = [asyncio.create_task(writer()) for _ in range(config.batch.in_flight)]
    reading = asyncio.create_task(read_all())
    try:
        await asyncio.gather(reading, *writers)
    finally:
        stop.set()
        for task in (reading, *writers):
            task.cancel()
        # Readers blocked on a full queue need room to see the stop.
        while not queue.empty():
            queue.get_nowait()
        await asyncio.gather(reading, *writers, return_exceptions=True)


def _ranges(config: Config, layout: TableLayout,
            parallel: int) -> list[tuple[int | None, int | None]]:
    """Key ranges splitting an integer key into ``parallel`` readers; one range otherwise."""
    if parallel <= 1 or not layout.integer_key:
        return [(None, None)]
    snapshot = snapshots.Snapshot(config.mysql, layout)
    try:
        bounds = snapshot.key_bounds()
    finally:
        snapshot.close()
    if bounds is None:
        return [(None, None)]
    # Each reader has its own snapshot, which may hold keys beyond these bounds: the outer
    # ranges are open-ended so that no row falls outside them.
    return snapshots.open_slices(*bounds, parallel)


async def _copy_tombstones(sink: ElasticsearchSink, live: list[str], index: str,
                           progress: Progress) -> int:
    """Deleted rows keep their delete versions in the new index, so a stale event replayed
    later cannot bring them back."""
    query = {"term": {f"{META_FIELD}.deleted": True}}
    total = sum([await sink.client.count(old, query) for old in live])
    copied = 0
    progress("tombstones", copied, total)
    batch: list[Op] = []
    for old in live:
        alias = alias_of_index(old) or old
        async for hit in sink.client.scan(old, {"query": query, "version": True}):
            batch.append(Op(alias, Write(hit["_id"], hit["_version"],
                                         orjson.dumps(hit["_source"]), True,
                                         hit.get("_routing")), index=index))
            if len(batch) >= 2000:
                await sink.write(batch)
                copied += len(batch)
                batch = []
                progress("tombstones", copied, total)
    if batch:
        await sink.write(batch)
        copied += len(batch)
    # One count: the bar ends at what the summary reports (the daemon may add tombstones).
    progress("tombstones", copied, copied)
    return copied


async def _abandon(client: SearchClient, alias: str, index: str) -> None:
    """Leaves the live alias untouched; the half-built index stops receiving changes and is
    left, named, for inspection or ``--delete-old``."""
    with contextlib.suppress(Exception):
        await asyncio.shield(client.update_aliases(
            [{"remove": {"index": index, "alias": sync_alias(alias)}}]))
    log.error("reindex abandoned: %s is half-built and no longer receives changes; the live "
              "alias %s is unchanged (remove it with `indexer reindex --delete-old`)",
              index, alias)


async def rollback(config: Config, table: TableConfig, *,
                   force: bool = False) -> tuple[str, str]:
    """Points the read alias back at the newest older index (kept current by the daemon),
    unless it refused writes since the swap (``force`` rolls back all the same)."""
    async with ElasticsearchSink(config.elasticsearch, Metrics(), max_backoff_s=1) as sink:
        await claim(config, sink.client, table)
        state = await alias_state(sink.client, table.alias)
        if len(state.live) != 1:
            raise ReindexError(f"alias {table.alias} points at {state.live}; expected one index")
        (current,) = state.live
        older = sorted(i for i in state.synced if i < current)
        if not older:
            raise ReindexError(f"no older index behind {sync_alias(table.alias)} to roll back to")
        previous = older[-1]
        missed = await missed_writes(sink.client, previous)
        if missed and not force:
            raise ReindexError(f"{previous} refused writes the live index took (since "
                               f"{missed.get('since')}: {missed.get('reason')}); rolling back "
                               "to it would serve those rows stale: repair it after a "
                               "rollback with --force and `indexer reconcile --repair`")
        await sink.client.update_aliases(swap_actions(table.alias, previous, [current]))
        return current, previous


async def delete_old(config: Config, table: TableConfig) -> list[str]:
    """Deletes every index of the table except the live one."""
    async with ElasticsearchSink(config.elasticsearch, Metrics(), max_backoff_s=1) as sink:
        client = sink.client
        await claim(config, client, table)
        state = await alias_state(client, table.alias)
        if not state.live:
            raise ReindexError(f"alias {table.alias} points at no index; nothing is deleted")
        found = await client.indices(f"{table.alias}-v*")
        doomed = sorted(i for i in found if alias_of_index(i) == table.alias
                        and i not in state.live)
        # Only this table's: an index named like the alias but recorded for another is kept.
        owners = await index_owners(client, doomed)
        mine = owner_of(config, table)
        doomed = [i for i in doomed if (owner := owners.get(i)) is None or owner.same(mine)]
        for index in doomed:
            await client.delete_index(index)
        return doomed


