"""Daemon throughput against the raw _bulk ceiling of the same Elasticsearch, in one run.

    .venv/bin/python -m bench.daemon --events 1000000

Protocol: Elasticsearch pinned to core 0; Kafka, MariaDB and the client side (the daemon
process, or the minimal raw client) to core 1. N events in the real connector's format
(synthesised from an event the running Debezium connector produced) are pre-loaded into a
one-partition topic, with and without schemas. The ceiling posts the very documents the
daemon writes, prebuilt as NDJSON, as many bulks in flight as indexer, before and after the
daemon run.
The daemon (`python -m indexer run`, a child process) is timed from "indexer running" to
the commit of the last offset. Prints docs/s, the ratio, and the daemon's peak RSS.
``--where few='qty < 100'`` runs the daemon again over the same events with that table
``where`` (a row filter) and prints its CPU per event against the plain run's;
``--transform same=bench.shaping:unchanged`` does the same with a table ``transform``, and
``--routing by-qty=qty`` with a table ``routing``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiokafka.admin import AIOKafkaAdminClient

from bench.common import (
    BASE,
    BENCH_MAPPING,
    CLIENT_CORE,
    DATABASE,
    ES,
    KAFKA,
    REPO,
    Busy,
    Events,
    capture_template,
    chunks,
    cpu_seconds,
    daemon_metric,
    delete_topic,
    mysql,
    peak_rss_mb,
    pin_protocol,
    produce_events,
    search_client,
    unique,
    unpin,
)
from indexer.core.documents import DocumentBuilder
from indexer.core.mappings import validate_definition
from indexer.core.streams import Stream
from indexer.run.daemon import DECODE_SLICE
from indexer.settings import (
    DEFAULT_BATCH_EVENTS,
    DEFAULT_IN_FLIGHT,
    KafkaSettings,
    TableConfig,
    VersionSource,
)
from indexer.source.kafka.consumer import KafkaSource

BULK_DOCS = DEFAULT_BATCH_EVENTS
QUIET_S = 300  # the longest a timed phase waits, in seconds, for merges before it to end
IN_FLIGHT = DEFAULT_IN_FLIGHT  # as many bulks at once as indexer: a ceiling, not a handicap
SEARCH_POLL_S = 0.1  # a searched ceiling polls its count as often as bench.pipeline's bursts


def ceiling_bodies(events: Events, n: int) -> list[bytes]:
    """The daemon's own document bytes (``_indexer`` block included) for events 0..n-1 as
    bulk bodies for ``/<index>/_bulk``, built once for both ceiling measurements."""
    builder = DocumentBuilder(TableConfig("bench", "raw", "", "raw", "", VersionSource("binlog")))
    bodies = []
    for part in chunks(n, BULK_DOCS):
        lines = []
        for i in part:
            lines.append(orjson.dumps({"index": {"_id": str(i), "version": i + 1,
                                                 "version_type": "external"}}))
            lines.append(builder.write_for_row({"id": i}, events.document(i), i + 1).source)
        bodies.append(b"\n".join(lines) + b"\n")
    return bodies


async def raw_ceiling(bodies: list[bytes], n: int,
                      settings: dict[str, Any] | None = None,
                      preload: list[bytes] | None = None,
                      searched: dict[str, Any] | None = None) -> float:
    """docs/s of n documents' prebuilt NDJSON posted by a minimal aiohttp client, as many bulks in
    flight as indexer, into a fresh index with the mapping `indexer` gives it plus ``settings`` (the
    reindex's load settings), so Elasticsearch does the same work per document as for
    `indexer`. ``preload`` is posted first, untimed (and its merges waited for): with the same
    documents at lower versions, the timed bodies are updates, each replacing a document, as a
    stream of updates pays. With ``searched`` (a query the timed documents match), the time
    lasts until its count is n, polled from the first post as often as bench.pipeline polls a
    burst: searchable, and the refreshes that searching brings paid for, as a burst's are."""
    async with aiohttp.ClientSession(base_url=ES) as http:
        index = await _bench_index(http, settings)

        async def post(queue: Iterator[bytes]) -> None:
            for body in queue:
                async with http.post(f"/{index}/_bulk?filter_path=errors", data=body,
                                     headers={"Content-Type": "application/x-ndjson"}) as r:
                    answer = await r.json()
                    assert answer == {"errors": False}, answer

        if preload:
            loading = iter(preload)
            await asyncio.gather(*(post(loading) for _ in range(IN_FLIGHT)))
            # The load's merges end before the timed posts, as bench.pipeline's bursts wait.
            for _ in range(QUIET_S):
                async with http.get("/_nodes/stats/indices/merge") as r:
                    nodes = (await r.json())["nodes"].values()
                if not sum(node["indices"]["merges"]["current"] for node in nodes):
                    break
                await asyncio.sleep(1)

        async def searchable(query: dict[str, Any]) -> None:
            while True:
                async with http.post(f"/{index}/_count", json={"query": query}) as r:
                    if (await r.json())["count"] >= n:
                        return
                await asyncio.sleep(SEARCH_POLL_S)

        queue = iter(bodies)
        started = time.perf_counter()
        await asyncio.gather(*(post(queue) for _ in range(IN_FLIGHT)),
                             *([searchable(searched)] if searched else []))
        elapsed = time.perf_counter() - started
        await (await http.delete(f"/{index}")).read()
    return n / elapsed


async def _bench_index(http: aiohttp.ClientSession, settings: dict[str, Any] | None) -> str:
    index = unique("bench-raw").lower()
    definition = validate_definition(BENCH_MAPPING, index, Path("bench"))
    body = {"settings": {**definition.settings, **(settings or {})},
            "mappings": definition.mappings}
    await (await http.put(f"/{index}", json=body)).read()
    return index


async def io_floor(topic: str, n: int, bodies: list[bytes]) -> tuple[float, float]:
    """(docs/s, CPU µs per event) of indexer's I/O alone, in this process on the client core:
    its Kafka source and Elasticsearch client, its batch size and bulks in flight, offsets
    committed in order, but each batch's prebuilt body posted instead of decoding the events.
    What the client core has left beside this is what decoding may spend."""

    async def no_revoke_hook(revoked: set[Stream]) -> None:
        pass

    settings = KafkaSettings(bootstrap_servers=KAFKA, group_id=unique("bench-floor"))
    async with aiohttp.ClientSession(base_url=ES) as http:
        index = await _bench_index(http, None)
    slots = asyncio.Semaphore(IN_FLIGHT)
    posts: list[asyncio.Task[None]] = []
    try:
        async with search_client() as client, \
                KafkaSource(settings, [topic], no_revoke_hook) as source:

            async def post(body: bytes, offsets: dict[Stream, int],
                           previous: asyncio.Task[None] | None) -> None:
                try:
                    answer = await client.bulk(body, index=index, filter_path="errors")
                    assert answer == {"errors": False}, answer
                    if previous is not None:
                        await previous  # commits in order, as the daemon's
                    await source.commit(offsets)
                finally:
                    slots.release()

            seen, started, cpu = 0, 0.0, 0.0
            for body in bodies:
                offsets: dict[Stream, int] = {}
                batch_end = min(seen + BULK_DOCS, n)
                while seen < batch_end:
                    records = await source.fetch(min(DECODE_SLICE, batch_end - seen), 500)
                    if records and not started:
                        started, cpu = time.perf_counter(), time.process_time()
                    for stream, part in records.items():
                        seen += len(part)
                        offsets[stream] = part[-1].position + 1
                await slots.acquire()
                posts.append(asyncio.create_task(
                    post(body, offsets, posts[-1] if posts else None)))
            await asyncio.gather(*posts)
            elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    finally:
        async with aiohttp.ClientSession(base_url=ES) as http:
            await (await http.delete(f"/{index}")).read()
    return n / elapsed, used / n * 1e6


async def committed(admin: AIOKafkaAdminClient, group: str, topic: str) -> int:
    offsets = await admin.list_consumer_group_offsets(group)
    return sum(meta.offset for tp, meta in offsets.items() if tp.topic == topic)


def write_config(folder: Path, table: str, topic: str, schemas: bool,
                 metrics_port: int = 0, shaping: tuple[str, str] | None = None,
                 ) -> tuple[Path, str, str]:
    alias = unique("bench-daemon").lower().replace("_", "-")
    (folder / f"{alias}.json").write_bytes(orjson.dumps(BENCH_MAPPING))
    group = unique("bench-group")
    hints = "" if schemas else (
        'column_types = { price = "decimal(10,2)", updated_at = "datetime(6)" }\n')
    path = folder / "bench.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{KAFKA}"\ngroup_id = "{group}"\n'
        f'dead_letter_topic = "{unique("bench-dlq")}"\n'
        f'[elasticsearch]\nhosts = ["{ES}"]\nmappings_dir = "{folder}"\n'
        f"[metrics]\nport = {metrics_port}\n"
        f'[[tables]]\nname = "{DATABASE}.{table}"\ntopic = "{topic}"\nalias = "{alias}"\n'
        + hints
        + (f"{shaping[0]} = {orjson.dumps(shaping[1]).decode()}\n" if shaping else "")
    )
    return path, group, alias


