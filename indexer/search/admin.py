"""Index and alias management on Elasticsearch: create a table's index from its mapping file,
find what stands behind the aliases, purge old tombstones."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from indexer.core.canary import CANARY_MAPPING
from indexer.core.checksums import CHECKSUM_FORMAT, CHECKSUM_META
from indexer.core.documents import META_FIELD
from indexer.core.field_types import SERVERS, Capabilities
from indexer.core.mappings import (
    READ_FILTER,
    IndexDefinition,
    alias_actions_for_new,
    new_index_name,
    sync_alias,
    validate_definition,
)
from indexer.core.ownership import OWNER_META, Owner, owner_in, owner_of
from indexer.errors import MappingError, OwnershipError
from indexer.search.client import SearchClient, SearchError
from indexer.search.servers import adapt_mappings
from indexer.settings import Config, TableConfig

log = logging.getLogger(__name__)

# Where a non-live index's mapping records that it refused writes the live one took.
MISSED_META = "indexer_missed_writes"

PURGE_BATCH = 2000


def load_definition(path: Path, alias: str) -> IndexDefinition:
    """A table's index definition from its mapping file, checked."""
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise MappingError(f"{path}: mapping file not found") from exc
    except orjson.JSONDecodeError as exc:
        raise MappingError(f"{path}: not valid JSON: {exc}") from exc
    return validate_definition(raw, alias, path)


def definition_for(config: Config, table: TableConfig) -> IndexDefinition:
    if table.canary:
        return validate_definition(CANARY_MAPPING, table.alias, Path("<the canary's mapping>"))
    definition = load_definition(config.elasticsearch.mappings_dir / table.mapping, table.alias)
    if table.routing:  # a write without a routing would land where no change finds it
        return replace(definition, mappings={**definition.mappings,
                                             "_routing": {"required": True}})
    return definition


@dataclass(frozen=True)
class AliasState:
    alias: str
    live: list[str]  # indices behind the read alias (normally one)
    synced: list[str]  # indices behind the sync alias


async def alias_state(client: SearchClient, alias: str) -> AliasState:
    return (await alias_states(client, [alias]))[alias]


async def alias_states(client: SearchClient, aliases: Iterable[str]) -> dict[str, AliasState]:
    """What stands behind each table alias and its sync alias, in one request."""
    live: dict[str, list[str]] = {a: [] for a in aliases}
    synced: dict[str, list[str]] = {sync_alias(a): [] for a in live}
    for index, names in (await client.aliases([*live, *synced])).items():
        for name in names:
            if name in live:
                live[name].append(index)
            if name in synced:
                synced[name].append(index)
    return {a: AliasState(a, sorted(live[a]), sorted(synced[sync_alias(a)])) for a in live}


async def create_index(client: SearchClient, definition: IndexDefinition, owner: Owner, *,
                       live: bool, bulk_load: bool = False) -> str:
    """Creates ``<alias>-v<timestamp>``, recording ``owner`` in its mapping's ``_meta``, and
    adds it to the sync alias (and read alias if live)."""
    index = new_index_name(definition.alias)
    body = definition.body(bulk_load=bulk_load)
    meta = body["mappings"].setdefault("_meta", {})
    meta[CHECKSUM_META] = CHECKSUM_FORMAT
    meta[OWNER_META] = owner.as_meta()
    assert client.server is not None
    body["mappings"], renamed = adapt_mappings(client.server, body["mappings"])
    for change in renamed:
        log.info("%s: field %s for %s", definition.source, change, client.server)
    await client.create_index(index, body)
    await client.update_aliases(alias_actions_for_new(definition.alias, index, live=live))
    log.info("created index %s for alias %s%s", index, definition.alias,
             "" if live else " (not live yet)")
    return index


async def ensure_table_index(client: SearchClient, config: Config,
                             table: TableConfig) -> AliasState:
    """Creates the table's first index when its alias does not exist yet (whoever owns an
    existing one is :mod:`indexer.jobs.ownership`'s question, asked first)."""
    state = await alias_state(client, table.alias)
    if state.live or state.synced:
        return state
    if await client.index_exists(table.alias):
        raise OwnershipError(f"{table.alias!r} is a concrete index, not an alias managed by "
                             "indexer; give the table another alias, or delete that index")
    await create_index(client, definition_for(config, table), owner_of(config, table),
                       live=True)
    return await alias_state(client, table.alias)


