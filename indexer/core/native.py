"""The native per-batch path: an accelerator beside the Python reference, as CPython's
``_json`` is beside ``json``.

``indexer._native`` (Rust, ``native/``, built by setup.py when cargo is there) turns a slice
of one table's messages into the documents :class:`~indexer.core.documents.DocumentBuilder`
would write for them, byte for byte, without a Python object per row or per value. It takes
messages of a table written whole (no include/exclude/rename) with binlog versions, whose
converters are ones it has (:func:`converter_step`): without schemas, rows of the accepted
layout; with schemas, messages of the schema the decoder last used, when that is the
accepted layout's. It declines each message that is in any way unusual (a delete, a float, a
key that is not one integer, another layout or schema, anything it cannot parse): the Python
path decodes those and decides what becomes of them. tests/unit/core/test_native.py holds
the two to identical results.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import orjson

from indexer.core import values
from indexer.core.checksums import Hasher, NativeHasher, content_hash
from indexer.core.documents import DocumentBuilder
from indexer.core.envelope import Position
from indexer.core.events import (
    PAYLOAD_MARKER,
    SCHEMA_PREFIX,
    EnvelopeDecoder,
    envelope_row_schema,
    field_converter,
    fraction_digits,
)
from indexer.errors import DecodeError

# A declined message costs the native side's parse on top of Python's: a table whose messages
# it keeps declining (floats, composite keys) goes to Python alone for DECLINED_PAUSE_SLICES
# slices once DECLINED_SLICES in a row were mostly (DECLINED_SHARE) declined. One such slice
# is no sign: the first after a start or a new layout is Python's anyway.
DECLINED_SLICES = 3
DECLINED_PAUSE_SLICES = 200
DECLINED_SHARE = 0.5


# DATETIME columns as Debezium encodes them: (the native step, its default fraction digits).
DATETIMES = {"io.debezium.time.MicroTimestamp": ("datetime", 6),
             "io.debezium.time.Timestamp": ("datetime-ms", 3),
             "org.apache.kafka.connect.data.Timestamp": ("datetime-ms", 3)}


def content_hasher(module: ModuleType | None) -> Hasher:
    """Documents' content hash: the native module's where there is one, else the Python
    reference (:func:`indexer.core.checksums.content_hash`)."""
    return NativeHasher(module.content_hash) if module is not None else content_hash


class NotNative(Exception):
    """A converter the native side does not have: the table's messages are Python's."""


def converter_step(schema: Mapping[str, Any]) -> tuple[str, int] | None:
    """The native step for a field's schema: None when its value is taken as is (as
    :func:`~indexer.core.events.field_converter` says), else ("decimal", scale) or
    (a DATETIMES kind, fraction digits). Raises NotNative for any other converter."""
    converter = field_converter(schema)
    if converter is None:
        return None
    name = schema.get("name")
    params: Mapping[str, Any] = schema.get("parameters") or {}
    # (a BIGINT UNSIGNED's Decimal is an integer to Python, not text)
    if name == "org.apache.kafka.connect.data.Decimal" and (
            converter is not values.unscaled_from_base64):
        scale = int(params.get("scale", 0))
        if scale >= 0:
            return "decimal", scale
    elif name in DATETIMES:
        kind, default = DATETIMES[name]
        digits = fraction_digits(params, default)
        if 0 <= digits <= 6:
            return kind, digits
    raise NotNative(f"{schema.get('field')!r}: {name or schema.get('type')}")


Steps = tuple[tuple[str, str, int], ...]


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """What the native side needs to know of a table: its converted fields, and either the
    field names of the accepted row layout (sorted; without schemas) or the accepted schemas'
    message prefixes (with schemas)."""

    steps: Steps
    layout: tuple[str, ...]
    value_prefix: bytes = b""  # b"": messages with schemas are declined
    key_prefix: bytes = b""


def steps_of(fields: Iterable[Mapping[str, Any]]) -> Steps:
    """The native steps of a row's field schemas; raises NotNative."""
    steps = []
    for schema in fields:
        step = converter_step(schema)
        if step is not None:
            steps.append((str(schema["field"]), *step))
    return tuple(steps)


# A table's messages carry the same few schemas for weeks: each is parsed once, not per slice.
@functools.lru_cache(maxsize=64)
def wrapped_steps(prefix: bytes) -> Steps | None:
    """The native steps of the row schema in a wrapped message's prefix, or None."""
    try:
        schema = orjson.loads(prefix[len(SCHEMA_PREFIX):-len(PAYLOAD_MARKER)])
        return steps_of(envelope_row_schema(schema).get("fields", []))
    except (orjson.JSONDecodeError, DecodeError, NotNative, AttributeError, TypeError):
        return None


def slice_plan(decoder: EnvelopeDecoder, builder: DocumentBuilder) -> SlicePlan | None:
    """The table's plan, or None while the native side cannot take its messages: documents
    projected or versioned by a column, no layout accepted yet (the first row is Python's:
    it may be a new layout), a converter it does not have; with schemas, also when the
    schema the decoder last used is not the accepted layout's, or its key is converted."""
    layout = decoder.layout
    if not (builder.identity and builder.binlog_versions) or layout is None:
        return None
    if not any(kind for _, kind in layout):  # the layout of rows without schemas
        try:
            steps = steps_of(decoder.schemaless_fields)
        except NotNative:
            return None
        return SlicePlan(steps, tuple(sorted(name for name, _ in layout)))
    (value_prefix, value_plan), (key_prefix, key_plan) = decoder.last_schemas
    if value_plan.layout != layout or key_plan.steps or not (
            value_prefix.startswith(SCHEMA_PREFIX) and key_prefix.startswith(SCHEMA_PREFIX)):
        return None
    wrapped = wrapped_steps(value_prefix)
    if wrapped is None:
        return None
    return SlicePlan(wrapped, (), value_prefix, key_prefix)


class Prepared(NamedTuple):
    """A message the native side took: its op, the document id and body, and the source
    position the Python path would have decoded."""

    op: str
    id: str
    document: bytes
    file: str
    pos: int
    row: int
    ts_ms: int
    gtid: str | None
    snapshot: str | None
    connector: str | None

    def position(self) -> Position:
        return Position(self.file, self.pos, self.row, self.ts_ms, self.gtid, self.snapshot,
                        self.connector)


class SlicePreparer:
    """Per table: runs slices through the native side while it takes them."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._declining = 0  # slices in a row mostly declined
        self._paused = 0  # slices left to give Python alone

    def prepare(self, plan: SlicePlan | None, keys: list[bytes | None],
                messages: list[bytes | None]) -> list[Prepared | None]:
        """Per message the native result, or None where the Python path must decode; [] for
        the whole slice when the table is not the native side's now."""
        if plan is None or self._paused:
            self._paused = max(0, self._paused - 1)
            return []
        found: list[tuple[Any, ...] | None] = self._module.prepare(
            keys, messages, list(plan.steps), list(plan.layout), plan.value_prefix,
            plan.key_prefix)
        if found.count(None) <= len(found) * DECLINED_SHARE:
            self._declining = 0
        else:
            self._declining += 1
            if self._declining == DECLINED_SLICES:
                self._declining = 0
                self._paused = DECLINED_PAUSE_SLICES
        return [None if result is None else Prepared(*result) for result in found]
