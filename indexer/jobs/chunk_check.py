"""The chunk checksum comparison of MySQL and an index, shared by `indexer reconcile` and the
continuous verification of `indexer run`.

A table with one integer key is cut into key ranges of ``width`` values; any other table into
``KEY_BUCKETS`` buckets of crc32(id). Per chunk, MySQL computes COUNT(*) and SUM(CRC32(row
text)) in one scan and the search server the doc count and the sum of the stored
``_indexer.hash`` in one aggregation. Only differing chunks are compared row by row, giving
ids that are missing (row, no document), extra (document, no row) or stale (content differs).
A repair rewrites missing and stale rows from a consistent snapshot with versions (the
snapshot's binlog position, or the row's version column), and tombstones extras.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from indexer.core.documents import (
    KEY_BUCKETS,
    META_FIELD,
    Write,
    key_bucket,
    leaving,
    tombstone,
)
from indexer.core.layout import TableLayout
from indexer.core.writes import Op, Outcome
from indexer.jobs.table_reads import Reads, reads_for
from indexer.progress import Progress, no_progress
from indexer.search import routing
from indexer.search.client import SearchClient
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.mysql import checksum_sql, snapshots

log = logging.getLogger(__name__)

# About this many rows per chunk: small enough that a differing chunk is cheap to compare
# row by row, large enough that the chunk sums stay few (Elasticsearch allows 65k buckets).
CHUNK_ROWS = 2000
MAX_CHUNKS = 50_000
DRILL_CHUNKS = 64  # differing chunks compared per round trip
DRILL_PARALLEL = 4
# Stale documents compared field by field whatever the table's columns (the report names
# their differing fields); beyond, only where checksums may differ from documents.
DETAILED_STALE = 200
UNCHUNKED = -(2**63)  # the chunk of an id that cannot be an integer key
# The stored hash of an id found on several routings: no row's hash, so it is stale, and
# its repair leaves every routing but the row's.
COPIES = -2

LIVE_DOCS: dict[str, Any] = {"bool": {"must_not": [{"term": {f"{META_FIELD}.deleted": True}}]}}


@dataclass(frozen=True, slots=True)
class Difference:
    kind: str  # "missing" | "extra" | "stale"
    row_hash: int | None  # MySQL's hash of the row (None: no row)


Differences = dict[str, Difference]


@dataclass
class Plan:
    reads: Reads  # the table's documents in MySQL (its rows, or its joined trees)
    width: int  # key values per chunk (integer keys); 0 = id buckets
    low: int | None = None  # key bounds when the plan was made (integer keys)
    high: int | None = None

    @property
    def layout(self) -> TableLayout:
        return self.reads.layout

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
            return int(doc_id) // self.width if is_int(doc_id) else UNCHUNKED
        return key_bucket(doc_id)

    def chunks_of(self, ids: Iterable[str]) -> list[int]:
        return sorted({self.chunk_of(i) for i in ids} - {UNCHUNKED})


def is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def make_plan(config: Config, table: TableConfig,
              also: tuple[int, int] | None = None) -> Plan:
    """Reads the table's layout and key bounds (widened to ``also``, the index's, when given)
    and chooses the chunks. Blocking: run it in a thread."""
    plan = row_plan(config, table)
    layout, reads = plan.layout, plan.reads
    if not layout.integer_key:
        return plan
    bounds = checksum_sql.key_range(config.mysql, layout)
    if bounds is not None:
        low, high, rows = bounds
    elif also is not None:
        (low, high), rows = also, 0
    else:
        return Plan(reads, CHUNK_ROWS)
    if also is not None:
        low, high = min(low, also[0]), max(high, also[1])
    chunks = min(MAX_CHUNKS, max(1, math.ceil(rows / CHUNK_ROWS)))
    return Plan(reads, max(1, math.ceil((high - low + 1) / chunks)), low, high)


def row_plan(config: Config, table: TableConfig) -> Plan:
    """A plan for looking at rows by id only (no chunks, no key bounds to read)."""
    return Plan(reads_for(config, table), 0)


def sums_of(sql_sums: dict[int, checksum_sql.ChunkSum], chunk: int) -> tuple[int, int]:
    found = sql_sums.get(chunk)
    return (found.rows, found.hash_sum) if found else (0, 0)


def differing(sql_sums: dict[int, checksum_sql.ChunkSum],
              es_sums: dict[int, tuple[int, int]]) -> list[int]:
    return [c for c in sorted(set(sql_sums) | set(es_sums))
            if sums_of(sql_sums, c) != es_sums.get(c, (0, 0))]


async def sql_sums(config: Config, plan: Plan, parallel: int,
                   first: int | None = None, last: int | None = None,
                   ) -> dict[int, checksum_sql.ChunkSum]:
    """The MySQL side of the chunk test (chunks ``first``..``last`` of an integer key only,
    when given; None leaves that end open), in ``parallel`` slices of whole chunks."""
    whole = first is None and last is None
    if not plan.width or plan.low is None or plan.high is None or parallel <= 1 or not whole:
        return await asyncio.to_thread(plan.reads.chunk_sums, plan.width, first, last)
    # Whole chunks per slice; rows inserted beyond the bounds read earlier still count.
    slices = snapshots.open_slices(plan.low // plan.width, plan.high // plan.width, parallel)
    parts = await plan.reads.slices_sums(plan.width, slices)
    merged: dict[int, checksum_sql.ChunkSum] = {}
    for part in parts:
        merged.update(part)
    return merged


def key_filter(plan: Plan, first: int | None, last: int | None) -> dict[str, Any] | None:
    """The search-server query for chunks ``first``..``last`` of an integer key."""
    bounds = {}
    if first is not None:
        bounds["gte"] = first * plan.width
    if last is not None:
        bounds["lt"] = (last + 1) * plan.width
    return {"range": {f"{META_FIELD}.key": bounds}} if bounds else None


async def es_sums(client: SearchClient, alias: str, plan: Plan, first: int | None = None,
                  last: int | None = None) -> dict[int, tuple[int, int]]:
    """chunk -> (documents, sum of hashes), in one aggregation request."""
    if plan.width:
        grouping: dict[str, Any] = {"histogram": {
            "field": f"{META_FIELD}.key", "interval": plan.width, "min_doc_count": 1}}
    else:
        grouping = {"terms": {"field": f"{META_FIELD}.bucket", "size": KEY_BUCKETS}}
    grouping["aggs"] = {"hash": {"sum": {"field": f"{META_FIELD}.hash"}}}
    query: dict[str, Any] = LIVE_DOCS
    if (scope := key_filter(plan, first, last)) is not None:
        query = {"bool": {"filter": [scope], **LIVE_DOCS["bool"]}}
    response = await client.search(alias, {"size": 0, "query": query,
                                           "aggs": {"chunks": grouping}}, timeout=600)
    sums = {}
    for bucket in response["aggregations"]["chunks"]["buckets"]:
        key = int(bucket["key"]) // plan.width if plan.width else int(bucket["key"])
        sums[key] = (int(bucket["doc_count"]), int(bucket["hash"]["value"]))
    return sums


async def es_key_bounds(client: SearchClient, alias: str) -> tuple[int, int] | None:
    """(min, max) of the documents' integer keys (None: no document has one)."""
    response = await client.search(alias, {"size": 0, "query": LIVE_DOCS, "aggs": {
        "keys": {"stats": {"field": f"{META_FIELD}.key"}}}})
    stats = response["aggregations"]["keys"]
    if not stats.get("count"):
        return None
    return int(stats["min"]), int(stats["max"])


