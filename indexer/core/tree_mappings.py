"""The mapping of a table's documents, joins included: what `indexer mappings generate` writes
and `indexer mappings validate` checks. A table without joins is a tree of one node.

Pure. Each column's field is :func:`indexer.core.field_types.field_for`'s; a lookup is an
``object`` of its fields, children are ``nested`` (a query then matches fields of one child,
not of two children that each match a part), and a join with a ``value`` is that field's own
type (an array of keywords for tags, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer.core import field_types
from indexer.core.field_types import Capabilities
from indexer.core.trees import Node, Tree


def generate(tree: Tree, caps: Capabilities) -> dict[str, Any]:
    """A mapping file's body. ``dynamic: false`` stores a column added later in ``_source``
    without refusing it; run ``mappings generate`` and ``reindex`` to make it searchable."""
    return {"settings": {"index": {"number_of_shards": 1, "refresh_interval": "1s"}},
            "mappings": {"dynamic": False, "properties": _properties(tree, tree.root, caps)}}


def _properties(tree: Tree, node: Node, caps: Capabilities) -> dict[str, Any]:
    columns = {c.name: c for c in node.columns}
    properties = {name: field_types.field_for(columns[column], caps)
                  for column, name in node.fields}
    for index in node.joins:
        join = tree.nodes[index]
        properties[join.name] = _join_field(tree, join, caps)
    return properties


def _join_field(tree: Tree, join: Node, caps: Capabilities) -> dict[str, Any]:
    if join.value is not None:
        return _value_field(tree, join, caps)
    return {"type": "object" if join.kind == "lookup" else "nested",
            "properties": _properties(tree, join, caps)}


def _value_field(tree: Tree, join: Node, caps: Capabilities) -> dict[str, Any]:
    """The field a ``value`` path ends at: a column's, or a join's."""
    node, last = _value_end(tree, join)
    column = next((c for c, name in node.fields if name == last), None)
    if column is not None:
        return field_types.field_for(next(c for c in node.columns if c.name == column), caps)
    inner = next(tree.nodes[j] for j in node.joins if tree.nodes[j].name == last)
    return _join_field(tree, inner, caps)


def _value_end(tree: Tree, join: Node) -> tuple[Node, str]:
    assert join.value is not None
    node = join
    for part in join.value[:-1]:
        node = next(tree.nodes[j] for j in node.joins if tree.nodes[j].name == part)
    return node, join.value[-1]


def check(tree: Tree, mappings: Mapping[str, Any],
          new_columns: str = "keep") -> tuple[list[str], list[str]]:
    """(problems, notes) of a mapping against the tables of a document: fields that refuse or
    lose a column's values, joins without a field under ``dynamic: strict``, children mapped
    as ``object`` (notes), as :func:`indexer.core.field_types.check` says of one table."""
    problems: list[str] = []
    notes: list[str] = []
    _check_node(tree, tree.root, mappings, str(mappings.get("dynamic", True)).lower(),
                new_columns, "", problems, notes)
    return problems, notes


def _check_node(tree: Tree, node: Node, spec: Mapping[str, Any], dynamic: str,
                new_columns: str, prefix: str, problems: list[str], notes: list[str]) -> None:
    properties: Mapping[str, Any] = spec.get("properties", {})
    joins = {tree.nodes[j].name: tree.nodes[j] for j in node.joins}
    level = {"dynamic": dynamic, "properties": {k: v for k, v in properties.items()
                                                if k not in joins}}
    found, said = field_types.check([c for c in node.columns if c.name in dict(node.fields)],
                                    dict(node.fields), level,
                                    new_columns if node.parent < 0 else "keep")
    problems += [prefix + p for p in found]
    notes += [prefix + n for n in said]
    for name, join in joins.items():
        label = f"{prefix}{name}"
        join_spec = properties.get(name)
        if join_spec is None:
            if dynamic == "strict":
                problems.append(f"{label}: no field for the join, and dynamic is strict: every "
                                "document is refused")
            else:
                notes.append(f"{label}: no field for the join; "
                             + ("the server guesses its fields" if dynamic == "true"
                                else "stored in _source but not searchable"))
            continue
        if join.value is not None:
            end, last = _value_end(tree, join)
            column = next((c for c, n in end.fields if n == last), None)
            if column is not None:
                problem = field_types.column_problem(
                    next(c for c in end.columns if c.name == column), join_spec)
                if problem is not None:
                    problems.append(f"{label}: {problem}")
            continue
        kind = join_spec.get("type", "object")
        if join.kind == "child" and kind == "object":
            notes.append(f"{label}: children mapped as object: a query can match a field of one "
                         "child and another of a second; nested keeps each child whole")
        inner = str(join_spec.get("dynamic", dynamic)).lower()
        _check_node(tree, join, join_spec, inner, new_columns, f"{label}.", problems, notes)
