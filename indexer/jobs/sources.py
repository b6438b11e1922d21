"""`indexer source status|ack|reset`: where binlog-versioned tables' changes come from, as the
state store records it (version epochs, stream cursors, source switches), acknowledging the
switches an operator has checked, and forgetting the binlog source's position when the
binlog no longer has it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from indexer.core.sources import Registry
from indexer.errors import ConfigError
from indexer.search.client import SearchClient
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.binlog.lock import reader_connection


async def registries(config: Config, tables: Sequence[TableConfig]) -> list[Registry]:
    """Each table's record of epochs, cursors and switches."""
    async with SearchClient(config.elasticsearch) as client:
        state = StateStore(client)
        return [await state.load(table.alias) for table in tables]


async def acknowledge(config: Config, tables: Sequence[TableConfig]) -> list[int]:
    """Marks every switch seen as acknowledged; how many, per table."""
    async with SearchClient(config.elasticsearch) as client:
        state = StateStore(client)
        return [(await state.update(table.alias, Registry.acknowledge))[1] for table in tables]


async def reset_position(config: Config) -> dict[str, Any] | None:
    """Forgets the binlog source's saved position, so that the next `indexer run` loads every
    table from a snapshot and reads on from the binlog's end; refused while a daemon reads."""
    if config.source.kind != "binlog":
        raise ConfigError("`indexer source reset` is for the binlog source ([source] kind = "
                          "\"binlog\"); Kafka's consumer group keeps its own offsets")
    reader = await asyncio.to_thread(reader_connection, config.mysql, config.source.name)
    if reader is not None:
        raise ConfigError(f"binlog source {config.source.name}: a daemon reads the binlog now "
                          f"(MySQL connection {reader}); stop every `indexer run` of it first")
    async with SearchClient(config.elasticsearch) as client:
        return await StateStore(client).forget_binlog_position(config.source.name)
