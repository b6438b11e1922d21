"""The native per-batch path against the Python reference: every message the native side
takes must come out exactly as the Python path makes it (op, id, document bytes, version
and source position); what it declines is the Python path's to decide."""

from __future__ import annotations

import base64
import json
import string
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from indexer.core import native
from indexer.core.documents import DocumentBuilder, pack_binlog_version
from indexer.core.events import EnvelopeDecoder, LayoutChanged
from indexer.errors import DecodeError
from indexer.settings import ConnectorSettings, TableConfig, VersionSource
from tests.unit.corpus import POISON, messages, without_schemas

Pair = tuple[bytes | None, bytes | None]
# The hinted columns the random rows carry beside plain ones: the native side's two steps.
HINTS = {"price": "decimal(10,2)", "at": "datetime(3)", "big": "decimal(30,0)",
         "whole": "datetime(0)", "micro": "datetime(6)"}


def builder(**table: Any) -> DocumentBuilder:
    config = TableConfig(database="shop", table="items", topic="t", alias="items",
                         mapping="items.json", version=table.pop("version",
                                                                 VersionSource("binlog")),
                         **table)
    return DocumentBuilder(config)


def decoder(hints: dict[str, str] | None = None) -> EnvelopeDecoder:
    return EnvelopeDecoder(ConnectorSettings(), HINTS if hints is None else hints,
                           watch_layouts=True)


def python_path(decoder: EnvelopeDecoder, builder: DocumentBuilder, key: bytes | None,
                value: bytes | None) -> tuple[Any, ...]:
    """What the daemon's Python path makes of a message, a new layout accepted as it does."""
    try:
        try:
            change = decoder.decode(key, value)
        except LayoutChanged as new:
            decoder.accept(new.current)
            change = decoder.decode(key, value)
        if change is None:
            return ("tombstone",)
        write = builder.write_for_change(change)
    except DecodeError as exc:
        return ("error", exc.kind, exc.reason)
    p = change.position
    return (change.op, write.id, write.source, p.file, p.pos, p.row, p.ts_ms, p.gtid,
            p.snapshot, p.connector, write.version, write.deleted)


def through_both(module: ModuleType, decoder: EnvelopeDecoder, builder: DocumentBuilder,
                 pairs: list[Pair]) -> int:
    """Each message natively (the plan as the daemon makes it, before Python sees the
    message), then through Python; returns how many the native side took."""
    taken = 0
    for key, value in pairs:
        plan = native.slice_plan(decoder, builder)
        found = native.SlicePreparer(module).prepare(plan, [key], [value])
        expected = python_path(decoder, builder, key, value)
        if not found or found[0] is None:
            continue
        prepared = found[0]
        version = pack_binlog_version(prepared.file, prepared.pos, prepared.row)
        assert (*prepared, version, False) == expected, (key, value)
        taken += 1
    return taken


def accepted(decoder: EnvelopeDecoder, builder: DocumentBuilder, pairs: list[Pair]) -> None:
    """The first layout of ``pairs`` accepted, as after the daemon's first message."""
    for key, value in pairs:
        python_path(decoder, builder, key, value)
        if decoder.layout is not None:
            return


def test_recorded_events_with_schemas_come_out_as_python_makes_them(module: ModuleType
                                                                    ) -> None:
    lifecycle = messages("t1_lifecycle.tsv")
    d, b = decoder({}), builder()
    accepted(d, b, lifecycle)
    # the insert and update of each round (the first insert is Python's: its schema is new)
    assert through_both(module, d, b, lifecycle * 3 + POISON + lifecycle) == 7
    through_both(module, decoder({}), b, messages("alltypes.tsv") * 2)


def test_recorded_events_come_out_as_python_makes_them(module: ModuleType) -> None:
    pairs = without_schemas(messages("t1_lifecycle.tsv")) + POISON
    d, b = decoder({"price": "decimal(10,2)"}), builder()
    accepted(d, b, pairs)
    # the lifecycle's insert and update, twice but for the insert after the poison's other
    # layout (the plan is made before a slice; its delete and tombstone are Python's)
    assert through_both(module, d, b, pairs * 2) == 3
    # every MySQL type: the rows with floats, dates, JSON... are declined, none differs
    alltypes = without_schemas(messages("alltypes.tsv"))
    through_both(module, decoder({}), b, alltypes)


