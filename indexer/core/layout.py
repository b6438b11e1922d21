"""A table's layout as plain data: its columns (name, MySQL type, scale, place in the
primary key), the document fields they fill, its key and the server's flavor. Pure: read from
MySQL by :mod:`indexer.source.mysql.schema`, used by field types, documents, checksums and the
MySQL adapter alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from indexer.settings import RowRule

Flavor = Literal["mariadb", "mysql"]


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # information_schema DATA_TYPE: int, decimal, datetime, ...
    column_type: str  # the full type: "bigint(20) unsigned", "tinyint(1)", "set('a','b')"
    scale: int  # NUMERIC_SCALE or DATETIME_PRECISION
    key_position: int  # 1-based position in the primary key, 0 if not part of it
    srid: int = 0  # a spatial column's declared SRID (0: none declared, or not spatial)

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type


@dataclass(frozen=True)
class Index:
    """A secondary index of a table: its columns in order, and whether it is unique."""

    name: str
    columns: tuple[str, ...]
    unique: bool


# (document field name, the column it holds): what the checksums cover.
Field = tuple[str, Column]


@dataclass(frozen=True)
class TableLayout:
    database: str
    table: str
    columns: tuple[Column, ...]
    flavor: Flavor = "mariadb"  # the server's: its SQL dialect for checksums
    normalizes_json: bool = True  # it has JSON_NORMALIZE (MariaDB 10.7+)
    # The rows the table's documents are made of (the table's where and deleted_when), for
    # the SQL reading them; None: every row.
    rows: RowRule | None = None

    @property
    def key(self) -> tuple[Column, ...]:
        return tuple(sorted((c for c in self.columns if c.key_position),
                            key=lambda c: c.key_position))


    @property
    def integer_key(self) -> bool:
        key = self.key
        return len(key) == 1 and key[0].data_type in (
            "tinyint", "smallint", "mediumint", "int", "bigint")
