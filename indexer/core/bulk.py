"""The bulk API's NDJSON lines for a write: pure, and compiled with the per-event path."""

from __future__ import annotations

import functools

import orjson

from indexer.core.documents import Write


def action_line(index: str, write: Write, version_type: str = "external") -> bytes:
    # Formatted by hand: this runs once per document and orjson on a nested dict costs more.
    return b"%b%b,\"version\":%d,\"version_type\":\"%b\"}}" % (
        _index_prefix(index), orjson.dumps(write.id), write.version, version_type.encode())


@functools.lru_cache(maxsize=256)
def _index_prefix(index: str) -> bytes:
    return b'{"index":{"_index":' + orjson.dumps(index) + b',"_id":'
