"""`indexer status`: where each table's pipeline stands, in one look.

Per table: the consumer group's lag per partition, the source commit time of the newest
change indexed and how long the oldest waiting change has waited, dead letters since a
time, the indices behind the read and sync aliases, tombstones, whether a daemon consumes,
source switches not acknowledged; plus the connectors' states when ``[connect]`` is set.
With the binlog source, instead of lag: its saved position against the binlog's end and the
MySQL connection that reads it; its dead letters are counted in the search server.
Gathering is I/O; :func:`table_problems` (what counts as unhealthy) is pure.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from indexer.core import trees
from indexer.core.documents import META_FIELD
from indexer.core.events import EnvelopeDecoder
from indexer.core.streams import Stream
from indexer.core.verification import record_problems
from indexer.errors import DecodeError
from indexer.jobs.health import (
    binlog_place,
    canary_report,
    connectors,
    place_problems,
    stall_problems,
)
from indexer.search import dead_letters
from indexer.search.admin import alias_state
from indexer.search.client import SearchClient
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.binlog.lock import reader_connection
from indexer.source.kafka.dead_letters import DeadLetter
from indexer.source.kafka.topics import PartitionLag, Record, TopicReader, iso_time
from indexer.source.mysql import retry as mysql_retry


@dataclass
class PartitionStatus:
    topic: str  # the table's, or (joined documents) a joined table's
    partition: int
    end: int
    committed: int | None
    lag: int
    indexed_up_to: str | None = None  # source commit time of the last change committed
    oldest_waiting_s: float | None = None  # age of the first change not yet committed


@dataclass
class TableStatus:
    table: str
    alias: str
    topic: str
    live: list[str]
    synced: list[str]
    documents: int | None = None
    tombstones: int | None = None
    partitions: list[PartitionStatus] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)  # kind -> count since
    unacknowledged_switches: int = 0
    verification: dict[str, Any] | None = None  # continuous verification's record
    # Joined documents whose children arrays were cut at their max, by the array's path.
    truncated: dict[str, int] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["lag"] = self.lag
        return data


@dataclass
class Status:
    group: str | None  # the Kafka consumer group (None: the binlog source)
    consumers: list[dict[str, Any]]
    dead_letters_since: str | None
    tables: list[TableStatus]
    connectors: list[dict[str, Any]] = field(default_factory=list)
    canary: dict[str, Any] | None = None  # where the newest beat is (canary.Sighting)
    problems: list[str] = field(default_factory=list)
    # The binlog source: its saved position, the binlog's end, bytes between, the reader.
    binlog: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "binlog": self.binlog, "consumers": self.consumers,
                "dead_letters_since": self.dead_letters_since, "connectors": self.connectors,
                "canary": self.canary, "tables": [t.as_json() for t in self.tables],
                "problems": self.problems, "healthy": not self.problems}


def table_problems(status: TableStatus, consumers: int | None) -> list[str]:
    """What is wrong with a table's pipeline (dead letters are reported, not a problem: each
    was logged with its reason and waits for `indexer dlq replay`); ``consumers``: the
    group's, None for the binlog source (no topics, no group)."""
    problems = []
    if not status.live:
        problems.append(f"{status.table}: no index behind alias {status.alias!r} "
                        "(run `indexer mappings apply`)")
    if consumers is not None and status.lag and not consumers:
        problems.append(f"{status.table}: {status.lag:,} changes wait in {status.topic} and no "
                        "daemon consumes them (is `indexer run` running?)")
    if consumers is not None and not status.partitions:
        problems.append(f"{status.table}: topic {status.topic!r} does not exist yet")
    if status.unacknowledged_switches:
        problems.append(f"{status.table}: {status.unacknowledged_switches} source switches "
                        "not acknowledged (`indexer source status`)")
    return problems


async def gather(config: Config, since_ms: int | None) -> Status:
    tables: dict[str, TableStatus] = {}
    async with SearchClient(config.elasticsearch) as client:
        state = StateStore(client)
        for table in config.tables:
            aliases = await alias_state(client, table.alias)
            status = TableStatus(table.name, table.alias, table.topic, aliases.live,
                                 aliases.synced)
            if aliases.live:
                status.documents = await client.count(table.alias)
                status.tombstones = await client.count(
                    ",".join(aliases.live), {"term": {f"{META_FIELD}.deleted": True}})
            if table.version.kind == "binlog":
                registry = await state.load(table.alias)
                status.unacknowledged_switches = len(registry.unacknowledged)
            status.verification = await state.verification(table.alias)
            if table.joins and aliases.live:
                status.truncated = await _truncated(client, table.alias)
            tables[table.topic] = status
        direct = (await _binlog_side(config, client, state, tables, since_ms)
                  if config.source.kind == "binlog" else None)
    result = direct or await _kafka_side(config, tables, since_ms)
    for status in result.tables:
        result.problems.extend(table_problems(status, len(result.consumers)
                                              if direct is None else None))
        result.problems.extend(record_problems(config.table(status.table), status.verification,
                                               config.verify))
    result.canary, problems = await canary_report(config)
    result.problems.extend(problems)
    return result


