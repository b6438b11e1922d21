"""`indexer reconcile`: prove the index matches MySQL (the authority), and repair it.

1. Chunks: a table with one integer key is cut into key ranges of ``width`` values; any
   other table into ``KEY_BUCKETS`` buckets of crc32(id). For every chunk, MySQL computes
   COUNT(*) and SUM(CRC32(row text)) in one scan (``GROUP BY`` chunk) and Elasticsearch the
   doc count and the sum of the stored ``_indexer.hash`` in one aggregation request, both at
   once. Equal chunks are done.
2. Only differing chunks are compared row by row (id -> hash from both sides): missing
   (row, no document), extra (document, no row), stale (content differs).
3. Rows changed while the check ran are looked at again after ``settle_s`` (the daemon
   needs a moment to apply them); only differences that persist are reported.
4. ``repair``: missing and stale rows are re-read inside a consistent snapshot and written
   with versions (the snapshot's binlog position, or the row's version column), extras get
   a tombstone, so a concurrent daemon write is never overwritten by an older copy; then the
   repaired chunks are checked again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from indexer.core.checksums import CHECKSUM_FORMAT
from indexer.jobs import chunk_check
from indexer.jobs.chunk_check import Differences, Plan, sums_of
from indexer.jobs.ownership import claim
from indexer.jobs.reindex import reindex
from indexer.metrics import Metrics
from indexer.progress import Progress, no_progress
from indexer.search import admin, pipelines
from indexer.search.client import SearchClient
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.mysql import checksum_sql

SETTLE_S = 2.0
# MySQL scans for the chunk sums run in this many key slices at once: one per core here.
SCAN_PARALLEL = 2
# After repairing more chunks than this, new chunk sums (a few seconds) pick the ones to
# compare again row by row, rather than comparing them all.
RECHECK_BY_SUMS_ABOVE = 4 * chunk_check.DRILL_CHUNKS
# A repair that would rewrite more than this share of a table's rows (a column added with a
# default, a rename) runs a reindex instead: a fresh index loads faster than as many
# documents are replaced in place (1M rows here: 30 s against 55 s). Small tables are
# rewritten in place whatever the share.
REINDEX_ABOVE_SHARE = 0.5
REINDEX_MIN_ROWS = 50_000
# Stale documents whose differing fields (or parts of a joined document) the report names.
STALE_DETAILED = chunk_check.DETAILED_STALE


@dataclass
class ChunkDiff:
    chunk: int
    low: str
    high: str
    rows: int
    docs: int
    missing: int = 0
    extra: int = 0
    stale: int = 0


@dataclass
class Report:
    """What `indexer reconcile` found for one table (``--format json`` is this, as JSON)."""

    table: str
    alias: str
    started_at: str
    seconds: float = 0.0
    rows: int = 0
    documents: int = 0
    chunking: str = ""
    chunks: int = 0
    chunks_differing: int = 0
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    rechecked: int = 0
    # What differs in stale documents (the first STALE_DETAILED): fields, or a joined
    # document's parts ("category.name", "variants: 3 in MySQL, 2 in the index").
    stale_fields: dict[str, list[str]] = field(default_factory=dict)
    repaired: dict[str, int] | None = None
    differing_chunks: list[ChunkDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the reader needs to know first

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.stale)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["clean"] = self.clean
        return data


async def reconcile(config: Config, table: TableConfig, *, repair: bool = False,
                    settle_s: float = SETTLE_S, parallel: int = SCAN_PARALLEL,
                    progress: Progress = no_progress) -> Report:
    started = time.monotonic()
    report = Report(table.name, table.alias, datetime.now(UTC).isoformat(timespec="seconds"))
    plan = await asyncio.to_thread(chunk_check.make_plan, config, table)
    report.chunking = plan.describe()
    async with ElasticsearchSink(config.elasticsearch, Metrics(),
                                 max_backoff_s=config.batch.max_backoff_s,
                                 pipelines=config.pipelines) as sink:
        client = sink.client
        await claim(config, client, table)  # another table's documents are not compared
        if repair:  # its repairs are written through the pipeline
            await pipelines.require(client, [table])
        await client.refresh(table.alias)
        report.notes += await _old_checksums(client, table.alias)

        async def sums() -> tuple[dict[int, checksum_sql.ChunkSum], dict[int, tuple[int, int]]]:
            progress("chunk sums", 0, 1)
            found = await asyncio.gather(chunk_check.sql_sums(config, plan, parallel),
                                         chunk_check.es_sums(client, table.alias, plan))
            progress("chunk sums", 1, 1)
            return found

        sql_sums, es_sums = await sums()
        report.rows = sum(s.rows for s in sql_sums.values())
        report.documents = sum(n for n, _ in es_sums.values())
        report.chunks = len(set(sql_sums) | set(es_sums))
        differing = chunk_check.differing(sql_sums, es_sums)
        report.chunks_differing = len(differing)

        async def differences(chunks: Sequence[int]) -> Differences:
            found = await chunk_check.compare_chunks(config, client, table, plan, chunks,
                                                     progress)
            found.update(await chunk_check.unchunked(config, client, table, plan))
            return found

        found = await differences(differing)
        if found and settle_s > 0:
            # Changes made while we looked: give the daemon time, then look again.
            await asyncio.sleep(settle_s)
            await client.refresh(table.alias)
            again = await differences(plan.chunks_of(found))
            report.rechecked = len(found)
            found = {i: d for i, d in again.items()
                     if (seen := found.get(i)) is not None and seen.kind == d.kind}
        checked = await chunk_check.confirmed(client, table, plan, found)
        found = checked.found
        if repair and found:
            fix = sum(1 for d in found.values() if d.kind != "extra")
            if fix >= REINDEX_MIN_ROWS and fix > REINDEX_ABOVE_SHARE * report.rows:
                report.repaired = await _rebuild_by_reindex(config, table, fix,
                                                            len(found) - fix, report, progress)
            else:
                report.repaired = await chunk_check.repair(config, sink, table, plan, found)
            await client.refresh(table.alias)
            repaired = plan.chunks_of(found)
            if len(repaired) > RECHECK_BY_SUMS_ABOVE:  # the sums first: most now agree
                sql_sums, es_sums = await sums()
                still = set(chunk_check.differing(sql_sums, es_sums))
                repaired = [c for c in repaired if c in still]
            checked = await chunk_check.confirmed(client, table, plan,
                                                  await differences(repaired))
            found = checked.found
        _fill(report, plan, found, sql_sums, es_sums)
        report.stale_fields = {i: checked.parts[i] for i in report.stale[:STALE_DETAILED]
                               if i in checked.parts}
        if checked.equal:
            report.notes.append(
                f"{len(checked.equal):,} rows have checksums that differ from their documents' "
                f"although the documents equal MySQL's (e.g. {', '.join(checked.equal[:5])}): "
                "in sync; a JSON value stored with escapes or digits its parsed value does not "
                "keep reads differently in SQL")
        await _record(client, table, report)
    report.seconds = round(time.monotonic() - started, 3)
    return report


async def _record(client: SearchClient, table: TableConfig, report: Report) -> None:
    """What a whole-table reconcile found replaces continuous verification's record of
    rows that differ: `indexer check` then reports what is left (nothing, after a repair)."""
    state = StateStore(client)
    record = await state.verification(table.alias) or {}
    unrepaired = {i: kind for kind in ("missing", "extra", "stale")
                  for i in getattr(report, kind)}
    record.update({"table": table.name, "unrepaired_count": len(unrepaired),
                   "unrepaired": dict(sorted(unrepaired.items())[:200]),
                   "reconciled_at": report.started_at,
                   "updated_at": datetime.now(UTC).isoformat(timespec="seconds")})
    await state.record_verification(table.alias, record)


async def _rebuild_by_reindex(config: Config, table: TableConfig, fix: int, extras: int,
                              report: Report, progress: Progress) -> dict[str, int]:
    """``fix`` rows differ, ``extras`` documents have no row: a new index holds neither."""
    result = await reindex(config, table, progress=progress)
    report.notes.append(f"{fix:,} of {report.rows:,} rows differed: rebuilt by a reindex into "
                        f"{result.index} (the previous index is kept for `indexer reindex "
                        f"--rollback` until `indexer reindex --delete-old`)")
    return {"rewritten": result.written, "tombstoned": extras,
            "refused_as_newer": result.stale, "refused": result.failed}


async def _old_checksums(client: SearchClient, alias: str) -> list[str]:
    notes = []
    for index in (await admin.alias_state(client, alias)).live:
        if (found := await admin.checksum_format(client, index)) < CHECKSUM_FORMAT:
            notes.append(f"index {index} was made by an indexer whose checksums (format "
                         f"{found}) differ from this one's ({CHECKSUM_FORMAT}): documents "
                         "written before the upgrade show as stale; `indexer reindex` (or "
                         "`reconcile --repair`) rewrites them")
    return notes


def _fill(report: Report, plan: Plan, found: Differences,
          sql_sums: dict[int, checksum_sql.ChunkSum], es_sums: dict[int, tuple[int, int]]) -> None:
    by_chunk: dict[int, ChunkDiff] = {}
    for doc_id, difference in sorted(found.items()):
        kind = difference.kind
        getattr(report, kind).append(doc_id)
        chunk = plan.chunk_of(doc_id)
        if chunk not in by_chunk:
            low, high = plan.bounds(chunk)
            by_chunk[chunk] = ChunkDiff(chunk, low, high, sums_of(sql_sums, chunk)[0],
                                        es_sums.get(chunk, (0, 0))[0])
        setattr(by_chunk[chunk], kind, getattr(by_chunk[chunk], kind) + 1)
    report.differing_chunks = [by_chunk[c] for c in sorted(by_chunk)]
