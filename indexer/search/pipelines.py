"""Tables' ingest pipelines on the search server: each must exist before anything is written
through it, and what one does to a document is asked of the server itself (``_simulate``), so
that explain compares only the fields the pipeline leaves as indexer wrote them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from indexer.errors import ConfigError
from indexer.search.client import SearchClient
from indexer.settings import TableConfig

_ABSENT = object()


async def missing(client: SearchClient, tables: Iterable[TableConfig]) -> list[str]:
    """One line for each table whose ingest pipeline the server does not have."""
    lines = []
    for table in tables:
        if not table.pipeline:
            continue
        found = await client.request("GET", f"/_ingest/pipeline/{quote(table.pipeline)}",
                                     ok=(404,))
        if table.pipeline not in (found or {}):
            lines.append(f"tables[{table.name}].pipeline: the search server has no ingest "
                         f"pipeline {table.pipeline!r}; create it (PUT _ingest/pipeline/"
                         f"{table.pipeline}) or remove the setting")
    return lines


async def require(client: SearchClient, tables: Iterable[TableConfig]) -> None:
    """ConfigError naming the first table whose pipeline is missing: nothing is written."""
    if lines := await missing(client, tables):
        raise ConfigError(lines[0])


async def simulate(client: SearchClient, pipeline: str, doc_id: str,
                   document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The document as the pipeline would index it; None: the pipeline drops it. A processor's
    failure raises ValueError with the server's reason."""
    answer = await client.request(
        "POST", f"/_ingest/pipeline/{quote(pipeline)}/_simulate",
        {"docs": [{"_id": doc_id, "_source": dict(document)}]})
    result = (answer.get("docs") or [{}])[0]
    if "error" in result:
        error = result["error"]
        raise ValueError(f"ingest pipeline {pipeline!r} fails on this document: "
                         f"{error.get('type')}: {error.get('reason')}")
    doc = result.get("doc")
    return None if doc is None else dict(doc.get("_source") or {})


def touched(document: Mapping[str, Any], piped: Mapping[str, Any] | None) -> list[str]:
    """The top-level fields the pipeline adds, removes or changes (every one when it drops
    the document)."""
    if piped is None:
        return sorted(document)
    return sorted(name for name in {*document, *piped}
                  if document.get(name, _ABSENT) != piped.get(name, _ABSENT))