def _letters_by_table(config: Config, tables: dict[str, TableStatus]) -> dict[str, TableStatus]:
    """Each stream's table: a joined document's letters come from any table of its tree."""
    by_topic = {topic: tables[table.topic] for table in config.tables
                for topic in trees.tree_topics(table)}
    by_topic.update({table.topic: tables[table.topic] for table in config.tables})
    return by_topic


async def _kafka_side(config: Config, tables: dict[str, TableStatus],
                      since_ms: int | None) -> Status:
    group = config.kafka.group_id
    async with TopicReader(config.kafka) as reader:
        consumers = await reader.members(group)
        for table in config.tables:
            # A joined document's lag is that of every table of its tree.
            lags = await reader.lag(group, list(trees.tree_topics(table)))
            tables[table.topic].partitions = [
                await _partition(reader, config, table, lag) for lag in lags]
        # Counted fetch by fetch: a dead letter keeps its message, which may be megabytes.
        by_topic = _letters_by_table(config, tables)
        async for batch in reader.since(config.kafka.dead_letter_topic, since_ms):
            for record in batch:
                letter = DeadLetter.from_headers(record.headers)
                if letter is not None and letter.topic in by_topic:
                    kinds = by_topic[letter.topic].dead_letters
                    kinds[letter.kind] = kinds.get(letter.kind, 0) + 1
    states, problems = await connectors(config)
    return Status(group, consumers, iso_time(since_ms) if since_ms else None,
                  list(tables.values()), [s.as_json() for s in states],
                  problems=problems + await stall_problems(config))


async def _binlog_side(config: Config, client: SearchClient, state: StateStore,
                       tables: dict[str, TableStatus], since_ms: int | None) -> Status:
    """The binlog source: where its saved position stands against the binlog's end, which
    MySQL connection reads (the reader lock's holder), and its dead letters (in the search
    server)."""
    name = config.source.name
    by_topic = _letters_by_table(config, tables)
    for stream, kinds in (await dead_letters.letter_counts(client, name, since_ms)).items():
        if stream in by_topic:
            counted = by_topic[stream].dead_letters
            for kind, n in kinds.items():
                counted[kind] = counted.get(kind, 0) + n
    place = await binlog_place(config, state)
    saved, end = place.saved, place.files[-1] if place.files else None
    binlog: dict[str, Any] = {
        "name": name, "position": f"{saved['file']}:{saved['pos']}" if saved else None,
        "gtid": saved.get("gtid") if saved else None,
        "saved_at": saved.get("saved_at") if saved else None,
        "end": f"{end[0]}:{end[1]}" if end else None,
        "bytes_behind": place.behind(), "reader_connection": None}
    if place.error is not None:
        binlog["error"] = place.error
    problems = place_problems(name, place, datetime.now(UTC))
    consumers = []
    try:
        reader = await asyncio.to_thread(reader_connection, config.mysql, name)
    except mysql_retry.FAILURES as exc:
        binlog["error"] = str(exc)
    else:
        binlog["reader_connection"] = reader
        if reader is not None:
            consumers.append({"client_id": f"binlog reader (MySQL connection {reader})",
                              "host": f"{config.mysql.host}:{config.mysql.port}"})
        elif binlog["bytes_behind"]:
            problems.append(f"binlog source {name}: {binlog['bytes_behind']:,} bytes of binlog "
                            "wait and no daemon reads them (is `indexer run` running?)")
    return Status(None, consumers, iso_time(since_ms) if since_ms else None,
                  list(tables.values()), problems=problems, binlog=binlog)


