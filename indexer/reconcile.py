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
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from indexer import admin
from indexer.checksums import CHECKSUM_FORMAT
from indexer.config import Config, TableConfig
from indexer.documents import (
    KEY_BUCKETS,
    META_FIELD,
    DocumentBuilder,
    Write,
    document_id,
    file_number,
    key_bucket,
    pack_binlog_version,
    tombstone,
)
from indexer.metrics import Metrics
from indexer.progress import Progress, no_progress
from indexer.reindex import reindex
from indexer.sink.elasticsearch import ElasticsearchSink, Op, Outcome
from indexer.sink.search import SearchClient
from indexer.sink.state import StateStore
from indexer.source import mysql

# About this many rows per chunk: small enough that a differing chunk is cheap to compare
# row by row, large enough that the chunk sums stay few (Elasticsearch allows 65k buckets).
CHUNK_ROWS = 2000
MAX_CHUNKS = 50_000
DRILL_CHUNKS = 64  # differing chunks compared per round trip
DRILL_PARALLEL = 4
SETTLE_S = 2.0
# MySQL scans for the chunk sums run in this many key slices at once: one per core here.
SCAN_PARALLEL = 2
UNCHUNKED = -(2**63)  # the chunk of an id that cannot be an integer key
# After repairing more chunks than this, new chunk sums (a few seconds) pick the ones to
# compare again row by row, rather than comparing them all.
RECHECK_BY_SUMS_ABOVE = 4 * DRILL_CHUNKS
# A repair that would rewrite more than this share of a table's rows (a column added with a
# default, a rename) runs a reindex instead: a fresh index loads faster than as many
# documents are replaced in place (1M rows here: 30 s against 55 s). Small tables are
# rewritten in place whatever the share.
REINDEX_ABOVE_SHARE = 0.5
REINDEX_MIN_ROWS = 50_000


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


@dataclass
class _Plan:
    layout: mysql.TableLayout
    fields: list[mysql.Field]  # what the documents hold, by field name
    width: int  # key values per chunk (integer keys); 0 = id buckets
    low: int | None = None  # key bounds when the plan was made (integer keys)
    high: int | None = None

    def describe(self) -> str:
        if self.width:
            return f"key ranges of {self.width} values"
        return f"{KEY_BUCKETS} buckets of crc32(id)"

    def bounds(self, chunk: int) -> tuple[str, str]:
        if chunk == UNCHUNKED:
            return "no chunk field", "no chunk field"
        if self.width:
            return str(chunk * self.width), str((chunk + 1) * self.width - 1)
        return f"bucket {chunk}", f"bucket {chunk}"

    def chunk_of(self, doc_id: str) -> int:
        if self.width:
            return int(doc_id) // self.width if _is_int(doc_id) else UNCHUNKED
        return key_bucket(doc_id)


async def reconcile(config: Config, table: TableConfig, *, repair: bool = False,
                    settle_s: float = SETTLE_S, parallel: int = SCAN_PARALLEL,
                    progress: Progress = no_progress) -> Report:
    started = time.monotonic()
    report = Report(table.name, table.alias, datetime.now(UTC).isoformat(timespec="seconds"))
    plan = await asyncio.to_thread(_plan, config, table, DocumentBuilder(table))
    builder = DocumentBuilder(table, plan.layout.flavor)  # hashes as the server's SQL does
    report.chunking = plan.describe()
    async with ElasticsearchSink(config.elasticsearch, Metrics(),
                                 max_backoff_s=config.batch.max_backoff_s) as sink:
        client = sink.client
        await client.refresh(table.alias)
        report.notes += await _old_checksums(client, table.alias)

        async def sums() -> tuple[dict[int, mysql.ChunkSum], dict[int, tuple[int, int]]]:
            progress("chunk sums", 0, 1)
            found = await asyncio.gather(_sql_sums(config, plan, parallel),
                                         _es_sums(client, table.alias, plan))
            progress("chunk sums", 1, 1)
            return found

        sql_sums, es_sums = await sums()
        report.rows = sum(s.rows for s in sql_sums.values())
        report.documents = sum(n for n, _ in es_sums.values())
        chunks = sorted(set(sql_sums) | set(es_sums))
        report.chunks = len(chunks)
        differing = [c for c in chunks if _sums(sql_sums, c) != es_sums.get(c, (0, 0))]
        report.chunks_differing = len(differing)

        async def differences(chunks: Sequence[int]) -> dict[str, str]:
            found = await _compare(config, client, table, plan, chunks, progress)
            found.update(await _unchunked(config, client, table, plan))
            return found

        found = await differences(differing)
        if found and settle_s > 0:
            # Changes made while we looked: give the daemon time, then look again.
            await asyncio.sleep(settle_s)
            await client.refresh(table.alias)
            again = await differences(_chunks_of(plan, found))
            report.rechecked = len(found)
            found = {i: kind for i, kind in again.items() if found.get(i) == kind}
        if repair and found:
            fix = sum(1 for kind in found.values() if kind != "extra")
            if fix >= REINDEX_MIN_ROWS and fix > REINDEX_ABOVE_SHARE * report.rows:
                report.repaired = await _rebuild_by_reindex(config, table, fix,
                                                            len(found) - fix, report, progress)
            else:
                report.repaired = await _repair(config, sink, table, builder, plan, found)
            await client.refresh(table.alias)
            repaired = _chunks_of(plan, found)
            if len(repaired) > RECHECK_BY_SUMS_ABOVE:  # the sums first: most now agree
                sql_sums, es_sums = await sums()
                repaired = [c for c in repaired
                            if _sums(sql_sums, c) != es_sums.get(c, (0, 0))]
            found = await differences(repaired)
        _fill(report, plan, found, sql_sums, es_sums)
    report.seconds = round(time.monotonic() - started, 3)
    return report


