"""Joined documents: a table's row with its lookups (many-to-one, an object) and children
(one-to-many, an array of objects), nested, as one document.

Pure, and compiled with the per-event path (a reindex or reconcile assembles every document
of a table here: 3x faster compiled). A :class:`Tree` is the configuration's joins
(:class:`~indexer.settings.JoinSettings`) laid over the tables' layouts: its nodes, what each
projects, how each finds its parent's rows (:func:`climb`, the walk from a changed row up to
the documents it is part of) and how the rows read for a batch of documents become those
documents (:func:`assemble`). The daemon, the reindex and reconciliation all build joined
documents here, from rows read from MySQL, so a document is the same whichever of them wrote
it.

A document records, beside its content hash and chunk, the lookup rows it embeds
(``_indexer.refs``, ``<database>.<table>#<id>``): deleting a lookup row (a tag) may delete
or change the rows that pointed at it (ON DELETE CASCADE or SET NULL in InnoDB, which the
binlog does not carry), so MySQL no longer knows which documents held it; the index does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from indexer import transforms
from indexer.core.checksums import content_hash
from indexer.core.documents import META_FIELD, Write, chunk_field, document_id, tombstone
from indexer.core.layout import Column, Flavor, TableLayout
from indexer.core.routing import routing_of, value_at
from indexer.settings import JoinSettings, RowRule, TableConfig

NodeKind = Literal["root", "lookup", "child"]
Row = dict[str, Any]
Values = tuple[Any, ...]
_META = META_FIELD.encode()


@dataclass(frozen=True)
class Node:
    """One table's place in a document: the root, or a join below its parent."""

    index: int
    parent: int  # -1 for the root
    path: str  # "" for the root, else the dotted field path: "variants.colour"
    name: str  # the field it fills in its parent's object ("" for the root)
    kind: NodeKind
    database: str
    table: str
    topic: str
    # (the parent's column, this table's column) pairs; empty for the root
    on: tuple[tuple[str, str], ...]
    key: tuple[str, ...]  # this table's primary key
    columns: tuple[Column, ...]
    fields: tuple[tuple[str, str], ...]  # (column, document field) for the columns it shows
    order_by: tuple[tuple[str, bool], ...]
    max: int
    value: tuple[str, ...] | None
    allow_unindexed: bool
    joins: tuple[int, ...] = ()
    # Made once by build(): touch() reads them for every change of every table of a tree.
    full_name: str = ""  # "database.table"
    parent_columns: tuple[str, ...] = ()  # the parent's side of ``on``
    own_columns: tuple[str, ...] = ()  # this table's side of ``on``

    def label(self) -> str:
        return self.path or self.full_name

    def ref(self, row: Mapping[str, Any]) -> str:
        """How a document names a lookup row it embeds."""
        return ref(self.full_name, {k: row[k] for k in self.key})


def ref(table: str, key: Mapping[str, Any]) -> str:
    return f"{table}#{document_id(key)}"


@dataclass(frozen=True)
class Tree:
    """A table's document and every table joined into it, depth first from the root."""

    alias: str
    nodes: tuple[Node, ...]
    flavor: Flavor = "mariadb"  # the server's
    below: tuple[tuple[Node, ...], ...] = ()  # each node's joins, as nodes (build() fills it)
    by_table: Mapping[str, tuple[Node, ...]] = field(default_factory=dict)  # build() fills it
    # The root table's where and deleted_when: a root row they leave out has no document.
    rows: RowRule | None = None
    # The root table's transform ("package.module:function"), applied to each whole document.
    transform: str = ""
    # The document's field (a path: a root column's, or through lookups) naming its routing.
    routing: tuple[str, ...] = ()

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def joins_of(self, node: Node) -> tuple[Node, ...]:
        """The nodes joined below ``node``, in order."""
        return self.below[node.index]

    def places(self, table: str) -> tuple[Node, ...]:
        """The nodes of a table (``database.table``): one table may be joined in twice."""
        return self.by_table.get(table, ())

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.full_name for n in self.nodes))

    @property
    def topics(self) -> dict[str, str]:
        """topic -> table, for every table of the tree."""
        return {n.topic: n.full_name for n in self.nodes}

    def levels(self) -> list[list[Node]]:
        """The joins level by level below the root: what one query per level reads."""
        found: list[list[Node]] = []
        current = [self.root]
        while current := [self.nodes[j] for n in current for j in n.joins]:
            found.append(current)
        return found


