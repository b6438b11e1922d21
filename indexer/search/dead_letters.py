"""Dead letters kept in the search server (the run wing's dead letters port where there is no
Kafka: the binlog source): one document per change that could not be written, with why, where
it was read (binlog coordinates and GTID) and the change itself (key and row images, as the
document builder got them), in the index ``indexer-dead-letters``.

A document's id is its deployment, stream and position: a change dead-lettered again after a
restart replaces its letter instead of adding one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from indexer.core.documents import META_FIELD
from indexer.core.streams import Delivery
from indexer.search.client import SearchClient, quote
from indexer.search.retry import retrying

DEAD_LETTER_INDEX = "indexer-dead-letters"
# Reasons longer than this are cut: a letter is no place for a 1 MB document echo.
MAX_REASON = 4000


def letter_for(source: str, delivery: Delivery, kind: str, reason: str, attempts: int,
               now: datetime | None = None) -> dict[str, Any]:
    stream = delivery.stream
    letter: dict[str, Any] = {
        "source": source, "stream": stream.name, "part": stream.part,
        "position": delivery.position, "kind": kind, "reason": reason[:MAX_REASON],
        "attempts": attempts,
        "failed_at": (now or datetime.now(UTC)).isoformat(timespec="milliseconds"),
    }
    change, built = delivery.change, delivery.built
    if change is not None:
        p = change.position
        # Canonical values are JSON already, but for what a bug may leave: text, not a loss.
        letter["change"] = orjson.loads(orjson.dumps(
            {"op": change.op, "key": change.key, "before": change.before,
             "after": change.after}, default=str))
    elif built is not None:  # its row is its document: the after image, without a before
        p = built.position
        after = orjson.loads(built.document)
        after.pop(META_FIELD, None)
        letter["change"] = {"op": built.op, "key": {built.key: after.get(built.key)},
                            "before": None, "after": after}
    else:
        return letter
    letter["binlog"] = {"file": p.file, "pos": p.pos, "row": p.row, "gtid": p.gtid,
                        "ts_ms": p.ts_ms, "connector": p.connector}
    return letter


class SearchDeadLetters:
    """The dead letters port on the search server: each letter stored until the server has it
    (the search server's retry policy: a letter is never lost)."""

    def __init__(self, client: SearchClient, source: str, max_backoff_s: float) -> None:
        self._client = client
        self._source = source
        self._max_backoff_s = max_backoff_s
        self._ready = False

    async def deliver(self, delivery: Delivery, kind: str, reason: str, attempts: int) -> None:
        letter = letter_for(self._source, delivery, kind, reason, attempts)
        doc_id = quote(f"{self._source}/{delivery.stream.key}/{delivery.position}", safe="")
        async for attempt in retrying(self._max_backoff_s):
            with attempt:
                await self._ensure_index()
                await self._client.request("PUT", f"/{DEAD_LETTER_INDEX}/_doc/{doc_id}", letter)

    async def _ensure_index(self) -> None:
        if self._ready:
            return
        # The change is kept, not searched: its fields would map as whatever came first.
        await self._client.own_index(DEAD_LETTER_INDEX, {"dynamic": False, "properties": {
            "source": {"type": "keyword"}, "stream": {"type": "keyword"},
            "kind": {"type": "keyword"}, "failed_at": {"type": "date"},
            "position": {"type": "long"}, "change": {"type": "object", "enabled": False}}})
        self._ready = True


async def letter_counts(client: SearchClient, source: str,
                        since_ms: int | None) -> dict[str, dict[str, int]]:
    """A source's dead letters since a time, per stream and kind."""
    if not await client.index_exists(DEAD_LETTER_INDEX):
        return {}
    query: list[dict[str, Any]] = [{"term": {"source": source}}]
    if since_ms is not None:
        query.append({"range": {"failed_at": {"gte": since_ms, "format": "epoch_millis"}}})
    found = await client.search(DEAD_LETTER_INDEX, {
        "size": 0, "query": {"bool": {"filter": query}},
        "aggs": {"streams": {"terms": {"field": "stream", "size": 1000}, "aggs": {
            "kinds": {"terms": {"field": "kind", "size": 100}}}}}})
    return {stream["key"]: {kind["key"]: int(kind["doc_count"])
                            for kind in stream["kinds"]["buckets"]}
            for stream in found["aggregations"]["streams"]["buckets"]}


async def letters_of(client: SearchClient, source: str, stream: str,
                     limit: int) -> list[dict[str, Any]]:
    """A stream's newest dead letters (their documents), newest first."""
    if not await client.index_exists(DEAD_LETTER_INDEX):
        return []
    found = await client.search(DEAD_LETTER_INDEX, {
        "size": limit, "sort": [{"failed_at": "desc"}],
        "query": {"bool": {"filter": [{"term": {"source": source}},
                                      {"term": {"stream": stream}}]}}})
    return [hit["_source"] for hit in found["hits"]["hits"]]
