"""Routed tables on the search server: their indices require a routing, and where a document
is found is asked of the index itself when the write cannot know it from the change (a
joined document's rebuild, a repair, a tombstone for a row that is gone)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from indexer.core.documents import META_FIELD, leaving
from indexer.core.mappings import sync_alias
from indexer.core.writes import Op
from indexer.search.admin import alias_states
from indexer.search.client import SearchClient
from indexer.search.retry import retrying
from indexer.settings import TableConfig

# Ids per search: the server's default result window is 10,000 hits, and copies add some.
IDS_PER_SEARCH = 2000


async def placements(client: SearchClient, alias: str,
                     ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """id -> {routing: version} of the live documents with these ids in any index the table
    writes to (an id on several routings has copies: one of them is misplaced)."""
    found: dict[str, dict[str, int]] = {}
    for start in range(0, len(ids), IDS_PER_SEARCH):
        part = list(ids[start:start + IDS_PER_SEARCH])
        query = {"bool": {"filter": [{"ids": {"values": part}}],
                          "must_not": [{"term": {f"{META_FIELD}.deleted": True}}]}}
        async for hit in client.scan(sync_alias(alias), {"query": query, "_source": False,
                                                         "version": True}, size=5000):
            routing = hit.get("_routing", hit["_id"])
            where = found.setdefault(hit["_id"], {})
            where[routing] = max(where.get(routing, 0), int(hit.get("_version", 0)))
    return found


async def leave_elsewhere(client: SearchClient, alias: str, ops: Sequence[Op],
                          deleted_at_ms: int, max_backoff_s: float) -> None:
    """Gives each op's write a tombstone on every other routing its document is found under:
    a rebuild or repair writes where the document belongs now, wherever it was before. Asked
    until the server answers, as the writes themselves are."""
    ids = [op.write.id for op in ops]
    async for attempt in retrying(max_backoff_s):
        with attempt:
            found = await placements(client, alias, ids)
    for op in ops:
        if (where := found.get(op.write.id)) is not None:
            op.write = leaving(op.write, where, deleted_at_ms)


async def misrouted(client: SearchClient, tables: Iterable[TableConfig]) -> list[str]:
    """One line per table whose live index was made for another routing setting: its
    documents sit where the other setting put them, so only a reindex moves them."""
    routed = {t.alias: bool(t.routing) for t in tables if not t.canary}
    lines = []
    for alias, state in (await alias_states(client, routed)).items():
        if not state.live:
            continue
        mappings = await client.request("GET", f"/{','.join(state.live)}/_mapping")
        for index, body in (mappings or {}).items():
            required = bool(body.get("mappings", {}).get("_routing", {}).get("required"))
            if required != routed[alias]:
                now = "sets routing" if routed[alias] else "sets no routing"
                lines.append(f"{alias}: the table {now} but its index {index} was made "
                             f"{'with' if required else 'without'} one; `indexer reindex` "
                             "the table to place its documents by the setting")
    return lines