def tree_tables(table: TableConfig) -> list[tuple[str, str]]:
    """(database, table) of every table of a table's document, the table first."""
    found = [(table.database, table.table)]

    def visit(joins: tuple[JoinSettings, ...]) -> None:
        for join in joins:
            if (join.database, join.table) not in found:
                found.append((join.database, join.table))
            visit(join.joins)

    visit(table.joins)
    return found


def tree_topics(table: TableConfig) -> dict[str, str]:
    """topic -> "database.table" for a table and every table joined into it."""
    found = {table.topic: table.name}

    def visit(joins: tuple[JoinSettings, ...]) -> None:
        for join in joins:
            found.setdefault(join.topic, join.full_name)
            visit(join.joins)

    visit(table.joins)
    return found


def build(table: TableConfig, layouts: Mapping[str, TableLayout]) -> Tree:
    """The tree of a table with joins, over its tables' layouts (``database.table`` ->
    layout). Columns the configuration names are assumed to exist: :func:`check` says."""
    nodes: list[Node] = []

    def add(parent: int, path: str, name: str, kind: NodeKind, settings: JoinSettings | None,
            ) -> int:
        database = settings.database if settings else table.database
        name_of = settings.table if settings else table.table
        layout = layouts[f"{database}.{name_of}"]
        include = settings.include if settings else (table.include or None)
        exclude = settings.exclude if settings else table.exclude
        rename = settings.rename if settings else table.rename
        joins = settings.joins if settings else table.joins
        taken = {j.name for j in joins}
        fields = tuple((c.name, rename.get(c.name, c.name)) for c in layout.columns
                       if (include is None or c.name in include) and c.name not in exclude
                       and rename.get(c.name, c.name) not in taken)
        index = len(nodes)
        on = settings.on if settings else ()
        nodes.append(Node(
            index=index, parent=parent, path=path, name=name, kind=kind, database=database,
            table=name_of, topic=settings.topic if settings else table.topic,
            on=on, key=tuple(c.name for c in layout.key),
            columns=layout.columns, fields=fields,
            order_by=settings.order_by if settings else (),
            max=settings.max if settings else 1, value=settings.value if settings else None,
            allow_unindexed=settings.allow_unindexed if settings else False,
            full_name=f"{database}.{name_of}", parent_columns=tuple(p for p, _ in on),
            own_columns=tuple(o for _, o in on)))
        children = tuple(add(index, f"{path}.{j.name}" if path else j.name, j.name, j.kind, j)
                         for j in joins)
        nodes[index] = replace(nodes[index], joins=children)
        return index

    add(-1, "", "", "root", None)
    below = tuple(tuple(nodes[j] for j in n.joins) for n in nodes)
    by_table: dict[str, tuple[Node, ...]] = {}
    for node in nodes:
        by_table[node.full_name] = (*by_table.get(node.full_name, ()), node)
    return Tree(table.alias, tuple(nodes), layouts[table.name].flavor, below, by_table,
                table.rows, table.transform,
                tuple(table.routing.split(".")) if table.routing else ())


# --- the walk up: from a changed row to the documents it is part of ------------------------

@dataclass(frozen=True)
class Step:
    """One level of the walk from a node to the root: rows of ``node`` (the parent of the
    level below) whose ``match`` columns hold the values found so far; their ``select``
    columns are the values for the next step (the root's key at the last). ``direct``: the
    values already are root keys, no query needed."""

    node: int
    match: tuple[str, ...]
    select: tuple[str, ...]
    direct: bool


def climb(tree: Tree, node: Node) -> list[Step]:
    """The steps from ``node``'s own join values up to root keys."""
    steps = []
    while node.parent >= 0:
        parent = tree.nodes[node.parent]
        match = node.parent_columns
        if parent.parent < 0:
            select = parent.key
            direct = set(match) == set(parent.key) and len(match) == len(parent.key)
        else:
            select = parent.own_columns
            direct = False
        steps.append(Step(parent.index, match, select, direct))
        node = parent
    return steps


def root_values(tree: Tree, step: Step, values: Values) -> Values:
    """The root key (in its order) from the values a direct step matches."""
    return tuple(values[step.match.index(k)] for k in tree.root.key)


def root_key(tree: Tree, values: Values) -> Row:
    return dict(zip(tree.root.key, values, strict=True))


