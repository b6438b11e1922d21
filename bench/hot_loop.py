"""CPU per event of the per-event path alone: compiled, pure Python, native, in one run.

    .venv/bin/python -m bench.hot_loop --events 200000 [--baseline <checkout>]

N events in the real connector's format (synthesised from an event the running Debezium
connector produced, as in bench.daemon), with and without schemas, go through what the
daemon does to each record before the bulk: decode the envelope, build the write (document,
``_indexer`` block, id, version) and its action line. Each build runs in a child process of
its own over the same events, the builds taking turns ``--rounds`` times; the median CPU
time per event of each is printed, and the ratio. Builds: this checkout as installed
(compiled when it could be), the same sources without their compiled modules (pure Python),
and with ``--baseline`` another checkout (a ``git worktree`` with its own ``.venv``). When
the native per-batch path is built, each build of this checkout also runs it ("+ native"):
slices of the daemon's size through ``indexer.core.native``, then the write and action line
from each result as the daemon makes them (the compiled or pure Python bookkeeping around the
native module: whether mypyc still earns its place beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.common import REPO, capture_template, mysql

# Runs in the child: the package is whichever the child's sys.path finds first.
CHILD = """
import pickle, sys, time
try:
    from indexer.settings import ConnectorSettings, TableConfig, VersionSource
    from indexer.core.documents import DocumentBuilder
    from indexer.core.events import EnvelopeDecoder
    from indexer.core.bulk import action_line
except ImportError:  # a checkout from before the layers (indexer.core, indexer.settings)
    from indexer.config import ConnectorSettings, TableConfig, VersionSource
    from indexer.documents import DocumentBuilder
    from indexer.events import EnvelopeDecoder
    from indexer.bulk import action_line
try:
    from indexer.build import current_build
    build = current_build().describe
except ImportError:
    build = "before indexer.build"
messages = pickle.load(open(sys.argv[1], "rb"))
decoder = EnvelopeDecoder(ConnectorSettings(), {"price": "decimal(10,2)",
                                                "updated_at": "datetime(6)"})
builder = DocumentBuilder(TableConfig("bench", "t", "t", "t", "t.json", VersionSource("binlog")))
parts = []
if sys.argv[2] == "native":
    from indexer.build import load_native
    from indexer.core import native
    from indexer.core.documents import Write, pack_binlog_version
    from indexer.run.daemon import DECODE_SLICE
    module = load_native()
    assert module is not None, "no native module"
    build += " + native"
    preparer = native.SlicePreparer(module)
    decoder.decode(*messages[0])  # the layout accepted, as by the daemon's first message
    started = time.process_time()
    for start in range(0, len(messages), DECODE_SLICE):
        taken = messages[start:start + DECODE_SLICE]
        found = preparer.prepare(native.slice_plan(decoder, builder), [k for k, _ in taken],
                                 [v for _, v in taken])
        for (key, value), p in zip(taken, found):
            if p is None:
                write = builder.write_for_change(decoder.decode(key, value))
            else:
                write = Write(p.id, pack_binlog_version(p.file, p.pos, p.row), p.document,
                              deleted=False)
            parts += (action_line("t-v1", write), write.source)
        if len(parts) >= 8000:
            body = b"\\n".join(parts)
            parts = []
else:
    started = time.process_time()
    for key, value in messages:
        change = decoder.decode(key, value)
        write = builder.write_for_change(change)
        parts += (action_line("t-v1", write), write.source)
        if len(parts) >= 8000:
            body = b"\\n".join(parts)
            parts = []
elapsed = time.process_time() - started
print(elapsed / len(messages) * 1e6, build)
"""


def pure_copy(into: Path) -> Path:
    """This checkout's package without its compiled modules."""
    with tarfile.open(into / "pkg.tar", "w") as tar:
        tar.add(REPO / "indexer", "indexer",
                filter=lambda info: None if info.name.endswith(".so") else info)
    with tarfile.open(into / "pkg.tar") as tar:
        tar.extractall(into / "pure", filter="data")
    return into / "pure"


def child(python: str, path: Path, events: Path, script: Path, mode: str) -> tuple[float, str]:
    out = subprocess.run([python, str(script), str(events), mode], cwd=path, check=True,
                         capture_output=True, text=True,
                         env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"}).stdout
    micros, build = out.strip().split(" ", 1)
    return float(micros), build


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout with its own .venv")
    args = parser.parse_args()
    db = mysql()
    _, events = await capture_template(db)
    db.close()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "child.py"
        script.write_text(CHILD)
        pure = pure_copy(work)
        builds = {"installed": (sys.executable, REPO, "python"),
                  "pure": (sys.executable, pure, "python")}
        built_native = [path for path in (REPO / "indexer").glob("_native.*")
                        if path.suffix == ".so"]
        if built_native:  # the native module beside both builds of the rest
            shutil.copy(built_native[0], pure / "indexer")
            builds["installed+native"] = (sys.executable, REPO, "native")
            builds["pure+native"] = (sys.executable, pure, "native")
        if args.baseline:
            builds["baseline"] = (str(args.baseline / ".venv/bin/python"), args.baseline,
                                  "python")
        for schemas in (True, False):
            data = work / f"events-{schemas}.pickle"
            with data.open("wb") as f:
                pickle.dump([events.message(i, schemas) for i in range(args.events)], f)
            runs: dict[str, list[float]] = {name: [] for name in builds}
            described: dict[str, str] = {}
            for _ in range(args.rounds):
                for name, (python, path, mode) in builds.items():
                    micros, described[name] = child(python, path, data, script, mode)
                    runs[name].append(micros)
            label = "with schemas" if schemas else "without schemas"
            installed = statistics.median(runs["installed"])
            for name, samples in runs.items():
                median = statistics.median(samples)
                print(f"{label:16} {name:16} {median:6.2f} µs/event (runs "
                      f"{', '.join(f'{s:.2f}' for s in samples)}) ratio to installed "
                      f"{median / installed:.3f}  [{described[name]}]")


if __name__ == "__main__":
    asyncio.run(main())
