"""`indexer source status|ack`: where binlog-versioned tables' changes come from, as the state
store records it (version epochs, stream cursors, source switches), and acknowledging the
switches an operator has checked."""

from __future__ import annotations

from collections.abc import Sequence

from indexer.core.sources import Registry
from indexer.search.client import SearchClient
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig


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