def test_what_the_native_side_takes(module: ModuleType) -> None:
    d, b = decoder(), builder()
    row = {"id": 7, "name": 'a "quoted"\n\u00e9\u2028 \\', "price": "AJY=",
           "micro": 1_700_000_000_123_456, "at": 1_700_000_000_123, "big": None, "whole": -1,
           "ok": True}
    value = orjson.dumps({"op": "u", "before": row, "after": row, "ts_ms": 5,
                          "source": {"file": "mysql-bin.000003", "pos": 4, "row": 1,
                                     "ts_ms": 0, "gtid": "0-1-9", "snapshot": "false",
                                     "connector": "mariadb"}})
    accepted(d, b, [(b'{"id":7}', value)])
    assert through_both(module, d, b, [(b'{"id":7}', value)]) == 1
    prepared = native.SlicePreparer(module).prepare(native.slice_plan(d, b), [b'{"id":7}'],
                                                    [value])[0]
    assert prepared is not None
    assert prepared.id == "7" and prepared.ts_ms == 5 and prepared.op == "u"
    assert orjson.loads(prepared.document)["price"] == "1.50"
    document = orjson.loads(prepared.document)
    assert document["micro"] == "2023-11-14T22:13:20.123456"
    assert document["at"] == "2023-11-14T22:13:20.123"
    assert document["whole"] == "1969-12-31T23:59:59"


@pytest.mark.parametrize("value", [
    {"op": "d", "before": {"id": 1}, "source": {"file": "b.000001", "pos": 4}},  # a delete
    {"op": "c", "after": {"id": 1, "f": 1.5}, "source": {"file": "b.000001", "pos": 4}},
    {"op": "c", "after": {"id": 1}, "source": {"file": "b.000001", "pos": 2**33}},
    {"op": "c", "after": {"id": 1}, "source": {"file": "b.1000000", "pos": 4}},
    {"op": "c", "after": {"id": 1}, "source": {"file": "b.000001", "pos": 4, "snapshot": True}},
    {"op": "c", "after": {"id": 1, "_indexer": 1}, "source": {"file": "b.000001", "pos": 4}},
    {"op": "c", "after": {"id": 1, "j": {"a": 1}}, "source": {"file": "b.000001", "pos": 4}},
    {"op": "c", "after": {"id": 1}, "before": {"id": 1, "price": "%%%"},
     "source": {"file": "b.000001", "pos": 4}},
    {"schema": {}, "payload": {"op": "c", "after": {"id": 1}, "source": {}}},
])
def test_the_unusual_is_declined(module: ModuleType, value: dict[str, Any]) -> None:
    raw = orjson.dumps(value)
    d = decoder()
    after = value.get("after") or {"id": 1}
    d.accept(frozenset((name, "") for name in after))
    plan = native.slice_plan(d, builder())
    assert plan is not None
    found = module.prepare([b'{"id":1}'], [raw], list(plan.steps), list(plan.layout), b"", b"")
    assert found == [None]


def test_the_plan_says_when_the_native_side_can_take_a_table() -> None:
    d = decoder()
    assert native.slice_plan(d, builder()) is None  # no layout accepted yet
    d.accept(frozenset({("id", ""), ("price", "")}))
    plan = native.slice_plan(d, builder())
    assert plan is not None and plan.layout == ("id", "price")
    assert sorted(plan.steps) == [("at", "datetime-ms", 3), ("big", "decimal", 0),
                                  ("micro", "datetime", 6), ("price", "decimal", 2),
                                  ("whole", "datetime-ms", 0)]
    assert native.slice_plan(d, builder(exclude=("price",))) is None
    assert native.slice_plan(d, builder(version=VersionSource("column", "id"))) is None
    for hint in ("date", "bigint unsigned", "json", "float", "time(6)", "timestamp(6)"):
        other = decoder({"c": hint})
        other.accept(frozenset({("id", "")}))
        assert native.slice_plan(other, builder()) is None, hint
    schema_layout = decoder()
    schema_layout.accept(frozenset({("id", "int64")}))
    assert native.slice_plan(schema_layout, builder()) is None


class Declining:
    """A native module that takes nothing."""

    calls = 0

    def prepare(self, keys: list[bytes], values: list[bytes], *plan: Any) -> list[None]:
        self.calls += 1
        return [None] * len(values)


def test_a_table_the_native_side_keeps_declining_is_left_to_python_for_a_while() -> None:
    module = Declining()
    preparer = native.SlicePreparer(module)  # type: ignore[arg-type]
    plan = native.SlicePlan((), ("id",))
    for _ in range(native.DECLINED_SLICES):
        assert preparer.prepare(plan, [b"k"], [b"v"]) == [None]
    for _ in range(native.DECLINED_PAUSE_SLICES):
        assert preparer.prepare(plan, [b"k"], [b"v"]) == []
    assert module.calls == native.DECLINED_SLICES
    assert preparer.prepare(plan, [b"k"], [b"v"]) == [None]  # tried again
    assert module.calls == native.DECLINED_SLICES + 1