async def _partition(reader: TopicReader, config: Config, table: TableConfig,
                     lag: PartitionLag) -> PartitionStatus:
    status = PartitionStatus(lag.topic, lag.partition, lag.end, lag.committed, lag.lag)
    if lag.committed is None or lag.committed <= 0:
        return status
    tp = Stream(lag.topic, lag.partition)
    decoder = EnvelopeDecoder(config.connector, table.column_types if lag.topic == table.topic
                              else {})
    # The last committed change: a few records back, past transaction markers and tombstones.
    done = await reader.read(tp, max(0, lag.committed - 5), lag.committed)
    for record in reversed(done):
        ts = _source_ms(decoder, record)
        if ts:
            status.indexed_up_to = iso_time(ts)
            break
    if lag.lag:
        waiting = await reader.read(tp, lag.committed, min(lag.end, lag.committed + 5))
        if waiting:
            ts = _source_ms(decoder, waiting[0]) or int(waiting[0].timestamp)
            status.oldest_waiting_s = round(max(0.0, time.time() - ts / 1000), 3)
    return status


async def _truncated(client: SearchClient, alias: str) -> dict[str, int]:
    """Documents whose children arrays were cut at their max, per array."""
    response = await client.search(alias, {"size": 0, "aggs": {"cut": {"terms": {
        "field": f"{META_FIELD}.truncated", "size": 100}}}})
    return {b["key"]: int(b["doc_count"]) for b in response["aggregations"]["cut"]["buckets"]}


def _source_ms(decoder: EnvelopeDecoder, record: Record) -> int | None:
    try:
        change = decoder.decode(record.key, record.value)
    except DecodeError:
        return None
    return change.position.ts_ms if change is not None else None


def render_text(status: Status) -> list[str]:
    """Plain lines: complete whatever reads them."""
    members = ", ".join(f"{m['client_id']}@{m['host']}" for m in status.consumers) or "none"
    if (b := status.binlog) is not None:
        reader = ("none reads it" if b["reader_connection"] is None
                  else f"read by MySQL connection {b['reader_connection']}")
        behind = "-" if b["bytes_behind"] is None else f"{b['bytes_behind']:,}"
        gtid = f", GTID {b['gtid']}" if b.get("gtid") else ""
        lines = [f"binlog source {b['name']}: {reader}; saved position {b['position'] or '-'}"
                 f"{gtid} (at {b['saved_at'] or '-'}), binlog end {b['end'] or '-'}, {behind} "
                 "bytes behind"]
    else:
        lines = [f"group {status.group}: consumers {members}"]
    for t in status.tables:
        dead = ", ".join(f"{k} {n:,}" for k, n in sorted(t.dead_letters.items())) or "none"
        lines.append(f"{t.table}: alias {t.alias} -> {', '.join(t.live) or 'nothing'}; "
                     f"sync -> {', '.join(t.synced) or 'nothing'}; documents "
                     f"{_n(t.documents)}, tombstones {_n(t.tombstones)}; "
                     + ("" if status.binlog is not None else f"lag {t.lag:,}; ")
                     + f"dead letters {dead}")
        for p in t.partitions:
            waiting = (f", oldest waiting {p.oldest_waiting_s:,.1f} s"
                       if p.oldest_waiting_s is not None else "")
            lines.append(f"  {p.topic}[{p.partition}]: end {p.end:,}, committed "
                         f"{_n(p.committed)}, lag {p.lag:,}, indexed up to "
                         f"{p.indexed_up_to or '-'}{waiting}")
        if t.truncated:
            cut = ", ".join(f"{path} {n:,}" for path, n in sorted(t.truncated.items()))
            lines.append(f"  documents with children cut at their max: {cut}")
        if (v := t.verification) is not None:
            lines.append(f"  verified: last whole pass {v.get('last_pass_at') or '-'} ("
                         f"{v.get('last_pass_s', '-')} s); rows differing and not repaired "
                         f"{v.get('unrepaired_count', 0):,}")
    if (c := status.canary) is not None:
        def where(beat: dict[str, Any] | None) -> str:
            return "-" if beat is None else f"beat {beat['seq']:,} ({beat['age_s']:,.1f} s ago)"

        if status.binlog is not None:
            lines.append(f"canary: written {where(c['written'])}, indexed "
                         f"{where(c['indexed'])}")
        else:
            heartbeat = c["heartbeat_age_s"]
            lines.append(f"canary: written {where(c['written'])}, in Kafka "
                         f"{where(c['in_kafka'])}, indexed {where(c['indexed'])}; Debezium "
                         "heartbeat " + ("-" if heartbeat is None else f"{heartbeat:,.1f} s ago"))
    for c in status.connectors:
        tasks = ", ".join(f"task {t['id']} {t['state']}" for t in c["tasks"]) or "no task"
        lines.append(f"connector {c['name']}: {c['state']} ({tasks})")
    lines.extend(f"unhealthy: {problem}" for problem in status.problems)
    return lines


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
