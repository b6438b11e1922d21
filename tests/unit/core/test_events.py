import orjson
import pytest

from indexer.core.events import (
    EnvelopeDecoder,
    Layout,
    LayoutChanged,
    column_hint,
    describe_change,
    field_converter,
    hinted_field_schema,
    layout_changes,
)
from indexer.errors import ConfigError, DecodeError
from indexer.settings import ConnectorSettings
from tests.unit.corpus import HINTS, SHAPES

Messages = list[tuple[bytes | None, bytes | None]]


def decoder(**hints: str) -> EnvelopeDecoder:
    return EnvelopeDecoder(ConnectorSettings(), hints)


def test_insert_update_delete_and_tombstone(lifecycle: Messages) -> None:
    d = decoder()
    insert, update, delete = (d.decode(k, v) for k, v in lifecycle[:3])
    assert insert is not None and update is not None and delete is not None
    assert (insert.op, insert.key, insert.before) == ("c", {"id": 1}, None)
    assert insert.after == {"id": 1, "name": "a", "price": "1.50"}
    assert update.op == "u" and update.before == insert.after
    assert update.after == {"id": 1, "name": "b", "price": "1.50"}
    assert delete.op == "d" and delete.after is None and delete.before == update.after
    assert insert.position.file == "mysql-bin.000001"
    assert insert.position.pos < update.position.pos < delete.position.pos
    assert insert.position.ts_ms > 0
    tombstone_key, tombstone_value = lifecycle[3]
    assert d.decode(tombstone_key, tombstone_value) is None


def test_every_logical_type_with_propagated_column_types(alltypes: Messages) -> None:
    key, value = alltypes[0]
    change = decoder().decode(key, value)
    assert change is not None and change.after is not None
    assert change.key == {"id": 18446744073709551615}
    assert change.after == {
        "id": 18446744073709551615,
        "d": "2024-02-29",
        "dt0": "2024-01-02T03:04:05",
        "dt3": "2024-01-02T03:04:05.123",
        "dt6": "2024-01-02T03:04:05.123456",
        "ts0": "2024-01-02T03:04:05Z",
        "ts6": "2024-01-02T03:04:05.000001Z",
        "t0": "-838:59:59",
        "t6": "12:34:56.789012",
        "j": {"a": [1, 2]},
        "s": ["a", "c"],
        "e": "y",
        "b1": True,
        "b12": 0b101010101010,
        "y": 2024,
        "bl": "AP8Q",
        "vb": "AQI=",
        "dec1": "-12345678901234567890.1234567890",
        "f": 1.100000023841858,  # the 32-bit value, exactly
        "db": 2.000001,
        "ti": 1,
        "u32": 4294967295,
        "c": "äé",
    }


