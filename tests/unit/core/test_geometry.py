import base64

import orjson
import pytest

from indexer.core import geometry
from indexer.core.checksums import content_hash, hash_text, normal_json
from indexer.core.events import field_converter, hinted_field_schema
from indexer.core.field_types import SERVERS, column_problem, field_for
from indexer.core.layout import Column
from indexer.settings import ConnectorSettings

# What MariaDB stores (HEX(column)) for each: SRID 4326 little-endian, then WKB.
STORED = {
    "POINT(1.5 -2.25)": ("E61000000101000000000000000000F83F00000000000002C0",
                         {"type": "Point", "coordinates": [1.5, -2.25]}),
    "LINESTRING(0 0, 1 1)": (
        "E610000001020000000200000000000000000000000000000000000000000000000000F03F"
        "000000000000F03F",
        {"type": "LineString", "coordinates": [[0.0, 0.0], [1.0, 1.0]]}),
    "GEOMETRYCOLLECTION EMPTY": ("E6100000010700000000000000",
                                 {"type": "GeometryCollection", "geometries": []}),
}


@pytest.mark.parametrize("wkt", list(STORED))
def test_stored_bytes_become_geojson_and_hash_as_their_hex(wkt: str) -> None:
    hex_text, geojson = STORED[wkt]
    found = geometry.from_hex(hex_text)
    assert orjson.loads(orjson.dumps(found)) == geojson
    assert hash_text(found) == hex_text  # what HEX(column) gives
    # A JSON column holding the same GeoJSON still hashes as JSON.
    assert hash_text(dict(found)) == normal_json(dict(found))


def test_debezium_structs_are_the_same_geometry_as_the_stored_bytes() -> None:
    hex_text, geojson = STORED["POINT(1.5 -2.25)"]
    wkb = bytes.fromhex(hex_text)[4:]
    point = {"x": 1.5, "y": -2.25, "wkb": base64.b64encode(wkb).decode(), "srid": 4326}
    convert = field_converter({"name": "io.debezium.data.geometry.Point"})
    assert convert is not None
    found = convert(point)
    assert found == geojson and found.text == hex_text
    assert content_hash({"p": found}) == content_hash({"p": geometry.from_hex(hex_text)})
    # No SRID (MariaDB's default 0) is SRID 0 in the stored bytes.
    assert geometry.from_debezium({"wkb": point["wkb"]}).text == "00000000" + hex_text[8:]


def test_without_schemas_spatial_hints_decode_the_same() -> None:
    for hint, name in (("point", "Point"), ("polygon", "Geometry"),
                       ("geomcollection", "Geometry")):
        schema = hinted_field_schema("g", hint, ConnectorSettings())
        assert schema["name"] == f"io.debezium.data.geometry.{name}"


@pytest.mark.parametrize("bad", ["00", "E6100000FFFF", "E61000000101000000"])
def test_a_broken_geometry_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        geometry.from_hex(bad)


def test_spatial_columns_map_to_geo_fields() -> None:
    point = Column("p", "point", "point", 0, 0)
    shape = Column("s", "polygon", "polygon", 0, 0)
    caps = SERVERS["es9"]
    assert field_for(point, caps) == {"type": "geo_point", "ignore_malformed": True}
    assert field_for(shape, caps) == {"type": "geo_shape", "ignore_malformed": True}
    assert column_problem(point, {"type": "geo_point"}) is None
    assert column_problem(point, {"type": "geo_shape"}) is None
    assert column_problem(shape, {"type": "geo_point"}) is not None
    assert column_problem(shape, {"type": "object", "enabled": False}) is None
