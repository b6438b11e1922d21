"""`indexer check`: can the daemon do its job right now?"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from indexer.admin import alias_state
from indexer.config import Config
from indexer.sink.search import SearchClient, SearchError, SearchUnavailable, TransportError
from indexer.sink.state import StateStore
from indexer.source.kafka import KafkaUnavailable, client_security, probe


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
    return problems
