"""`indexer explain <table> <key>`: why does the search show what it shows for this row?

Side by side: the row in MySQL now (canonical values, projected as the document would be),
the document in every index of the table's aliases with its version decoded, the key's
latest events in Kafka (and whether the daemon's group has committed them), its dead
letters, and a verdict naming the fields that differ and the command that fixes it. With
the binlog source the versions name the binlog events, and the letters are the search
server's.
The verdict is pure (:func:`judge`); :func:`explain` gathers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from indexer.core import compare, conditions
from indexer.core.documents import META_FIELD, DocumentBuilder, document_id
from indexer.core.events import EnvelopeDecoder
from indexer.core.layout import TableLayout
from indexer.core.ownership import owner_of
from indexer.core.routing import routing_of, value_at
from indexer.core.sources import Epoch, Registry, partition_key
from indexer.core.streams import Stream
from indexer.core.versions import unpack_binlog_version
from indexer.core.writes import MAPPING_CONFLICT, MAPPING_ERRORS
from indexer.errors import DecodeError, OwnershipError
from indexer.jobs.ownership import look
from indexer.jobs.table_reads import reads_for
from indexer.search import dead_letters, pipelines
from indexer.search.admin import alias_state
from indexer.search.client import SearchClient
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig, VersionSource
from indexer.source.kafka.dead_letters import DeadLetter
from indexer.source.kafka.topics import Record, TopicReader, iso_time
from indexer.source.mysql import snapshots

EVENTS_SHOWN = 5  # the key's most recent events listed
# The binlog source's letters of a table read looking for the key (a letter holds its change:
# the key is not searchable).
LETTERS_READ = 1000
# Records read per partition looking for the key: ~3 s here (a 200,000-event topic: 4.5 s
# for the whole command, 131 MB peak RSS).
DEFAULT_SCAN_BUDGET = 50_000
# Dead-letter kinds that a mapping change fixes (letters of older versions carry the server's).
MAPPING_KINDS = (MAPPING_CONFLICT, *MAPPING_ERRORS)


@dataclass
class Found:
    """A document in one index."""

    index: str
    live: bool  # behind the read alias
    version: int
    version_decoded: dict[str, Any]
    deleted: bool
    source: dict[str, Any]  # without indexer's own block
    by_indexer: bool = True  # it has that block: indexer wrote it
    routing: str | None = None  # where a routed table's document lives


@dataclass
class Event:
    topic: str
    partition: int
    offset: int
    committed: bool  # the daemon's group has committed past it
    sent_at: str  # the record's Kafka timestamp
    op: str
    commit_time: str | None
    version: int | None
    error: str | None = None  # why it cannot be decoded


@dataclass
class Letter:
    offset: int  # in the dead-letter topic (the binlog source: the change's position)
    kind: str
    reason: str
    failed_at: str
    source_offset: int  # the change's (the binlog source: its position)
    binlog: str | None = None  # the binlog source: "file:pos row N" of the change


@dataclass
class Verdict:
    in_sync: bool
    summary: str
    differing_fields: list[str] = field(default_factory=list)
    fix: str | None = None


@dataclass
class Explanation:
    table: str
    id: str
    row: dict[str, Any] | None  # the document the row makes now (None: no such row)
    documents: list[Found]
    events: list[Event]
    dead_letters: list[Letter]
    scanned: int  # records read looking for events
    verdict: Verdict
    # A joined document's rows: (path in the document, "database.table", the row's id).
    made_of: list[tuple[str, str, str]] = field(default_factory=list)
    source: str = "kafka"  # where changes are read: "kafka" or "binlog"
    routing: str | None = None  # where a routed table's row says its document lives

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def describe_version(version: int, kind: VersionSource, epochs: list[Epoch]) -> dict[str, Any]:
    """A version as what it was made from: binlog coordinates (with their epoch) or the
    column's value."""
    if kind.kind == "column":
        return {"column": kind.column, "value": version}
    number, pos, row = unpack_binlog_version(version)
    epoch = max((e for e in epochs if e.tier <= number), key=lambda e: e.tier,
                default=Epoch(0, 0, 0))
    return {"binlog_file": number - epoch.tier + epoch.base, "position": pos, "row": row,
            "epoch": epoch.number}


