"""indexer's own durable state in the search server: each binlog-versioned table's version
epochs and source cursors (:class:`indexer.core.sources.Registry`), one document per table in the
index ``indexer-state``. Every change is a read-modify-write guarded by the document's
sequence number, so daemons, a reindex and an operator's acknowledgement never overwrite
each other's decisions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from indexer.core.documents import file_number, pack_binlog_version
from indexer.core.sources import Epoch, Registry
from indexer.search.client import SearchClient, SearchError, quote

log = logging.getLogger(__name__)

STATE_INDEX = "indexer-state"
# A table's continuous verification record, beside its registry ("@" is in no alias).
VERIFY_PREFIX = "verify@"
# Where a deployment reading the binlog resumes (by source.name).
BINLOG_PREFIX = "binlog@"
# Concurrent writers of one table's document retry this often before giving up.
MAX_CONFLICTS = 20

T = TypeVar("T")


class StateStore:
    def __init__(self, client: SearchClient) -> None:
        self._client = client
        self._index_ready = False

    async def load(self, alias: str) -> Registry:
        return (await self._read(alias))[0]

    async def update(self, alias: str, change: Callable[[Registry], T]) -> tuple[Registry, T]:
        """Applies ``change`` to the stored registry and stores it; on a concurrent write,
        reads it again and applies ``change`` to that."""
        for _ in range(MAX_CONFLICTS):
            registry, guard = await self._read(alias)
            result = change(registry)
            if await self._write(alias, registry, guard):
                return registry, result
        raise RuntimeError(f"{STATE_INDEX}/{alias}: {MAX_CONFLICTS} concurrent writes in a row")

    async def snapshot_epoch(self, alias: str, file_number: int, pos: int, snapshot_ms: int,
                             where: str) -> Epoch:
        """The epoch for versions read from a snapshot at these binlog coordinates; a new one
        (logged) when the snapshot's server is not the one the table's stream followed."""
        at = datetime.now(UTC).isoformat(timespec="seconds")
        before = len((await self.load(alias)).switches)
        registry, epoch = await self.update(
            alias, lambda r: r.snapshot_epoch(file_number, pos, snapshot_ms, at, where))
        for switch in registry.switches[before:]:
            if switch["where"] == where and switch["epoch"] == epoch.number:
                log.error("source switch for %s seen by the %s: %s; before: %s, now: %s. Its "
                          "versions take epoch %d, above every earlier version. Check the "
                          "table with `indexer reconcile`, then `indexer source ack`.", alias,
                          where, switch["reason"], switch["old"], switch["new"], epoch.number)
        return epoch

    async def verification(self, alias: str) -> dict[str, Any] | None:
        """What continuous verification last recorded for a table (None: nothing yet)."""
        found = await self._client.request(
            "GET", f"/{STATE_INDEX}/_doc/{quote(VERIFY_PREFIX + alias)}", ok=(404,))
        return found["_source"] if found and found.get("found") else None

    async def record_verification(self, alias: str, record: dict[str, Any]) -> None:
        """Replaces the table's verification record: one writer at a time (the daemon that
        verifies the table, or a whole-table `indexer reconcile`), last one wins."""
        await self._ensure_index()
        await self._client.request("PUT", f"/{STATE_INDEX}/_doc/{quote(VERIFY_PREFIX + alias)}",
                                   record)

    async def binlog_position(self, name: str) -> dict[str, Any] | None:
        """Where the deployment reading the binlog resumes (None: it never saved one)."""
        found = await self._client.request(
            "GET", f"/{STATE_INDEX}/_doc/{quote(BINLOG_PREFIX + name)}", ok=(404,))
        return found["_source"] if found and found.get("found") else None

    async def save_binlog_position(self, name: str, record: dict[str, Any]) -> None:
        """Replaces it: only the deployment's one reader saves, after its writes are done."""
        await self._ensure_index()
        await self._client.request("PUT", f"/{STATE_INDEX}/_doc/{quote(BINLOG_PREFIX + name)}",
                                   record)

    async def forget_binlog_position(self, name: str) -> dict[str, Any] | None:
        """Deletes it (the next start is a first one); what it was, None when there was none."""
        saved = await self.binlog_position(name)
        if saved is not None:
            await self._client.request(
                "DELETE", f"/{STATE_INDEX}/_doc/{quote(BINLOG_PREFIX + name)}", ok=(404,))
        return saved

    async def snapshot_version(self, alias: str, file: str, pos: int, snapshot_ms: int,
                               where: str) -> int:
        """The version of every row a snapshot at these binlog coordinates reads (the reindex,
        a repair): its position, in the epoch of its time, so that any change committed later
        has a higher one."""
        epoch = await self.snapshot_epoch(alias, file_number(file), pos, snapshot_ms, where)
        return pack_binlog_version(file, pos, 0, epoch)

    async def _read(self, alias: str) -> tuple[Registry, dict[str, Any]]:
        found = await self._client.request("GET", f"/{STATE_INDEX}/_doc/{quote(alias)}",
                                           ok=(404,))
        if not found or not found.get("found"):
            return Registry(), {"op_type": "create"}
        return (Registry.from_json(found["_source"]),
                {"if_seq_no": found["_seq_no"], "if_primary_term": found["_primary_term"]})

    async def _write(self, alias: str, registry: Registry, guard: dict[str, Any]) -> bool:
        await self._ensure_index()
        try:
            await self._client.request("PUT", f"/{STATE_INDEX}/_doc/{quote(alias)}",
                                       registry.as_json(), params=guard)
        except SearchError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def _ensure_index(self) -> None:
        if self._index_ready:
            return
        # Stored, not searched: no field mappings, whatever partitions and cursors it holds.
        await self._client.own_index(STATE_INDEX, {"dynamic": False})
        self._index_ready = True
