"""`indexer check`: can the daemon do its job right now?"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from indexer.admin import alias_state
from indexer.config import Config
from indexer.sink.elasticsearch import connect


async def check_health(config: Config) -> list[str]:
    """Problems found (empty when healthy)."""
    problems: list[str] = []
    client = connect(config.elasticsearch)
    try:
        health = await client.cluster.health()
        if health.body.get("status") == "red":
            problems.append("elasticsearch: cluster status red")
        for table in config.tables:
            state = await alias_state(client, table.alias)
            if not state.live:
                problems.append(f"{table.name}: no index behind alias {table.alias!r} "
                                "(run `indexer mappings apply`)")
    except Exception as exc:
        problems.append(f"elasticsearch: {type(exc).__name__}: {exc}")
    finally:
        await client.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka.bootstrap_servers,
                                request_timeout_ms=5000)
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
