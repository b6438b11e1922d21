"""Soak: a randomized fault schedule under a steady writer, ended by a field-by-field
comparison of MySQL and the index that does not use indexer's own reconcile.

    .venv/bin/python -m bench.soak --minutes 20 [--seed 7] [--rate 150] \
        [--overlap] [--faults ...,connect-blind] [--debezium 3.6.1.Final] [--no-canary] \
        [--verify-period 120] [--repair]

On the dev stack (`dev/stack.sh up`). A writer thread commits ``--rate`` transactions a
second (inserts, updates and deletes of one table) and keeps a log of what it committed;
`indexer run` streams the table (a child process, restarted after each kill); every
``--check-every`` seconds `indexer check` is run and its verdict kept. Meanwhile faults at
random gaps, one at a time or (``--overlap``) each at its time: MariaDB restarted or killed
with -9, Kafka Connect restarted or killed with -9, Kafka or the search server restarted,
`indexer run` killed with -9 or stopped; and, only when named in ``--faults``, connect-blind:
the connector pointed at a database nobody writes for a while, the loss seen upstream.

At the end the writer stops and the harness
- reads the table's whole topic and finds every committed change that never reached Kafka
  (each insert and update writes its sequence number into the row, each row is deleted at
  most once), grouped into loss windows;
- says, for each window, when `indexer check` first reported the canary missing;
- compares MySQL's rows with the documents field by field (its own queries, no reconcile),
  again every 15 s until they match or ``--settle`` seconds pass (with ``--repair``, that is
  the continuous verification's work).

Everything is written to ``bench/results/soak-<time>/``: summary.json, the daemon's log,
check's verdicts, the fault schedule. The Connect log stays in .stack/connect.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pymysql
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from bench.common import DATABASE, ES, KAFKA, MYSQL_PORT, REPO, STACK, unique

CONNECT_URL = f"http://127.0.0.1:{os.environ.get('CONNECT_PORT', '8083')}"
TOPIC_PREFIX = "mysql"
STACK_SH = str(REPO / "dev" / "stack.sh")
# Loss separated by less than this is one window.
WINDOW_GAP_S = 5.0
# A check that reports the canary this long after a window began has met the goal.
REPORT_GOAL_S = 60.0
COMPARE_EVERY_S = 15.0
COLUMNS = ("id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT NOT NULL, "
           "price DECIMAL(10,2) NOT NULL, updated_at DATETIME(6) NOT NULL "
           "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), KEY (updated_at)")
MAPPING = {"settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}},
           "mappings": {"dynamic": False, "properties": {
               "id": {"type": "long"}, "name": {"type": "keyword"},
               "qty": {"type": "integer"}, "price": {"type": "keyword"},
               "updated_at": {"type": "date"}}}}
FAULTS = ("mariadb-restart", "mariadb-kill", "connect-restart", "connect-kill",
          "kafka-restart", "search-restart", "indexer-kill", "indexer-stop")
# Not in the default schedule (--faults ...,connect-blind): the failure seen upstream, made on
# purpose. The connector is pointed at a database nobody writes for 45-90 s, then back: it
# reads the binlog, sends heartbeats, emits no row change and commits offsets past them all.
BLIND = "connect-blind"
BLIND_DATABASE = "indexer_soak_blind"
CONNECTOR = os.environ.get("CONNECTOR_NAME", "indexer-mariadb")


def log(text: str) -> None:
    print(f"[soak {datetime.now(UTC).strftime('%H:%M:%S')}] {text}", flush=True)


# --- the writer ------------------------------------------------------------------------------

@dataclass
class Committed:
    seq: int
    at: float
    op: str  # c, u or d
    id: int


class Writer:
    """Commits ``rate`` transactions a second, one row change each, through MariaDB restarts.
    A change whose commit was not confirmed (the connection broke) is left out of the log:
    the final comparison reads MySQL itself."""

    def __init__(self, table: str, rate: float, seed: int) -> None:
        self.table = table
        self.rate = rate
        self.log: list[Committed] = []
        self.errors = 0
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        live: list[int] = []
        next_id, seq = 1, 0
        started = time.perf_counter()
        db: pymysql.connections.Connection[Any] | None = None
        while not self._stop.is_set():
            delay = started + seq / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            seq += 1
            roll = self._random.random()
            if roll < 0.4 or len(live) < 100:
                op, row_id = "c", next_id
            elif roll < 0.85:
                op, row_id = "u", self._random.choice(live)
            else:
                op, row_id = "d", live.pop(self._random.randrange(len(live)))
            try:
                if db is None:
                    db = _connect()
                with db.cursor() as cur:
                    if op == "c":
                        cur.execute(f"INSERT INTO `{self.table}` (id, name, qty, price) "
                                    "VALUES (%s, %s, %s, %s)",
                                    (row_id, f"w{seq}", seq % 1000, Decimal(seq % 10_000) / 100))
                        next_id += 1
                        live.append(row_id)
                    elif op == "u":
                        cur.execute(f"UPDATE `{self.table}` SET name = %s, qty = qty + 1 "
                                    "WHERE id = %s", (f"w{seq}", row_id))
                    else:
                        cur.execute(f"DELETE FROM `{self.table}` WHERE id = %s", (row_id,))
                self.log.append(Committed(seq, time.time(), op, row_id))
            except pymysql.err.MySQLError:
                self.errors += 1
                if op == "c":
                    next_id += 1  # it may have committed: never reuse the id
                if db is not None:
                    with contextlib.suppress(Exception):
                        db.close()
                db = None
                time.sleep(0.2)
        if db is not None:
            db.close()


def _connect() -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=MYSQL_PORT, user="indexer", password="indexer",
                           database=DATABASE, autocommit=True, connect_timeout=2,
                           read_timeout=10, write_timeout=10)


# --- the daemon and the faults ---------------------------------------------------------------

def python_of(checkout: Path | None) -> tuple[str, Path]:
    """The Python that runs `indexer` (this checkout's, or another's with its own .venv)."""
    return ((str(checkout / ".venv" / "bin" / "python"), checkout) if checkout
            else (sys.executable, REPO))


class DaemonProcess:
    """`indexer run` as a child process whose output goes to one log file; never two at once
    (faults run in threads side by side, and each may start it again)."""

    def __init__(self, config: Path, log_file: Path, checkout: Path | None) -> None:
        self.config = config
        self.log_file = log_file
        self.python, self.cwd = python_of(checkout)
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Starts the daemon unless it runs."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return
            if self.proc is not None and self.proc.returncode not in (0, -9):
                log(f"indexer run had exited ({self.proc.returncode}); starting it again")
            with self.log_file.open("ab") as out:
                self.proc = subprocess.Popen(
                    [self.python, "-m", "indexer", "run", "--config", str(self.config)],
                    cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT)

    def signal(self, sig: signal.Signals, wait_s: float = 40) -> None:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                return
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stack(*args: str, env: dict[str, str]) -> None:
    subprocess.run([STACK_SH, *args], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def kill9(server: str) -> None:
    """kill -9 of a stack server and the processes under its wrapper."""
    folder = "elasticsearch" if server == "elasticsearch" else server
    pid = int((STACK / folder / f"{server}.pid").read_text())
    subprocess.run(["pkill", "-KILL", "-P", str(pid)], check=False)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def server_of(fault: str) -> str:
    return fault.split("-")[0]


@dataclass
class Fault:
    name: str
    started: float
    ended: float = 0.0


def inject(name: str, daemon: DaemonProcess, env: dict[str, str], rng: random.Random) -> None:
    if name == "mariadb-restart":
        stack("down", "mariadb", env=env)
        stack("up", "mariadb", env=env)
    elif name == "mariadb-kill":
        kill9("mariadb")
        stack("up", "mariadb", env=env)
    elif name == "connect-restart":
        stack("down", "connect", env=env)
        stack("up", "connect", env=env)
    elif name == "connect-kill":
        kill9("connect")
        stack("up", "connect", env=env)
    elif name == "kafka-restart":
        stack("down", "kafka", env=env)
        stack("up", "kafka", env=env)
    elif name == "search-restart":
        stack("down", "elasticsearch", env=env)
        stack("up", "elasticsearch", env=env)
    elif name == "indexer-kill":
        daemon.signal(signal.SIGKILL)
        time.sleep(rng.uniform(0, 10))
        daemon.start()
    elif name == "indexer-stop":
        daemon.signal(signal.SIGTERM)
        time.sleep(rng.uniform(0, 10))
        daemon.start()
    elif name == BLIND:
        config = connect_rest("GET", f"/connectors/{CONNECTOR}/config")
        put_config({**config, "database.include.list": BLIND_DATABASE})
        try:
            time.sleep(rng.uniform(45, 90))
        finally:
            put_config(config)
    else:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join((*FAULTS, BLIND))}")


def put_config(config: dict[str, Any], within_s: float = 180) -> None:
    """Connect validates a configuration against MySQL: while it (or Connect itself) is away
    by another fault, the call is refused, and tried again."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            connect_rest("PUT", f"/connectors/{CONNECTOR}/config", config)
            return
        except OSError:  # refused (400 while MySQL is down) or no answer at all
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def connect_rest(method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(f"{CONNECT_URL}{path}", method=method,
                                     data=orjson.dumps(body) if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
    return orjson.loads(text) if text else None


# --- watching Debezium's offsets -------------------------------------------------------------

OFFSET = re.compile(rb'\{"ts_sec":[^}]*\}')


async def watch_offsets(out: Path, stop: asyncio.Event) -> None:
    """Debezium's committed source offset (file, pos, gtids, events and rows to skip on a
    restart), each second, from Connect's standalone offset file: what the connector would
    resume from at each moment."""
    last = b""
    with out.open("ab") as log:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                found = OFFSET.findall((STACK / "connect" / "offsets.dat").read_bytes())
                if found and found[-1] != last:
                    last = found[-1]
                    log.write(b'{"at":%.3f,"offset":%b}\n' % (time.time(), last))
                    log.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


# --- watching `indexer check` ----------------------------------------------------------------

@dataclass
class Verdict:
    at: float
    healthy: bool
    lines: list[str]

    @property
    def upstream_loss(self) -> bool:
        return any("changes are being lost upstream" in line for line in self.lines)

    @property
    def canary(self) -> bool:
        return any("canary" in line for line in self.lines)


async def watch_check(config: Path, every_s: float, checkout: Path | None,
                      verdicts: list[Verdict], stop: asyncio.Event) -> None:
    python, cwd = python_of(checkout)
    while not stop.is_set():
        at = time.time()
        proc = await asyncio.create_subprocess_exec(
            python, "-m", "indexer", "check", "--config", str(config),
            "--log-level", "ERROR", cwd=cwd, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        lines = [line for line in out.decode(errors="replace").splitlines()
                 if line.startswith("unhealthy:") or line.startswith("error:")]
        verdicts.append(Verdict(at, proc.returncode == 0, lines))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, at + every_s - time.time()))


# --- what reached Kafka ----------------------------------------------------------------------

async def topic_changes(topic: str) -> tuple[set[int], set[int]]:
    """(sequence numbers of the inserts and updates in the topic, ids deleted in it)."""
    seqs: set[int] = set()
    deleted: set[int] = set()
    consumer = AIOKafkaConsumer(bootstrap_servers=KAFKA, enable_auto_commit=False,
                                group_id=None, isolation_level="read_committed")
    await consumer.start()
    await asyncio.sleep(0)  # aiokafka's stop() raises if its group-less task never ran
    admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        tps = [TopicPartition(topic, int(p["partition"])) for p in described["partitions"]]
        if not tps:
            return seqs, deleted
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        async def unread() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        while await unread():
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    if record.value is None:
                        continue
                    payload = orjson.loads(record.value).get("payload") or {}
                    after, before = payload.get("after"), payload.get("before")
                    if payload.get("op") in ("c", "u", "r") and after:
                        name = str(after.get("name", ""))
                        if name.startswith("w"):
                            seqs.add(int(name[1:]))
                    elif payload.get("op") == "d" and before:
                        deleted.add(int(before["id"]))
    finally:
        await admin.close()
        await consumer.stop()
    return seqs, deleted


@dataclass
class Window:
    start: float
    end: float
    lost: int
    reported_after_s: float | None = None  # first canary report by `indexer check`
    reported_as_upstream: bool = False


def lost_changes(committed: list[Committed], seqs: set[int],
                 deleted: set[int]) -> list[Committed]:
    """The committed changes that are not in the topic."""
    return [c for c in committed
            if (c.op == "d" and c.id not in deleted) or (c.op != "d" and c.seq not in seqs)]


def loss_windows(committed: list[Committed], seqs: set[int], deleted: set[int]) -> list[Window]:
    windows: list[Window] = []
    for at in sorted(c.at for c in lost_changes(committed, seqs, deleted)):
        if windows and at - windows[-1].end <= WINDOW_GAP_S:
            windows[-1].end = at
            windows[-1].lost += 1
        else:
            windows.append(Window(at, at, 1))
    return windows


def attribute_reports(windows: list[Window], verdicts: list[Verdict]) -> None:
    for window in windows:
        for verdict in verdicts:
            if verdict.at >= window.start and verdict.canary:
                window.reported_after_s = round(verdict.at - window.start, 1)
                window.reported_as_upstream = verdict.upstream_loss
                break


# --- MySQL against the index, field by field -------------------------------------------------

def mysql_documents(table: str) -> dict[str, dict[str, Any]]:
    """Each row as the document it should be: the canonical values, computed here."""
    db = _connect()
    try:
        with db.cursor() as cur:
            cur.execute(f"SELECT id, name, qty, price, updated_at FROM `{table}`")
            rows = cur.fetchall()
    finally:
        db.close()
    return {str(r[0]): {"id": r[0], "name": r[1], "qty": r[2], "price": f"{r[3]:.2f}",
                        "updated_at": r[4].isoformat(timespec="microseconds")} for r in rows}


async def index_documents(alias: str) -> dict[str, dict[str, Any]]:
    """Every document the read alias shows (tombstones are filtered by it), by scroll."""
    found: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession(base_url=ES) as http:
        await (await http.post(f"/{alias}-sync/_refresh")).read()
        async with http.post(f"/{alias}/_search", params={"scroll": "1m"},
                             json={"size": 5000, "query": {"match_all": {}}}) as answer:
            page = await answer.json()
        while hits := page["hits"]["hits"]:
            for hit in hits:
                source = hit["_source"]
                source.pop("_indexer", None)
                found[hit["_id"]] = source
            async with http.post("/_search/scroll", json={"scroll": "1m",
                                 "scroll_id": page["_scroll_id"]}) as answer:
                page = await answer.json()
        await (await http.delete("/_search/scroll", json={"scroll_id": page["_scroll_id"]})).read()
    return found


@dataclass
class Comparison:
    at: float
    rows: int
    documents: int
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    stale_fields: dict[str, int] = field(default_factory=dict)  # field -> rows differing

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.stale)

    def line(self) -> str:
        fields = ", ".join(f"{k} {n}" for k, n in sorted(self.stale_fields.items())) or "-"
        return (f"{self.rows:,} rows, {self.documents:,} documents: missing "
                f"{len(self.missing):,}, extra {len(self.extra):,}, stale {len(self.stale):,} "
                f"(fields: {fields})")