@dataclass
class DaemonRun:
    rate: float  # docs/s
    rss_mb: float
    load: str  # how busy each process was
    cpu_us: float  # the daemon's CPU per event
    native: float  # share of the events the native per-batch path took


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run_daemon(table: str, topic: str, n: int, schemas: bool,
                     checkout: Path | None = None, shaping: tuple[str, str] | None = None,
                     ) -> DaemonRun:
    """`indexer run` draining the topic: this checkout's, or another's with its own .venv;
    with ``shaping`` (a table setting: where, transform or routing, and its value), shaped by it."""
    python = str(checkout / ".venv" / "bin" / "python") if checkout else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config, group, alias = write_config(Path(tmp), table, topic, schemas, port, shaping)
        proc = await asyncio.create_subprocess_exec(
            "taskset", "-c", CLIENT_CORE, python, "-m", "indexer", "run",
            "--config", str(config), "--log-level", "INFO", cwd=checkout or REPO,
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert proc.stderr is not None
        try:
            while b"indexer running" not in (line := await proc.stderr.readline()):
                if not line:
                    raise RuntimeError("indexer run exited before it started")
            started = time.perf_counter()
            busy, daemon_cpu = Busy("elasticsearch", "kafka"), cpu_seconds(proc.pid)
            drain = asyncio.create_task(_drain(proc.stderr))
            # One client for the whole poll: it shares the daemon's core.
            admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
            await admin.start()
            try:
                while await committed(admin, group, topic) < n:  # noqa: ASYNC110 - polls Kafka
                    await asyncio.sleep(0.05)
                elapsed = time.perf_counter() - started
            finally:
                await admin.close()
            used = cpu_seconds(proc.pid) - daemon_cpu
            # absent from a checkout without the native path: none taken
            native = (daemon_metric(port, "indexer_native_events_total") or 0.0) / n
            load = busy.report(indexer=used)
            rss = peak_rss_mb(proc.pid)  # taskset execs the daemon: same pid
            proc.terminate()
            await proc.wait()
            errors = await drain
            if errors:
                raise RuntimeError("daemon logged errors:\n" + "\n".join(errors[:5]))
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            async with aiohttp.ClientSession(base_url=ES) as http:
                await (await http.delete(f"/{alias}-v*")).read()
    return DaemonRun(n / elapsed, rss, load, used / n * 1e6, native)


async def _drain(stream: asyncio.StreamReader) -> list[str]:
    errors = []
    while line := await stream.readline():
        if b" ERROR " in line:
            errors.append(line.decode(errors="replace").rstrip())
    return errors


async def main(n: int, modes: list[bool], baseline: Path | None,
               shapes: Sequence[tuple[str, tuple[str, str]]] = ()) -> None:
    pin_protocol()
    try:
        db = mysql()
        table, events = await capture_template(db)
        fill_rows(db, table, n)
        for schemas in modes:
            topic = unique("bench-events")
            size = await produce_events(topic, events, n, schemas)
            bodies = ceiling_bodies(events, n)
            before = await raw_ceiling(bodies, n)
            run = await run_daemon(table, topic, n, schemas)
            base = (await run_daemon(table, topic, n, schemas, baseline)
                    if baseline else None)
            shaped = [(label, await run_daemon(table, topic, n, schemas, shaping=shaping))
                      for label, shaping in shapes]
            after = await raw_ceiling(bodies, n)
            floor, floor_cpu = await io_floor(topic, n, bodies)
            del bodies
            ceiling = max(before, after)  # the higher: a ceiling, and noisy here
            label = "with schemas" if schemas else "without schemas"
            print(f"{label:>16}: {n} events, {size / n:.0f} B/event | raw _bulk ceiling "
                  f"{before:,.0f} / {after:,.0f} docs/s | indexer run {run.rate:,.0f} docs/s | "
                  f"ratio {run.rate / ceiling:.2f} | daemon peak RSS {run.rss_mb:.0f} MB | CPU "
                  f"busy: {run.load}; indexer CPU {run.cpu_us:.1f} µs/event, "
                  f"{run.native:.0%} native | I/O alone {floor:,.0f} docs/s "
                  f"({floor / ceiling:.2f}) at {floor_cpu:.1f} µs/event",
                  flush=True)
            if base is not None:
                print(f"{'baseline':>16}: {baseline} | indexer run {base.rate:,.0f} docs/s | "
                      f"ratio {base.rate / ceiling:.2f} | CPU busy: {base.load}; indexer CPU "
                      f"{base.cpu_us:.1f} µs/event | this checkout / baseline: "
                      f"{run.cpu_us / base.cpu_us:.3f} of the CPU per event", flush=True)
            for label, other in shaped:
                setting, value = dict(shapes)[label]
                print(f"{label:>16}: {setting} {value} | indexer run {other.rate:,.0f} "
                      f"events/s | CPU busy: {other.load}; indexer CPU {other.cpu_us:.1f} "
                      f"µs/event, {other.native:.0%} native | / unshaped: "
                      f"{other.cpu_us / run.cpu_us:.3f} of the CPU per event, "
                      f"{other.rate / run.rate:.2f}x the events/s", flush=True)
            await delete_topic(topic)
        with db.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")
    finally:
        unpin()


def fill_rows(db: Any, table: str, n: int) -> None:
    """The rows the events describe, in MySQL too (binlog off: Debezium must not stream them),
    so that the daemon's continuous verification finds the index equal to the table, as in
    production, and costs what it costs there."""
    with db.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM `{table}`")
        for start in range(0, n, 1_000_000):
            cur.execute(f"INSERT INTO `{table}` SELECT seq, CONCAT('product ', seq), "
                        "(100 + seq MOD 100000) / 100, seq MOD 1000, "
                        f"TIMESTAMPADD(MICROSECOND, seq, '{BASE}') "
                        f"FROM seq_{start}_to_{min(start + 999_999, n - 1)}")
        cur.execute("SET SESSION sql_log_bin = 1")


def parse(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--schemas", choices=["both", "with", "without"], default="both")
    parser.add_argument("--baseline", type=Path, help="another checkout (with its own .venv) "
                        "whose daemon runs over the same events right after this one's")
    parser.add_argument("--where", action="append", default=[], metavar="LABEL=CONDITION",
                        type=_shaping("where"), help="after the plain run, the daemon again "
                        "over the same events with this table where (e.g. few='qty < 100': a "
                        "tenth kept)")
    parser.add_argument("--transform", action="append", default=[], metavar="LABEL=FUNCTION",
                        type=_shaping("transform"), help="the same with this table transform "
                        "(e.g. same=bench.shaping:unchanged)")
    parser.add_argument("--routing", action="append", default=[], metavar="LABEL=COLUMN",
                        type=_shaping("routing"), help="the same with this table routing "
                        "(e.g. by-qty=qty)")
    return parser.parse_args(argv)


def _shaping(setting: str) -> Callable[[str], tuple[str, tuple[str, str]]]:
    def parse_one(text: str) -> tuple[str, tuple[str, str]]:
        label, sep, value = text.partition("=")
        if not sep or not label or not value:
            raise argparse.ArgumentTypeError(f"expected LABEL=VALUE, got {text!r}")
        return label, (setting, value)
    return parse_one


if __name__ == "__main__":
    args = parse()
    modes = {"both": [True, False], "with": [True], "without": [False]}[args.schemas]
    asyncio.run(main(args.events, modes, args.baseline,
                     [*args.where, *args.transform, *args.routing]))
