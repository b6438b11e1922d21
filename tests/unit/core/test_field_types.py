import pytest

from indexer.core.field_types import (
    SERVERS,
    Capabilities,
    check,
    column_problem,
    field_for,
    generate,
)
from indexer.core.layout import Column

FULL = SERVERS["es9"]
TEST_BUILD = Capabilities("es9 test build", unsigned_long=False, scaled_float=False)


def col(data_type: str, column_type: str | None = None, scale: int = 0) -> Column:
    return Column("c", data_type, column_type or data_type, scale, 0)


@pytest.mark.parametrize(("column", "expected"), [
    (col("tinyint", "tinyint(4)"), {"type": "byte"}),
    (col("tinyint", "tinyint(1)"), {"type": "byte"}),  # BOOLEAN: indexer writes 0/1
    (col("tinyint", "tinyint(3) unsigned"), {"type": "short"}),
    (col("smallint", "smallint(5) unsigned"), {"type": "integer"}),
    (col("mediumint", "mediumint(9)"), {"type": "integer"}),
    (col("int", "int(10) unsigned"), {"type": "long"}),
    (col("bigint", "bigint(20)"), {"type": "long"}),
    (col("bigint", "bigint(20) unsigned"), {"type": "unsigned_long"}),
    (col("year", "year(4)"), {"type": "short"}),
    (col("bit", "bit(1)"), {"type": "boolean"}),
    (col("bit", "bit(12)"), {"type": "short"}),
    (col("bit", "bit(64)"), {"type": "unsigned_long"}),
    (col("decimal", "decimal(10,2)", 2), {"type": "scaled_float", "scaling_factor": 100}),
    (col("decimal", "decimal(18,0)"), {"type": "long"}),
    (col("decimal", "decimal(65,30)", 30),
     {"type": "keyword", "fields": {"number": {"type": "double"}}}),
    (col("float"), {"type": "float"}),
    (col("double"), {"type": "double"}),
    (col("date"), {"type": "date", "format": "strict_date"}),
    (col("datetime", "datetime(6)", 6), {"type": "date"}),
    (col("timestamp", "timestamp(6)", 6), {"type": "date_nanos"}),
    (col("timestamp"), {"type": "date"}),
    (col("time", "time(3)", 3), {"type": "keyword"}),
    (col("varchar", "varchar(100)"),
     {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}),
    (col("longtext"), {"type": "text"}),
    (col("enum", "enum('a','b')"), {"type": "keyword"}),
    (col("set", "set('x','y')"), {"type": "keyword"}),
    (col("varbinary", "varbinary(10)"), {"type": "binary"}),
    (col("json"), {"type": "flattened"}),
    (col("geometry"), {"type": "geo_shape", "ignore_malformed": True}),
    (col("point"), {"type": "geo_point", "ignore_malformed": True}),
])
def test_each_type_gets_a_field_that_takes_its_canonical_values(
        column: Column, expected: dict[str, object]) -> None:
    assert field_for(column, FULL) == expected
    assert column_problem(column, expected) is None


def test_fallbacks_where_the_server_lacks_a_type() -> None:
    assert field_for(col("bigint", "bigint(20) unsigned"), TEST_BUILD) == {"type": "keyword"}
    assert field_for(col("decimal", "decimal(10,2)", 2), TEST_BUILD) == {"type": "double"}
    assert field_for(col("json"), SERVERS["opensearch2"]) == {"type": "flat_object"}


