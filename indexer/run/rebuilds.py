"""`indexer run`'s joined documents: every change to any table of a document's tree rebuilds
exactly the documents it touched, read from MySQL after the change committed and versioned by
the newest change of the batch that touched each.

Why that is exact: every table of one server shares one binlog, so binlog versions order the
changes of all the tables of a tree. A rebuild triggered by the change at version v reads MySQL
after v committed (Debezium sends a change once it is committed), so it holds everything up to
v; the search server keeps the write with the highest version, which is the rebuild that read
last. Rebuilds may finish in any order: an older one arriving late is refused as stale and
loses nothing. A root that is gone becomes a tombstone at that version, so a slower rebuild of
an older change cannot bring it back.

Per batch: the changes' touches (:func:`indexer.core.trees.touch`) become root keys (the walk
up, one indexed query per level for all the batch's values), then documents in pages (one
query per joined table per page). One change touching more than ``FANOUT_ROOTS`` documents (a
category renamed) is finished in the background, page by page, holding back only its own
partition's commits; so is a lookup row deleted or re-keyed, whose documents the index names
(``_indexer.refs``: the engine's ON DELETE CASCADE / SET NULL leaves no trace in the binlog) and
is asked again ``SETTLE_S`` later, for rebuilds that were in flight at the first look.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from tenacity import RetryCallState

from indexer.core import trees
from indexer.core.documents import document_id
from indexer.core.mappings import META_MAPPING, sync_alias
from indexer.core.sources import parse_gtid
from indexer.core.trees import Touch, Tree, Values
from indexer.core.writes import MAPPING_CONFLICT, Op, Outcome
from indexer.errors import ReplicaBehind
from indexer.metrics import Metrics
from indexer.outages import Outage
from indexer.run.ports import Request, Sink
from indexer.search import routing
from indexer.search.client import SearchClient
from indexer.search.retry import retrying
from indexer.settings import Config, TableConfig
from indexer.source.mysql import connection
from indexer.source.mysql import retry as mysql_retry
from indexer.source.mysql import trees as tree_sql
from indexer.source.mysql.connection import unreachable
from indexer.source.mysql.trees import Connection, TreeRows

log = logging.getLogger(__name__)
T = TypeVar("T")

# One change touching more documents than this (a category renamed, a tag deleted) is
# rebuilt in the background, holding only its own partition's commits: the other partitions
# (and the rest of its own batch) go on being written and committed meanwhile.
FANOUT_ROOTS = 1000
# A lookup row deleted or re-keyed: the index is asked again this long after the first look,
# for documents that rebuilds in flight then (anywhere in the group) wrote with the row.
SETTLE_S = 3.0
PROGRESS_EVERY_S = 10.0  # a fan-out's progress in the log
TRUNCATION_LOG_EVERY_S = 600.0  # a children array cut at its cap is logged this often per path
# MySQL errors a schema change causes: the tree's layouts are read again and the read retried
# (a few times: a column still unknown after that is a fault of the configuration).
MAX_RELOADS = 3  # layouts read again for one change's columns or tables that are gone
REBUILD_FAILED = "rebuild-failed"


class Rebuilds:
    """Rebuilds the joined documents of the configured tables with joins."""

    def __init__(self, config: Config, client: SearchClient, sink: Sink, metrics: Metrics,
                 outage: Outage | None = None) -> None:
        self._config = config
        self._outage = outage or Outage("MySQL", "joined documents' rebuilds")
        self._client = client
        self._sink = sink
        self._metrics = metrics
        self._tables = {t.alias: t for t in config.tables if t.joins}
        self._rows: dict[str, TreeRows] = {}
        self._pool = connection.Pool(config.mysql, config.tables[0].database)
        self._replica: tuple[float, bool] = (0.0, False)  # (checked at, replicates)
        self._truncation_logged: dict[str, float] = {}

    async def __aenter__(self) -> Rebuilds:
        """Reads and checks every tree: a join that cannot work stops the start here, before
        any index is made."""
        for table in self._tables.values():
            await self._load(table)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await asyncio.to_thread(self._pool.close)

    def tree(self, alias: str) -> Tree:
        return self._rows[alias].tree

    def touch(self, alias: str, table: str, before: Mapping[str, Any] | None,
              after: Mapping[str, Any] | None) -> Touch:
        return trees.touch(self._rows[alias].tree, table, before, after)

    async def reload(self, table: str) -> None:
        """A table's layout changed: the trees it is part of are read again."""
        for alias, config in self._tables.items():
            if table in {f"{d}.{t}" for d, t in trees.tree_tables(config)}:
                await self._load(config)
                log.info("joined documents of %s: layouts read again after %s changed", alias,
                         table)

    async def _load(self, table: TableConfig) -> None:
        tree = await asyncio.to_thread(tree_sql.load_tree, self._config.mysql, table)
        self._rows[table.alias] = TreeRows(tree)

    async def ensure_meta(self) -> None:
        """Indices made before joined documents existed map ``_indexer.refs`` and
        ``truncated`` now (the refs query needs them searchable)."""
        meta = {"properties": {k: META_MAPPING["properties"][k] for k in ("refs", "truncated")}}
        for alias in self._tables:
            for index in await self._client.aliases([sync_alias(alias)]):
                await self._client.put_mapping(index, {"_indexer": meta})

    # --- one batch -----------------------------------------------------------------------------

    async def rebuild(self, requests: Sequence[Request]) -> dict[Any, list[Request]]:
        """Rebuilds what these changes touched; returns, per holder, the requests left to
        :meth:`finish` in the background (fan-outs, lookup rows removed)."""
        later: dict[Any, list[Request]] = {}
        for alias, group in _by_alias(requests).items():
            await self._resolve(alias, group)
            touched: dict[Values, list[Request]] = {}
            fanout = self._metrics.rebuild_fanout.labels(self._name(alias))
            for request in group:
                if len(request.roots) != 1:  # one per change is most; events_total counts them
                    fanout.observe(len(request.roots))
                if request.touch.refs or len(request.roots) > FANOUT_ROOTS:
                    later.setdefault(request.holder, []).append(request)
                    continue
                for root in request.roots:
                    touched.setdefault(root, []).append(request)
            if touched:
                await self._write(alias, touched)
        return later

    async def finish(self, requests: Sequence[Request]) -> None:
        """Rebuilds what :meth:`rebuild` left for later: the documents holding removed lookup
        rows (asked of the index for all of them at once, and once more SETTLE_S later), then
        each fan-out with its progress, the rest together."""
        for alias, group in _by_alias(requests).items():
            removed = [r for r in group if r.touch.refs]
            if removed:
                await self._add_referring(alias, removed)
            small: dict[Values, list[Request]] = {}
            for request in group:
                if len(request.roots) > FANOUT_ROOTS:
                    await self._fan_out(alias, request)
                    continue
                for root in request.roots:
                    small.setdefault(root, []).append(request)
            if small:
                await self._write(alias, small)
            if removed:
                # Rebuilds that read a removed row before it went and wrote later: the index
                # is asked again, once for all of them.
                await asyncio.sleep(SETTLE_S)
                seen = {id(r): set(r.roots) for r in removed}
                await self._add_referring(alias, removed)
                again: dict[Values, list[Request]] = {}
                for request in removed:
                    for root in request.roots - seen[id(request)]:
                        again.setdefault(root, []).append(request)
                if again:
                    await self._write(alias, again)

    async def _fan_out(self, alias: str, request: Request) -> None:
        name, total, started = self._name(alias), len(request.roots), time.monotonic()
        log.info("joined documents of %s: rebuilding %d documents touched by one change (a "
                 "fan-out; only its partition's commits wait)", name, total)
        await self._write(alias, {root: [request] for root in request.roots}, progress=True)
        log.info("joined documents of %s: rebuilt %d documents in %.1f s", name, total,
                 time.monotonic() - started)

    # --- finding the documents ----------------------------------------------------------------

    async def _resolve(self, alias: str, requests: Sequence[Request]) -> None:
        """Each request's root keys; a request whose walk fails for good (a value MySQL
        refuses) is marked failed alone, found by walking each request of the batch apart."""
        try:
            await self._walk(alias, requests)
            return
        except _PERMANENT as exc:
            if len(requests) == 1:
                _fail(requests[0], exc, "finding its documents")
                return
        for request in requests:
            request.roots.clear()
            try:
                await self._walk(alias, [request])
            except _PERMANENT as exc:
                request.roots.clear()
                _fail(request, exc, "finding its documents")

    async def _walk(self, alias: str, requests: Sequence[Request]) -> None:
        """Each request's root keys: those it names, and the walk up from its join values
        (all the batch's values of a node in one query per level)."""
        tree = self._rows[alias].tree
        starts: dict[int, dict[Values, list[Request]]] = {}
        for request in requests:
            key = tree.root.key
            request.roots.update(tuple(k[c] for c in key) for k in request.touch.roots)
            for node, values in request.touch.starts.items():
                by_value = starts.setdefault(node, {})
                for value in values:
                    by_value.setdefault(value, []).append(request)
        if not starts:
            return

        def walk(rows: TreeRows, conn: Connection) -> list[tuple[int, dict[
                Values, set[Values]]]]:
            return [(node, rows.roots_of(conn, rows.tree.nodes[node], by_value))
                    for node, by_value in starts.items()]

        for node, found in await self._mysql(alias, walk):
            for value, roots in found.items():
                for request in starts[node].get(value, ()):
                    request.roots |= roots

    async def _add_referring(self, alias: str, requests: Sequence[Request]) -> None:
        """Adds to each request the documents the index says embed the lookup rows it
        removed (every index the daemon writes to, refreshed first so that what was written
        is seen): one query for all of them."""
        tree = self._rows[alias].tree
        target = sync_alias(alias)
        refs = sorted({ref for r in requests for ref in r.touch.refs})
        query = {"query": {"terms": {"_indexer.refs": refs}}, "_source": ["_indexer.refs"]}
        found: list[tuple[Values, set[str]]] = []
        async for attempt in retrying(self._config.batch.max_backoff_s):
            with attempt:
                await self._client.refresh(target)
                found = [(trees.root_values_of_id(tree, hit["_id"]),
                          set((hit["_source"].get("_indexer") or {}).get("refs") or ()))
                         async for hit in self._client.scan(target, query)]
        for request in requests:
            request.roots.update(root for root, held in found if held & request.touch.refs)

    # --- reading and writing documents ---------------------------------------------------------

    async def _write(self, alias: str, touched: Mapping[Values, list[Request]], *,
                     progress: bool = False) -> None:
        """Reads the touched documents from MySQL in pages and writes each with the version
        of the newest change that touched it (a tombstone when its root is gone)."""
        name = self._name(alias)
        roots = sorted(touched, key=tree_sql.sortable)
        size = min(tree_sql.PAGE_ROOTS, self._config.batch.max_events)  # a bulk's worth
        pending = self._metrics.rebuild_pending.labels(name)
        if progress:
            pending.inc(len(roots))
        last_said = time.monotonic()
        try:
            for start in range(0, len(roots), size):
                page = roots[start:start + size]
                began = time.monotonic()
                await self._write_page(alias, page, touched)
                self._metrics.rebuild_seconds.labels(name).observe(time.monotonic() - began)
                if progress:
                    pending.dec(len(page))
                    if time.monotonic() - last_said >= PROGRESS_EVERY_S:
                        last_said = time.monotonic()
                        log.info("joined documents of %s: %d of %d rebuilt", name,
                                 start + len(page), len(roots))
        finally:
            if progress:
                pending.set(0)

    async def _write_page(self, alias: str, page: list[Values],
                          touched: Mapping[Values, list[Request]]) -> None:
        """A page of documents; when reading it fails for good (a row a finisher cannot
        read), its halves are tried apart, down to the documents that fail, whose changes are
        marked failed (dead-lettered by the daemon) while the others are written."""
        try:
            await self._write_documents(alias, page, touched)
        except _PERMANENT as exc:
            if len(page) == 1:
                for request in touched[page[0]]:
                    _fail(request, exc, "reading its documents")
                return
            middle = len(page) // 2
            await self._write_page(alias, page[:middle], touched)
            await self._write_page(alias, page[middle:], touched)

    async def _write_documents(self, alias: str, page: list[Values],
                               touched: Mapping[Values, list[Request]]) -> None:
        tree = self._rows[alias].tree
        newest = {root: max(touched[root], key=lambda r: r.version) for root in page}
        gtids = _newest_gtids(r for root in page for r in touched[root])
        keys = [trees.root_key(tree, root) for root in page]

        def read(rows: TreeRows, conn: Connection) -> list[trees.Assembled]:
            if gtids and self._is_replica(conn) and not tree_sql.wait_for(
                    conn, rows.tree.flavor, gtids):
                raise ReplicaBehind(f"the replica has not applied {', '.join(gtids.values())} "
                                     f"within {tree_sql.REPLICA_WAIT_S} s")
            tree_sql.begin_snapshot(conn)
            try:
                return rows.by_keys(conn, keys)
            finally:
                tree_sql.end_snapshot(conn)

        documents = await self._mysql(alias, read)
        ops = []
        for assembled in documents:
            root = tuple(assembled.key[c] for c in tree.root.key)
            request = newest[root]
            ops.append(Op(alias, trees.write_for(assembled, request.version, request.ts_ms,
                                                 tree.routing)))
            self._note_truncated(alias, assembled)
        if tree.routing:  # the document may be on another routing than its rebuild's
            await routing.leave_elsewhere(self._client, alias, ops,
                                          max(newest[r].ts_ms for r in page),
                                          self._config.batch.max_backoff_s)
        await self._sink.write(ops)
        counts: dict[str, int] = {}
        for op, assembled in zip(ops, documents, strict=True):
            outcome = ("failed" if op.outcome is Outcome.FAILED else "stale"
                       if op.outcome is Outcome.STALE else "deleted" if op.write.deleted
                       else "indexed")
            counts[outcome] = counts.get(outcome, 0) + 1
            if op.outcome is Outcome.FAILED:
                root = tuple(assembled.key[c] for c in tree.root.key)
                reason = f"document {op.write.id} of {alias}: {op.error_reason}"
                if op.error_kind == MAPPING_CONFLICT:
                    reason += (f"; the mapping refuses the joined document: fix "
                               f"mappings/{self._tables[alias].mapping}, `indexer reindex "
                               f"{self._tables[alias].table}`, then `indexer dlq replay`")
                for request in touched[root]:
                    request.failure = (op.error_kind, reason)
        for outcome, n in counts.items():
            self._metrics.rebuilt.labels(self._name(alias), outcome).inc(n)

    def _note_truncated(self, alias: str, assembled: trees.Assembled) -> None:
        for path in assembled.truncated:
            self._metrics.truncated.labels(self._name(alias), path).inc()
            label = f"{alias}.{path}"
            if time.monotonic() - self._truncation_logged.get(label, -1e9) >= \
                    TRUNCATION_LOG_EVERY_S:
                self._truncation_logged[label] = time.monotonic()
                node = next(n for n in self._rows[alias].tree.nodes if n.path == path)
                log.warning("joined documents of %s: %s has more than %d children for document "
                            "%s; the first %d are kept (max; counted in "
                            "indexer_children_truncated_total, `indexer status` lists them)",
                            self._name(alias), path, node.max,
                            document_id(assembled.key), node.max)

    def _is_replica(self, conn: Connection) -> bool:
        """Whether the server read replicates from another (asked at most every 30 s)."""
        checked, replica = self._replica
        if time.monotonic() - checked > 30:
            replica = connection.replicates_from(conn) is not None
            self._replica = (time.monotonic(), replica)
        return replica

    async def _mysql(self, alias: str,
                     work: Callable[[TreeRows, Connection], T]) -> T:
        """Runs ``work`` in a worker thread on a pooled connection: again after a transient
        failure (MySQL away, a replica behind: MySQL's retry policy), and after reading the
        tree's layouts again when a column or table it reads is gone; other errors are
        raised."""
        reloads = 0
        while True:
            try:
                return await self._retried(
                    alias, lambda: asyncio.to_thread(self._run, self._rows[alias], work))
            except mysql_retry.QUERY_ERRORS as exc:
                if not mysql_retry.schema_changed(exc) or reloads >= MAX_RELOADS:
                    raise
                reloads += 1
                log.warning("joined documents of %s: %s; reading the layouts again", alias,
                            exc.args[-1])
                # A layout that cannot be read is tried again whatever the reason.
                await self._retried(alias, lambda: self._load(self._tables[alias]),
                                    retry_on=mysql_retry.failure)

    async def _retried(self, alias: str, work: Callable[[], Awaitable[T]], *,
                       retry_on: Callable[[BaseException], bool] = mysql_retry.transient) -> T:
        def told(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            if unreachable(exc) or retry_on is mysql_retry.transient:
                self._outage.failed(exc, "unreachable" if unreachable(exc) else "not answering")
            else:  # a layout that cannot be read is no outage: said each time
                log.warning("joined documents of %s: cannot read the layouts (%s); trying "
                            "again", alias, exc)
            log.debug("joined documents of %s: MySQL cannot answer now (%s); retry %d in "
                      "%.1f s", alias, exc, state.attempt_number, state.upcoming_sleep)

        async for attempt in mysql_retry.retrying(self._config.batch.max_backoff_s,
                                                  retry_on=retry_on, before_sleep=told):
            with attempt:
                done = await work()
        self._outage.ok()
        return done

    def _run(self, rows: TreeRows, work: Callable[[TreeRows, Connection], T]) -> T:
        with self._pool.connection() as conn:
            return work(rows, conn)

    def _name(self, alias: str) -> str:
        return self._tables[alias].name


# Errors that another try will not mend (a value MySQL or a finisher refuses, a query MySQL
# will not run): the change they come from is dead-lettered, not retried for ever. Transient
# ones (MySQL away, a replica behind) never get here: _mysql retries them.
_PERMANENT: tuple[type[Exception], ...] = (
    *mysql_retry.QUERY_ERRORS, ValueError, TypeError, KeyError, LookupError, ArithmeticError)


def _fail(request: Request, exc: BaseException, doing: str) -> None:
    log.error("joined documents of %s: a change cannot be rebuilt (%s: %s: %s); it is "
              "dead-lettered", request.alias, doing, type(exc).__name__, exc)
    request.failure = (REBUILD_FAILED, f"{doing}: {type(exc).__name__}: {exc}")


def _by_alias(requests: Sequence[Request]) -> dict[str, list[Request]]:
    found: dict[str, list[Request]] = {}
    for request in requests:
        found.setdefault(request.alias, []).append(request)
    return found


def _newest_gtids(requests: Iterable[Request]) -> dict[str, str]:
    """The newest GTID of each replication domain (MariaDB) or source (MySQL) among these
    changes: what a replica must have applied before it is read."""
    newest: dict[str, tuple[int, str]] = {}
    for request in requests:
        parsed = parse_gtid(request.gtid)
        if parsed is None:
            continue
        owner, number = parsed
        domain = owner.split(" server ")[0]  # MariaDB numbers grow per domain
        if number > newest.get(domain, (-1, ""))[0]:
            newest[domain] = (number, str(request.gtid))
    return {domain: gtid for domain, (_, gtid) in newest.items()}
