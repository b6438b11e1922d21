import orjson
import pytest

from indexer.config import ConfigError, ConnectorSettings
from indexer.events import DecodeError, EnvelopeDecoder, field_converter, hinted_field_schema

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
        decoder(geo="geometry")


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