def judge(table: TableConfig, row: dict[str, Any] | None, live: Found | None,
          events: list[Event], letters: list[Letter], left_out: str | None = None,
          set_by_pipeline: Sequence[str] = (), copies: int = 1,
          routing: str | None = None) -> Verdict:
    """In sync or not, what differs, and the command that fixes it. ``left_out``: the row
    exists, and why the table's where or deleted_when leaves it out of the index;
    ``set_by_pipeline``: the fields the table's ingest pipeline changes, not compared;
    ``copies``: live documents with the id (more than one: on several routings);
    ``routing``: the one the row names (a routed table's)."""
    deleted = live is None or live.deleted
    if copies > 1:
        return Verdict(False, f"stale: {copies} documents have this id, on different routings "
                              "(a routing change that did not reach the index)",
                       ["_routing"], f"indexer reconcile --repair {table.table}")
    if routing is not None and live is not None and not deleted and live.routing != routing:
        # Not a difference of content: reconcile does not see it; a reindex places it.
        return Verdict(False, f"misplaced: the document is under routing {live.routing!r}, "
                              f"the row names {routing!r}", ["_routing"],
                       f"indexer reindex {table.table}")
    if row is None and deleted:
        if left_out:
            what = f"the row is left out ({left_out}) and " + (
                "has no document" if live is None else
                f"its tombstone (version {live.version}) keeps it out of searches")
        else:
            what = "no row and no document" if live is None else (
                f"the row is deleted and its tombstone (version {live.version}) keeps it "
                "deleted")
        return Verdict(True, f"in sync: {what}")
    if row is not None and live is not None and not live.deleted:
        skipped = set(set_by_pipeline)
        fields = compare.stale_parts({k: v for k, v in row.items() if k not in skipped},
                                     {k: v for k, v in live.source.items() if k not in skipped},
                                     flat=not table.joins, by_indexer=live.by_indexer)
        if not fields:
            unseen = (f" (not compared: {', '.join(sorted(skipped))}, which ingest pipeline "
                      f"{table.pipeline!r} sets)" if skipped else "")
            return Verdict(True, f"in sync: the document (version {live.version}) matches "
                                 f"the row{unseen}")
        summary = f"stale: {len(fields)} fields differ from the row"
    elif row is not None:
        fields = sorted(row)
        summary = ("missing: the row exists but the index has " +
                   ("no document" if live is None else "a tombstone (deleted)"))
    else:
        fields = sorted(live.source) if live is not None else []
        summary = (f"extra: the row is left out ({left_out}) but the index has its document"
                   if left_out else
                   "extra: the index has a document for a row that does not exist")
    return Verdict(False, summary, fields, _fix(table, events, letters))


def _fix(table: TableConfig, events: list[Event], letters: list[Letter]) -> str:
    waiting = [e for e in events if not e.committed]
    if waiting:
        newest = waiting[0]
        return (f"wait: its change at {newest.topic}[{newest.partition}]@{newest.offset} is not "
                "written yet (is `indexer run` running? `indexer status` shows the lag)")
    if letters:
        letter = letters[0]
        replay = f"indexer dlq replay --table {table.table}"
        if letter.kind in MAPPING_KINDS:
            return (f"its change was dead-lettered ({letter.kind}: {letter.reason}): fix "
                    f"mappings/{table.mapping}, run `indexer reindex {table.table}`, then "
                    f"`{replay}`")
        return (f"its change was dead-lettered ({letter.kind}: {letter.reason}): fix the cause, "
                f"then `{replay}`")
    return f"indexer reconcile --repair {table.table}"


async def explain(config: Config, table: TableConfig, doc_id: str, *,
                  scan_budget: int = DEFAULT_SCAN_BUDGET) -> Explanation:
    builder = DocumentBuilder(table, config.mysql.server)
    reads = await asyncio.to_thread(reads_for, config, table)
    layout = reads.layout
    if layout.integer_key and not doc_id.removeprefix("-").isdigit():
        raise LookupError(f"{doc_id!r} cannot be a key of {table.name}: its primary key "
                          f"{layout.key[0].name} is an integer")
    document, made_of = await asyncio.to_thread(reads.now, doc_id)
    row = _json(document) if document is not None else None
    routing = None if document is None else await _routing(config, table, layout, doc_id,
                                                            document)
    left_out = None
    if document is None and (table.rows is not None or table.transform):
        # a row the rule or the transform leaves out, or none
        unruled = replace(layout, rows=None)
        found = await asyncio.to_thread(snapshots.rows_now, config.mysql, unruled, [doc_id])
        if found and table.rows is not None:
            left_out = conditions.left_out_by(table.rows, found[0][1])
        if found and left_out is None and table.transform:
            left_out = f"transform {table.transform} returns None for it"
    registry = Registry()
    async with SearchClient(config.elasticsearch) as client:
        # Another table's documents under the alias would be judged against this one's rows.
        if problems := (await look(client, table)).problems(owner_of(config, table)):
            raise OwnershipError(problems[0])
        if table.version.kind == "binlog":
            registry = await StateStore(client).load(table.alias)
        documents = await _documents(client, table, doc_id, registry.epochs)
        set_by: list[str] = []
        if table.pipeline and row is not None:  # compare what the pipeline leaves as written
            set_by = pipelines.touched(row, await pipelines.simulate(
                client, table.pipeline, doc_id, row))
        direct = config.source.kind == "binlog"
        if direct:  # it keeps no copy of its events to list; its letters are here
            letters = await _binlog_letters(client, config, table, doc_id)
    events: list[Event] = []
    scanned = 0
    if not direct:
        decoder = EnvelopeDecoder(config.connector, table.column_types)
        async with TopicReader(config.kafka) as reader:
            events, scanned = await _events(reader, config, table, decoder, builder, registry,
                                            doc_id, scan_budget)
            letters = await _letters(reader, config, table, decoder, doc_id, scan_budget)
    # A routed document leaves a tombstone on the routing it left: the document decides.
    live = next((d for d in documents if d.live and not d.deleted),
                next((d for d in documents if d.live), None))
    copies = sum(1 for d in documents if d.live and not d.deleted)
    return Explanation(table.name, doc_id, row, documents, events, letters, scanned,
                       judge(table, row, live, events, letters, left_out, set_by, copies,
                             routing),
                       made_of if table.joins else [],
                       config.source.kind, routing)