async def _rebuild_by_reindex(config: Config, table: TableConfig, fix: int, extras: int,
                              report: Report, progress: Progress) -> dict[str, int]:
    """``fix`` rows differ, ``extras`` documents have no row: a new index holds neither."""
    result = await reindex(config, table, progress=progress)
    report.notes.append(f"{fix:,} of {report.rows:,} rows differed: rebuilt by a reindex into "
                        f"{result.index} (the previous index is kept for `indexer reindex "
                        f"--rollback` until `indexer reindex --delete-old`)")
    return {"rewritten": result.written, "tombstoned": extras,
            "refused_as_newer": result.stale}


async def _old_checksums(client: SearchClient, alias: str) -> list[str]:
    notes = []
    for index in (await admin.alias_state(client, alias)).live:
        if (found := await admin.checksum_format(client, index)) < CHECKSUM_FORMAT:
            notes.append(f"index {index} was made by an indexer whose checksums (format "
                         f"{found}) differ from this one's ({CHECKSUM_FORMAT}): documents "
                         "written before the upgrade show as stale; `indexer reindex` (or "
                         "`reconcile --repair`) rewrites them")
    return notes


def _chunks_of(plan: _Plan, ids: dict[str, str]) -> list[int]:
    return sorted({plan.chunk_of(i) for i in ids} - {UNCHUNKED})


def _sums(sql_sums: dict[int, mysql.ChunkSum], chunk: int) -> tuple[int, int]:
    found = sql_sums.get(chunk)
    return (found.rows, found.hash_sum) if found else (0, 0)


def _plan(config: Config, table: TableConfig, builder: DocumentBuilder) -> _Plan:
    layout = mysql.read_layout(config.mysql, table.database, table.table)
    names = builder.field_names(c.name for c in layout.columns)
    fields = [(names[c.name], c) for c in layout.columns if c.name in names]
    if not layout.integer_key:
        return _Plan(layout, fields, 0)
    bounds = mysql.key_range(config.mysql, layout)
    if bounds is None:
        return _Plan(layout, fields, CHUNK_ROWS)
    low, high, rows = bounds
    chunks = min(MAX_CHUNKS, max(1, math.ceil(rows / CHUNK_ROWS)))
    return _Plan(layout, fields, max(1, math.ceil((high - low + 1) / chunks)), low, high)