_INTEGERS = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")


def root_values_of_id(tree: Tree, doc_id: str) -> Values:
    """The root key (in key order, canonical values) a document id stands for: the inverse
    of :func:`~indexer.core.documents.document_id` (parts joined by '|', '\\' escaping)."""
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in doc_id if len(tree.root.key) > 1 else ():
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "|":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts = [*parts, "".join(current)] if len(tree.root.key) > 1 else [doc_id]
    types = {c.name: c.data_type for c in tree.root.columns}
    return tuple(int(part) if types[name] in _INTEGERS else part
                 for name, part in zip(tree.root.key, parts, strict=True))


@dataclass
class Touch:
    """What one change of one table means for one tree: root keys it names itself, the
    join values each of its nodes walks up from, and lookup rows it removed or re-keyed,
    whose documents the index knows (``refs``)."""

    roots: list[Row] = field(default_factory=list)
    starts: dict[int, set[Values]] = field(default_factory=dict)  # node -> its own join values
    refs: set[str] = field(default_factory=set)


def touch(tree: Tree, table: str, before: Mapping[str, Any] | None,
          after: Mapping[str, Any] | None) -> Touch:
    """What a change of ``table`` (its before and after images) touches in the tree. Both
    images count: a child moved to another parent leaves one document and joins another."""
    found = Touch()
    images = (before, after) if before is not None and after is not None else (
        (before,) if before is not None else (after,) if after is not None else ())
    for node in tree.places(table):
        if node.parent < 0:
            for image in images:
                key = {k: image.get(k) for k in node.key}
                if None not in key.values() and key not in found.roots:
                    found.roots.append(key)
            continue
        values = found.starts.setdefault(node.index, set())
        own = node.own_columns
        for image in images:
            if len(own) == 1:  # most joins: one column, no tuple built to look for None
                single = image.get(own[0])
                if single is not None:
                    values.add((single,))
                continue
            joined = tuple(image.get(c) for c in own)
            if None not in joined:
                values.add(joined)
        if node.kind == "lookup" and before is not None and _unlinked(node, before, after):
            key = {k: before.get(k) for k in node.key}
            if None not in key.values():
                found.refs.add(node.ref(key))
    return found


def _unlinked(node: Node, before: Mapping[str, Any], after: Mapping[str, Any] | None) -> bool:
    """A lookup row deleted, or its key or join columns changed: rows that pointed at it
    may have been deleted, re-pointed or set NULL by the engine, without binlog events."""
    if after is None:
        return True
    return any(before.get(c) != after.get(c) for c in (*node.key, *node.own_columns))


# --- assembling documents from the rows read for them --------------------------------------

@dataclass
class Matches:
    """A node's rows read for a batch, by the values of its own join columns, each list in
    the node's order and at most its cap long; ``totals`` counts matches beyond the cap."""

    rows: dict[Values, list[Row]] = field(default_factory=dict)
    totals: dict[Values, int] = field(default_factory=dict)
    refs: dict[Values, str] = field(default_factory=dict)  # a lookup row's, made once

    def add(self, values: Values, row: Row, total: int = 0) -> None:
        self.rows.setdefault(values, []).append(row)
        if total > len(self.rows[values]):
            self.totals[values] = total

    def ref(self, node: Node, values: Values, row: Row) -> str:
        found = self.refs.get(values)
        if found is None:
            found = self.refs[values] = node.ref(row)
        return found


@dataclass
class Assembled:
    """One document (None: the root row is gone), with the lookup rows it embeds and the
    children arrays it had to cut."""

    key: Row
    document: dict[str, Any] | None
    refs: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    # With ``trace``: every row it is made of, (path, "database.table", the row's id).
    rows: list[tuple[str, str, str]] = field(default_factory=list)


def wanted_values(node: Node, parents: Iterable[Row]) -> set[Values]:
    """The join values of ``node`` that these rows of its parent point at (NULLs match
    nothing, as in SQL)."""
    columns = node.parent_columns
    found = set()
    for row in parents:
        values = tuple(row.get(c) for c in columns)
        if None not in values:
            found.add(values)
    return found


