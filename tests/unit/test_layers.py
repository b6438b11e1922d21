"""The package's layers (README, "The package's layers"): imports run down, never up or
across between adapters, and the core imports no I/O library."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "indexer"

# Lower numbers sit lower; a module may import from its own rank or below. The adapters share
# a rank but not each other: a search-server module has no business with MySQL or Kafka.
RANKS = {
    "security": 0, "build": 0, "progress": 0, "errors": 0, "transforms": 0,
    "settings": 1, "logs": 1, "outages": 1, "retrying": 1,
    "config": 2, "join_config": 2, "condition_config": 2, "metrics": 2,
    "core": 3,
    "search": 4, "source": 4,
    "jobs": 5,
    "run": 6,
    "report": 7,
    "cli": 8,
    "__main__": 9,
}
IO_LIBRARIES = {"aiokafka", "aiohttp", "asyncio", "elastic_transport", "prometheus_client",
                "pymysql", "socket", "ssl", "subprocess"}
# The servers' client libraries: only the adapters (indexer/search, indexer/source) use them.
DRIVERS = {"aiokafka", "aiohttp", "elastic_transport", "pymysql"}


def room(module: str) -> str:
    """The layer of ``indexer.x.y``: its package, or the module itself at the top."""
    return module.split(".")[1]


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@functools.cache
def modules() -> dict[str, set[str]]:
    result = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name != "indexer":
            result[name] = imports(path)
    return result


def test_every_module_has_a_layer() -> None:
    assert {room(name) for name in modules()} <= set(RANKS)


def test_imports_run_down_and_not_across_the_adapters() -> None:
    wrong = []
    for name, imported in modules().items():
        here = room(name)
        for target in (t for t in imported if t.startswith("indexer.")):
            there = room(target)
            if RANKS[there] > RANKS[here] or (RANKS[there] == RANKS[here] and there != here
                                              and RANKS[here] == RANKS["search"]):
                wrong.append(f"{name} imports {target}")
    assert not wrong


@pytest.mark.parametrize("name", sorted(n for n in modules() if room(n) == "core"))
def test_the_core_does_no_io(name: str) -> None:
    roots = {target.split(".")[0] for target in modules()[name]}
    assert not roots & IO_LIBRARIES


@pytest.mark.parametrize("name", sorted(n for n in modules()
                                        if room(n) in ("run", "jobs", "report", "cli")))
def test_only_adapters_speak_to_the_servers_drivers(name: str) -> None:
    """`indexer run`'s wing (its wiring included: it names adapters, not drivers), the jobs
    and the CLI work with ports and adapters: a driver's types and errors stay inside."""
    roots = {target.split(".")[0] for target in modules()[name]}
    assert not roots & DRIVERS


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: {t for t in imported if t in known} for name, imported in known.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise AssertionError(" -> ".join((*path[path.index(name):], name)))
        if name in done:
            return
        for target in graph[name]:
            visit(target, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())