def compare_hashes(rows: dict[str, int], docs: dict[str, int]) -> Differences:
    """What differs between MySQL's id -> row hash and the index's id -> stored hash."""
    found: Differences = {}
    for doc_id, row_hash in rows.items():
        doc_hash = docs.get(doc_id)
        if doc_hash is None:
            found[doc_id] = Difference("missing", row_hash)
        elif doc_hash != row_hash:
            found[doc_id] = Difference("stale", row_hash)
    for doc_id in docs.keys() - rows.keys():
        found[doc_id] = Difference("extra", None)
    return found


async def compare_chunks(config: Config, client: SearchClient, table: TableConfig,
                         plan: Plan, chunks: Sequence[int],
                         progress: Progress = no_progress) -> Differences:
    """Every difference inside these chunks, row by row."""
    found: Differences = {}
    groups = [list(chunks[i:i + DRILL_CHUNKS]) for i in range(0, len(chunks), DRILL_CHUNKS)]
    gate = asyncio.Semaphore(DRILL_PARALLEL)
    done = 0

    async def one(group: list[int]) -> None:
        nonlocal done
        async with gate:
            rows, docs = await asyncio.gather(
                asyncio.to_thread(plan.reads.chunk_hashes, plan.width, group),
                es_hashes(client, table.alias, chunk_scope(plan, group)))
        found.update(compare_hashes(rows, docs))
        done += len(group)
        progress("compare chunks", done, len(chunks))

    progress("compare chunks", 0, len(chunks))
    await asyncio.gather(*(one(group) for group in groups))
    return found


