"""Whose index is it? Every index indexer creates records in its mapping's ``_meta`` what it
mirrors: the source (Debezium's logical server name, ``connector.topic_prefix``), the table
(or a joined document's root table) and the alias. A command that would write, map, compare
or repair refuses an index recorded for another table or source, so that one table's daemon
can never map, overwrite or tombstone another's documents.

Pure: the record, the comparison and the judgment on an index made before records existed
(adopted when its documents are this table's: :func:`adoption_problem`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from indexer.core.documents import META_FIELD
from indexer.settings import Config, TableConfig

OWNER_META = "indexer_owner"  # the key in an index mapping's _meta
Kind = Literal["table", "tree", "canary"]
# Documents of an index without a record looked at before adopting it.
ADOPTION_SAMPLE = 20


@dataclass(frozen=True)
class Owner:
    source: str  # the logical source: one MySQL server or replication cluster
    table: str  # "database.table": the table, or a joined document's root table
    alias: str
    kind: Kind = "table"
    mysql: str = ""  # host:port it was read from when recorded (shown, not compared)

    def same(self, other: Owner) -> bool:
        """The same table of the same source (an alias may move; a table may gain joins)."""
        return (self.source, self.table) == (other.source, other.table)

    def describe(self) -> str:
        return f"{self.table} of source {self.source!r}" + (
            f" ({self.mysql})" if self.mysql else "")

    def as_meta(self) -> dict[str, str]:
        return {"source": self.source, "table": self.table, "alias": self.alias,
                "kind": self.kind, "mysql": self.mysql}


def owner_of(config: Config, table: TableConfig) -> Owner:
    """What ``table``'s indices record as theirs."""
    kind: Kind = "canary" if table.canary else "tree" if table.joins else "table"
    return Owner(config.connector.topic_prefix, table.name, table.alias, kind,
                 f"{config.mysql.host}:{config.mysql.port}")


def owner_in(mapping_meta: Mapping[str, Any] | None) -> Owner | None:
    """The owner an index's mapping ``_meta`` records (None: made before records existed)."""
    found = (mapping_meta or {}).get(OWNER_META)
    if not isinstance(found, dict) or not all(
            isinstance(found.get(k), str) for k in ("source", "table", "alias")):
        return None
    kind = found.get("kind")
    return Owner(found["source"], found["table"], found["alias"],
                 kind if kind in ("table", "tree", "canary") else "table",
                 str(found.get("mysql") or ""))


def conflict(alias: str, index: str, found: Owner, wanted: Owner) -> str:
    """The line that refuses ``wanted``'s use of an index ``found`` owns."""
    return (f"alias {alias}: index {index} belongs to {found.describe()}, not to "
            f"{wanted.describe()}; nothing was written. Give {wanted.table} an alias of its own "
            f"(tables.alias), or, if {found.table} became {wanted.table}, take the index over "
            f"with `indexer mappings adopt {wanted.table} --force`")


def adoption_problem(samples: Iterable[Mapping[str, Any]], fields: Mapping[str, set[str]],
                     ) -> str | None:
    """Why an index without a record cannot be taken to be this table's (None: it can).

    ``samples`` are live documents of the index (``_id`` and ``_source``), ``fields`` the
    fields MySQL's document has for each id that is a row of the table now. Adopted when
    every sample is indexer's (its ``_indexer`` block) and every one whose row exists holds
    no field the table's document lacks, and at least one sample is a row of the table; an
    index with no live document holds nothing to lose.
    """
    samples = list(samples)
    if not samples:
        return None
    rows = 0
    for sample in samples:
        doc_id, source = sample["_id"], sample["_source"]
        if not isinstance(source.get(META_FIELD), dict):
            return f"document {doc_id} was not written by indexer (no {META_FIELD} block)"
        mine = fields.get(doc_id)
        if mine is None:
            continue
        rows += 1
        foreign = sorted(set(source) - mine - {META_FIELD})
        if foreign:
            return (f"document {doc_id} has fields the table's document does not: "
                    f"{', '.join(foreign[:5])}")
    if not rows:
        return f"none of {len(samples)} documents looked at is a row of the table"
    return None
