"""Reconciliation time on a large table with injected drift, beside a naive merge-compare.

    .venv/bin/python -m bench.reconcile --rows 10000000

The table is generated inside MariaDB (sequence engine, a database Debezium does not
capture) and indexed with `indexer reindex`. Then 50 drifts are injected behind the
pipeline's back: 15 documents deleted, 10 replaced by hand-edited copies and 10 added in
Elasticsearch; 10 rows updated and 5 deleted in MariaDB with the binlog off. Timed on the
whole machine (no pinning: both sides are mostly server work, MariaDB's and Elasticsearch's):
  * `indexer reconcile` (child process, whole command), which must find exactly the 50;
  * a naive full merge-compare: every row's id and CRC32 streamed from MariaDB in key order
    (hashes computed by the server, as reconcile's are) against every document's id and
    stored hash scrolled from Elasticsearch in key order.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pymysql.cursors

from bench.common import BENCH_MAPPING, ES, mysql, search_client, unique
from bench.reindex import BENCH_DATABASE, create_table, drop_table
from indexer.core.checksums import content_hash
from indexer.search.client import SearchClient
from indexer.settings import MySQLSettings
from indexer.source.mysql import checksum_sql, connection, schema
from indexer.source.mysql.connection import qualified


def write_config(folder: Path, table: str) -> tuple[Path, str]:
    alias = unique("bench-reconcile").lower().replace("_", "-")
    (folder / f"{alias}.json").write_bytes(orjson.dumps(BENCH_MAPPING))
    config = folder / "bench.toml"
    config.write_text(f'[elasticsearch]\nhosts = ["{ES}"]\nmappings_dir = "{folder}"\n'
                      "[metrics]\nport = 0\n"
                      f'[[tables]]\nname = "{BENCH_DATABASE}.{table}"\nalias = "{alias}"\n')
    return config, alias


async def command(*args: str) -> tuple[int, bytes, float]:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "indexer", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    return proc.returncode or 0, out, time.perf_counter() - started


async def inject(es: SearchClient, alias: str, table: str, rows: int) -> dict[str, set[str]]:
    (index,) = await es.aliases([alias])
    step = rows // 60
    ids = [str(1 + i * step) for i in range(50)]
    deleted, edited, rows_changed, rows_deleted = ids[:15], ids[15:25], ids[25:35], ids[35:40]
    for doc_id in deleted:
        await es.request("DELETE", f"/{index}/_doc/{doc_id}")
    for doc_id in edited[:5]:
        src = (await es.request("GET", f"/{index}/_doc/{doc_id}"))["_source"]
        src.pop("_indexer")
        await es.request("PUT", f"/{index}/_doc/{doc_id}", {**src, "name": "edited by hand"})
    for doc_id in edited[5:]:  # as written before a column rename: same values, old name
        src = (await es.request("GET", f"/{index}/_doc/{doc_id}"))["_source"]
        meta = src.pop("_indexer")
        src["label"] = src.pop("name")
        meta["hash"] = content_hash(src)
        await es.request("PUT", f"/{index}/_doc/{doc_id}", {**src, "_indexer": meta})
    added = [str(rows + 1000 + i) for i in range(10)]
    for doc_id in added:
        await es.request("PUT", f"/{index}/_doc/{doc_id}", {"id": int(doc_id), "name": "ghost"})
    await es.refresh(index)
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for doc_id in rows_changed:
                cur.execute(f"UPDATE {BENCH_DATABASE}.`{table}` SET qty = qty + 1 WHERE id = %s",
                            (int(doc_id),))
            for doc_id in rows_deleted:
                cur.execute(f"DELETE FROM {BENCH_DATABASE}.`{table}` WHERE id = %s",
                            (int(doc_id),))
    finally:
        db.close()
    return {"missing": set(deleted), "stale": set(edited) | set(rows_changed),
            "extra": set(added) | set(rows_deleted)}


async def naive(es: SearchClient, alias: str, table: str) -> tuple[int, float]:
    """Differences found by streaming both sides in key order and merging them."""
    started = time.perf_counter()
    conn = connection.connect(MySQLSettings(), BENCH_DATABASE)
    layout = schema.table_layout(conn, BENCH_DATABASE, table)
    cursor = conn.cursor(pymysql.cursors.SSCursor)
    row_hash = checksum_sql.hash_sql([(c.name, c) for c in layout.columns], layout.flavor)
    cursor.execute(f"SELECT id, {row_hash} FROM {qualified(layout)} ORDER BY id")

    def mysql_rows() -> Any:
        while page := cursor.fetchmany(10000):
            yield from page

    async def es_docs() -> Any:
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": 10000, "sort": [{"_indexer.key": "asc"}, {"_seq_no": "asc"}],
                "_source": False, "track_total_hits": False,
                "docvalue_fields": [{"field": "_indexer.hash"}, {"field": "_indexer.key"}]}
            if after is not None:
                body["search_after"] = after
            response = await es.search(alias, body)
            hits = response["hits"]["hits"]
            if not hits:
                return
            for hit in hits:
                fields = hit.get("fields", {})
                key = fields.get("_indexer.key", [None])[0]
                yield (hit["_id"], int(key) if key is not None else None,
                       fields.get("_indexer.hash", [None])[0])
            after = hits[-1]["sort"]

    differences = 0
    keyless: set[int] = set()  # written without the indexer's fields: sorted last
    rows = mysql_rows()
    row = next(rows, None)
    unmatched: list[int] = []
    async for doc_id, key, doc_hash in es_docs():
        if key is None:
            differences += 1  # stale if its row exists, extra if not: one difference
            keyless.add(int(doc_id) if doc_id.isdigit() else -1)
            continue
        while row is not None and row[0] < key:
            unmatched.append(row[0])  # missing
            row = next(rows, None)
        if row is not None and row[0] == key:
            differences += int(row[1]) != doc_hash
            row = next(rows, None)
        else:
            differences += 1  # extra
    while row is not None:
        unmatched.append(row[0])
        row = next(rows, None)
    differences += sum(1 for key in unmatched if key not in keyless)
    cursor.close()
    conn.close()
    return differences, time.perf_counter() - started


async def repair_every_row(table: str, config: Path, load_s: float) -> None:
    """A column added with a non-NULL default makes every document stale: the repair
    rewrites them all, and should cost about what the reindex did."""
    db = mysql()
    try:
        with db.cursor() as cur:
            cur.execute(f"ALTER TABLE {BENCH_DATABASE}.`{table}` "
                        "ADD COLUMN flag INT NOT NULL DEFAULT 1")
    finally:
        db.close()
    code, out, seconds = await command("reconcile", table, "--config", str(config), "--repair",
                                       "--format", "json", "--settle", "0")
    (report,) = orjson.loads(out)["tables"]
    print(f"whole-table repair after ADD COLUMN ... DEFAULT 1: {seconds:.1f} s, exit {code}, "
          f"rewritten {report['repaired']['rewritten']:,}, clean after: {report['clean']} | "
          f"reindex of the same table: {load_s:.1f} s | repair/reindex "
          f"{seconds / load_s:.2f}", flush=True)


async def main(rows: int, whole_repair: bool) -> None:
    table = create_table(rows)
    es = await search_client().__aenter__()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config, alias = write_config(Path(tmp), table)
            code, _, load = await command("reindex", table, "--config", str(config))
            assert code == 0, "reindex failed"
            expected = await inject(es, alias, table, rows)
            code, out, seconds = await command("reconcile", table, "--config", str(config),
                                               "--format", "json", "--settle", "0")
            (report,) = orjson.loads(out)["tables"]
            found = {k: set(report[k]) for k in ("missing", "stale", "extra")}
            naive_found, naive_seconds = await naive(es, alias, table)
            exact = found == expected
            print(f"reconcile {rows:,} rows ({report['chunks']:,} chunks, "
                  f"{report['chunks_differing']} differing): {seconds:.1f} s, exit {code}, "
                  f"found {sum(map(len, found.values()))} of 50, exact: {exact} | naive "
                  f"merge-compare: {naive_seconds:.1f} s, {naive_found} differences | "
                  f"{naive_seconds / seconds:.1f}x faster (index load by reindex: {load:.0f} s)",
                  flush=True)
            if not exact:
                print(f"  expected {expected}\n  found    {found}")
            if whole_repair:
                await repair_every_row(table, config, load)
            await es.delete_matching(f"{alias}-v*")
    finally:
        await es.close()
        drop_table(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--whole-repair", action="store_true",
                        help="then add a column with a default (every document stale) and "
                             "time `reconcile --repair` against the reindex that loaded it")
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.whole_repair))
