"""Debezium change events (JSON converter, with or without schemas) to plain change records.

Pure: bytes in, a :class:`Change` (or ``None`` for a tombstone) out. Logical types are decoded
to the canonical values of :mod:`indexer.core.values`. With schemas, each field's schema names its
encoding; the schema part of a message is identical for every event of a table version, so it
is parsed once and cached by its bytes and only the payload is parsed per event. Without
schemas, the encoding follows the connector settings plus per-column type hints.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from indexer.core import geometry, values
from indexer.core.envelope import ENVELOPE, Envelope, Position
from indexer.errors import ConfigError, DecodeError
from indexer.settings import ConnectorSettings

Converter = Callable[[Any], Any]
# (field name, converter) for the fields that need one; the rest pass through unchanged.
RowPlan = tuple[tuple[str, Converter], ...]
# A table's row as events show it: (field, its type in the schema), or (field, "") without
# schemas, where only the names are known.
Layout = frozenset[tuple[str, str]]

OPS = frozenset({"c", "u", "r", "d"})
SCHEMA_PREFIX = b'{"schema":'
PAYLOAD_MARKER = b',"payload":'
# A table's schema changes rarely; a small cache holds every live version with room to spare.
SCHEMA_CACHE_SIZE = 64

_COLUMN_TYPE = "__debezium.source.column.type"
_COLUMN_LENGTH = "__debezium.source.column.length"
_COLUMN_SCALE = "__debezium.source.column.scale"


class LayoutChanged(Exception):
    """A row whose layout the decoder has not accepted yet (a column added, dropped, renamed
    or retyped, or the table's first event: ``previous`` is None). Not an error: the caller
    learns what it needs (column types from MySQL, a mapping update), calls
    :meth:`EnvelopeDecoder.accept` and decodes the message again."""

    def __init__(self, previous: Layout | None, current: Layout, schemaless: bool,
                 origin: str = "") -> None:
        super().__init__(f"new row layout: {describe_change(previous, current)}")
        self.previous = previous
        self.current = current
        self.schemaless = schemaless
        self.origin = origin or ("names of the fields without schemas" if schemaless
                                 else "Debezium's schema")  # where the layout was seen


def layout_changes(previous: Layout | None,
                   current: Layout) -> tuple[list[str], list[str], list[str]]:
    """(fields added, fields removed, fields whose type changed), each sorted."""
    before = dict(previous or ())
    after = dict(current)
    return (sorted(set(after) - set(before)), sorted(set(before) - set(after)),
            sorted(n for n in set(after) & set(before) if after[n] != before[n]))


def describe_change(previous: Layout | None, current: Layout) -> str:
    if previous is None:
        return f"{len(current)} fields"
    added, removed, changed = layout_changes(previous, current)
    dict_before, dict_after = dict(previous), dict(current)
    parts = [f"added {', '.join(added)}" if added else "",
             f"removed {', '.join(removed)}" if removed else "",
             "changed " + ", ".join(f"{n} ({dict_before[n]} -> {dict_after[n]})"
                                    for n in changed) if changed else ""]
    return "; ".join(p for p in parts if p) or "no field changed"


@dataclass(slots=True)
class Change:
    op: str
    key: dict[str, Any]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    position: Position

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per change.
    def __init__(self, op: str, key: dict[str, Any], before: dict[str, Any] | None,
                 after: dict[str, Any] | None, position: Position) -> None:
        self.op, self.key, self.before, self.after, self.position = (op, key, before, after,
                                                                      position)


@dataclass(slots=True)
class Built:
    """An insert or update whose document its source built (the binlog's native row reader,
    for a table whose documents are its rows as they are): the id and body
    :class:`~indexer.core.documents.DocumentBuilder` writes for it, byte for byte, and the
    position its version is packed from. ``key``: the key column, the id's value."""

    op: str
    position: Position
    id: str
    document: bytes
    key: str

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per change.
    def __init__(self, op: str, position: Position, id: str, document: bytes, key: str) -> None:
        self.op, self.position, self.id, self.document, self.key = (op, position, id, document,
                                                                    key)


@dataclass(slots=True)
class BuiltRows:
    """A rows event's inserts or updates whose documents its source built, kept together: row
    ``i``'s id and body are ``documents[i]``, its position ``position`` at row ``i``. One
    object per event rather than per row: the rows of an event share all but their row."""

    op: str
    position: Position  # the first row's
    documents: list[tuple[str, bytes]]  # (id, body) per row, in row order
    key: str

    def __init__(self, op: str, position: Position, documents: list[tuple[str, bytes]],
                 key: str) -> None:
        self.op, self.position, self.documents, self.key = op, position, documents, key

    def at(self, row: int) -> Position:
        return msgspec.structs.replace(self.position, row=row)

    def row(self, row: int) -> Built:
        """One of its rows on its own (a dead letter is one row's)."""
        doc_id, document = self.documents[row]
        return Built(self.op, self.at(row), doc_id, document, self.key)


# Temporal logical types: (formatter of microseconds, multiply, divide to get microseconds,
# fraction digits when the column's own are unknown).
_TEMPORAL: dict[str, tuple[Callable[[int, int], str], int, int, int]] = {
    "io.debezium.time.Timestamp": (values.datetime_from_micros, 1000, 1, 3),
    "org.apache.kafka.connect.data.Timestamp": (values.datetime_from_micros, 1000, 1, 3),
    "io.debezium.time.MicroTimestamp": (values.datetime_from_micros, 1, 1, 6),
    "io.debezium.time.NanoTimestamp": (values.datetime_from_micros, 1, 1000, 6),
    "io.debezium.time.Time": (values.time_from_micros, 1000, 1, 3),
    "org.apache.kafka.connect.data.Time": (values.time_from_micros, 1000, 1, 3),
    "io.debezium.time.MicroTime": (values.time_from_micros, 1, 1, 6),
    "io.debezium.time.NanoTime": (values.time_from_micros, 1, 1000, 6),
}


def fraction_digits(params: Mapping[str, Any], default: int) -> int:
    """Fraction digits of a temporal column: the propagated length, or the encoding's unit."""
    if _COLUMN_TYPE in params:
        return int(params.get(_COLUMN_LENGTH) or 0)
    return default


# Debezium's spatial structs (POINT; every other spatial type; PostgreSQL's geography).
GEOMETRIES = ("io.debezium.data.geometry.Point", "io.debezium.data.geometry.Geometry",
              "io.debezium.data.geometry.Geography")


def field_converter(schema: Mapping[str, Any]) -> Converter | None:
    """The converter for one field's value, from its Kafka Connect schema; None = as is."""
    name = schema.get("name")
    params: Mapping[str, Any] = schema.get("parameters") or {}
    column_type = str(params.get(_COLUMN_TYPE, "")).upper()
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = int(params.get("scale", 0))
        unsigned_bigint = column_type == "BIGINT UNSIGNED" or (
            not column_type and scale == 0 and params.get("connect.decimal.precision") == "20"
        )
        if unsigned_bigint:
            return values.unscaled_from_base64
        return lambda v: values.decimal_from_base64(v, scale)
    if name == "io.debezium.data.VariableScaleDecimal":
        return lambda v: values.decimal_from_unscaled(
            values.unscaled_from_base64(v["value"]), int(v["scale"])
        )
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return values.date_from_days
    if name in _TEMPORAL:
        format_micros, multiply, divide, default_fsp = _TEMPORAL[name]
        fsp = fraction_digits(params, default_fsp)
        if multiply == divide == 1:  # microseconds already: the usual encoding
            return lambda v: format_micros(v, fsp)
        return lambda v: format_micros(values.integer(v, "a time") * multiply // divide, fsp)
    if name == "io.debezium.time.ZonedTimestamp":
        fsp = fraction_digits(params, 6)
        return lambda v: values.timestamp_from_iso(v, fsp)
    if name == "io.debezium.time.Year" or column_type == "YEAR":
        return values.year
    if name == "io.debezium.data.Json":
        return orjson.loads
    if name == "io.debezium.data.EnumSet":
        return values.set_members
    if name == "io.debezium.data.Bits":
        return values.bits_from_base64_le
    if name in GEOMETRIES:
        return geometry.from_debezium
    if schema.get("type") == "float" or column_type.startswith("FLOAT"):
        # Connect's FLOAT32 ("float" in JSON schemas): Java's text of the 32-bit value
        return values.float32
    if column_type == "BIGINT UNSIGNED" and schema.get("type") == "int64":
        return values.unsigned_from_signed_long
    if column_type in ("BOOLEAN", "BOOL") and schema.get("type") == "boolean":
        # MySQL stores BOOLEAN as TINYINT(1), which is what a row read from MySQL says;
        # only the DDL text made Debezium call it boolean.
        return int
    return None


def row_plan(struct_schema: Mapping[str, Any]) -> RowPlan:
    plan = []
    for field in struct_schema.get("fields", []):
        converter = field_converter(field)
        if converter is not None:
            plan.append((field_name(field), converter))
    return tuple(plan)


def layout_of(struct_schema: Mapping[str, Any]) -> Layout:
    return frozenset((field_name(f), _field_type(f)) for f in struct_schema.get("fields", []))


def field_name(schema: Mapping[str, Any]) -> str:
    name = schema["field"]
    if type(name) is not str:
        raise TypeError(f"a field's name is {name!r}")
    return name


def _field_type(schema: Mapping[str, Any]) -> str:
    """A field's type as its schema tells it: the logical or Connect type, plus the
    propagated column type and size when the connector sends them."""
    params: Mapping[str, Any] = schema.get("parameters") or {}
    text = str(schema.get("name") or schema.get("type") or "").rsplit(".", 1)[-1]
    if _COLUMN_TYPE in params:
        text += f" {params[_COLUMN_TYPE]}"
    sizes = [str(params[k]) for k in (_COLUMN_LENGTH, _COLUMN_SCALE) if k in params]
    if not sizes and "scale" in params:
        sizes = [str(params["scale"])]
    return f"{text}({','.join(sizes)})" if sizes else text


@dataclass(frozen=True, slots=True)
class Plan:
    steps: RowPlan
    layout: Layout | None  # None without schemas: each row's own field names are its layout


def column_hint(data_type: str, column_type: str, scale: int) -> str:
    """The ``column_types`` hint for a column as information_schema describes it."""
    if data_type == "decimal":
        return f"decimal(65,{scale})"
    if data_type in ("datetime", "timestamp", "time"):
        return f"{data_type}({scale})"
    if data_type == "bigint" and "unsigned" in column_type:
        return "bigint unsigned"
    if data_type in ("bit", "tinyint"):
        return column_type.split(" ")[0]  # bit(n); tinyint(1) is MySQL's BOOLEAN
    return data_type


def apply_plan(row: dict[str, Any], plan: RowPlan) -> dict[str, Any]:
    for name, convert in plan:
        value = row.get(name)
        if value is not None:
            try:
                row[name] = convert(value)
            except (ValueError, TypeError, KeyError, AttributeError, OverflowError,
                    orjson.JSONDecodeError) as exc:
                raise DecodeError("bad-value", f"column {name!r}: {exc}") from exc
    return row


_HINT = re.compile(r"^\s*([a-z ]+?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*(unsigned)?\s*$")


def hinted_field_schema(column: str, hint: str, connector: ConnectorSettings) -> dict[str, Any]:
    """The field schema Debezium would have sent for a column of MySQL type ``hint``.

    Lets schemaless messages reuse the schema-driven converters. Raises ConfigError for a
    type it does not know, naming the column.
    """
    match = _HINT.match(hint.lower())
    if not match:
        raise ConfigError(f"column_types.{column}: cannot read the type {hint!r}")
    base, first, second, unsigned = match.groups()
    length = int(first) if first else 0
    params: dict[str, Any] = {_COLUMN_TYPE: base.upper(), _COLUMN_LENGTH: str(length)}
    schema: dict[str, Any] = {"field": column, "parameters": params}
    mode = connector.time_precision_mode
    if base in ("decimal", "numeric"):
        if connector.decimal_handling_mode == "precise":
            schema["name"] = "org.apache.kafka.connect.data.Decimal"
            params["scale"] = second or "0"
    elif base == "bigint" and unsigned:
        params[_COLUMN_TYPE] = "BIGINT UNSIGNED"
        if connector.bigint_unsigned_handling_mode == "precise":
            schema["name"] = "org.apache.kafka.connect.data.Decimal"
            params["scale"] = "0"
        else:
            schema["type"] = "int64"
    elif base == "date":
        schema["name"] = "io.debezium.time.Date"
    elif base == "datetime":
        micro = mode != "connect" and length > 3
        schema["name"] = f"io.debezium.time.{'MicroTimestamp' if micro else 'Timestamp'}"
    elif base == "timestamp":
        schema["name"] = "io.debezium.time.ZonedTimestamp"
    elif base == "time":
        micro = mode == "adaptive_time_microseconds" or (mode == "adaptive" and length > 3)
        schema["name"] = f"io.debezium.time.{'MicroTime' if micro else 'Time'}"
    elif base == "float":
        schema["type"] = "float"
    elif base in ("bool", "boolean") or (base == "tinyint" and length == 1):
        params[_COLUMN_TYPE] = "BOOLEAN"  # 0/1, as a row read from MySQL has it
        schema["type"] = "boolean"
    elif base == "year":
        schema["name"] = "io.debezium.time.Year"
    elif base == "json":
        schema["name"] = "io.debezium.data.Json"
    elif base == "set":
        schema["name"] = "io.debezium.data.EnumSet"
    elif base == "bit":
        if length > 1:
            schema["name"] = "io.debezium.data.Bits"
    elif base in geometry.SPATIAL_TYPES:
        schema["name"] = GEOMETRIES[0] if base == "point" else GEOMETRIES[1]
    elif base not in ("enum", "year", "blob", "binary", "varbinary", "char", "varchar", "text",
                      "int", "integer", "bigint", "smallint", "tinyint", "mediumint",
                      "double", "real", "bool", "boolean", "tinyblob", "mediumblob", "longblob",
                      "tinytext", "mediumtext", "longtext"):
        raise ConfigError(f"column_types.{column}: unknown MySQL type {hint!r}")
    return schema


class _Plans:
    """Parsed schemas keyed by their bytes. The schema of the previous message is checked
    first, in place (no copy, no hash): it is almost always the same."""

    def __init__(self, row_schema: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._row_schema = row_schema
        self._by_schema: dict[bytes, Plan] = {}
        self._last_prefix = b"\x00"  # never a message's start
        self._last_plan = Plan((), None)

    def split(self, raw: bytes) -> tuple[int, Plan] | None:
        """(where the payload starts, its plan), or None if this is not the compact
        ``{"schema":...,"payload":...}`` layout JsonConverter writes.

        An unescaped ``,"payload":`` cannot occur inside the schema's strings, and the schema
        is a complete JSON object, so the first match after a parsable schema is the split.
        """
        if raw.startswith(self._last_prefix):
            return len(self._last_prefix), self._last_plan
        if not raw.startswith(SCHEMA_PREFIX):
            return None
        split = raw.find(PAYLOAD_MARKER)
        if split < 0:
            return None
        schema = raw[len(SCHEMA_PREFIX):split]
        plan = self._by_schema.get(schema)
        if plan is None:
            try:
                plan = self.plan(orjson.loads(schema))
            except orjson.JSONDecodeError:
                return None
            if len(self._by_schema) >= SCHEMA_CACHE_SIZE:
                self._by_schema.clear()
            self._by_schema[schema] = plan
        self._last_prefix = raw[:split + len(PAYLOAD_MARKER)]
        self._last_plan = plan
        return len(self._last_prefix), plan

    @property
    def last(self) -> tuple[bytes, Plan]:
        """The last wrapped message's prefix (schema and payload marker) and its plan."""
        return self._last_prefix, self._last_plan

    def plan(self, schema: Any) -> Plan:
        """The plan of a parsed schema (the whole-message path does not cache it)."""
        return plan_for(schema, self._row_schema)

    def __len__(self) -> int:
        return len(self._by_schema)


class EnvelopeDecoder:
    """Decodes one table's topic. Holds a cache of parsed schemas, the column types used
    for messages without schemas, and the row layouts accepted so far."""

    def __init__(self, connector: ConnectorSettings, column_types: Mapping[str, str], *,
                 watch_layouts: bool = False) -> None:
        self._connector = connector
        self._watch = watch_layouts  # raise LayoutChanged (the daemon), or accept silently
        # The configured hints' field schemas: a hint of an unknown type stops the start.
        self._hinted = {c: hinted_field_schema(c, t, connector) for c, t in column_types.items()}
        self._schemaless_fields: tuple[dict[str, Any], ...] = tuple(self._hinted.values())
        self._schemaless = Plan(row_plan({"fields": list(self._schemaless_fields)}), None)
        self._value_plans = _Plans(envelope_row_schema)
        self._key_plans = _Plans(lambda schema: schema)
        self._layout: Layout | None = None
        self._names: frozenset[str] = frozenset()
        self._seen: set[Layout] = set()

    def learn_types(self, column_types: Mapping[str, str]) -> None:
        """The table's column types (from MySQL) for messages without schemas; the
        configured ``column_types`` still override them. A type the decoder does not know
        passes its values through unchanged."""
        known = {}
        for column, hint in column_types.items():
            with contextlib.suppress(ConfigError):
                known[column] = hinted_field_schema(column, hint, self._connector)
        self._schemaless_fields = tuple((known | self._hinted).values())
        self._schemaless = Plan(row_plan({"fields": list(self._schemaless_fields)}), None)

    def accept(self, layout: Layout) -> None:
        """Rows of this layout decode from now on without :class:`LayoutChanged`."""
        if len(self._seen) >= SCHEMA_CACHE_SIZE:
            self._seen.clear()
        self._seen.add(layout)
        self._switch(layout)

    def forget(self) -> None:
        """Forgets the layouts accepted so far: the next row's is checked again, as after a
        start (a rebalance may hand over a partition whose mapping another member changed)."""
        self._seen.clear()
        self._layout = None
        self._names = frozenset()

    @property
    def layout(self) -> Layout | None:
        return self._layout

    @property
    def last_schemas(self) -> tuple[tuple[bytes, Plan], tuple[bytes, Plan]]:
        """The value's and the key's: the last wrapped message's prefix and its plan."""
        return self._value_plans.last, self._key_plans.last

    @property
    def schemaless_fields(self) -> tuple[dict[str, Any], ...]:
        """The field schemas messages without schemas are decoded by (hints and types)."""
        return self._schemaless_fields

    def decode(self, key: bytes | None, value: bytes | None) -> Change | None:
        """A change, or None for Debezium's tombstone (the null value after a delete).

        Watching layouts, raises :class:`LayoutChanged` before decoding a row of a layout
        not accepted yet, the first one included."""
        if value is None:
            return None
        envelope, plan = self._envelope(value)
        op = envelope.op
        if op not in OPS:
            raise _unsupported(op)
        before, after = envelope.before, envelope.after
        if (op == "d" and before is None) or (op != "d" and after is None):
            raise DecodeError("undecodable", f"op {op!r} without its row image")
        layout = plan.layout
        if layout is None or layout is not self._layout:  # None: no schema, the names count
            row = after if after is not None else before
            assert row is not None
            if layout is not None or row.keys() != self._names:
                self._check_layout(layout, row)
        steps = plan.steps
        if before is not None:
            apply_plan(before, steps)
        if after is not None:
            apply_plan(after, steps)
        position = envelope.source
        if position is None:
            raise DecodeError("undecodable", "the envelope has no source block")
        if not position.ts_ms:
            position.ts_ms = envelope.ts_ms or 0
        return Change(op, self.decode_key(key), before, after, position)

    def check(self, layout: Layout, origin: str) -> None:
        """For a change a source decoded itself (a binlog's rows, ``origin`` their table map):
        raises :class:`LayoutChanged` as :meth:`decode` would for its row layout."""
        if layout is not self._layout:
            self._check_layout(layout, {}, origin)

    def _check_layout(self, layout: Layout | None, row: dict[str, Any],
                      origin: str = "") -> None:
        schemaless = layout is None
        if layout is None:
            layout = frozenset((name, "") for name in row)
        if layout in self._seen:  # a layout accepted before (events of an older version)
            self._switch(layout)
            return
        if self._watch:  # the first layout too: a column may have been added while stopped
            raise LayoutChanged(self._layout, layout, schemaless, origin)
        self.accept(layout)

    def _switch(self, layout: Layout) -> None:
        self._layout = layout
        self._names = frozenset(name for name, _ in layout)

    def _envelope(self, raw: bytes) -> tuple[Envelope, Plan]:
        try:
            found = self._value_plans.split(raw) if raw.endswith(b"}") else None
            if found is not None:
                start, plan = found
                try:
                    return ENVELOPE.decode(raw[start:-1]), plan  # a copy decodes faster
                except msgspec.DecodeError:
                    pass  # not the layout we expected: decode the whole message below
            message = ENVELOPE.decode(raw)
            if not (message.schema and message.payload):
                return message, self._schemaless
            plan = self._value_plans.plan(orjson.loads(bytes(message.schema)))
            return ENVELOPE.decode(message.payload), plan
        except msgspec.ValidationError as exc:
            raise DecodeError("undecodable", f"not a Debezium envelope: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise DecodeError("undecodable", f"not JSON: {exc}") from exc
        except orjson.JSONDecodeError as exc:  # a schema msgspec skipped over, invalid UTF-8
            raise DecodeError("undecodable", f"the schema is not JSON: {exc}") from exc

    def decode_key(self, key: bytes | None) -> dict[str, Any]:
        if key is None:
            raise DecodeError("undecodable", "the message has no key (a table without a "
                              "primary key cannot be indexed by id)")
        payload, plan = self._parse_key(key)
        if type(payload) is not dict or not payload:
            raise DecodeError("undecodable", "the key is not a JSON object of key columns")
        return apply_plan(payload, plan.steps)

    def _parse_key(self, raw: bytes) -> tuple[Any, Plan]:
        """JSON, or JSON wrapped in ``{"schema", "payload"}``."""
        plans = self._key_plans
        found = (plans.split(raw) if raw.startswith(SCHEMA_PREFIX) and raw.endswith(b"}")
                 else None)
        if found is not None:
            start, plan = found
            try:
                return orjson.loads(raw[start:-1]), plan  # a copy parses faster than a view
            except orjson.JSONDecodeError:
                pass  # not the layout we expected: parse the whole message below
        try:
            message = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise DecodeError("undecodable", f"not JSON: {exc}") from exc
        if type(message) is dict and len(message) == 2 and "payload" in message and (
            "schema" in message
        ):
            return message["payload"], plans.plan(message["schema"])
        return message, self._schemaless


def _unsupported(op: str | None) -> DecodeError:
    if op is None:
        return DecodeError("undecodable", "not a Debezium envelope: no `op`, and no `payload` "
                           "holding one")
    if op == "t":
        return DecodeError("unsupported-op", "a TRUNCATE (op 't') cannot be applied row by row: "
                           "run `indexer reindex`")
    return DecodeError("unsupported-op", f"op {op!r} is not one of c, u, r, d")


def plan_for(schema: Any, row_schema: Callable[[dict[str, Any]], dict[str, Any]]) -> Plan:
    if not isinstance(schema, dict):
        raise DecodeError("undecodable", "the schema is not a JSON object")
    try:
        struct = row_schema(schema)
        return Plan(row_plan(struct), layout_of(struct))
    except DecodeError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # valid JSON of the wrong shape: a field without a name, a scale that is no number
        raise DecodeError("undecodable", "the schema is not a Kafka Connect struct "
                          f"schema: {type(exc).__name__} {exc}") from exc



def envelope_row_schema(envelope_schema: dict[str, Any]) -> dict[str, Any]:
    for field in envelope_schema.get("fields", []):
        if field.get("field") in ("after", "before") and field.get("type") == "struct":
            return dict(field)
    raise DecodeError("undecodable", "the schema is not a Debezium envelope (no before/after)")
