"""The bulk API's NDJSON lines for a write: pure, and compiled with the per-event path."""

from __future__ import annotations

import functools

import orjson

from indexer.core.documents import Write


def action_line(index: str, write: Write, version_type: str = "external",
                pipeline: str = "") -> bytes:
    """The write's action; a document (never a tombstone) through ``pipeline`` when set."""
    # Formatted by hand: this runs once per document and orjson on a nested dict costs more.
    line = b"%b%b,\"version\":%d%b" % (_index_prefix(index), orjson.dumps(write.id),
                                        write.version, _version_end(version_type))
    more = b""
    if write.routing is not None:
        more += b',"routing":' + orjson.dumps(write.routing)
    if pipeline and not write.deleted:
        more += b',"pipeline":' + orjson.dumps(pipeline)
    return line[:-2] + more + b"}}" if more else line


@functools.lru_cache(maxsize=256)
def _index_prefix(index: str) -> bytes:
    return b'{"index":{"_index":' + orjson.dumps(index) + b',"_id":'


@functools.lru_cache(maxsize=8)
def _version_end(version_type: str) -> bytes:
    """The action's closing part, the same for every line of one version type."""
    return b',"version_type":' + orjson.dumps(version_type) + b"}}"