async def _sql_sums(config: Config, plan: _Plan, parallel: int) -> dict[int, mysql.ChunkSum]:
    """The MySQL side of the chunk test, in ``parallel`` slices of whole chunks."""
    if not plan.width or plan.low is None or plan.high is None or parallel <= 1:
        return await asyncio.to_thread(mysql.chunk_sums, config.mysql, plan.layout,
                                       plan.fields, plan.width)
    # Whole chunks per slice; rows inserted beyond the bounds read earlier still count.
    slices = mysql.open_slices(plan.low // plan.width, plan.high // plan.width, parallel)
    parts = await asyncio.gather(*(
        asyncio.to_thread(mysql.chunk_sums, config.mysql, plan.layout, plan.fields,
                          plan.width, a, b) for a, b in slices))
    merged: dict[int, mysql.ChunkSum] = {}
    for part in parts:
        merged.update(part)
    return merged


_LIVE_DOCS = {"bool": {"must_not": [{"term": {f"{META_FIELD}.deleted": True}}]}}


async def _es_sums(client: SearchClient, alias: str,
                   plan: _Plan) -> dict[int, tuple[int, int]]:
    """chunk -> (documents, sum of hashes), in one aggregation request."""
    if plan.width:
        grouping: dict[str, Any] = {"histogram": {
            "field": f"{META_FIELD}.key", "interval": plan.width, "min_doc_count": 1}}
    else:
        grouping = {"terms": {"field": f"{META_FIELD}.bucket", "size": KEY_BUCKETS}}
    grouping["aggs"] = {"hash": {"sum": {"field": f"{META_FIELD}.hash"}}}
    response = await client.search(alias, {"size": 0, "query": _LIVE_DOCS,
                                           "aggs": {"chunks": grouping}}, timeout=600)
    sums = {}
    for bucket in response["aggregations"]["chunks"]["buckets"]:
        key = int(bucket["key"]) // plan.width if plan.width else int(bucket["key"])
        sums[key] = (int(bucket["doc_count"]), int(bucket["hash"]["value"]))
    return sums


async def _compare(config: Config, client: SearchClient, table: TableConfig,
                   plan: _Plan, chunks: Sequence[int], progress: Progress) -> dict[str, str]:
    """id -> "missing" | "extra" | "stale" for every difference inside these chunks."""
    found: dict[str, str] = {}
    groups = [list(chunks[i:i + DRILL_CHUNKS]) for i in range(0, len(chunks), DRILL_CHUNKS)]
    gate = asyncio.Semaphore(DRILL_PARALLEL)
    done = 0

    async def one(group: list[int]) -> None:
        nonlocal done
        async with gate:
            rows, docs = await asyncio.gather(
                asyncio.to_thread(mysql.chunk_rows, config.mysql, plan.layout, plan.fields,
                                  plan.width, group),
                _es_hashes(client, table.alias, plan, group))
        for doc_id, row_hash in rows.items():
            doc_hash = docs.pop(doc_id, None)
            if doc_hash is None:
                found[doc_id] = "missing"
            elif doc_hash != row_hash:
                found[doc_id] = "stale"
        for doc_id in docs:
            found[doc_id] = "extra"
        done += len(group)
        progress("compare chunks", done, len(chunks))

    progress("compare chunks", 0, len(chunks))
    await asyncio.gather(*(one(group) for group in groups))
    return found


async def _unchunked(config: Config, client: SearchClient, table: TableConfig,
                     plan: _Plan) -> dict[str, str]:
    """Documents without the indexer's chunk field were written behind its back: stale if
    their row exists, extra if not."""
    field_name = f"{META_FIELD}.key" if plan.width else f"{META_FIELD}.bucket"
    query = {"bool": {"must_not": [*_LIVE_DOCS["bool"]["must_not"],
                                   {"exists": {"field": field_name}}]}}
    ids = [hit["_id"] async for hit in client.scan(table.alias,
                                                     {"query": query, "_source": False})]
    if not ids:
        return {}
    candidates = [i for i in ids if not plan.width or _is_int(i)]
    snapshot = await asyncio.to_thread(mysql.Snapshot, config.mysql, plan.layout)
    try:
        rows = await asyncio.to_thread(snapshot.rows_for_ids, candidates)
    finally:
        snapshot.close()
    present = {document_id(key) for key, _ in rows}
    return {i: "stale" if i in present else "extra" for i in ids}


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


async def _es_hashes(client: SearchClient, alias: str, plan: _Plan,
                     chunks: Sequence[int]) -> dict[str, int]:
    if plan.width:
        scope: dict[str, Any] = {"bool": {"should": [
            {"range": {f"{META_FIELD}.key": {"gte": c * plan.width, "lt": (c + 1) * plan.width}}}
            for c in chunks]}}
    else:
        scope = {"terms": {f"{META_FIELD}.bucket": list(chunks)}}
    query = {"bool": {"filter": [scope], **_LIVE_DOCS["bool"]}}
    hashes = {}
    async for hit in client.scan(alias, {"query": query, "_source": False,
                                         "docvalue_fields": [f"{META_FIELD}.hash"]}, size=5000):
        values = hit.get("fields", {}).get(f"{META_FIELD}.hash") or [None]
        hashes[hit["_id"]] = int(values[0]) if values[0] is not None else -1
    return hashes


async def _repair(config: Config, sink: ElasticsearchSink, table: TableConfig,
                  builder: DocumentBuilder, plan: _Plan, found: dict[str, str]) -> dict[str, int]:
    """Rewrites missing and stale documents from a consistent snapshot, page by page (a
    whole table's worth streams like a reindex), then tombstones extras."""
    fix = [i for i, kind in found.items() if kind != "extra"]
    extras = [i for i, kind in found.items() if kind == "extra"]
    binlog = table.version.kind == "binlog"
    counts = {"rewritten": 0, "tombstoned": len(extras), "refused_as_newer": 0}

    async def write(ops: list[Op]) -> None:
        await sink.write(ops)
        counts["refused_as_newer"] += sum(1 for op in ops if op.outcome is Outcome.STALE)

    snapshot = await asyncio.to_thread(mysql.Snapshot, config.mysql, plan.layout)
    reading: asyncio.Task[list[tuple[mysql.Row, mysql.Row]] | None] | None = None
    writing: set[asyncio.Task[None]] = set()
    try:
        position = snapshot.position
        snapshot_version = 0
        if binlog:
            epoch = await StateStore(sink.client).snapshot_epoch(
                table.alias, file_number(position.file), position.pos, position.ts_ms,
                "repair")
            snapshot_version = pack_binlog_version(position.file, position.pos, 0, epoch)
        pages = snapshot.pages_for_ids(fix, config.batch.max_events)
        reading = asyncio.create_task(asyncio.to_thread(next, pages, None))
        while (page := await reading) is not None:
            reading = asyncio.create_task(asyncio.to_thread(next, pages, None))  # read ahead
            # Column versions: the document may carry the row's own version with other
            # content (changed behind the pipeline's back), so an equal version must win.
            ops = [Op(table.alias, builder.write_for_row(
                key, row, snapshot_version if binlog else builder.row_version(row)),
                version_type="external" if binlog else "external_gte") for key, row in page]
            if len(writing) >= config.batch.in_flight:  # as many bulks at once as the daemon
                done, writing = await asyncio.wait(writing, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            writing.add(asyncio.create_task(write(ops)))
            counts["rewritten"] += len(page)
        for task in writing:
            await task
    finally:
        for task in writing:
            task.cancel()
        await asyncio.gather(*writing, return_exceptions=True)
        if reading is not None:  # its thread uses the connection: let it end first
            await asyncio.wait([reading])
            if not reading.cancelled():
                reading.exception()  # raised or not, the error that ended the loop is told
        await asyncio.to_thread(snapshot.close)
    now_ms = int(time.time() * 1000)
    for start in range(0, len(extras), mysql.IDS_PER_LOOKUP):
        part = extras[start:start + mysql.IDS_PER_LOOKUP]
        versions = {} if binlog else await _versions(sink.client, table.alias, part)
        await write([Op(table.alias, Write(doc_id, snapshot_version if binlog
                                           else versions.get(doc_id, 0) + 1,
                                           tombstone(now_ms), True)) for doc_id in part])
    return counts


async def _versions(client: SearchClient, alias: str, ids: list[str]) -> dict[str, int]:
    response = await client.search(alias, {"size": len(ids), "version": True, "_source": False,
                                           "query": {"ids": {"values": ids}}})
    return {hit["_id"]: int(hit["_version"]) for hit in response["hits"]["hits"]}


def _fill(report: Report, plan: _Plan, found: dict[str, str],
          sql_sums: dict[int, mysql.ChunkSum], es_sums: dict[int, tuple[int, int]]) -> None:
    by_chunk: dict[int, ChunkDiff] = {}
    for doc_id, kind in sorted(found.items()):
        getattr(report, kind).append(doc_id)
        chunk = plan.chunk_of(doc_id)
        if chunk not in by_chunk:
            low, high = plan.bounds(chunk)
            by_chunk[chunk] = ChunkDiff(chunk, low, high, _sums(sql_sums, chunk)[0],
                                        es_sums.get(chunk, (0, 0))[0])
        setattr(by_chunk[chunk], kind, getattr(by_chunk[chunk], kind) + 1)
    report.differing_chunks = [by_chunk[c] for c in sorted(by_chunk)]