# Random rows of every shape the schemaless JSON can hold, random source blocks (out-of-range
# coordinates included) and random damage to valid messages: the two must never disagree.
names = st.sampled_from(["id", "name", "price", "at", "big", "whole", "micro", "n", "ok", "é",
                         "a\"b", "tab\t", "_indexer", "x" * 40])
decimals = st.binary(min_size=0, max_size=20).map(lambda b: base64.b64encode(b).decode())
json_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=30), decimals,
    st.text(alphabet=string.printable, max_size=8), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
rows = st.dictionaries(names, json_values, min_size=0, max_size=9)
sources = st.fixed_dictionaries({}, optional={
    "file": st.one_of(st.sampled_from(["mysql-bin.000001", "b.524287", "b.524288", "b.+1",
                                       "b.", "nodot", "b.0", "b.0000000000000000000001"]),
                      st.text(max_size=12)),
    "pos": st.one_of(st.integers(min_value=-5, max_value=2**33), st.floats(), st.text(max_size=3)),
    "row": st.integers(min_value=-2, max_value=5000),
    "ts_ms": st.one_of(st.integers(min_value=-1, max_value=2**62), st.none()),
    "gtid": st.one_of(st.text(max_size=8), st.none(), st.integers()),
    "snapshot": st.one_of(st.sampled_from(["true", "false", "last"]), st.booleans(), st.none()),
    "connector": st.sampled_from(["mariadb", "mysql", None]),
})
keys = st.one_of(st.fixed_dictionaries({"id": json_values}),
                 st.dictionaries(names, st.integers(), max_size=3))
# ... and rows as Debezium writes them, now and then with a value of another shape: most of
# these the native side takes, so that what it writes is compared, not only what it declines.
odd = st.one_of(json_values, st.integers(min_value=-(2**63), max_value=2**63 - 1))


def column(usual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``usual``; one value in ten NULL, one in twenty of any other shape."""
    return st.tuples(st.integers(0, 19), usual, odd).map(
        lambda t: None if t[0] < 2 else t[2] if t[0] == 2 else t[1])


ordinary_rows = st.fixed_dictionaries({
    "id": column(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    "name": column(st.text(max_size=20)),
    "price": column(decimals),
    "big": column(st.binary(min_size=1, max_size=16).map(
        lambda b: base64.b64encode(b).decode())),
    "at": column(st.integers(min_value=-62_135_596_800_000, max_value=253_402_300_799_999)),
    "micro": column(st.integers(min_value=-62_135_596_800_000_000,
                                max_value=253_402_300_799_999_999)),
    "whole": column(st.integers(min_value=-(10**14), max_value=10**14)),
    "ok": column(st.booleans()),
})
ordinary_sources = st.fixed_dictionaries({
    "file": st.integers(min_value=1, max_value=530_000).map(lambda n: f"mysql-bin.{n:06d}"),
    "pos": st.integers(min_value=-1, max_value=2**32 + 1),
    "row": st.integers(min_value=-1, max_value=4097),
    "ts_ms": st.integers(min_value=0, max_value=2**42),
    "gtid": st.one_of(st.none(), st.text(max_size=10)),
    "snapshot": st.sampled_from(["false", "true", "last", False]),
    "connector": st.sampled_from(["mariadb", "mysql"]),
})
def field(name: str, kind: str, logical: str | None = None, **parameters: str
          ) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, "optional": name != "id", "field": name}
    if logical:
        schema["name"] = logical
    if parameters:
        schema["parameters"] = parameters
    return schema


# The schema Debezium would send with ordinary rows (DECIMAL, DATETIME(3/0/6) columns).
ROW_SCHEMA = {"type": "struct", "optional": True, "name": "t.Value", "fields": [
    field("id", "int64"), field("name", "string"),
    field("price", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
    field("big", "bytes", "org.apache.kafka.connect.data.Decimal", scale="0"),
    field("at", "int64", "io.debezium.time.Timestamp"),
    field("micro", "int64", "io.debezium.time.MicroTimestamp"),
    field("whole", "int64", "io.debezium.time.Timestamp",
          **{"__debezium.source.column.type": "DATETIME",
             "__debezium.source.column.length": "0"}),
    field("ok", "boolean")]}
ENVELOPE_SCHEMA = orjson.dumps({"type": "struct", "name": "t.Envelope", "fields": [
    dict(ROW_SCHEMA, field="before"), dict(ROW_SCHEMA, field="after"),
    {"type": "struct", "fields": [], "field": "source"}, field("op", "string")]})
KEY_SCHEMA = orjson.dumps({"type": "struct", "name": "t.Key", "fields": [field("id", "int64")]})


def wrapped(schema: bytes, payload: bytes) -> bytes:
    return b'{"schema":' + schema + b',"payload":' + payload + b"}"


ordinary_keys = st.fixed_dictionaries({"id": st.integers(min_value=-(2**63),
                                                        max_value=2**63 - 1)})
ordinary = st.fixed_dictionaries(
    {"op": st.sampled_from(["c", "u", "r", "u", "u", "c", "d"]), "after": ordinary_rows,
     "source": ordinary_sources, "ts_ms": st.integers(min_value=0, max_value=2**42)},
    optional={"before": ordinary_rows})
envelopes = st.fixed_dictionaries(
    {"op": st.sampled_from(["c", "u", "r", "d", "t", "x", None])},
    optional={"before": st.one_of(rows, st.none()), "after": st.one_of(rows, st.none()),
              "source": sources, "ts_ms": st.one_of(st.integers(min_value=0, max_value=2**40),
                                                    st.none())})


def encoded(value: Any, other_producer: bool) -> bytes:
    """Debezium's compact JSON, or as another producer may write it: \\u escapes, spaces
    (and big integers, Infinity, which are not Debezium's either)."""
    if other_producer:
        return json.dumps(value, ensure_ascii=True).encode()
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


damages = st.one_of(st.none(), st.none(), st.tuples(
    st.integers(min_value=0), st.binary(max_size=3), st.integers(min_value=0, max_value=3)))


def damaged(value: bytes, damage: tuple[int, bytes, int] | None) -> bytes:
    """``value`` with a few bytes replaced somewhere."""
    if damage is None:
        return value
    at, inserted, removed = damage
    at %= len(value) + 1
    return value[:at] + inserted + value[at + removed:]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope=ordinary, key=ordinary_keys, escapes=st.booleans(),
       damage=st.one_of(st.none(), damages))
def test_ordinary_messages_come_out_as_python_makes_them(
        module: ModuleType, envelope: dict[str, Any], key: dict[str, Any], escapes: bool,
        damage: tuple[int, bytes, int] | None) -> None:
    d, b = decoder(), builder()
    d.accept(frozenset((name, "") for name in envelope["after"]))
    through_both(module, d, b, [(encoded(key, escapes), damaged(encoded(envelope, escapes),
                                                                 damage))])


FIRST = {"op": "c", "after": {"id": 1, "name": "a", "price": "AJY=", "big": None, "at": 0,
                              "micro": 0, "whole": 0, "ok": True},
         "source": {"file": "b.000001", "pos": 4}}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope=ordinary, key=ordinary_keys, escapes=st.booleans(),
       damage=st.one_of(st.none(), damages), key_damage=st.one_of(st.none(), damages))