async def _routing(config: Config, table: TableConfig, layout: TableLayout, doc_id: str,
                   document: dict[str, Any]) -> str | None:
    """The routing the row names (None: the table is not routed): a joined document's from
    its field, a row's from its column, which the document may not hold."""
    if not table.routing:
        return None
    if table.joins:
        value = value_at(document, tuple(table.routing.split(".")))
    else:
        found = await asyncio.to_thread(snapshots.rows_now, config.mysql,
                                        replace(layout, rows=None), [doc_id])
        value = found[0][1].get(table.routing) if found else None
    return routing_of(value, doc_id, table.routing)


def _json(value: dict[str, Any]) -> dict[str, Any]:
    """As the document's JSON reads back: the form the index holds."""
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(value))
    return loaded


async def _documents(client: SearchClient, table: TableConfig, doc_id: str,
                     epochs: list[Epoch]) -> list[Found]:
    aliases = await alias_state(client, table.alias)
    found = []
    for index in sorted({*aliases.live, *aliases.synced}):
        hits = (await client.search(index, {"query": {"ids": {"values": [doc_id]}},
                                            "version": True}))["hits"]["hits"]
        for hit in hits:
            source = dict(hit["_source"])
            by_indexer = compare.written_by_indexer(source)
            meta = source.pop(META_FIELD, {}) or {}
            found.append(Found(index, index in aliases.live, int(hit["_version"]),
                               describe_version(int(hit["_version"]), table.version, epochs),
                               bool(meta.get("deleted")), source, by_indexer,
                               hit.get("_routing")))
    return sorted(found, key=lambda d: (not d.live, d.index))


def _key_matcher(decoder: EnvelopeDecoder, doc_id: str) -> Any:
    def match(record: Record) -> bool:
        try:
            return document_id(decoder.decode_key(record.key)) == doc_id
        except DecodeError:
            return False
    return match


async def _events(reader: TopicReader, config: Config, table: TableConfig,
                  decoder: EnvelopeDecoder, builder: DocumentBuilder, registry: Registry,
                  doc_id: str, budget: int) -> tuple[list[Event], int]:
    lags = {(p.topic, p.partition): p for p in
            await reader.lag(config.kafka.group_id, [table.topic])}
    match = _key_matcher(decoder, doc_id)
    events: list[Event] = []
    scanned = 0
    for (topic, partition), lag in sorted(lags.items()):
        records, covered = await reader.scan_back(Stream(topic, partition), match,
                                                  limit=EVENTS_SHOWN, budget=budget)
        scanned += covered
        for record in records:
            committed = lag.committed is not None and record.offset < lag.committed
            events.append(_event(record, committed, decoder, builder, registry))
    events.sort(key=lambda e: (e.sent_at, e.offset), reverse=True)
    return events[:EVENTS_SHOWN], scanned


def _event(record: Record, committed: bool, decoder: EnvelopeDecoder,
           builder: DocumentBuilder, registry: Registry) -> Event:
    event = Event(record.topic, record.partition, record.offset, committed,
                  iso_time(int(record.timestamp)), "?", None, None)
    try:
        change = decoder.decode(record.key, record.value)
        if change is None:
            event.op = "tombstone (Debezium's, after a delete)"
            return event
        event.op = change.op
        event.commit_time = iso_time(change.position.ts_ms)
        epoch = registry.epoch_at(partition_key(record.topic, record.partition), record.offset)
        event.version = builder.write_for_change(change, epoch).version
    except DecodeError as exc:
        event.error = f"{exc.kind}: {exc.reason}"
    return event


