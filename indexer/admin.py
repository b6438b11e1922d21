"""Index and alias management on Elasticsearch: create a table's index from its mapping file,
find what stands behind the aliases, purge old tombstones."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from elasticsearch import AsyncElasticsearch

from indexer.config import Config, TableConfig
from indexer.documents import META_FIELD
from indexer.mappings import (
    IndexDefinition,
    alias_actions_for_new,
    load_definition,
    new_index_name,
    sync_alias,
)

log = logging.getLogger(__name__)


def definition_for(config: Config, table: TableConfig) -> IndexDefinition:
    return load_definition(config.elasticsearch.mappings_dir / table.mapping, table.alias)


@dataclass(frozen=True)
class AliasState:
    alias: str
    live: list[str]  # indices behind the read alias (normally one)
    synced: list[str]  # indices behind the sync alias


async def alias_state(client: AsyncElasticsearch, alias: str) -> AliasState:
    live: list[str] = []
    synced: list[str] = []
    response = await client.options(ignore_status=404).indices.get_alias(
        name=[alias, sync_alias(alias)]
    )
    for index, entry in response.body.items():
        if not isinstance(entry, dict):
            continue
        names = entry.get("aliases", {})
        if alias in names:
            live.append(index)
        if sync_alias(alias) in names:
            synced.append(index)
    return AliasState(alias, sorted(live), sorted(synced))


async def create_index(client: AsyncElasticsearch, definition: IndexDefinition, *,
                       live: bool, bulk_load: bool = False) -> str:
    """Creates ``<alias>-v<timestamp>`` and adds it to the sync alias (and read alias if live)."""
    index = new_index_name(definition.alias)
    await client.indices.create(index=index, **definition.body(bulk_load=bulk_load))
    await client.indices.update_aliases(
        actions=alias_actions_for_new(definition.alias, index, live=live)
    )
    log.info("created index %s for alias %s%s", index, definition.alias,
             "" if live else " (not live yet)")
    return index


async def ensure_table_index(client: AsyncElasticsearch, config: Config,
                             table: TableConfig) -> AliasState:
    """Creates the table's first index when its alias does not exist yet."""
    state = await alias_state(client, table.alias)
    if state.live or state.synced:
        return state
    if await client.indices.exists(index=table.alias):
        raise RuntimeError(f"{table.alias!r} is a concrete index, not an alias managed by "
                           "indexer; reindex into a new index or delete it")
    await create_index(client, definition_for(config, table), live=True)
    return await alias_state(client, table.alias)


async def purge_tombstones(client: AsyncElasticsearch, alias: str, older_than_ms: int) -> int:
    """Deletes tombstones older than the retention window from every synced index.

    Uses the documents' own versions (no external version): a row recreated meanwhile has a
    newer document, which delete-by-query leaves alone on conflict.
    """
    response = await client.delete_by_query(
        index=sync_alias(alias),
        query={"bool": {"filter": [
            {"term": {f"{META_FIELD}.deleted": True}},
            {"range": {f"{META_FIELD}.deleted_at": {"lt": older_than_ms}}},
        ]}},
        conflicts="proceed",
        refresh=True,
    )
    return int(response.body.get("deleted", 0))
