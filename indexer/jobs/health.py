"""`indexer check`: can the daemon do its job right now?"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from indexer.core import canary, trees
from indexer.core.canary import Beat, Sighting
from indexer.core.events import EnvelopeDecoder
from indexer.core.ownership import owner_of
from indexer.core.verification import record_problems
from indexer.errors import (
    ConnectUnavailable,
    DecodeError,
    JoinError,
    KafkaUnavailable,
    MissingTable,
    SearchUnavailable,
)
from indexer.jobs.ownership import look
from indexer.search import pipelines, routing
from indexer.search.admin import alias_state
from indexer.search.client import SearchClient, SearchError, TransportError, quote
from indexer.search.state import StateStore
from indexer.security import redact_url
from indexer.settings import Config, TableConfig
from indexer.source.binlog.replication import RELOAD_HINT, binlog_files, bytes_behind
from indexer.source.canary_table import read_beat
from indexer.source.kafka.clients import FAILURES as kafka_failures
from indexer.source.kafka.clients import TOPIC_HINT, missing_topics, probe
from indexer.source.kafka.connect import ConnectClient, ConnectorState, connector_problems
from indexer.source.kafka.topics import TopicReader, age_s
from indexer.source.mysql import retry as mysql_retry
from indexer.source.mysql.schema import missing_table
from indexer.source.mysql.trees import load_tree

HEARTBEAT_PREFIX = "__debezium-heartbeat"  # Debezium's heartbeat.topics.prefix default
# Records read back from the canary topic's end for the group's newest beat: other groups'
# beats share the topic, one every few seconds each.
CANARY_SCAN = 500
# The binlog source saves its position every second while it moves: still this long, with
# the binlog ahead of it, it is stalled.
STALLED_S = 60.0

# A table's layout cannot be read: MySQL away or refusing, or the table is not there.
_UNREADABLE: tuple[type[Exception], ...] = (LookupError, *mysql_retry.FAILURES)


async def check_health(config: Config) -> list[str]:
    """Problems found (empty when healthy). Settings the servers refuse (credentials, TLS, an
    unsupported server) raise ConfigError instead: they are errors, not ill health."""
    problems: list[str] = []
    try:
        async with SearchClient(config.elasticsearch) as client:
            health = await client.health()
            if health.get("status") == "red":
                problems.append(f"search server ({client.server}): cluster status red")
            store = StateStore(client)
            canary = (config.canary_table,) if config.canary_table else ()
            for table in (*config.tables, *canary):  # another table's index behind an alias
                problems += (await look(client, table)).problems(owner_of(config, table))
            problems += await pipelines.missing(client, config.tables)
            problems += await routing.misrouted(client, config.tables)
            for table in config.tables:
                state = await alias_state(client, table.alias)
                if not state.live:
                    problems.append(f"{table.name}: no index behind alias {table.alias!r} "
                                    "(run `indexer mappings apply`)")
                if table.version.kind == "binlog":
                    for switch in (await store.load(table.alias)).unacknowledged:
                        problems.append(
                            f"{table.name}: source switch at {switch['at']} ({switch['where']}): "
                            f"{switch['reason']}; now in version epoch {switch['epoch']}. Check "
                            f"with `indexer reconcile {table.table}`, then `indexer source ack "
                            f"{table.table}`")
                problems += record_problems(table, await store.verification(table.alias),
                                            config.verify)
            if config.source.kind == "binlog":
                problems += await binlog_problems(config, store)
    except SearchUnavailable as exc:
        problems.append(str(exc))
    except (SearchError, TransportError) as exc:
        problems.append(f"search server: {exc}")
    if config.source.kind == "binlog":
        return (problems + await missing_tables(config)
                + (await canary_report(config))[1])
    try:
        await probe(config.kafka)
    except KafkaUnavailable as exc:
        return [*problems, str(exc)]
    try:
        wanted = {topic: (table, name) for table in config.tables
                  for topic, name in trees.tree_topics(table).items()}  # joined tables' too
        for topic in await missing_topics(config.kafka, list(wanted), timeout_ms=5000):
            table, name = wanted[topic]
            joined = "" if name == table.name else f" (joined: {name})"
            problems.append(f"{table.name}: topic {topic!r}{joined} does not exist yet "
                            f"({TOPIC_HINT})")
    except Exception as exc:
        problems.append(f"kafka: {type(exc).__name__}: {exc}")
    return (problems + await missing_tables(config) + await connect_problems(config)
            + await stall_problems(config) + (await canary_report(config))[1])


@dataclass
class BinlogPlace:
    """The binlog source's saved position beside the server's binlog, as read once."""

    saved: dict[str, Any] | None  # None: no first start finished yet
    server_id: int = 0
    files: list[tuple[str, int]] = field(default_factory=list)  # (name, size), oldest first
    error: str | None = None  # MySQL could not be asked

    def behind(self) -> int | None:
        """Bytes of binlog after the saved position (None: not known, or purged)."""
        if self.saved is None or self.error is not None:
            return None
        return bytes_behind(self.files, str(self.saved["file"]), int(self.saved["pos"]))


async def binlog_place(config: Config, store: StateStore) -> BinlogPlace:
    saved = await store.binlog_position(config.source.name)
    try:
        server_id, files = await asyncio.to_thread(binlog_files, config.mysql)
    except mysql_retry.FAILURES as exc:
        return BinlogPlace(saved, error=str(exc))
    return BinlogPlace(saved, server_id, files)


async def binlog_problems(config: Config, store: StateStore) -> list[str]:
    return place_problems(config.source.name, await binlog_place(config, store),
                          datetime.now(UTC))


def place_problems(name: str, place: BinlogPlace, now: datetime) -> list[str]:
    """The binlog source: no position yet, a position the binlog no longer has (or another
    server's), or one that stopped moving while the binlog grows."""
    where = f"binlog source {name}"
    saved = place.saved
    if saved is None:
        return [f"{where}: no saved position: `indexer run` has not finished its first start "
                "(it loads every table, then reads the binlog)"]
    if place.error is not None:
        return [f"{where}: cannot list MySQL's binlog files ({place.error})"]
    file, pos = str(saved["file"]), int(saved["pos"])
    if saved.get("server_id") is not None and int(saved["server_id"]) != place.server_id:
        if saved.get("gtid"):  # a fail-over: `indexer run` reads on from the GTID position
            return []
        return [f"{where}: its position {file}:{pos} belongs to server_id {saved['server_id']}, "
                f"and the server is now server_id {place.server_id} (a fail-over?): `indexer "
                f"run` cannot resume; {RELOAD_HINT}"]
    behind = place.behind()
    if behind is None:
        return [f"{where}: the binlog no longer has its position {file}:{pos} (purged): "
                f"`indexer run` cannot resume; {RELOAD_HINT}"]
    saved_at = datetime.fromisoformat(str(saved.get("saved_at", "1970-01-01T00:00:00+00:00")))
    still_s = (now - saved_at).total_seconds()
    if behind and still_s > STALLED_S:
        return [f"{where}: its position ({file}:{pos}) has not moved for {still_s:,.0f} s while "
                f"the binlog is {behind:,} bytes ahead: is `indexer run` running? (its log "
                "says why not)"]
    return []


async def missing_tables(config: Config) -> list[str]:
    """The configured tables MySQL says it does not have, and joins that cannot work
    (MySQL away: nothing said here)."""
    async def missing(table: TableConfig) -> str | None:
        try:
            await asyncio.to_thread(load_tree, config.mysql, table)
        except MissingTable as exc:
            return missing_table(config.mysql, table, exc)
        except JoinError as exc:
            return str(exc)
        except _UNREADABLE:
            return None
        return None

    found = await asyncio.gather(*(missing(t) for t in config.tables))
    return [problem for problem in found if problem is not None]


async def connect_problems(config: Config) -> list[str]:
    return (await connectors(config))[1]


async def connectors(config: Config) -> tuple[list[ConnectorState], list[str]]:
    """The watched connectors' states, and those not RUNNING as problems (with ``[connect]``
    set; nothing without it)."""
    settings = config.connect
    if settings.url is None:
        return [], []
    try:
        async with ConnectClient(settings) as connect:
            states = await connect.states()
    except ConnectUnavailable as exc:
        return [], [str(exc)]
    watched = [s for s in states if not settings.connectors or s.name in settings.connectors]
    return watched, connector_problems(settings.url, states, settings.connectors)


def heartbeat_topic(config: Config) -> str:
    return f"{HEARTBEAT_PREFIX}.{config.connector.topic_prefix}"


async def stall_problems(config: Config) -> list[str]:
    """With ``health.max_source_age_s``: the newest event in the tables' topics (and
    Debezium's heartbeat topic) is older than that. Seen without Kafka Connect's API."""
    bound = config.health.max_source_age_s
    if not bound:
        return []
    topics = [t.topic for t in config.tables] + [heartbeat_topic(config)]
    async with TopicReader(config.kafka) as reader:
        ages = [age_s(r) for topic in topics if (r := await reader.newest(topic)) is not None]
    if ages and min(ages) <= bound:
        return []
    newest = f"is {min(ages):,.0f} s old" if ages else "does not exist"
    hint = "" if config.connect.url else " (set [connect] to check it)"
    return [f"no source event for longer than health.max_source_age_s ({bound:g} s): the "
            f"newest event in the tables' topics and {heartbeat_topic(config)} {newest}. Is "
            f"the connector running{hint}? A quiet database looks the same unless the "
            "connector sends heartbeats (heartbeat.interval.ms, heartbeat.action.query)"]


async def canary_report(config: Config) -> tuple[dict[str, Any] | None, list[str]]:
    """Where the group's newest canary beat is (MySQL, Kafka, the index) and what that says
    is wrong; (None, []) with the canary off."""
    table = config.canary_table
    if table is None:
        return None, []
    group = config.deployment
    now_ms = int(time.time() * 1000)
    try:
        written, primary = await asyncio.to_thread(read_beat, config.canary_mysql, table, group)
    except mysql_retry.FAILURES as exc:
        return None, [f"canary {table.name}: cannot read it from MySQL ({exc})"]
    # A server that is away is reported on its own; the canary says what the others show.
    indexed, index_read = None, True
    try:
        async with SearchClient(config.elasticsearch) as client:
            found = await client.request("GET", f"/{table.alias}/_doc/{quote(group)}",
                                         ok=(404,))
        source = found.get("_source") if found and found.get("found") else None
        if isinstance(source, dict) and "seq" in source:
            indexed = Beat.from_row(source)
    except (SearchUnavailable, SearchError, TransportError):
        index_read = False
    in_kafka, heartbeat, kafka_read = None, None, True
    direct = config.source.kind == "binlog"
    try:
        if not direct:
            async with TopicReader(config.kafka) as reader:
                in_kafka = await _newest_beat(reader, config, table)
                heartbeat = await reader.newest(heartbeat_topic(config))
    except kafka_failures:
        kafka_read = False
    seen = Sighting(written, in_kafka, indexed, age_s(heartbeat) if heartbeat else None,
                    kafka_read, index_read, direct)
    hint = ""
    if config.connect.url:
        hint = (f" (curl -X POST '{redact_url(config.connect.url).rstrip('/')}/connectors/"
                "<name>/restart?includeTasks=true')")
    problems = canary.problems(config.canary, table, group, seen, now_ms, hint)
    if primary is not None:
        mysql = config.canary_mysql
        problems.insert(0, f"canary {table.name}: no beat is written into {mysql.host}:"
                           f"{mysql.port}, a replica of {primary}; set [canary] mysql_host and "
                           "mysql_port to the primary")
    return seen.as_json(now_ms), problems


async def _newest_beat(reader: TopicReader, config: Config, table: TableConfig) -> Beat | None:
    decoder = EnvelopeDecoder(config.connector, table.column_types)
    group = config.kafka.group_id
    newest: Beat | None = None
    for tp in await reader.partitions(table.topic):
        for record in (await reader.scan_back(tp, lambda r: r.value is not None,
                                              limit=CANARY_SCAN, budget=CANARY_SCAN))[0]:
            try:
                change = decoder.decode(record.key, record.value)
            except DecodeError:
                continue
            if change is None or change.after is None or change.key.get("group_id") != group:
                continue
            beat = Beat.from_row(change.after)
            if newest is None or beat.seq > newest.seq:
                newest = beat
            break  # newest first: the rest of this partition is older
    return newest
