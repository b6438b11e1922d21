"""Index and alias management on Elasticsearch: create a table's index from its mapping file,
find what stands behind the aliases, purge old tombstones."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from elasticsearch import AsyncElasticsearch
from elasticsearch.helpers import async_scan

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

PURGE_BATCH = 2000


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

    Each delete is conditional on the tombstone's sequence number (``if_seq_no``): a row
    recreated meanwhile has a newer document, which the conditional delete leaves alone.
    Written with scan + bulk rather than delete-by-query, which minimal builds lack.
    """
    query = {"bool": {"filter": [
        {"term": {f"{META_FIELD}.deleted": True}},
        {"range": {f"{META_FIELD}.deleted_at": {"lt": older_than_ms}}},
    ]}}
    purged = 0
    actions: list[dict[str, Any]] = []

    async def flush() -> int:
        if not actions:
            return 0
        response = await client.bulk(operations=actions, refresh=True,
                                     filter_path="items.*.status")
        actions.clear()
        return sum(1 for item in response.body.get("items", [])
                   if item["delete"]["status"] == 200)

    async for hit in async_scan(client, index=sync_alias(alias), query={
            "query": query, "_source": False, "seq_no_primary_term": True}):
        actions.append({"delete": {"_index": hit["_index"], "_id": hit["_id"],
                                   "if_seq_no": hit["_seq_no"],
                                   "if_primary_term": hit["_primary_term"]}})
        if len(actions) >= PURGE_BATCH:
            purged += await flush()
    return purged + await flush()
