"""`indexer check`: can the daemon do its job right now?"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from indexer.admin import alias_state
from indexer.config import Config
from indexer.sink.search import SearchClient, SearchError, SearchUnavailable, TransportError
from indexer.sink.state import StateStore
from indexer.source.connect import (
    ConnectClient,
    ConnectorState,
    ConnectUnavailable,
    connector_problems,
)
from indexer.source.kafka import KafkaUnavailable, client_security, probe
from indexer.source.topics import TopicReader, age_s

HEARTBEAT_PREFIX = "__debezium-heartbeat"  # Debezium's heartbeat.topics.prefix default


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
    except SearchUnavailable as exc:
        problems.append(str(exc))
    except (SearchError, TransportError) as exc:
        problems.append(f"search server: {exc}")
    try:
        await probe(config.kafka)
    except KafkaUnavailable as exc:
        return [*problems, str(exc)]
    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka.bootstrap_servers,
                                request_timeout_ms=5000, **client_security(config.kafka))
    try:
        await admin.start()
        topics = set(await admin.list_topics())
        for table in config.tables:
            if table.topic not in topics:
                problems.append(f"{table.name}: topic {table.topic!r} does not exist yet")
    except Exception as exc:
        problems.append(f"kafka: {type(exc).__name__}: {exc}")
    finally:
        await admin.close()
    return problems + await connect_problems(config) + await stall_problems(config)


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
