"""A table's layout from MySQL's information_schema, and what it says about indices."""

from __future__ import annotations

import re
from typing import Any, Literal

import pymysql

from indexer.core.geometry import SPATIAL_TYPES
from indexer.core.layout import Column, Flavor, TableLayout
from indexer.errors import ConfigError, MissingTable
from indexer.settings import MySQLSettings, TableConfig
from indexer.source.mysql.connection import connect, fetch_all, server_version


def table_layout(conn: pymysql.connections.Connection[Any], database: str, table: str,
                 server: Literal["auto", "mariadb", "mysql"] = "auto") -> TableLayout:
    found, version = server_version(conn)
    flavor: Flavor = found if server == "auto" else server
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, "
            "COALESCE(c.NUMERIC_SCALE, c.DATETIME_PRECISION, 0), "
            "COALESCE(k.ORDINAL_POSITION, 0) "
            "FROM information_schema.COLUMNS c LEFT JOIN information_schema.KEY_COLUMN_USAGE k "
            "ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME "
            "AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' "
            "WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION",
            (database, table),
        )
        rows = cur.fetchall()
        json_columns = _json_columns(cur, database, table)
        srids = (_srids(cur, database, table, flavor)
                 if any(str(r[1]).lower() in SPATIAL_TYPES for r in rows) else {})
    if not rows:
        raise MissingTable(f"table {database}.{table} does not exist (or this MySQL user "
                           "cannot see it)")
    layout = TableLayout(database, table, tuple(
        Column(str(r[0]), "json" if r[0] in json_columns else str(r[1]).lower(),
               str(r[2]).lower(), int(r[3]), int(r[4]), srids.get(str(r[0]), 0))
        for r in rows), flavor, normalizes_json=found == "mariadb" and version >= (10, 7))
    if not layout.key:
        raise LookupError(f"table {database}.{table} has no primary key; documents need one")
    return layout


UNKNOWN_DATABASE = 1049  # ER_BAD_DB_ERROR


def read_layout(settings: MySQLSettings, database: str, table: str) -> TableLayout:
    try:
        conn = connect(settings, database)
    except ConfigError as exc:
        cause = exc.__cause__
        if isinstance(cause, pymysql.err.OperationalError) and cause.args[:1] == (
                UNKNOWN_DATABASE,):
            raise MissingTable(f"database {database} does not exist (or this MySQL user "
                               "cannot see it)") from exc
        raise
    with conn:
        return table_layout(conn, database, table, settings.server)


def _srids(cur: Any, database: str, table: str, flavor: Flavor) -> dict[str, int]:
    """The SRIDs spatial columns declare (MariaDB's REF_SYSTEM_ID, MySQL 8's SRID)."""
    # MariaDB 10.11 leaves F_GEOMETRY_COLUMN empty and names the column in G_GEOMETRY_COLUMN.
    query = ("SELECT COALESCE(NULLIF(F_GEOMETRY_COLUMN, ''), G_GEOMETRY_COLUMN), SRID "
             "FROM information_schema.GEOMETRY_COLUMNS "
             "WHERE F_TABLE_SCHEMA = %s AND F_TABLE_NAME = %s" if flavor == "mariadb" else
             "SELECT COLUMN_NAME, SRS_ID FROM information_schema.ST_GEOMETRY_COLUMNS "
             "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s")
    try:
        cur.execute(query, (database, table))
    except pymysql.err.MySQLError:
        return {}  # a server without the view: every SRID reads as undeclared
    return {str(name): int(srid or 0) for name, srid in cur.fetchall()}


_JSON_VALID = re.compile(r"^json_valid\(`?([^`]+)`?\)$", re.IGNORECASE)


def _json_columns(cur: Any, database: str, table: str) -> set[str]:
    """MariaDB's JSON is LONGTEXT plus a json_valid() check; MySQL's JSON is its own type."""
    try:
        cur.execute("SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                    "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s", (database, table))
    except pymysql.err.MySQLError:
        return set()  # MySQL before 8.0.16 has no such table, and no need for it
    return {m.group(1) for (clause,) in cur.fetchall()
            if (m := _JSON_VALID.match(str(clause).strip()))}


def row_count_estimate(settings: MySQLSettings, layout: TableLayout) -> int:
    found = fetch_all(settings, layout.database,
                       "SELECT TABLE_ROWS FROM information_schema.TABLES "
                       "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                       (layout.database, layout.table))
    return int(found[0][0] or 0) if found else 0


def changed_column(settings: MySQLSettings, layout: TableLayout,
                   wanted: str | None) -> tuple[str | None, str]:
    """The indexed DATETIME/TIMESTAMP column that says when a row last changed: ``wanted``,
    or the one MySQL sets ON UPDATE CURRENT_TIMESTAMP; and why there is none."""
    columns = fetch_all(settings, layout.database,
                         "SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS "
                         "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                         (layout.database, layout.table))
    if wanted is None:
        found = [str(name) for name, data_type, extra in columns
                 if str(data_type).lower() in ("datetime", "timestamp")
                 and "on update current_timestamp" in str(extra).lower()]
        if not found:
            return None, "no column is set ON UPDATE CURRENT_TIMESTAMP (set changed_column)"
        wanted = found[0]
    elif wanted not in {str(name) for name, _, _ in columns}:
        return None, f"changed_column {wanted!r} is not a column of the table"
    leading = fetch_all(settings, layout.database,
                         "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                         "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1",
                         (layout.database, layout.table, wanted))
    if not leading:
        return None, f"column {wanted} has no index of its own (each look would scan the table)"
    return wanted, ""


def missing_table(mysql: MySQLSettings, table: TableConfig, why: Exception) -> str:
    """One line naming a configured table MySQL does not have, and what to check."""
    return (f"table {table.name}: MySQL at {mysql.host}:{mysql.port} says: {why}; check the "
            "[[tables]] entry's database and table (names are case-sensitive on Linux)")
