"""The wire shape of a Debezium envelope, decoded by msgspec.

Kept apart from :mod:`indexer.core.events` because that module is compiled with mypyc, and
msgspec reads these classes' annotations at run time, which a compiled module does not keep
as msgspec needs them. Decoding is msgspec's own C code either way.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Position(msgspec.Struct, gc=False):
    """Where and when the change was committed in the source database: the fields of
    Debezium's source block that versions, freshness and following the source need (the
    rest is never parsed)."""

    file: str = ""
    pos: int = 0
    row: int = 0
    ts_ms: int = 0
    gtid: str | None = None
    # "true", "first", "last", ... for snapshot reads; "false" (or false) when streaming
    snapshot: str | bool | None = None
    connector: str | None = None  # "mariadb" or "mysql"


class Envelope(msgspec.Struct):
    """A Debezium envelope, or the ``{"schema", "payload"}`` message that wraps one. Typed
    decoding skips what is not declared here (most of the source block, or a schema that
    has been seen before) without building Python objects for it."""

    op: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: Position | None = None
    ts_ms: int | None = None
    schema: msgspec.Raw = msgspec.Raw()
    payload: msgspec.Raw = msgspec.Raw()


ENVELOPE = msgspec.json.Decoder(Envelope)