def test_ordinary_messages_with_schemas_come_out_as_python_makes_them(
        module: ModuleType, envelope: dict[str, Any], key: dict[str, Any], escapes: bool,
        damage: tuple[int, bytes, int] | None, key_damage: tuple[int, bytes, int] | None
        ) -> None:
    d, b = decoder({}), builder()
    first = (wrapped(KEY_SCHEMA, b'{"id":1}'), wrapped(ENVELOPE_SCHEMA, orjson.dumps(FIRST)))
    assert through_both(module, d, b, [first, first]) == 1  # (the first: a new schema)
    through_both(module, d, b, [(
        damaged(wrapped(KEY_SCHEMA, encoded(key, escapes)), key_damage),
        damaged(wrapped(ENVELOPE_SCHEMA, encoded(envelope, escapes)), damage))])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope=envelopes, key=keys, escapes=st.booleans(), accept_first=st.booleans(),
       damage=damages)
@example(envelope={"op": "c", "after": {"id": 1, "n": 5}, "source": {"file": "b.000001",
                                                                       "pos": 4}},
         key={"id": 1}, escapes=False, accept_first=True, damage=None)
def test_random_messages_never_disagree(module: ModuleType, envelope: dict[str, Any],
                                        key: dict[str, Any], escapes: bool, accept_first: bool,
                                        damage: tuple[int, bytes, int] | None) -> None:
    d, b = decoder(), builder()
    after = envelope.get("after")
    if accept_first and isinstance(after, dict):  # most of the time the layout is known
        d.accept(frozenset((name, "") for name in after))
    through_both(module, d, b, [(encoded(key, escapes), damaged(encoded(envelope, escapes),
                                                                 damage))])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=200)), max_size=5))
def test_random_bytes_never_disagree(module: ModuleType, pairs: list[tuple[bytes, bytes]]
                                     ) -> None:
    d = decoder()
    d.accept(frozenset({("id", "")}))
    through_both(module, d, builder(), list(pairs))
