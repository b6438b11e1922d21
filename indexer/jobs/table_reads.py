"""A table's documents as MySQL has them: the one way the reindex, reconciliation, repairs and
continuous verification read them. A table's rows go through its document builder and their
checksums are computed in the server (:mod:`indexer.source.mysql.checksum_sql`); a table with
joins is read as whole documents (:mod:`indexer.source.mysql.trees`) and hashed here, as the
daemon hashes what it writes. Both answer the same questions, so those jobs have one path.

Blocking (callers run these in worker threads), but for :meth:`Reads.slices_sums`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from indexer.build import load_native
from indexer.core import compare, conditions, native, routing, trees
from indexer.core.documents import DocumentBuilder, Write, document_id, key_bucket
from indexer.core.layout import Field, TableLayout
from indexer.core.trees import Assembled, Tree
from indexer.settings import Config, TableConfig
from indexer.source.mysql import checksum_sql, schema, snapshots
from indexer.source.mysql import trees as tree_sql
from indexer.source.mysql.checksum_sql import ChunkSum
from indexer.source.mysql.connection import connect
from indexer.source.mysql.snapshots import Row, Snapshot, SnapshotPosition
from indexer.source.mysql.trees import TreeRows

Pages = Iterator[list[Write]]


class ReadSnapshot(Protocol):
    """Documents inside one consistent snapshot, versioned by its position (``version``) or,
    for a table versioned by a column, by each row's own (``version`` None)."""

    position: SnapshotPosition

    def pages(self, low: int | None, high: int | None, page_rows: int,
              version: int | None) -> Pages: ...
    def pages_for_ids(self, ids: Sequence[str], page_rows: int, version: int | None) -> Pages: ...
    def close(self) -> None: ...


