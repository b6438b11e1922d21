"""Reconciliation's SQL: the server computes each row's text and checksum as
:mod:`indexer.core.checksums` does for documents, per chunk or per id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pymysql.converters

from indexer.core.documents import KEY_BUCKETS
from indexer.core.layout import Field, Flavor, TableLayout
from indexer.settings import MySQLSettings
from indexer.source.mysql.condition_sql import with_rule
from indexer.source.mysql.connection import fetch_all, qualified, quote
from indexer.source.mysql.snapshots import ids_where, key_range_where
from indexer.source.mysql.value_sql import id_sql, text_sql


def hash_sql(fields: Sequence[Field], flavor: Flavor = "mariadb",
             normalize_json: bool = True) -> str:
    """The SQL twin of checksums.content_hash: CRC32 of ``#name=text`` for each column, in
    the order of the field names; a NULL makes its part NULL, which CONCAT_WS leaves out."""
    parts = ", ".join(f"CONCAT({_literal(f'#{name}=')}, "
                      f"{text_sql(column, flavor, normalize_json)})"
                      for name, column in sorted(fields, key=lambda f: f[0])) or "''"
    return f"CRC32(CONCAT_WS('', {parts}))"


def _row_hash(layout: TableLayout, fields: Sequence[Field]) -> str:
    return hash_sql(fields, layout.flavor, layout.normalizes_json)


def _literal(text: str) -> str:
    """A string literal for queries run through fetch_all (which always formats them)."""
    return "'" + pymysql.converters.escape_string(text).replace("%", "%%") + "'"


@dataclass(frozen=True)
class ChunkSum:
    chunk: int
    rows: int
    hash_sum: int


def chunk_sums(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
               width: int, first: int | None = None, last: int | None = None,
               ) -> dict[int, ChunkSum]:
    """Per chunk of ``width`` key values (integer keys) or per id bucket: count and hash sum,
    in one scan inside the server (of chunks ``first``..``last`` only, when given)."""
    chunk = _chunk_sql(layout, width)
    where: str = ""
    args: tuple[int, ...] = ()
    if layout.integer_key:
        where, args = key_range_where(layout, None if first is None else first * width,
                                      None if last is None else (last + 1) * width - 1)
    row_hash = _row_hash(layout, fields)
    where, params = with_rule(layout, where, args)
    found = fetch_all(settings, layout.database,
                       f"SELECT {chunk} AS chunk, COUNT(*), SUM({row_hash}) "
                       f"FROM {qualified(layout)} {where} GROUP BY chunk", params)
    return {int(c): ChunkSum(int(c), int(n), int(h)) for c, n, h in found}


def _chunk_sql(layout: TableLayout, width: int) -> str:
    if layout.integer_key:
        return f"FLOOR({quote(layout.key[0].name)} / {int(width)})"
    return f"MOD(CRC32({id_sql(layout)}), {KEY_BUCKETS})"


def chunk_rows(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
               width: int, chunks: Sequence[int]) -> dict[str, int]:
    """id -> row hash for every row in these chunks."""
    if not chunks:
        return {}
    if layout.integer_key:
        key = quote(layout.key[0].name)
        where = " OR ".join(f"({key} >= %s AND {key} < %s)" for _ in chunks)
        args: list[int] = []
        for c in chunks:
            args += [c * width, (c + 1) * width]
    else:
        where = f"{_chunk_sql(layout, width)} IN ({', '.join(['%s'] * len(chunks))})"
        args = list(chunks)
    where, params = with_rule(layout, f"WHERE ({where})", args)
    found = fetch_all(settings, layout.database,
                       f"SELECT {id_sql(layout)}, {_row_hash(layout, fields)} "
                       f"FROM {qualified(layout)} {where}", params)
    return {str(i): int(h) for i, h in found}


def hashes_for_ids(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
                   ids: Sequence[str]) -> dict[str, int]:
    """id -> row hash of the rows behind these document ids (absent ids are left out)."""
    if not ids:
        return {}
    where, args = with_rule(layout, *ids_where(layout, ids))
    found = fetch_all(settings, layout.database,
                       f"SELECT {id_sql(layout)}, {_row_hash(layout, fields)} "
                       f"FROM {qualified(layout)} {where}", args)
    return {str(i): int(h) for i, h in found}


def changed_since(settings: MySQLSettings, layout: TableLayout, fields: Sequence[Field],
                  column: str, since: str | None, back_s: float,
                  limit: int) -> tuple[dict[str, int], str | None]:
    """id -> row hash of the rows whose ``column`` (when the row last changed) is at least
    ``since`` (None: ``back_s`` before the newest value), oldest first, at most ``limit``; and
    the newest value read (None: no row). Values are the column's own text, so the server's
    and the writers' time zones never meet."""
    c = quote(column)
    if since is None:
        ((since,),) = fetch_all(settings, layout.database,
                                 f"SELECT CAST(MAX({c}) - INTERVAL %s SECOND AS CHAR) "
                                 f"FROM {qualified(layout)}", (int(back_s),))
        if since is None:
            return {}, None
    where, args = with_rule(layout, f"WHERE {c} >= %s", (since,))
    found = fetch_all(settings, layout.database,
                       f"SELECT {id_sql(layout)}, {_row_hash(layout, fields)}, "
                       f"CAST({c} AS CHAR) FROM {qualified(layout)} {where} "
                       f"ORDER BY {c} LIMIT {int(limit)}", args)
    return {str(i): int(h) for i, h, _ in found}, (str(found[-1][2]) if found else since)


def key_range(settings: MySQLSettings, layout: TableLayout) -> tuple[int, int, int] | None:
    """(min key, max key, rows) of an integer-keyed table."""
    key = quote(layout.key[0].name)
    ((low, high, rows),) = fetch_all(
        settings, layout.database,
        f"SELECT MIN({key}), MAX({key}), COUNT(*) FROM {qualified(layout)}")
    return None if low is None or high is None else (int(low), int(high), int(rows))