def test_fast_path_and_full_parse_agree(lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert value is not None
    spaced = orjson.dumps(orjson.loads(value), option=orjson.OPT_INDENT_2)
    assert decoder().decode(key, spaced) == decoder().decode(key, value)


def test_schema_is_parsed_once_per_version(lifecycle: Messages) -> None:
    d = decoder()
    for key, value in lifecycle[:3]:
        d.decode(key, value)
    assert len(d._value_plans) == 1


def test_schemaless_messages_follow_hints_and_connector_settings(lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert key is not None and value is not None
    bare_value = orjson.dumps(orjson.loads(value)["payload"])
    bare_key = orjson.dumps(orjson.loads(key)["payload"])
    change = decoder(price="decimal(10,2)").decode(bare_key, bare_value)
    assert change is not None and change.after == {"id": 1, "name": "a", "price": "1.50"}
    # Without a hint the base64 bytes cannot be told from text: they pass through unchanged.
    unhinted = decoder().decode(bare_key, bare_value)
    assert unhinted is not None and unhinted.after is not None
    assert unhinted.after["price"] == "AJY="


def test_hints_for_string_decimals_leave_values_alone() -> None:
    connector = ConnectorSettings(decimal_handling_mode="string")
    assert "name" not in hinted_field_schema("price", "decimal(10,2)", connector)


@pytest.mark.parametrize(("hint", "name"), [
    ("datetime(6)", "io.debezium.time.MicroTimestamp"),
    ("datetime", "io.debezium.time.Timestamp"),
    ("timestamp(3)", "io.debezium.time.ZonedTimestamp"),
    ("time", "io.debezium.time.MicroTime"),
    ("json", "io.debezium.data.Json"),
    ("set", "io.debezium.data.EnumSet"),
    ("bit(8)", "io.debezium.data.Bits"),
    ("BIGINT UNSIGNED", "org.apache.kafka.connect.data.Decimal"),
])
def test_hint_types(hint: str, name: str) -> None:
    assert hinted_field_schema("c", hint, ConnectorSettings())["name"] == name


def test_unknown_hint_fails_at_start_naming_the_column() -> None:
    with pytest.raises(ConfigError, match=r"column_types\.geo"):
        decoder(geo="hyperbola")


def test_hinted_value_of_the_wrong_shape_is_a_clear_error() -> None:
    value = orjson.dumps({"op": "c", "before": None, "after": {"id": 1, "d": "yesterday"},
                          "source": {"file": "mysql-bin.000001", "pos": 4, "row": 0}})
    with pytest.raises(DecodeError, match="column 'd'") as info:
        decoder(d="date").decode(b'{"id": 1}', value)
    assert info.value.kind == "bad-value"


@pytest.mark.parametrize(("key", "value", "kind", "match"), [
    (b'{"id":1}', b"\x00\x01garbage", "undecodable", "not JSON"),
    (b'{"id":1}', b"[1,2]", "undecodable", "not a Debezium envelope"),
    (b'{"id":1}', b'{"op":"t","source":{}}', "unsupported-op", "TRUNCATE"),
    (b'{"id":1}', b'{"hello":"world"}', "undecodable",
     "^not a Debezium envelope: no `op`, and no `payload` holding one$"),
    (b'{"id":1}', b'{"op":"m","source":{}}', "unsupported-op", "^op 'm' is not one of"),
    (b'{"id":1}', b'{"op":"c","after":null,"source":{}}', "undecodable", "row image"),
    (b'{"id":1}', b'{"op":"c","after":{"id":1}}', "undecodable", "source block"),
    (b'{"id":1}', b'{"op":"c","after":{"id":1},"source":{"pos":"4"}}', "undecodable",
     r"got `str` - at `\$\.source\.pos`"),
    (b'{"id":1}', b'{"op":"c","after":[1],"source":{}}', "undecodable", r"at `\$\.after`"),
    (None, b'{"op":"c","after":{"id":1},"source":{}}', "undecodable", "no key"),
    (b"[]", b'{"op":"c","after":{"id":1},"source":{}}', "undecodable", "key columns"),
    # (found by comparing the native path: was an internal error)
    (b'{"id":1}', b'{"schema":{"x":"\x80"},"payload":{"op":"c"}}', "undecodable",
     "the schema is not JSON"),
    # valid JSON of the wrong shape (found by the same comparison: were internal errors)
    *[(b'{"id":1}', b'{"schema":{"type":"struct","fields":[{"field":"after","type":"struct",'
       b'"fields":' + fields + b'}]},"payload":{"op":"c","after":{"id":1},"source":{}}}',
       "undecodable", "not a Kafka Connect struct schema")
      for fields in (
          b'[{"type":"int32"}]',  # a field without a name
          b'[{"field":"p","type":"bytes","name":"org.apache.kafka.connect.data.Decimal",'
          b'"parameters":{"scale":"0,"}}]',  # a scale that is no number
          b'[{"field":"p","type":"int64","name":"io.debezium.time.Timestamp",'
          b'"parameters":{"__debezium.source.column.type":"DATETIME",'
          b'"__debezium.source.column.length":"x"}}]',  # a length that is no number
          b'[{"field":"p","type":"string","parameters":[1]}]',  # parameters not an object
          b'["id"]',  # a field that is not an object
          b'7',  # fields that are not a list
      )],
    (b'{"schema":{"type":"struct","fields":[{"type":"int32"}]},"payload":{"id":1}}',
     b'{"op":"c","after":{"id":1},"source":{}}', "undecodable",
     "not a Kafka Connect struct schema"),
])
def test_poison_messages_raise_decode_errors(key: bytes | None, value: bytes, kind: str,
                                             match: str) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        decoder().decode(key, value)
    assert info.value.kind == kind


def test_columns_added_while_running_get_their_own_plan(lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert value is not None
    message = orjson.loads(value)
    d = decoder()
    d.decode(key, value)
    row_schema = message["schema"]["fields"][1]
    row_schema["fields"].append({"type": "int32", "optional": True, "name": "io.debezium.time.Date",
                                 "field": "born"})
    message["schema"]["fields"][0] = row_schema | {"field": "before"}
    message["payload"]["after"]["born"] = 1
    change = d.decode(key, orjson.dumps(message))
    assert change is not None and change.after is not None
    assert change.after["born"] == "1970-01-02"
    assert len(d._value_plans) == 2


def test_float_columns_become_the_double_their_32_bits_widen_to() -> None:
    propagated = {"type": "double", "parameters": {"__debezium.source.column.type": "FLOAT"}}
    for schema in (propagated, {"type": "float"},
                   hinted_field_schema("f", "float", ConnectorSettings())):
        convert = field_converter(schema)
        assert convert is not None and convert(123456.7) == 123456.703125
        assert convert(16777217) == 16777216.0
    assert field_converter({"type": "double"}) is None  # a DOUBLE is left as it is


def _with_column(value: bytes, name: str, field: dict[str, object], data: object) -> bytes:
    message = orjson.loads(value)
    row_schema = message["schema"]["fields"][1]
    row_schema["fields"].append({**field, "field": name})
    message["schema"]["fields"][0] = row_schema | {"field": "before"}
    message["payload"]["after"][name] = data
    return orjson.dumps(message)


def _accept_first(d: EnvelopeDecoder, key: bytes | None, value: bytes) -> Layout:
    """The first layout stops a watching decoder too (a column may have been added while
    the daemon was stopped); the daemon checks it against the mapping and accepts it."""
    with pytest.raises(LayoutChanged) as raised:
        d.decode(key, value)
    assert raised.value.previous is None
    d.accept(raised.value.current)
    assert d.decode(key, value) is not None
    return raised.value.current


def test_a_forgetting_decoder_checks_its_next_layout_again(lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert value is not None
    d = EnvelopeDecoder(ConnectorSettings(), {}, watch_layouts=True)
    first = _accept_first(d, key, value)
    d.forget()  # after a rebalance
    assert d.layout is None
    assert _accept_first(d, key, value) == first


def test_a_new_layout_stops_the_watching_decoder_until_accepted(lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert value is not None
    d = EnvelopeDecoder(ConnectorSettings(), {}, watch_layouts=True)
    first = _accept_first(d, key, value)
    added = _with_column(value, "born", {"type": "int32", "name": "io.debezium.time.Date"}, 1)
    with pytest.raises(LayoutChanged) as raised:
        d.decode(key, added)
    change = raised.value
    assert change.previous == first and not change.schemaless
    assert layout_changes(change.previous, change.current) == (["born"], [], [])
    assert describe_change(change.previous, change.current) == "added born"
    d.accept(change.current)
    decoded = d.decode(key, added)
    assert decoded is not None and decoded.after is not None
    assert decoded.after["born"] == "1970-01-02"
    d.decode(key, value)  # an older layout, accepted before: no stop
    assert d.layout == first
    # Not watching (explain, status): every layout is accepted as it comes.
    assert EnvelopeDecoder(ConnectorSettings(), {}).decode(key, added) is not None


def test_a_retyped_field_is_a_new_layout(lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert value is not None
    message = orjson.loads(value)
    d = EnvelopeDecoder(ConnectorSettings(), {}, watch_layouts=True)
    _accept_first(d, key, value)
    for struct in message["schema"]["fields"][:2]:
        for field in struct["fields"]:
            if field["field"] == "id":
                field["type"] = "int64"
    with pytest.raises(LayoutChanged) as raised:
        d.decode(key, orjson.dumps(message))
    added, removed, changed = layout_changes(raised.value.previous, raised.value.current)
    assert (added, removed, changed) == ([], [], ["id"])
    assert "id (int32 -> int64)" in describe_change(raised.value.previous, raised.value.current)


def test_without_schemas_new_column_names_stop_it_and_mysql_types_decode(
        lifecycle: Messages) -> None:
    key, value = lifecycle[0]
    assert key is not None and value is not None
    bare_key = orjson.dumps(orjson.loads(key)["payload"])
    payload = orjson.loads(value)["payload"]
    d = EnvelopeDecoder(ConnectorSettings(), {"name": "varchar(10)"}, watch_layouts=True)
    d.learn_types({"id": "int", "name": "varchar", "price": "decimal(65,2)", "geo": "point"})
    _accept_first(d, bare_key, orjson.dumps(payload))
    first = d.decode(bare_key, orjson.dumps(payload))
    assert first is not None and first.after == {"id": 1, "name": "a", "price": "1.50"}
    payload["after"]["born"] = 19782
    with pytest.raises(LayoutChanged) as raised:
        d.decode(bare_key, orjson.dumps(payload))
    assert raised.value.schemaless
    assert layout_changes(raised.value.previous, raised.value.current) == (["born"], [], [])
    d.learn_types({"id": "int", "price": "decimal(65,2)", "born": "date"})
    d.accept(raised.value.current)
    again = d.decode(bare_key, orjson.dumps(payload))
    assert again is not None and again.after is not None and again.after["born"] == "2024-02-29"


@pytest.mark.parametrize(("data_type", "column_type", "scale", "hint"), [
    ("decimal", "decimal(10,2)", 2, "decimal(65,2)"), ("datetime", "datetime(3)", 3, "datetime(3)"),
    ("bigint", "bigint(20) unsigned", 0, "bigint unsigned"), ("bigint", "bigint(20)", 0, "bigint"),
    ("tinyint", "tinyint(1)", 0, "tinyint(1)"), ("bit", "bit(12)", 0, "bit(12)"),
    ("set", "set('a','b')", 0, "set"), ("json", "longtext", 0, "json"),
    ("float", "float", 0, "float"),
])
def test_hints_from_information_schema(data_type: str, column_type: str, scale: int,
                                       hint: str) -> None:
    assert column_hint(data_type, column_type, scale) == hint
    hinted_field_schema("c", hint, ConnectorSettings())  # every one is a known hint


def test_tinyint_1_is_mysqls_boolean() -> None:
    convert = field_converter(hinted_field_schema("flag", "tinyint(1)", ConnectorSettings()))
    assert convert is not None and convert(True) == 1 and convert(0) == 0


def test_every_hinted_type_answers_any_json_shape_with_a_value_or_a_bad_value() -> None:
    # Never an internal error: each converter checks the shape it is given.

    for hint in HINTS:
        d = decoder(c=hint)
        for shape in SHAPES:
            value = orjson.dumps({"op": "c", "after": {"id": 1, "c": shape},
                                  "source": {"file": "b.000001", "pos": 4}})
            try:
                d.decode(b'{"id":1}', value)
            except DecodeError as exc:
                assert exc.kind == "bad-value" and "column 'c'" in exc.reason, (hint, shape)


def test_wrong_shapes_name_what_was_expected() -> None:
    with pytest.raises(DecodeError, match=r"expected days as an integer, got float 1\.5"):
        decoder(d="date").decode(b'{"id":1}', orjson.dumps(
            {"op": "c", "after": {"id": 1, "d": 1.5}, "source": {"file": "b.000001"}}))
    with pytest.raises(DecodeError, match="expected a FLOAT as a number, got str 'x'"):
        decoder(f="float").decode(b'{"id":1}', orjson.dumps(
            {"op": "c", "after": {"id": 1, "f": "x"}, "source": {"file": "b.000001"}}))
    with pytest.raises(DecodeError, match=r"not a FLOAT: 1e\+300"):
        decoder(f="float").decode(b'{"id":1}', orjson.dumps(
            {"op": "c", "after": {"id": 1, "f": 1e300}, "source": {"file": "b.000001"}}))
