"""Async bulk writer: item-level results, 409 as stale, transient failures retried.

Writes go to every index behind a table's sync alias (the live index, and one being rebuilt
while a reindex runs), resolved again before every bulk so a newly added index never misses a
change consumed after it was added.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from types import TracebackType
from typing import Any

from tenacity import RetryCallState

from indexer.core.bulk import action_line
from indexer.core.mappings import sync_alias
from indexer.core.writes import MAPPING_CONFLICT, MAPPING_ERRORS, Op, Outcome
from indexer.errors import NoTarget, SearchBusy
from indexer.metrics import Metrics
from indexer.outages import Outage
from indexer.search.admin import alias_states, mark_missed_writes
from indexer.search.client import SearchClient, SearchError, root_cause
from indexer.search.retry import retrying
from indexer.settings import ElasticsearchSettings

log = logging.getLogger(__name__)

BULK_FILTER = "errors,items.*.status,items.*.error.type,items.*.error.reason"
# Statuses that say "not now": retried until they pass, never dead-lettered.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# A bulk refused for now is tried again sooner than other requests: it is what the daemon waits on.
BULK_FIRST_WAIT_S = 0.05
# A 500 for one item may be permanent; it gets this many tries before the dead-letter topic.
MAX_SERVER_ERROR_ATTEMPTS = 8


@dataclass
class _Round:
    """One bulk request: (op, index) per action, in request order, and its NDJSON lines."""

    lines: list[tuple[Op, str]] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)
    # index -> (id, reason) of each write it refused that the live index took
    missed: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    # positions of the tombstones an op leaves on other routings: they decide no outcome
    # unless refused for good
    leaving: set[int] = field(default_factory=set)


class ElasticsearchSink:
    def __init__(self, settings: ElasticsearchSettings, metrics: Metrics,
                 *, max_backoff_s: float, outage: Outage | None = None,
                 pipelines: Mapping[str, str] | None = None) -> None:
        self._settings = settings
        self._pipelines = dict(pipelines or {})  # alias -> its table's ingest pipeline
        self._metrics = metrics
        self._max_backoff_s = max_backoff_s
        self._outage = outage
        # Items refused for now (429) while bulks themselves go through: told once, too.
        self._busy = Outage("the search server", "writes (nothing past them is committed)")
        self._client: SearchClient | None = None
        # alias -> its live indices among those it writes to, as last resolved
        self._live: dict[str, set[str]] = {}
        self._marked: set[str] = set()  # indices marked as having missed writes

    async def __aenter__(self) -> ElasticsearchSink:
        client = SearchClient(self._settings, self._outage)
        self._client = await client.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._client is not None:
            await self._client.close()

    @property
    def client(self) -> SearchClient:
        assert self._client is not None, "use the sink as an async context manager"
        return self._client

    async def resolve(self, aliases: Iterable[str]) -> dict[str, list[str]]:
        """alias -> the concrete indices behind its sync alias (possibly none). Also notes
        which of them are live (behind the read alias): only their answers decide an op."""
        wanted = set(aliases)
        if not wanted:
            return {}
        states = await alias_states(self.client, wanted)
        for alias, state in states.items():
            self._live[alias] = set(state.live) & set(state.synced)
        return {alias: state.synced for alias, state in states.items()}

    async def write(self, ops: Sequence[Op]) -> None:
        """Writes every op until each is WRITTEN, STALE or FAILED (permanently).

        Transient failures are retried forever with capped exponential backoff and jitter;
        the caller cancels the call to abandon it.
        """
        pending = [op for op in ops if op.outcome is None]
        async for attempt in retrying(self._max_backoff_s, first_wait_s=BULK_FIRST_WAIT_S,
                                      before_sleep=self._before_sleep):
            with attempt:
                pending = await self._write_round(pending)
                if pending:
                    raise SearchBusy(f"{len(pending)} items refused for now (429/5xx)")
                self._busy.ok()

    async def _write_round(self, pending: list[Op]) -> list[Op]:
        targets = await self.resolve({op.alias for op in pending if op.index is None})
        missing = sorted(alias for alias, indices in targets.items() if not indices)
        if missing:
            raise NoTarget(f"no index behind {', '.join(sync_alias(a) for a in missing)}; "
                                "run `indexer mappings apply`")
        round_ = _Round()
        lines, parts = round_.lines, round_.parts
        for op in pending:
            op.attempts += 1
            for index in targets[op.alias] if op.index is None else (op.index,):
                lines.append((op, index))
                parts += (action_line(index, op.write, op.version_type,
                                      self._pipelines.get(op.alias, "")), op.write.source)
                # Then the routings a routed document leaves, at its version but strictly
                # above: where the old routing leads to the same shard, the write just made
                # is that document, and the tombstone must lose to it.
                for stone in op.write.leaves:
                    round_.leaving.add(len(lines))
                    lines.append((op, index))
                    parts += (action_line(index, stone), stone.source)
        started = perf_counter()
        try:
            body = b"\n".join(parts) + b"\n"  # NDJSON: action, document, action, ...
            response = await self.client.bulk(body, filter_path=BULK_FILTER)
        except SearchError as exc:
            if exc.status in RETRY_STATUSES or exc.status >= 500:
                raise SearchBusy(f"bulk answered {exc.status}") from exc
            raise
        finally:
            self._metrics.bulk_seconds.observe(perf_counter() - started)
        pending = self._settle(round_, response)
        if round_.missed:
            await self._mark_missed(round_.missed)
        return pending

    def _settle(self, round_: _Round, body: dict[str, Any]) -> list[Op]:
        """Applies item results; returns the ops that must be sent again."""
        items = body.get("items", [])
        if len(items) != len(round_.lines):
            raise SearchBusy(f"bulk answered {len(items)} items for {len(round_.lines)}")
        if body.get("errors") is False:  # every item 2xx: the common case, no per-item look
            for op, _ in round_.lines:
                op.outcome = Outcome.WRITTEN
            return []
        retry: dict[int, Op] = {}
        written: dict[int, bool] = {}
        refused_elsewhere: list[tuple[str, Op, str]] = []
        for line, ((op, index), item) in enumerate(zip(round_.lines, items, strict=True)):
            (result,) = item.values()
            status = int(result.get("status", 0))
            if 200 <= status < 300 or status == 409:
                if line not in round_.leaving:
                    written[id(op)] = written.get(id(op), False) or status != 409
                continue
            error = result.get("error") or {}
            kind, reason = str(error.get("type", status)), str(error.get("reason", ""))
            if status in RETRY_STATUSES or (status == 404 and kind == "index_not_found_exception"):
                retry[id(op)] = op
            elif status >= 500 and op.server_errors < MAX_SERVER_ERROR_ATTEMPTS:
                op.server_errors += 1
                retry[id(op)] = op
            elif op.index is None and self._not_live(op.alias, index):
                # A kept or rebuilding index refused what the live one is asked too: the
                # live answer decides; this index is marked as having missed a write.
                refused_elsewhere.append((index, op, f"{kind}: {reason}"))
            elif kind in MAPPING_ERRORS:
                op.outcome = Outcome.FAILED
                op.error_kind, op.error_reason = MAPPING_CONFLICT, f"{index}: {kind}: {reason}"
            else:
                op.outcome = Outcome.FAILED
                op.error_kind, op.error_reason = kind, f"{index}: {reason}"
        for op, _ in round_.lines:
            if op.outcome is None and id(op) not in retry:
                op.outcome = Outcome.WRITTEN if written.get(id(op)) else Outcome.STALE
        for index, op, why in refused_elsewhere:  # missed only what the live index took
            if op.outcome is not Outcome.FAILED and id(op) not in retry:
                round_.missed.setdefault(index, []).append((op.write.id, why))
        if retry:
            self._metrics.retries.labels("item").inc(len(retry))
        return list(retry.values())

    def _not_live(self, alias: str, index: str) -> bool:
        """The index is not live while the alias has a live index the op also goes to."""
        live = self._live.get(alias, set())
        return bool(live) and index not in live

    async def _mark_missed(self, missed: dict[str, list[tuple[str, str]]]) -> None:
        """Counts and logs writes a non-live index refused, and marks the index (its
        mapping's ``_meta``) so that `reindex --rollback` and the swap can tell."""
        for index, refused in missed.items():
            self._metrics.kept_index_rejected.labels(index).inc(len(refused))
            doc_id, reason = refused[0]
            if index in self._marked:
                continue
            log.warning("%s (not live) refused document %s that the live index is asked to "
                        "take: %s; it is marked as having missed writes (`reindex --rollback` "
                        "to it needs --force)", index, doc_id, reason)
            await mark_missed_writes(self.client, index, reason)
            self._marked.add(index)

    def _before_sleep(self, state: RetryCallState) -> None:
        """Each retry is a DEBUG line: the client tells an unreachable server once (its
        :class:`~indexer.outages.Outage`), and so does this sink for items refused for now."""
        exc = state.outcome.exception() if state.outcome else None
        reason = type(exc).__name__ if exc else "unknown"
        self._metrics.retries.labels(reason).inc()
        cause = root_cause(exc) if exc else None
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None and cause is not exc \
            else ""
        if isinstance(exc, NoTarget):
            self._busy.failed(exc, "has no index to write to")
        elif isinstance(exc, SearchBusy) and exc.__cause__ is None:  # items, not the bulk
            self._busy.failed(exc, "refusing writes for now")
        log.debug("bulk not written (%s: %s%s); retry %d in %.2fs", reason, exc, detail,
                  state.attempt_number, state.upcoming_sleep)
