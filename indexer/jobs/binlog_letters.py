"""`indexer dlq replay` on the binlog source: its dead letters (the index
``indexer-dead-letters``, each holding the change it was about) written again after a fix.

Each is written as the daemon would have written it: the document built from the change's row
image, at the version of its binlog coordinates in the epoch of its position. So a letter
about a row changed since loses to the newer document (stale: nothing to write), and a delete
stays a tombstone. A letter written, or found stale, is removed; one refused again is kept with
the new reason. Letters without a change (a rows event that could not be read, a TRUNCATE) and
letters of joined documents are not replayed: their reasons and the report say what to run
instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from indexer.core import trees
from indexer.core.documents import DocumentBuilder
from indexer.core.envelope import Position
from indexer.core.events import Change
from indexer.core.streams import Stream
from indexer.core.writes import Op, Outcome
from indexer.metrics import Metrics
from indexer.search.client import SearchClient
from indexer.search.dead_letters import DEAD_LETTER_INDEX
from indexer.search.sink import ElasticsearchSink
from indexer.search.state import StateStore
from indexer.settings import Config, TableConfig
from indexer.source.kafka.dead_letters import ReplayReport

log = logging.getLogger(__name__)

# Letters read and written per bulk: as many as a daemon's batch holds by default.
PAGE = 500


@dataclass
class LetterReplay(ReplayReport):
    """``replayed``: written; ``stale``: older than the document (nothing to write);
    ``refused``: refused again (kept, with the new reason); ``skipped``: not replayable here."""

    stale: int = 0
    refused: int = 0
    skipped: int = 0


async def replay_letters(config: Config, tables: Sequence[TableConfig], kinds: Sequence[str],
                         since: datetime | None, *, dry_run: bool) -> LetterReplay:
    chosen = list(tables) or config.tables
    plain = {t.topic: t for t in chosen if not t.joins}
    streams = sorted({*plain, *(topic for t in chosen if t.joins
                                for topic in trees.tree_topics(t))})
    report = LetterReplay()
    async with ElasticsearchSink(config.elasticsearch, Metrics(),
                                 max_backoff_s=config.batch.max_backoff_s,
                                 pipelines=config.pipelines) as sink:
        client = sink.client
        if not await client.index_exists(DEAD_LETTER_INDEX):
            return report
        query = _query(config.source.name, streams, kinds, since)
        builders = {t.topic: DocumentBuilder(t) for t in plain.values()}
        store = StateStore(client)
        registries = {t.alias: await store.load(t.alias) for t in plain.values()}
        after: list[Any] | None = None
        await client.refresh(DEAD_LETTER_INDEX)  # the letters written just before
        while True:
            body: dict[str, Any] = {"size": PAGE, "query": query,
                                    "sort": [{"position": "asc"}, {"stream": "asc"}]}
            if after is not None:
                body["search_after"] = after
            hits = (await client.search(DEAD_LETTER_INDEX, body))["hits"]["hits"]
            if not hits:
                return report
            after = hits[-1]["sort"]
            report.read += len(hits)
            report.matched += len(hits)
            ops: list[tuple[dict[str, Any], Op]] = []
            for hit in hits:
                letter = hit["_source"]
                table = plain.get(str(letter.get("stream")))
                change = _change(letter)
                if table is None or change is None:
                    report.skipped += 1
                    continue
                key = Stream(str(letter["stream"]), int(letter.get("part", 0))).key
                epoch = registries[table.alias].epoch_at(key, int(letter["position"]))
                write = builders[table.topic].write_for_change(change, epoch)
                ops.append((hit, Op(table.alias, write)))
            if dry_run or not ops:
                continue
            await sink.write([op for _, op in ops])
            await _settle(client, ops, report)


def _query(source: str, streams: list[str], kinds: Sequence[str],
           since: datetime | None) -> dict[str, Any]:
    filters: list[dict[str, Any]] = [{"term": {"source": source}},
                                     {"terms": {"stream": streams}}]
    if kinds:
        filters.append({"terms": {"kind": list(kinds)}})
    if since is not None:
        filters.append({"range": {"failed_at": {"gte": since.isoformat()}}})
    return {"bool": {"filter": filters}}


def _change(letter: dict[str, Any]) -> Change | None:
    """The change a letter holds, as the document builder got it (None: it holds none)."""
    held, where = letter.get("change"), letter.get("binlog")
    if not isinstance(held, dict) or not isinstance(where, dict):
        return None
    position = Position(str(where["file"]), int(where["pos"]), int(where["row"]),
                        int(where.get("ts_ms") or 0), where.get("gtid"), "false",
                        where.get("connector"))
    return Change(str(held["op"]), dict(held["key"]), held.get("before"), held.get("after"),
                  position)


async def _settle(client: SearchClient, ops: list[tuple[dict[str, Any], Op]],
                  report: LetterReplay) -> None:
    """Removes the letters written or found stale; keeps the refused with their new reason."""
    lines: list[bytes] = []
    for hit, op in ops:
        action = {"_index": DEAD_LETTER_INDEX, "_id": hit["_id"]}
        if op.outcome is Outcome.FAILED:
            report.refused += 1
            letter = hit["_source"]
            letter["reason"], letter["kind"] = op.error_reason, op.error_kind
            letter["attempts"] = int(letter.get("attempts", 0)) + 1
            log.warning("dead letter %s refused again: %s: %s", hit["_id"], op.error_kind,
                        op.error_reason)
            lines += [orjson.dumps({"index": action}), orjson.dumps(letter)]
            continue
        if op.outcome is Outcome.STALE:
            report.stale += 1
        else:
            report.replayed += 1
        lines.append(orjson.dumps({"delete": action}))
    await client.bulk(b"\n".join(lines) + b"\n", refresh=True)