def assemble(tree: Tree, roots: Sequence[tuple[Row, Row | None]],
             matches: Mapping[int, Matches], trace: bool = False) -> list[Assembled]:
    """The documents of these roots ((key, row or None when gone)) from every node's rows;
    with ``trace``, each lists the rows it is made of. A document the tree's transform gives
    no document is as a root row gone; what the transform raises is raised (a
    :class:`DecodeError`: the rebuild dead-letters the changes behind that document)."""
    function = transforms.load(tree.transform) if tree.transform else None
    documents = []
    for key, row in roots:
        if row is None:
            documents.append(Assembled(key, None))
            continue
        refs: set[str] = set()
        truncated: set[str] = set()
        used: list[tuple[str, str, str]] | None = [] if trace else None
        document: dict[str, Any] | None = _object(tree, tree.root, row, matches, refs,
                                                  truncated, used)
        if function is not None and document is not None:
            shaped = transforms.apply(function, tree.transform, document_id(key), document)
            document = None if shaped is None else dict(shaped)
        documents.append(Assembled(key, document, sorted(refs), sorted(truncated), used or []))
    return documents


def _object(tree: Tree, node: Node, row: Row, matches: Mapping[int, Matches], refs: set[str],
            truncated: set[str], used: list[tuple[str, str, str]] | None = None,
            ) -> dict[str, Any]:
    # Runs for every object of every document a reindex or reconcile reads: the common
    # shapes (one join column, a lookup's ref once per row) take the short way.
    if used is not None:
        used.append((node.path, node.full_name, document_id({k: row[k] for k in node.key})))
    obj = {name: row[column] for column, name in node.fields}
    for join in tree.joins_of(node):
        columns = join.parent_columns
        if len(columns) == 1:
            single = row[columns[0]]
            values: Values | None = None if single is None else (single,)
        else:
            values = tuple(row[c] for c in columns)
            if None in values:
                values = None
        found = matches[join.index]
        rows: Sequence[Row] = found.rows.get(values, ()) if values is not None else ()
        if join.kind == "lookup":
            if rows:
                assert values is not None
                refs.add(found.ref(join, values, rows[0]))
                inner = _object(tree, join, rows[0], matches, refs, truncated, used)
                obj[join.name] = inner if join.value is None else _embed(join, inner)
            else:
                obj[join.name] = None
            continue
        if len(rows) > join.max or (values is not None and found.totals.get(values, 0)
                                    > join.max):
            truncated.add(join.path)
            rows = rows[:join.max]
        if join.value is None:
            obj[join.name] = [_object(tree, join, r, matches, refs, truncated, used)
                              for r in rows]
        else:
            obj[join.name] = [_embed(join, _object(tree, join, r, matches, refs, truncated,
                                                   used)) for r in rows]
    return obj


def _embed(node: Node, obj: dict[str, Any]) -> Any:
    if node.value is None:
        return obj
    value: Any = obj
    for part in node.value:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def write_for(assembled: Assembled, version: int, deleted_at_ms: int,
              routing: tuple[str, ...] = ()) -> Write:
    """The search-server write of a joined document: the document with ``_indexer`` (its
    content hash, chunk, the lookup rows it embeds, the children arrays cut at their cap), or
    a tombstone when its root row is gone. Routed (``routing``, the field's path) by the
    document; a tombstone by its id, until the caller learns where the document is."""
    doc_id = document_id(assembled.key)
    document = assembled.document
    if document is None:
        return Write(doc_id, version, tombstone(deleted_at_ms), True,
                     doc_id if routing else None)
    place = routing_of(value_at(document, routing), doc_id, ".".join(routing)) if routing \
        else None
    return Write(doc_id, version, body(assembled, doc_id), False, place)


def body(assembled: Assembled, doc_id: str) -> bytes:
    document = assembled.document
    assert document is not None
    chunk, number = chunk_field(assembled.key, doc_id)
    meta: dict[str, Any] = {"hash": document_hash(document), chunk.decode(): number}
    if assembled.refs:
        meta["refs"] = assembled.refs
    if assembled.truncated:
        meta["truncated"] = assembled.truncated
    doc = orjson.dumps(document)
    return b'%b%b"%b":%b}' % (doc[:-1], b"," if len(doc) > 2 else b"", _META,
                              orjson.dumps(meta))


def document_hash(document: Mapping[str, Any]) -> int:
    """A joined document's content hash: each field as :func:`content_hash` writes it, the
    lookups and children as their JSON text. Reconciliation computes it from documents it
    assembles from MySQL, so stream, reindex and reconcile agree by construction."""
    return content_hash(document)