async def compare_ids(config: Config, client: SearchClient, table: TableConfig, plan: Plan,
                      ids: Sequence[str]) -> Differences:
    """Differences among these ids (a row without a document is missing; an id with neither
    is not a difference; a document whose row is gone is extra)."""
    found: Differences = {}
    for start in range(0, len(ids), snapshots.IDS_PER_LOOKUP):
        part = list(ids[start:start + snapshots.IDS_PER_LOOKUP])
        rows, docs = await asyncio.gather(
            asyncio.to_thread(plan.reads.hashes_for_ids, part),
            es_hashes(client, table.alias, {"ids": {"values": part}}))
        found.update(compare_hashes(rows, docs))
    return found


@dataclass
class Confirmed:
    """Differences once stale candidates are compared as documents (:mod:`indexer.core.compare`)."""

    found: Differences  # what stands
    parts: dict[str, list[str]]  # stale id -> what differs in its document, where compared
    equal: list[str]  # candidates whose checksum text differs but whose documents are equal


async def confirmed(client: SearchClient, table: TableConfig, plan: Plan,
                    found: Differences) -> Confirmed:
    """Compares stale candidates' documents with MySQL's: only a document that differs is
    stale. A table whose checksum texts are exact for every column type it has (no JSON:
    MariaDB keeps a JSON string's escapes as stored) has its first DETAILED_STALE compared
    (for the report's fields), the rest only if one of those turned out equal."""
    stale = sorted(i for i, d in found.items() if d.kind == "stale")
    parts: dict[str, list[str]] = {}
    exact = plan.reads.exact_checksums
    for start in range(0, len(stale), snapshots.IDS_PER_LOOKUP):
        if exact and start >= DETAILED_STALE and all(parts.values()):
            break
        page = stale[start:start + snapshots.IDS_PER_LOOKUP]
        sources, copies = await es_sources(client, table.alias, page)
        parts.update(await asyncio.to_thread(plan.reads.what_differs, sources))
        parts.update({i: [f"_routing: {n} documents have this id"] for i, n in copies.items()})
    equal = sorted(i for i, p in parts.items() if not p)
    return Confirmed({i: d for i, d in found.items() if i not in parts or parts[i]},
                     {i: p for i, p in parts.items() if p}, equal)


async def es_hashes_for_ids(client: SearchClient, alias: str,
                            ids: Sequence[str]) -> dict[str, int]:
    """id -> stored hash of these documents, an ids query of at most IDS_PER_LOOKUP at a time
    (the server refuses more ids than its result window, 10,000 by default)."""
    found: dict[str, int] = {}
    for start in range(0, len(ids), snapshots.IDS_PER_LOOKUP):
        found.update(await es_hashes(client, alias, {"ids": {
            "values": list(ids[start:start + snapshots.IDS_PER_LOOKUP])}}))
    return found


