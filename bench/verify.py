"""What continuous verification costs: CPU of MariaDB, the search server and the daemon per
whole rolling pass, and of the quick pass over recent rows under a steady writer.

    .venv/bin/python -m bench.verify --rows 1000000 [--recent-rows 100000] [--rate 150]

1. Rolling pass. A table of ``--rows`` rows is made inside MariaDB (a database Debezium does
   not capture) and indexed with `indexer reindex`. `indexer run` then verifies it with
   ``max_load_share = 1`` and a period of a second, so that passes follow each other at full
   speed; the CPU each process used during the second whole pass, and its length, are one
   pass's cost. At the defaults (a pass an hour at 5% load) that is the cost per hour.
2. Quick pass. A table of ``--recent-rows`` rows in the captured database, indexed, with a
   writer updating ``--rate`` rows a second (through Debezium and the daemon, as in
   production): for ``--seconds`` with verification off, then as long with only the quick
   pass on (every 60 s, the default). The difference in each process's CPU is what the quick
   pass costs.
No pinning: the work is the servers'.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson

from bench.common import (
    BASE,
    BENCH_MAPPING,
    DATABASE,
    ES,
    KAFKA,
    MYSQL_PORT,
    REPO,
    cpu_seconds,
    daemon_metric,
    mysql,
    server_cpu,
    unique,
)
from bench.reindex import BENCH_DATABASE, create_table, drop_table

METRICS_PORT = 9481
SERVERS = ("mariadb", "elasticsearch")


def write_config(folder: Path, database: str, table: str, verify: str) -> tuple[Path, str]:
    alias = unique("bench-verify").lower().replace("_", "-")
    (folder / f"{alias}.json").write_bytes(orjson.dumps(BENCH_MAPPING))
    path = folder / f"{alias}.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{KAFKA}"\ngroup_id = "{unique("bench-verify")}"\n'
        f'[elasticsearch]\nhosts = ["{ES}"]\nmappings_dir = "{folder}"\n'
        f"[mysql]\nport = {MYSQL_PORT}\n[metrics]\nport = {METRICS_PORT}\n"
        # The bench database is not captured: the canary lives where beats do travel.
        f'[canary]\ntable = "{DATABASE}.indexer_canary"\n'
        f"[verify]\n{verify}\n"
        f'[[tables]]\nname = "{database}.{table}"\nalias = "{alias}"\n'
        'changed_column = "updated_at"\n')
    return path, alias


async def indexer(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "indexer", *args, cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"indexer {' '.join(args)} failed:\n{err.decode()[-2000:]}")


@contextlib.asynccontextmanager
async def daemon(config: Path) -> AsyncIterator[int]:
    log = config.with_suffix(".log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "indexer", "run", "--config", str(config), cwd=REPO,
        stdout=log, stderr=log)
    try:
        yield proc.pid
    finally:
        proc.terminate()
        await proc.wait()
        log.close()


def metric(name: str) -> float | None:
    """The sum of a metric's samples on the daemon's endpoint (None: not there yet)."""
    try:
        return daemon_metric(METRICS_PORT, name)
    except OSError:
        return None


async def pass_ended(after: float, timeout: float = 1800) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = metric("indexer_verify_last_pass_timestamp_seconds")
        if ended is not None and ended > after:
            return ended
        await asyncio.sleep(0.2)
    raise RuntimeError("no verification pass ended in time (see the daemon's log)")


def cpu(pid: int) -> dict[str, float]:
    return {**{s: server_cpu(s) for s in SERVERS}, "indexer": cpu_seconds(pid)}


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def line(costs: dict[str, float], scale: float = 1.0) -> str:
    return ", ".join(f"{k} {v * scale:.2f} s" for k, v in costs.items())


async def rolling(rows: int, folder: Path) -> None:
    table = create_table(rows)
    try:
        config, alias = write_config(folder, BENCH_DATABASE, table,
                                     "period_s = 1\nmax_load_share = 1.0\n"
                                     "recent_every_s = 1000000")
        started = time.perf_counter()
        await indexer("reindex", table, "--config", str(config))
        print(f"rolling pass: {rows:,} rows indexed in {time.perf_counter() - started:.0f} s",
              flush=True)
        async with daemon(config) as pid:
            first = await pass_ended(0)
            before, began = cpu(pid), time.perf_counter()
            await pass_ended(first)
            took, used = time.perf_counter() - began, spent(before, cpu(pid))
        print(f"rolling pass over {rows:,} rows at full speed: {took:.1f} s; CPU {line(used)}. "
              f"At the defaults (a pass each hour, at most 5% of the time busy) a pass takes "
              f"~{took / 0.05 / 60:.0f} min and costs per hour the same CPU: "
              f"{sum(used.values()) / 3600:.2%} of one core for all three", flush=True)
        async with aiohttp.ClientSession(base_url=ES) as http:
            await (await http.delete(f"/{alias}-v*")).read()
    finally:
        drop_table(table)


def writer(table: str, rows: int, rate: float, stop: threading.Event) -> int:
    db = mysql()
    done = 0
    started = time.perf_counter()
    try:
        with db.cursor() as cur:
            while not stop.is_set():
                delay = started + done / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                cur.execute(f"UPDATE `{table}` SET qty = qty + 1, updated_at = NOW(6) "
                            "WHERE id = %s", (1 + done * 7919 % rows,))
                done += 1
    finally:
        db.close()
    return done


async def recent(rows: int, rate: float, seconds: float, folder: Path) -> None:
    table = unique("verify")
    db = mysql()
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL,"
                    " price DECIMAL(10,2) NOT NULL, qty INT NOT NULL, updated_at DATETIME(6) NOT"
                    " NULL, KEY (updated_at))")
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"INSERT INTO `{table}` SELECT seq, CONCAT('product ', seq), "
                    "(100 + seq MOD 100000) / 100, seq MOD 1000, "
                    f"TIMESTAMPADD(MICROSECOND, seq, '{BASE}') FROM seq_1_to_{rows}")
    db.close()
    try:
        results: dict[str, tuple[dict[str, float], int]] = {}
        for label, verify in (("verification off", "enabled = false"),
                              ("quick pass only", "period_s = 1000000")):
            config, alias = write_config(folder, DATABASE, table, verify)
            await indexer("reindex", table, "--config", str(config))
            async with daemon(config) as pid:
                await asyncio.sleep(20)  # started, caught up, first looks done
                stop = threading.Event()
                before = cpu(pid)
                task = asyncio.create_task(asyncio.to_thread(writer, table, rows, rate, stop))
                await asyncio.sleep(seconds)
                stop.set()
                changes = await task
                results[label] = spent(before, cpu(pid)), changes
                checked = metric("indexer_verify_rows_total")
            print(f"quick pass, {label}: {changes:,} updates in {seconds:.0f} s; CPU "
                  f"{line(results[label][0])}"
                  + (f"; rows checked {checked:,.0f}" if checked is not None else ""), flush=True)
            async with aiohttp.ClientSession(base_url=ES) as http:
                await (await http.delete(f"/{alias}-v*")).read()
        off, on = results["verification off"][0], results["quick pass only"][0]
        delta = {k: on[k] - off[k] for k in off}
        print(f"quick pass every 60 s at {rate:g} updates/s costs per hour: "
              f"{line(delta, 3600 / seconds)} (the difference of the two runs)", flush=True)
    finally:
        db = mysql()
        with db.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")
        db.close()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if args.rows:
            await rolling(args.rows, Path(tmp))
        if args.recent_rows:
            await recent(args.recent_rows, args.rate, args.seconds, Path(tmp))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="0: skip the rolling pass")
    parser.add_argument("--recent-rows", type=int, default=100_000, help="0: skip the quick pass")
    parser.add_argument("--rate", type=float, default=150, help="updates per second")
    parser.add_argument("--seconds", type=float, default=180)
    return parser.parse_args(argv)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(parse()))
