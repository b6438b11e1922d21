"""Spatial values: MySQL's stored geometry (the binlog's bytes, which Debezium forwards, and
what ``HEX(column)`` gives) as the GeoJSON that Elasticsearch's ``geo_point`` and
``geo_shape`` take.

Pure. The stored format is a 4-byte little-endian SRID, then the geometry's WKB. GeoJSON's
coordinates are the stored x and y as they are: longitude first on MariaDB (which has no
geographic SRIDs) and, as MySQL documents its storage format, on MySQL 8, which keeps
longitude first whatever axis order the SRID declares (ST_X and ST_AsText follow the declared
order; the stored bytes do not; not tried here, where no MySQL 8 server runs). The
SRID is not part of GeoJSON: the search server takes every geometry as WGS 84 (SRID 4326)
longitude and latitude. Parsing is shapely's (GEOS).

Not compiled with the hot path: :class:`Geometry` subclasses dict, which a compiled class
cannot; spatial values are rare enough that a call out costs nothing measurable.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

SRID_BYTES = 4  # the stored format's prefix
# MySQL's spatial column types (MySQL 8 also says geomcollection).
SPATIAL_TYPES = ("point", "linestring", "polygon", "geometry", "multipoint", "multilinestring",
                 "multipolygon", "geometrycollection", "geomcollection")


class Geometry(dict[str, Any]):
    """A geometry's GeoJSON (what is written to the document) that remembers its stored
    bytes: its checksum text is their hex, which the server computes as ``HEX(column)``,
    exact where any text of its coordinates would depend on how each side prints a double."""

    __slots__ = ("text",)

    def __init__(self, geojson: Mapping[str, Any], stored: bytes) -> None:
        super().__init__(geojson)
        self.text = stored.hex().upper()


def from_stored(stored: bytes) -> Geometry:
    """A geometry from MySQL's stored format (SRID, then WKB)."""
    if len(stored) <= SRID_BYTES:
        raise ValueError(f"a geometry of {len(stored)} bytes (the SRID alone takes 4)")
    return Geometry(_geojson(stored[SRID_BYTES:]), stored)


def from_hex(text: str) -> Geometry:
    """A geometry from ``HEX(column)``, as the snapshot and repairs read it."""
    return from_stored(bytes.fromhex(text))


def from_debezium(value: Mapping[str, Any]) -> Geometry:
    """A geometry from Debezium's ``io.debezium.data.geometry.Point`` or ``Geometry`` struct:
    ``wkb`` (base64 of the stored bytes after the SRID) and ``srid`` (absent or null: 0)."""
    wkb = base64.b64decode(value["wkb"], validate=True)
    srid = int(value.get("srid") or 0)
    return Geometry(_geojson(wkb), srid.to_bytes(SRID_BYTES, "little") + wkb)


def _geojson(wkb: bytes) -> dict[str, Any]:
    # Imported with the first geometry: shapely brings numpy and GEOS (15 MB of a daemon's
    # memory), and most tables have no spatial column.
    import shapely
    import shapely.geometry

    try:
        shape = shapely.from_wkb(wkb)
    except shapely.errors.GEOSException as exc:
        raise ValueError(f"not a geometry's WKB: {exc}") from exc
    return {name: _lists(value) for name, value in shapely.geometry.mapping(shape).items()}


def _lists(value: Any) -> Any:
    """shapely's coordinate tuples as the lists a document read back from JSON holds."""
    if isinstance(value, tuple | list):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value
