import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import indexer
from indexer.build import HOT_PATH, Build, built_files, current_build
from tests.unit import corpus

PACKAGE = Path(indexer.__file__).parent


def test_every_hot_path_module_exists_as_source() -> None:
    for name in HOT_PATH:
        assert (PACKAGE.parent / (name.replace(".", "/") + ".py")).is_file(), name
        importlib.import_module(name)


def test_the_build_says_what_runs() -> None:
    assert Build("1.0", (), ()).describe == "indexer 1.0 (pure Python)"
    assert Build("1.0", HOT_PATH, ()).describe == "indexer 1.0 (compiled with mypyc)"
    assert Build("1.0", HOT_PATH, (), native=True).describe == (
        "indexer 1.0 (compiled with mypyc + native per-batch path)")
    assert Build("1.0", (), (), native=True).describe == (
        "indexer 1.0 (pure Python + native per-batch path)")
    partly = Build("1.0", ("indexer.core.values",), ("indexer.core.values",)).describe
    assert "partly compiled with mypyc: indexer.core.values" in partly
    assert "STALE" in partly and "dev/venv.sh" in partly


def test_no_compiled_module_is_older_than_its_source() -> None:
    # An edited .py behind a compiled .so is not what runs: dev/venv.sh rebuilds.
    build = current_build()
    assert build.stale == ()
    for name in build.compiled:  # the check found what it compares
        source, built = built_files(name)
        assert source.is_file() and len(built) == 2, (name, source, built)


def test_compiled_and_pure_python_produce_the_same_bytes(tmp_path: Path) -> None:
    if not current_build().compiled:
        pytest.skip("pure Python build: nothing compiled to compare (dev/test.sh requires "
                    "the compiled build)")
    pure = tmp_path / "indexer"
    shutil.copytree(PACKAGE, pure, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    script = Path(corpus.__file__)
    check = subprocess.run(
        [sys.executable, "-c", "import indexer.core.events as e; print(e.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, check=True)
    assert check.stdout.decode().strip() == str(pure / "core" / "events.py")
    run = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                         capture_output=True, check=True)
    compiled = orjson.dumps(corpus.corpus())
    assert run.stdout == compiled
    assert len(compiled) > 20_000  # the corpus did decode and build something
