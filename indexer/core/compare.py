"""When is a document in the index the document MySQL's rows make now? One answer, used by
`indexer explain`, `indexer reconcile`, continuous verification and their repairs, so that
none of them can call a row stale that another calls in sync.

Pure. Both documents are compared as the JSON they are (the MySQL side read back through
JSON, as the index holds it): a field that is NULL and a field that is absent are equal (as
the checksums count them: a nullable column added with no default leaves older documents
in sync), and the indexer's own ``_indexer`` field is not content.

Checksums are the fast way to find candidates; they compare texts, and a text can differ
where the documents cannot (MariaDB keeps a JSON string's escapes as stored), so a checksum
alone never makes a row stale: :func:`differences` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer.core.documents import META_FIELD


def differences(mysql: Mapping[str, Any], index: Mapping[str, Any], path: str = "", *,
                flat: bool = False) -> list[str]:
    """Which parts of a document differ between MySQL's and the index's (empty: equal): the
    root's fields by name, a lookup's by its path, children by count or by position
    (``flat``: a row's document, whose objects are JSON values, named by their field only)."""
    found: list[str] = []
    for name in sorted(set(mysql) | set(index), key=str):
        ours, theirs = mysql.get(name), index.get(name)
        if ours == theirs or name == META_FIELD:
            continue
        where = f"{path}.{name}" if path else name
        if flat:
            found.append(where)
        elif isinstance(ours, dict) and isinstance(theirs, dict):
            found += differences(ours, theirs, where)
        elif isinstance(ours, list) and isinstance(theirs, list) and any(
                isinstance(v, dict) for v in (*ours, *theirs)):
            if len(ours) != len(theirs):
                found.append(f"{where}: {len(ours)} in MySQL, {len(theirs)} in the index")
                continue
            for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
                if a != b:
                    inner = (differences(a, b, f"{where}[{i}]")
                             if isinstance(a, dict) and isinstance(b, dict) else [])
                    found += inner or [f"{where}[{i}]"]
        else:
            found.append(where)
    return found


# What a document written by something other than indexer lacks, whatever its fields hold:
# its checksum and chunk (reconciliation cannot see it) and a version from the source.
NOT_INDEXERS = f"{META_FIELD} (written by something other than indexer: no checksum, no version)"


def stale_parts(mysql: Mapping[str, Any], index: Mapping[str, Any], *, flat: bool,
                by_indexer: bool) -> list[str]:
    """What makes an index document stale against MySQL's: its differing parts, or, when
    its content is equal but indexer did not write it, its missing ``_indexer`` block.
    Empty: in sync."""
    found = differences(mysql, index, flat=flat)
    return found if found or by_indexer else [NOT_INDEXERS]


def written_by_indexer(source: Mapping[str, Any]) -> bool:
    """Whether an index document carries indexer's own block (checksum, chunk)."""
    return isinstance(source.get(META_FIELD), dict)