class Reads(Protocol):
    """What a job asks of a table's documents in MySQL."""

    layout: TableLayout  # the table's (a tree's root)
    fields: list[Field]  # what single-table documents hold; empty for trees

    @property
    def exact_checksums(self) -> bool:
        """Equal documents always have equal checksums (the server writes every value's text
        as the document hashes it); False where it cannot for some values (JSON columns)."""
        ...

    def snapshot(self) -> ReadSnapshot: ...
    def chunk_sums(self, width: int, first: int | None, last: int | None,
                   ) -> dict[int, ChunkSum]: ...
    async def slices_sums(self, width: int, slices: Sequence[tuple[int | None, int | None]],
                          ) -> list[dict[int, ChunkSum]]:
        """:meth:`chunk_sums` of several chunk ranges at once."""
        ...
    def chunk_hashes(self, width: int, chunks: Sequence[int]) -> dict[str, int]: ...
    def hashes_for_ids(self, ids: Sequence[str]) -> dict[str, int]: ...
    def present(self, ids: Sequence[str]) -> set[str]: ...
    def now(self, doc_id: str) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]]]:
        """The document behind an id as MySQL has it now (None: no row), and every row it
        is made of: (path in the document, "database.table", the row's id)."""
        ...
    def what_differs(self, sources: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        """For candidate stale documents (id -> the index's ``_source``) whose row MySQL has:
        what differs from MySQL's, by field (and for joined documents by part: a lookup,
        which children); empty: the documents are equal (:mod:`indexer.core.compare`)."""
        ...


def reads_for(config: Config, table: TableConfig) -> Reads:
    """The table's reads: its layout read from MySQL (with joins, every table of the tree,
    checked)."""
    if table.joins:
        tree = tree_sql.load_tree(config.mysql, table)
        return TreeReads(config, tree, table)
    layout = conditions.bind(table.rows, schema.read_layout(config.mysql, table.database,
                                                             table.table), table.name)
    routing.check_column(table.routing, layout, table.name)
    names = DocumentBuilder(table).field_names(c.name for c in layout.columns)
    fields = [(names[c.name], c) for c in layout.columns if c.name in names]
    if table.transform:
        return TransformedReads(config, table, layout, fields)
    return RowReads(config, table, layout, fields)


# --- a table's own rows ---------------------------------------------------------------------

class _RowSnapshot:
    def __init__(self, reads: RowReads) -> None:
        self._snapshot = Snapshot(reads.config.mysql, reads.layout)
        self.position = self._snapshot.position
        self._builder = reads.builder

    def _writes(self, rows: Iterator[list[tuple[dict[str, Any], dict[str, Any]]]],
                version: int | None) -> Pages:
        builder = self._builder
        for page in rows:
            yield [builder.write_for_row(key, row, builder.row_version(row) if version is None
                                         else version) for key, row in page]

    def pages(self, low: int | None, high: int | None, page_rows: int,
              version: int | None) -> Pages:
        where, args = ("", ()) if low is None and high is None else \
            snapshots.key_range_where(self._snapshot.layout, low, high)
        return self._writes(self._snapshot.rows(where, args, page_rows=page_rows), version)

    def pages_for_ids(self, ids: Sequence[str], page_rows: int, version: int | None) -> Pages:
        return self._writes(self._snapshot.pages_for_ids(ids, page_rows), version)

    def close(self) -> None:
        self._snapshot.close()


@dataclass
class RowReads:
    config: Config
    table: TableConfig
    layout: TableLayout
    fields: list[Field]

    @property
    def builder(self) -> DocumentBuilder:
        module = load_native() if self.config.batch.native else None
        return DocumentBuilder(self.table, self.layout.flavor, native.content_hasher(module))

    @property
    def exact_checksums(self) -> bool:
        return not any(column.data_type == "json" for _, column in self.fields)

    def snapshot(self) -> ReadSnapshot:
        return _RowSnapshot(self)

    def chunk_sums(self, width: int, first: int | None, last: int | None,
                   ) -> dict[int, ChunkSum]:
        return checksum_sql.chunk_sums(self.config.mysql, self.layout, self.fields, width, first,
                                       last)

    async def slices_sums(self, width: int, slices: Sequence[tuple[int | None, int | None]],
                          ) -> list[dict[int, ChunkSum]]:
        """Side by side in threads: the server computes the sums."""
        return list(await asyncio.gather(*(asyncio.to_thread(self.chunk_sums, width, a, b)
                                           for a, b in slices)))

    def chunk_hashes(self, width: int, chunks: Sequence[int]) -> dict[str, int]:
        return checksum_sql.chunk_rows(self.config.mysql, self.layout, self.fields, width,
                                       chunks)

    def hashes_for_ids(self, ids: Sequence[str]) -> dict[str, int]:
        return checksum_sql.hashes_for_ids(self.config.mysql, self.layout, self.fields, ids)

    def now(self, doc_id: str) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]]]:
        rows = snapshots.rows_now(self.config.mysql, self.layout, [doc_id])
        if not rows:
            return None, []
        return dict(self.builder.document(rows[0][1])), [("", self.table.name, doc_id)]

    def what_differs(self, sources: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        rows = snapshots.rows_now(self.config.mysql, self.layout, list(sources))
        mine = {document_id(key): _as_json(self.builder.document(row)) for key, row in rows}
        return _stale_parts(mine, sources, flat=True)

    def present(self, ids: Sequence[str]) -> set[str]:
        snapshot = Snapshot(self.config.mysql, self.layout)
        try:
            return {document_id(key) for key, _ in snapshot.rows_for_ids(ids)}
        finally:
            snapshot.close()


# --- documents hashed here (a transform's, joined ones) -----------------------------------------

class _HashedHere:
    """Chunk sums and hashes of documents made and hashed in Python, as the daemon makes and
    hashes what it writes, for reads whose documents the server cannot checksum in SQL.
    :meth:`_hashed` gives (id, hash) of each document whose root key is in a range."""

    config: Config
    table: TableConfig

    def _hashed(self, low: int | None = None, high: int | None = None,
                ) -> Iterator[tuple[str, int]]:
        raise NotImplementedError

    def chunk_sums(self, width: int, first: int | None, last: int | None,
                   ) -> dict[int, ChunkSum]:
        low = None if first is None or not width else first * width
        high = None if last is None or not width else (last + 1) * width - 1
        rows: dict[int, int] = {}
        sums: dict[int, int] = {}
        for doc_id, found in self._hashed(low, high):
            chunk = int(doc_id) // width if width else key_bucket(doc_id)
            rows[chunk] = rows.get(chunk, 0) + 1
            sums[chunk] = sums.get(chunk, 0) + found
        return {c: ChunkSum(c, n, sums[c]) for c, n in rows.items()}

    async def slices_sums(self, width: int, slices: Sequence[tuple[int | None, int | None]],
                          ) -> list[dict[int, ChunkSum]]:
        """Side by side in processes of their own: making documents is Python work, which
        threads would take turns at (one process reads ~14k joined documents of 5 children a
        second; MariaDB's part is a quarter of that)."""
        if len(slices) <= 1:
            return [await asyncio.to_thread(self.chunk_sums, width, a, b) for a, b in slices]
        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")  # not a fork of a running event loop
        with ProcessPoolExecutor(max_workers=len(slices), mp_context=context) as pool:
            return list(await asyncio.gather(*(
                loop.run_in_executor(pool, hashed_chunk_sums, self.config, self.table, width,
                                     a, b) for a, b in slices)))

    def chunk_hashes(self, width: int, chunks: Sequence[int]) -> dict[str, int]:
        found: dict[str, int] = {}
        if width:
            for chunk in chunks:
                found.update(self._hashed(chunk * width, (chunk + 1) * width - 1))
            return found
        wanted = set(chunks)  # buckets of crc32(id): one pass over every document
        return {i: h for i, h in self._hashed() if key_bucket(i) in wanted}


def hashed_chunk_sums(config: Config, table: TableConfig, width: int, first: int | None,
                      last: int | None) -> dict[int, ChunkSum]:
    """:meth:`_HashedHere.chunk_sums` in a worker process (which reads the layouts itself)."""
    return reads_for(config, table).chunk_sums(width, first, last)


# --- a table's rows through its transform ------------------------------------------------------

@dataclass
class TransformedReads(_HashedHere, RowReads):
    """Rows whose documents a user's function makes: read as rows, hashed here as the daemon
    hashes what it writes (what the function does cannot be summed in SQL). A row the
    function gives no document is not counted; one it raises on stops the job with the
    function's error (the stream dead-lettered that row)."""

    @property
    def exact_checksums(self) -> bool:
        return True  # both sides hashed here, from documents made the same way

    def _rows(self, where: str = "", args: Sequence[Any] = (),
              ) -> Generator[tuple[Row, Row], None, None]:
        snapshot = Snapshot(self.config.mysql, self.layout)
        try:
            for page in snapshot.rows(where, args):
                yield from page
        finally:
            snapshot.close()

    def _hashed(self, low: int | None = None, high: int | None = None,
                ) -> Iterator[tuple[str, int]]:
        where, args = ("", ()) if low is None and high is None else \
            snapshots.key_range_where(self.layout, low, high)
        rows = self._rows(where, args)
        try:
            yield from self._hashes(rows)
        finally:
            # Its snapshot ends now: left suspended by a function that raised, it would hold
            # its transaction (and a DROP or ALTER of the table) until garbage collected.
            rows.close()

    def _hashes(self, rows: Iterable[tuple[Row, Row]]) -> Iterator[tuple[str, int]]:
        builder = self.builder
        for key, row in rows:
            found = builder.row_hash(key, row)
            if found is not None:
                yield found

    def _now(self, ids: Sequence[str]) -> list[tuple[Row, Row]]:
        return snapshots.rows_now(self.config.mysql, self.layout, ids) if ids else []

    def hashes_for_ids(self, ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(ids), snapshots.IDS_PER_LOOKUP):
            found.update(self._hashes(self._now(ids[start:start + snapshots.IDS_PER_LOOKUP])))
        return found

    def present(self, ids: Sequence[str]) -> set[str]:
        return set(self.hashes_for_ids(ids))

    def now(self, doc_id: str) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]]]:
        rows = self._now([doc_id])
        if not rows:
            return None, []
        document = self.builder.shaped(doc_id, rows[0][1])
        return (None if document is None else dict(document)), [("", self.table.name, doc_id)]

    def what_differs(self, sources: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        builder = self.builder
        mine: dict[str, dict[str, Any]] = {}
        for key, row in self._now(list(sources)):
            doc_id = document_id(key)
            document = builder.shaped(doc_id, row)
            if document is not None:
                mine[doc_id] = _as_json(document)
        return _stale_parts(mine, sources, flat=True)


# --- a table's joined documents ---------------------------------------------------------------

class _TreeSnapshot:
    def __init__(self, reads: TreeReads) -> None:
        # Snapshot opens the read view and reads its binlog position; the tree's levels are
        # read on the same connection, inside it.
        self._snapshot = Snapshot(reads.config.mysql, reads.layout)
        self.position = self._snapshot.position
        self._rows = reads.rows

    def pages(self, low: int | None, high: int | None, page_rows: int,
              version: int | None) -> Pages:
        assert version is not None, "joined documents are versioned by the binlog"
        tree = self._rows.tree
        for page in self._rows.pages(self._snapshot.connection, low, high, page_rows):
            yield [trees.write_for(a, version, 0, tree.routing) for a in page]

    def pages_for_ids(self, ids: Sequence[str], page_rows: int, version: int | None) -> Pages:
        assert version is not None, "joined documents are versioned by the binlog"
        tree = self._rows.tree
        for start in range(0, len(ids), page_rows):
            keys = [trees.root_key(tree, trees.root_values_of_id(tree, i))
                    for i in ids[start:start + page_rows]]
            found = self._rows.by_keys(self._snapshot.connection, keys)
            yield [trees.write_for(a, version, 0, tree.routing) for a in found
                   if a.document is not None]

    def close(self) -> None:
        self._snapshot.close()


@dataclass
class TreeReads(_HashedHere):
    config: Config
    tree: Tree
    table: TableConfig

    def __post_init__(self) -> None:
        self.rows = TreeRows(self.tree)
        root = self.tree.root
        self.layout = TableLayout(root.database, root.table, root.columns, self.tree.flavor)
        self.fields: list[Field] = []
        # Both sides hashed here, from documents assembled the same way.
        self.exact_checksums = True

    def snapshot(self) -> ReadSnapshot:
        return _TreeSnapshot(self)

    def _documents(self, low: int | None = None, high: int | None = None) -> Iterator[Assembled]:
        conn = connect(self.config.mysql, self.tree.root.database)
        try:
            for page in self.rows.pages(conn, low, high):
                yield from page
        finally:
            conn.close()

    def _hashed(self, low: int | None = None, high: int | None = None,
                ) -> Iterator[tuple[str, int]]:
        """Every document assembled as the daemon writes it, and its hash (what a joined
        document is cannot be summed in SQL); a root its transform gives none is left out."""
        for assembled in self._documents(low, high):
            if assembled.document is not None:
                yield document_id(assembled.key), _hash(assembled)

    def _by_ids(self, ids: Sequence[str], trace: bool = False) -> list[Assembled]:
        tree = self.tree
        conn = connect(self.config.mysql, tree.root.database)
        try:
            found: list[Assembled] = []
            for start in range(0, len(ids), tree_sql.PAGE_ROOTS):
                keys = [trees.root_key(tree, trees.root_values_of_id(tree, i))
                        for i in ids[start:start + tree_sql.PAGE_ROOTS]]
                found += self.rows.by_keys(conn, keys, trace)
            return found
        finally:
            conn.close()

    def hashes_for_ids(self, ids: Sequence[str]) -> dict[str, int]:
        return {document_id(a.key): _hash(a) for a in self._by_ids(ids) if a.document is not None}

    def present(self, ids: Sequence[str]) -> set[str]:
        return {document_id(a.key) for a in self._by_ids(ids) if a.document is not None}

    def documents_for_ids(self, ids: Sequence[str]) -> list[Assembled]:
        """The documents behind these ids (what differs in stale ones)."""
        return self._by_ids(ids)

    def now(self, doc_id: str) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]]]:
        (found,) = self._by_ids([doc_id], trace=True)
        return found.document, found.rows

    def what_differs(self, sources: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        mine = {document_id(a.key): _as_json(a.document) for a in self._by_ids(list(sources))
                if a.document is not None}
        return _stale_parts(mine, sources, flat=False)


def _stale_parts(mine: Mapping[str, Mapping[str, Any]],
                 sources: Mapping[str, Mapping[str, Any]], *, flat: bool) -> dict[str, list[str]]:
    """id -> what makes the index's document stale (empty: in sync), for the ids whose row
    MySQL still has."""
    return {i: compare.stale_parts(mine[i], source, flat=flat,
                                   by_indexer=compare.written_by_indexer(source))
            for i, source in sources.items() if i in mine}


def _as_json(document: Mapping[str, Any]) -> dict[str, Any]:
    """As the index's ``_source`` reads back."""
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(document))
    return loaded


def _hash(assembled: Assembled) -> int:
    assert assembled.document is not None
    return trees.document_hash(assembled.document)