async def compare(table: str, alias: str) -> Comparison:
    rows = await asyncio.to_thread(mysql_documents, table)
    docs = await index_documents(alias)
    result = Comparison(time.time(), len(rows), len(docs))
    for doc_id, row in rows.items():
        doc = docs.get(doc_id)
        if doc is None:
            result.missing.append(doc_id)
            continue
        differing = [name for name in row.keys() | doc.keys() if row.get(name) != doc.get(name)]
        if differing:
            result.stale.append(doc_id)
            for name in differing:
                result.stale_fields[name] = result.stale_fields.get(name, 0) + 1
    result.extra = [doc_id for doc_id in docs if doc_id not in rows]
    return result


# --- the run ---------------------------------------------------------------------------------

def write_config(folder: Path, table: str, alias: str, args: argparse.Namespace) -> Path:
    (folder / f"{alias}.json").write_bytes(orjson.dumps(MAPPING))
    text = (f'[kafka]\nbootstrap_servers = "{KAFKA}"\ngroup_id = "{unique("soak-group")}"\n'
            f'dead_letter_topic = "{unique("soak-dlq")}"\n'
            f'[elasticsearch]\nhosts = ["{ES}"]\nmappings_dir = "{folder}"\n'
            f'[mysql]\nport = {MYSQL_PORT}\n'
            f'[connect]\nurl = "{CONNECT_URL}"\n'
            f'[metrics]\nport = {args.metrics.port}\n')
    if args.canary:
        text += f"[canary]\ninterval_s = {args.canary_interval}\nmax_age_s = {args.canary_age}\n"
    else:
        text += "[canary]\nenabled = false\n"
    if args.verify_period:
        text += (f"[verify]\nperiod_s = {args.verify_period}\n"
                 f"repair = {'true' if args.repair else 'false'}\n")
    elif args.verify_period == 0:
        text += "[verify]\nenabled = false\n"
    text += f'[[tables]]\nname = "{DATABASE}.{table}"\nalias = "{alias}"\n'
    path = folder / "soak.toml"
    path.write_text(text)
    return path