@pytest.mark.parametrize(("column", "spec", "says"), [
    (col("double"), {"type": "float"}, "refuses a DOUBLE above 3.4e38"),
    (col("bigint", "bigint(20) unsigned"), {"type": "long"},
     "long holds -9223372036854775808..9223372036854775807 but a bigint(20) unsigned holds "
     "0..18446744073709551615"),
    (col("datetime", "datetime(6)", 6), {"type": "date_nanos"}, "refuses years outside 1970"),
    (col("date"), {"type": "date_nanos"}, "refuses years outside"),
    (col("tinyint", "tinyint(1)"), {"type": "boolean"}, "boolean refuses"),
    (col("decimal", "decimal(10,4)", 4), {"type": "scaled_float", "scaling_factor": 100},
     "rounds a decimal(10,4) (needs 10^4)"),
    (col("decimal", "decimal(30,2)", 2), {"type": "double"}, "double keeps 15"),
    (col("decimal", "decimal(10,2)", 2), {"type": "long"}, "drops the fraction"),
    (col("varchar", "varchar(10)"), {"type": "long"}, "refuses a varchar(10)'s values"),
    (col("time"), {"type": "date"}, "date refuses a time's values"),
    (col("int", "int(11)"), {"type": "short"}, "short holds"),
    (col("varchar", "varchar(10)"), {"type": "flattened"}, "not objects"),
    (col("json"), {"type": "object"}, "use flattened"),
])
def test_problems_name_what_would_be_refused_or_lost(column: Column, spec: dict[str, object],
                                                     says: str) -> None:
    problem = column_problem(column, spec)
    assert problem is not None and says in problem


def test_check_against_the_table() -> None:
    columns = [Column("id", "int", "int(11)", 0, 1), Column("price", "double", "double", 0, 0),
               Column("added", "varchar", "varchar(5)", 0, 0),
               Column("secret", "varchar", "varchar(5)", 0, 0)]
    names = {"id": "id", "price": "cost", "added": "added"}  # secret excluded, price renamed
    mappings = {"dynamic": "strict", "properties": {
        "id": {"type": "integer"}, "cost": {"type": "float"}, "gone": {"type": "keyword"}}}
    problems, notes = check(columns, names, mappings)
    assert problems == [
        "cost (column price): float refuses a DOUBLE above 3.4e38 and keeps 7 of its 17 digits",
        "added: no field, and dynamic is strict: every row is refused"]
    assert notes == ["gone: a field for no column of the table (dropped or renamed?)"]
    _, notes = check(columns, names, {"properties": {"id": {"type": "long"}}})
    assert any("server guesses its type" in n for n in notes)


def test_a_column_new_columns_map_would_map_is_a_problem_when_the_file_lacks_it() -> None:
    columns = [Column("id", "int", "int(11)", 0, 1),
               Column("popularity", "decimal", "decimal(6,2)", 2, 0)]
    names = {"id": "id", "popularity": "popularity"}
    mappings = {"dynamic": False, "properties": {"id": {"type": "integer"}}}
    problems, _ = check(columns, names, mappings, "map")
    assert len(problems) == 1 and problems[0].startswith(
        'popularity: no field, although new_columns = "map"')
    _, notes = check(columns, names, mappings, "keep")
    assert notes == ["popularity: no field; stored in _source but not searchable"]


def test_geo_fields_note_how_they_read_coordinates() -> None:
    columns = [Column("id", "int", "int(11)", 0, 1), Column("at", "point", "point", 0, 0)]
    names = {"id": "id", "at": "at"}
    body = generate(columns, names, SERVERS["es9"])
    problems, notes = check(columns, names, body["mappings"])
    assert problems == [] and len(notes) == 1 and "WGS 84 longitude and latitude" in notes[0]
    _, strict = check(columns, names, {"properties": {"at": {"type": "geo_point"}}})
    assert any("refused unless ignore_malformed" in n for n in strict)
    mercator = [columns[0], Column("at", "point", "point", 0, 0, 3857)]
    _, notes = check(mercator, names, body["mappings"])
    assert notes[0].startswith("at: declares SRID 3857, which geo_point cannot represent")


def test_generated_mappings_pass_their_own_check() -> None:
    columns = [Column(f"c{i}", t, ct, s, int(i == 0)) for i, (t, ct, s) in enumerate([
        ("int", "int(11)", 0), ("bigint", "bigint(20) unsigned", 0), ("double", "double", 0),
        ("decimal", "decimal(65,30)", 30), ("datetime", "datetime(6)", 6), ("json", "json", 0),
        ("bit", "bit(64)", 0), ("set", "set('a')", 0), ("blob", "blob", 0)])]
    names = {c.name: c.name for c in columns}
    for caps in (*SERVERS.values(), TEST_BUILD):
        body = generate(columns, names, caps)
        assert body["mappings"]["dynamic"] is False
        assert check(columns, names, body["mappings"]) == ([], [])