async def es_sources(client: SearchClient, alias: str, ids: Sequence[str],
                     ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """id -> ``_source`` of these live documents (at most IDS_PER_LOOKUP at a time), and
    id -> how many documents have it, for ids found on several routings."""
    found: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for start in range(0, len(ids), snapshots.IDS_PER_LOOKUP):
        part = list(ids[start:start + snapshots.IDS_PER_LOOKUP])
        query = {"bool": {"filter": [{"ids": {"values": part}}], **LIVE_DOCS["bool"]}}
        async for hit in client.scan(alias, {"query": query}):
            found[hit["_id"]] = hit["_source"]
            counts[hit["_id"]] = counts.get(hit["_id"], 0) + 1
    return found, {i: n for i, n in counts.items() if n > 1}


def chunk_scope(plan: Plan, chunks: Sequence[int]) -> dict[str, Any]:
    if plan.width:
        return {"bool": {"should": [
            {"range": {f"{META_FIELD}.key": {"gte": c * plan.width, "lt": (c + 1) * plan.width}}}
            for c in chunks]}}
    return {"terms": {f"{META_FIELD}.bucket": list(chunks)}}


async def es_hashes(client: SearchClient, alias: str, scope: dict[str, Any]) -> dict[str, int]:
    """id -> stored hash of the live documents in ``scope`` (-1: a document without one;
    COPIES: several documents with the id, on different routings)."""
    query = {"bool": {"filter": [scope], **LIVE_DOCS["bool"]}}
    hashes = {}
    async for hit in client.scan(alias, {"query": query, "_source": False,
                                         "docvalue_fields": [f"{META_FIELD}.hash"]}, size=5000):
        values = hit.get("fields", {}).get(f"{META_FIELD}.hash") or [None]
        doc_id = hit["_id"]
        hashes[doc_id] = COPIES if doc_id in hashes else \
            int(values[0]) if values[0] is not None else -1
    return hashes


async def unchunked(config: Config, client: SearchClient, table: TableConfig,
                    plan: Plan) -> Differences:
    """Documents without the indexer's chunk field were written behind its back: stale if
    their row exists, extra if not."""
    field_name = f"{META_FIELD}.key" if plan.width else f"{META_FIELD}.bucket"
    query = {"bool": {"must_not": [*LIVE_DOCS["bool"]["must_not"],
                                   {"exists": {"field": field_name}}]}}
    ids = [hit["_id"] async for hit in client.scan(table.alias,
                                                     {"query": query, "_source": False})]
    if not ids:
        return {}
    candidates = [i for i in ids if not plan.width or is_int(i)]
    present = await asyncio.to_thread(plan.reads.present, candidates)
    return {i: Difference("stale", None) if i in present else Difference("extra", None)
            for i in ids}


async def repair(config: Config, sink: ElasticsearchSink, table: TableConfig, plan: Plan,
                 found: Differences) -> dict[str, int]:
    """Rewrites missing and stale documents from a consistent snapshot, page by page (a
    whole table's worth streams like a reindex), then tombstones extras. Counts what
    happened to each: rewritten, tombstoned, refused_as_newer (the index had a newer
    version: a change got there first) and refused (the search server would not take it)."""
    fix = [i for i, d in found.items() if d.kind != "extra"]
    extras = [i for i, d in found.items() if d.kind == "extra"]
    binlog = table.version.kind == "binlog"
    counts = {"rewritten": 0, "tombstoned": 0, "refused_as_newer": 0, "refused": 0}

    async def write(ops: list[Op]) -> None:
        await sink.write(ops)
        for op in ops:
            if op.outcome is Outcome.WRITTEN:
                counts["tombstoned" if op.write.deleted else "rewritten"] += 1
            elif op.outcome is Outcome.STALE:  # a newer change got there first
                counts["refused_as_newer"] += 1
            else:  # still differs: the re-check reports it
                counts["refused"] += 1
                log.error("repair of %s: row %s refused: %s: %s", table.name, op.write.id,
                          op.error_kind, op.error_reason)

    now_ms = int(time.time() * 1000)
    snapshot = await asyncio.to_thread(plan.reads.snapshot)
    reading: asyncio.Task[list[Write] | None] | None = None
    writing: set[asyncio.Task[None]] = set()
    try:
        position = snapshot.position
        snapshot_version = 0
        if binlog:
            snapshot_version = await StateStore(sink.client).snapshot_version(
                table.alias, position.file, position.pos, position.ts_ms, "repair")
        pages = snapshot.pages_for_ids(fix, config.batch.max_events,
                                       snapshot_version if binlog else None)
        reading = asyncio.create_task(asyncio.to_thread(next, pages, None))
        while (page := await reading) is not None:
            reading = asyncio.create_task(asyncio.to_thread(next, pages, None))  # read ahead
            # An equal version must win. Column versions: the document may carry the row's
            # own version with other content (changed behind the pipeline's back). Binlog
            # versions: only a snapshot at the same position (a reindex or repair with nothing
            # logged since) wrote one; this later read holds what changed without the binlog,
            # and a change logged after either has rows at a higher position, so it still wins.
            ops = [Op(table.alias, write, version_type="external_gte") for write in page]
            if table.routing:  # copies on other routings (a lost routing change) go
                await routing.leave_elsewhere(sink.client, table.alias, ops, now_ms,
                                              config.batch.max_backoff_s)
            if len(writing) >= config.batch.in_flight:  # as many bulks at once as the daemon
                done, writing = await asyncio.wait(writing, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            writing.add(asyncio.create_task(write(ops)))
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
    for start in range(0, len(extras), snapshots.IDS_PER_LOOKUP):
        part = extras[start:start + snapshots.IDS_PER_LOOKUP]
        # Where each is (every routing, for a routed table) and at which version.
        placed = await routing.placements(sink.client, table.alias, part)
        ops = []
        for doc_id in part:
            where = placed.get(doc_id) or {doc_id: 0}
            version = snapshot_version if binlog else max(where.values()) + 1
            first, *others = sorted(where)
            stone = Write(doc_id, version, tombstone(now_ms), True,
                          first if table.routing else None)
            ops.append(Op(table.alias, leaving(stone, others, now_ms),
                          version_type="external_gte" if binlog else "external"))
        await write(ops)
    return counts