@contextlib.asynccontextmanager
async def soak_table() -> AsyncIterator[tuple[str, str]]:
    table = unique("soak")
    alias = table.replace("_", "-")
    db = _connect()
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` ({COLUMNS})")
    db.close()
    yield table, alias


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out = REPO / "bench" / "results" / f"soak-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True)
    env = dict(os.environ)
    if args.debezium:
        env["DEBEZIUM_VERSION"] = args.debezium
        log(f"Kafka Connect with Debezium {args.debezium}")
        stack("down", "connect", env=env)
        stack("up", "connect", env=env)
    rng = random.Random(args.seed)
    connect_log = STACK / "connect" / "connect.log"
    connect_from = connect_log.stat().st_size if connect_log.exists() else 0
    async with soak_table() as (table, alias):
        config = write_config(out, table, alias, args)
        daemon = DaemonProcess(config, out / "indexer.log", args.checkout)
        daemon.start()
        writer = Writer(table, args.rate, args.seed)
        writer.start()
        verdicts: list[Verdict] = []
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(watch_check(config, args.check_every, args.checkout,
                                                 verdicts, stop_checks))
        offsets = asyncio.create_task(watch_offsets(out / "debezium-offsets.jsonl", stop_checks))
        faults: list[Fault] = []
        started = time.time()
        deadline = started + args.minutes * 60
        names = args.faults.split(",") if args.faults else list(FAULTS)
        log(f"table {table}, {args.rate:g} transactions/s, {args.minutes:g} min, faults "
            f"{', '.join(names)}; results in {out}")
        await asyncio.sleep(args.warmup)
        running: dict[str, asyncio.Task[None]] = {}  # server -> its fault under way

        async def one(fault: Fault) -> None:
            try:
                await asyncio.to_thread(inject, fault.name, daemon, env, rng)
            except subprocess.CalledProcessError as exc:
                log(f"fault {fault.name}: {exc}; bringing the stack back")
                await asyncio.to_thread(stack, "up", env=env)
            fault.ended = time.time()
            daemon.start()

        while time.time() < deadline:
            # --overlap: a fault starts while others are still under way (a server down while
            # another restarts), never two on one server at once.
            idle = [n for n in names if server_of(n) not in running]
            if idle:
                fault = Fault(rng.choice(idle), time.time())
                faults.append(fault)
                log(f"fault {len(faults)}: {fault.name}")
                server = server_of(fault.name)
                running[server] = task = asyncio.create_task(one(fault))
                task.add_done_callback(lambda _, server=server: running.pop(server, None))  # type: ignore[misc]
                if not args.overlap:
                    await task
            await asyncio.sleep(min(max(0.0, deadline - time.time()),
                                    rng.uniform(args.gap_min, args.gap_max)))
        await asyncio.gather(*running.values())
        await asyncio.to_thread(stack, "up", env=env)
        daemon.start()
        last_fault = max((f.ended for f in faults), default=started)
        log(f"{len(faults)} faults; stopping the writer")
        await asyncio.to_thread(writer.stop)
        stopped = time.time()
        comparisons: list[Comparison] = []
        while True:
            await asyncio.sleep(COMPARE_EVERY_S)
            daemon.start()
            comparison = await compare(table, alias)
            comparisons.append(comparison)
            log(f"MySQL against the index, {comparison.at - stopped:.0f} s after the writer "
                f"stopped: {comparison.line()}")
            if comparison.equal or time.time() - stopped > args.settle:
                break
        stop_checks.set()
        await checks
        await offsets
        daemon.signal(signal.SIGTERM)
        seqs, deleted = await topic_changes(f"{TOPIC_PREFIX}.{DATABASE}.{table}")
        windows = loss_windows(writer.log, seqs, deleted)
        attribute_reports(windows, verdicts)
        final = comparisons[-1]
        summary = {
            "table": table, "alias": alias, "seed": args.seed, "rate": args.rate,
            "minutes": args.minutes, "overlap": args.overlap,
            "debezium": args.debezium or "as running",
            "checkout": str(args.checkout or REPO), "canary": args.canary,
            "verify_period_s": args.verify_period,
            "repair": args.repair, "committed": len(writer.log),
            "writer_errors": writer.errors, "faults": [asdict(f) for f in faults],
            "lost_changes": sum(w.lost for w in windows),
            "windows": [asdict(w) for w in windows],
            "final": {**asdict(final), "missing": len(final.missing),
                      "extra": len(final.extra), "stale": len(final.stale),
                      "missing_ids": final.missing[:20], "extra_ids": final.extra[:20],
                      "stale_ids": final.stale[:20]},
            "equal_after_writer_stopped_s": (round(final.at - stopped, 1) if final.equal
                                             else None),
            "equal_after_last_fault_s": round(final.at - last_fault, 1) if final.equal else None,
            "checks": len(verdicts), "unhealthy_checks": sum(not v.healthy for v in verdicts),
        }
        (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
        (out / "checks.json").write_bytes(orjson.dumps([asdict(v) for v in verdicts],
                                                       option=orjson.OPT_INDENT_2))
        (out / "committed.jsonl").write_bytes(b"".join(
            orjson.dumps(asdict(c)) + b"\n" for c in writer.log))
        (out / "lost.jsonl").write_bytes(b"".join(
            orjson.dumps(asdict(c)) + b"\n" for c in lost_changes(writer.log, seqs, deleted)))
        with connect_log.open("rb") as source:  # Debezium's side of the run
            source.seek(connect_from)
            (out / "connect.log").write_bytes(source.read())
    if args.debezium and not args.keep_connector:
        env.pop("DEBEZIUM_VERSION")
        stack("down", "connect", env=env)
        stack("up", "connect", env=env)
    report(summary, windows)
    return summary


def report(summary: dict[str, Any], windows: list[Window]) -> None:
    faults: dict[str, int] = {}
    for fault in summary["faults"]:
        faults[fault["name"]] = faults.get(fault["name"], 0) + 1
    log(f"{summary['committed']:,} changes committed, {len(summary['faults'])} faults "
        f"({', '.join(f'{n} {k}' for k, n in sorted(faults.items()))})")
    log(f"{summary['lost_changes']:,} changes never reached Kafka, in {len(windows)} windows")
    for w in windows:
        start = datetime.fromtimestamp(w.start, UTC).strftime("%H:%M:%S")
        seen = (f"reported by check after {w.reported_after_s:.0f} s"
                + (" as upstream loss" if w.reported_as_upstream else "")
                if w.reported_after_s is not None else "never reported by check")
        log(f"  {start} for {w.end - w.start:.0f} s: {w.lost:,} changes lost; {seen}")
    final = summary["final"]
    log(f"final: {final['rows']:,} rows, {final['documents']:,} documents, missing "
        f"{final['missing']:,}, extra {final['extra']:,}, stale {final['stale']:,}; equal "
        + (f"{summary['equal_after_last_fault_s']:.0f} s after the last fault"
           if summary["equal_after_last_fault_s"] is not None else "never"))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=150, help="transactions per second")
    parser.add_argument("--faults", help=f"comma-separated, of {', '.join(FAULTS)} (default all)")
    parser.add_argument("--gap-min", type=float, default=5, help="seconds between faults, min")
    parser.add_argument("--gap-max", type=float, default=35, help="seconds between faults, max")
    parser.add_argument("--warmup", type=float, default=30, help="seconds before the first fault")
    parser.add_argument("--overlap", action="store_true", help="start each fault at its time "
                        "even while others are under way (on other servers)")
    parser.add_argument("--check-every", type=float, default=10)
    parser.add_argument("--settle", type=float, default=300, help="seconds after the writer "
                        "stops to wait for the index to equal MySQL")
    parser.add_argument("--debezium", help="Debezium version for Kafka Connect (restarted with "
                        "it, then back to the stack's default unless --keep-connector)")
    parser.add_argument("--keep-connector", action="store_true")
    parser.add_argument("--checkout", type=Path, help="run another checkout's indexer (with its "
                        "own .venv), e.g. the previous main")
    parser.add_argument("--no-canary", dest="canary", action="store_false")
    parser.add_argument("--canary-interval", type=float, default=5)
    parser.add_argument("--canary-age", type=float, default=30)
    parser.add_argument("--verify-period", type=float, default=None,
                        help="continuous verification period (0: off; default: indexer's)")
    parser.add_argument("--repair", action="store_true", help="verification repairs drift")
    parser.add_argument("--metrics-port", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse(argv)))


if __name__ == "__main__":
    main()