async def index_owners(client: SearchClient, indices: Iterable[str]) -> dict[str, Owner | None]:
    """index -> the owner its mapping records (None: none recorded), in one request."""
    wanted = sorted(set(indices))
    if not wanted:
        return {}
    found = await client.request("GET", f"/{','.join(wanted)}/_mapping",
                                 params={"filter_path": "*.mappings._meta"})
    return {index: owner_in((found.get(index) or {}).get("mappings", {}).get("_meta"))
            for index in wanted}


async def record_owner(client: SearchClient, index: str, owner: Owner) -> None:
    """Records ``owner`` in the index's mapping ``_meta`` (the rest of it kept)."""
    meta = await _meta(client, index)
    meta[OWNER_META] = owner.as_meta()
    await client.request("PUT", f"/{index}/_mapping", {"_meta": meta})


async def sample_documents(client: SearchClient, index: str,
                           size: int) -> list[dict[str, Any]]:
    """Up to ``size`` live documents of one index (``_id``, ``_source``)."""
    response = await client.search(index, {"size": size, "query": READ_FILTER})
    return [{"_id": hit["_id"], "_source": hit["_source"]} for hit in response["hits"]["hits"]]


async def mark_missed_writes(client: SearchClient, index: str, reason: str) -> None:
    """Records in the index's mapping ``_meta`` that it refused a write the live index took,
    so that `reindex --rollback` and the swap can tell. A put replaces the whole ``_meta``:
    what the mapping file put there is kept."""
    meta = await _meta(client, index)
    meta[MISSED_META] = {"since": datetime.now(UTC).isoformat(timespec="seconds"),
                         "reason": reason}
    await client.request("PUT", f"/{index}/_mapping", {"_meta": meta})


async def missed_writes(client: SearchClient, index: str) -> dict[str, Any] | None:
    """When and why a non-live index refused a write the live one took (None: it has not)."""
    mark = (await _meta(client, index)).get(MISSED_META)
    return mark if isinstance(mark, dict) else None


async def checksum_format(client: SearchClient, index: str) -> int:
    """The checksum format of the index's documents (1: made before the mark existed)."""
    found = (await _meta(client, index)).get(CHECKSUM_META)
    return found if isinstance(found, int) else 1


async def _meta(client: SearchClient, index: str) -> dict[str, Any]:
    found = await client.request("GET", f"/{index}/_mapping")
    meta = found.get(index, {}).get("mappings", {}).get("_meta")
    return dict(meta) if isinstance(meta, dict) else {}


async def field_capabilities(client: SearchClient, alias: str) -> Capabilities:
    """Which optional field types this server has (builds and distributions differ): each is
    tried on a throwaway index named after the table (``<alias>-probe-*``), then deleted."""
    server = client.server
    assert server is not None
    full = SERVERS[("es" if server.distribution == "elasticsearch" else "opensearch")
                   + str(server.version[0])]
    found: dict[str, bool] = {}
    for field_type, extra in (("unsigned_long", {}), ("scaled_float", {"scaling_factor": 100}),
                              ("geo_shape", {})):
        name = f"{alias}-probe-{secrets.token_hex(4)}"
        try:
            await client.create_index(name, {
                "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}},
                "mappings": {"properties": {"f": {"type": field_type, **extra}}}})
        except SearchError as exc:
            if exc.status != 400:
                raise
            found[field_type] = False
            continue
        found[field_type] = True
        await client.delete_index(name)
    return replace(full, name=f"{full.name} (this server)",
                   unsigned_long=found["unsigned_long"], scaled_float=found["scaled_float"],
                   geo_shape=found["geo_shape"])


async def purge_tombstones(client: SearchClient, alias: str, older_than_ms: int) -> int:
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
    actions: list[bytes] = []

    async def flush() -> int:
        if not actions:
            return 0
        response = await client.bulk(b"\n".join(actions) + b"\n", refresh=True,
                                     filter_path="items.*.status")
        actions.clear()
        return sum(1 for item in response.get("items", []) if item["delete"]["status"] == 200)

    async for hit in client.scan(sync_alias(alias), {
            "query": query, "_source": False, "seq_no_primary_term": True}):
        actions.append(orjson.dumps({"delete": {
            "_index": hit["_index"], "_id": hit["_id"], "if_seq_no": hit["_seq_no"],
            "if_primary_term": hit["_primary_term"]}}))
        if len(actions) >= PURGE_BATCH:
            purged += await flush()
    return purged + await flush()
