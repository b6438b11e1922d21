"""`indexer mappings ...` and `indexer tombstones purge`: a table's index definition against
its columns in MySQL, the indices behind its aliases, whose they are, and their tombstones."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from indexer.core.field_types import SERVERS, Capabilities
from indexer.core.ownership import Owner
from indexer.core.tree_mappings import check, generate
from indexer.core.trees import Tree
from indexer.jobs.ownership import adopt, claim
from indexer.search.admin import (
    AliasState,
    definition_for,
    ensure_table_index,
    field_capabilities,
    purge_tombstones,
)
from indexer.search.client import SearchClient
from indexer.settings import Config, TableConfig
from indexer.source.mysql.trees import load_tree


async def tree_of(config: Config, table: TableConfig) -> Tree:
    """The table's document as MySQL's tables make it (with joins, every table of it; a join
    that cannot work raises with its reason)."""
    return await asyncio.to_thread(load_tree, config.mysql, table)


@dataclass
class Validation:
    """What `mappings validate` found for one table's mapping file."""

    source: str  # the mapping file
    problems: list[str] = field(default_factory=list)  # values it would refuse or lose
    notes: list[str] = field(default_factory=list)


async def validate(config: Config, table: TableConfig, *, files_only: bool) -> Validation:
    """The mapping file checked (raises MappingError), and against the live table."""
    definition = definition_for(config, table)
    found = Validation(str(definition.source))
    if not files_only:
        found.problems, found.notes = check(await tree_of(config, table), definition.mappings,
                                            table.new_columns)
    return found


async def capabilities(config: Config, server: str | None, alias: str) -> Capabilities:
    """The field types of ``server`` (es9, ...), or of the configured one, asked."""
    if server is not None:
        return SERVERS[server]
    async with SearchClient(config.elasticsearch) as client:
        return await field_capabilities(client, alias)


async def generated(config: Config, table: TableConfig, found: Capabilities) -> dict[str, Any]:
    """A mapping for the table's document that takes exactly what indexer writes."""
    return generate(await tree_of(config, table), found)


async def apply(config: Config, tables: Sequence[TableConfig]) -> list[AliasState]:
    """Each table's first index made from its mapping file where its alias has none (another
    table's index behind it is refused)."""
    states = []
    async with SearchClient(config.elasticsearch) as client:
        for table in tables:
            await claim(config, client, table)
            states.append(await ensure_table_index(client, config, table))
    return states


async def adopt_all(config: Config, tables: Sequence[TableConfig], *,
                    force: bool) -> list[list[tuple[str, Owner | None]]]:
    """Each table recorded as the owner of the indices behind its alias: per table, (index,
    the owner recorded before) for each changed."""
    async with SearchClient(config.elasticsearch) as client:
        return [await adopt(config, client, table, force=force) for table in tables]


async def purge(config: Config) -> list[int]:
    """Tombstones older than deletes.tombstone_retention_s deleted, per table."""
    cutoff_ms = int((time.time() - config.deletes.tombstone_retention_s) * 1000)
    purged = []
    async with SearchClient(config.elasticsearch) as client:
        for table in config.tables:
            await claim(config, client, table)
            purged.append(await purge_tombstones(client, table.alias, cutoff_ms))
    return purged