async def _letters(reader: TopicReader, config: Config, table: TableConfig,
                   decoder: EnvelopeDecoder, doc_id: str, budget: int) -> list[Letter]:
    key_match = _key_matcher(decoder, doc_id)
    found: list[Letter] = []

    def match(record: Record) -> bool:
        letter = DeadLetter.from_headers(record.headers)
        return letter is not None and letter.topic == table.topic and key_match(record)

    for tp in await reader.partitions(config.kafka.dead_letter_topic):
        records, _ = await reader.scan_back(tp, match, limit=EVENTS_SHOWN, budget=budget)
        for record in records:
            letter = DeadLetter.from_headers(record.headers)
            assert letter is not None
            found.append(Letter(record.offset, letter.kind, letter.reason, letter.failed_at,
                                letter.offset))
    return sorted(found, key=lambda x: x.failed_at, reverse=True)


async def _binlog_letters(client: SearchClient, config: Config, table: TableConfig,
                          doc_id: str) -> list[Letter]:
    """The key's dead letters among the table's newest in the search server."""
    found = []
    for letter in await dead_letters.letters_of(client, config.source.name, table.topic,
                                                LETTERS_READ):
        change = letter.get("change") or {}
        if not isinstance(change.get("key"), dict) or document_id(change["key"]) != doc_id:
            continue
        where = letter.get("binlog") or {}
        found.append(Letter(int(letter["position"]), str(letter["kind"]), str(letter["reason"]),
                            str(letter["failed_at"]), int(letter["position"]),
                            f"{where.get('file')}:{where.get('pos')} row {where.get('row')}"))
        if len(found) == EVENTS_SHOWN:
            break
    return found


def render_text(e: Explanation) -> list[str]:
    lines = [f"{e.table} id {e.id}", "", "MySQL now:"]
    lines.append(f"  {_line(e.row)}" if e.row is not None else "  no such row")
    if e.routing is not None:
        lines.append(f"  routing {e.routing!r}")
    if e.made_of:
        lines += ["", f"Made of {len(e.made_of)} rows:"]
        lines += [f"  {path or '(the document)'}: {table} id {row_id}"
                  for path, table, row_id in e.made_of]
    lines += ["", "Elasticsearch:"]
    if not e.documents:
        lines.append("  no document in any index of the table")
    for d in e.documents:
        where = "live" if d.live else "sync only (kept for --rollback)"
        version = ", ".join(f"{k} {v}" for k, v in d.version_decoded.items())
        routed = f", routing {d.routing!r}" if d.routing is not None else ""
        lines.append(f"  {d.index} ({where}{routed}): version {d.version} ({version})"
                     + (": tombstone (deleted)" if d.deleted else ""))
        if not d.deleted:
            lines.append(f"    {_line(d.source)}")
    joined = " (the document's own table; its joined tables' changes are not listed)" \
        if e.made_of else ""
    if e.source == "binlog":
        lines += ["", "Binlog: a document's version above names the change that wrote it (file, "
                      "position, row); the direct source keeps no copy of the events to list"]
    else:
        lines += ["", f"Kafka (newest first; {e.scanned:,} records looked at){joined}:"]
        if not e.events:
            lines.append("  no event for this key in the records looked at")
    for ev in e.events:
        state = "committed" if ev.committed else "NOT committed yet"
        detail = ev.error or f"op {ev.op}, commit time {ev.commit_time}, version {ev.version}"
        lines.append(f"  {ev.topic}[{ev.partition}]@{ev.offset}: {detail}; {state}")
    lines += ["", "Dead letters:"]
    if not e.dead_letters:
        lines.append("  none")
    for letter in e.dead_letters:
        origin = (f"{letter.binlog} ({letter.failed_at})" if letter.binlog is not None else
                  f"@{letter.offset} ({letter.failed_at}), from offset {letter.source_offset}")
        lines.append(f"  {origin}: {letter.kind}: {letter.reason}")
    v = e.verdict
    lines += ["", f"Verdict: {v.summary}"]
    if v.differing_fields:
        lines.append(f"  fields: {', '.join(v.differing_fields)}")
    if v.fix:
        lines.append(f"  fix: {v.fix}")
    return lines


def _line(doc: dict[str, Any]) -> str:
    return orjson.dumps(doc).decode()
