"""Compiles indexer's per-event path with mypyc, and builds the native per-batch path (Rust,
native/) when this machine can; pure Python otherwise.

The compiled modules are built from the very sources that stay in the package, so there is
one implementation: each ``.so`` sits beside its ``.py`` and Python imports it first. With no
C compiler (or no mypyc for this platform) the build warns and installs pure Python, which
behaves the same, only slower. The native module ``indexer._native`` is an accelerator beside
the Python reference (indexer.core.native): without cargo the build warns and leaves it out.
``INDEXER_PURE_PYTHON=1`` at install time skips both. ``indexer --version`` says what runs.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
# pip builds the package before it installs the dependencies, so mypyc's type check cannot
# see them: their types count as Any (compiled as generic operations), and the strict checks
# that Any would trip are left to CI's own mypy run, which sees everything.
TYPE_CHECK = ["--ignore-missing-imports", "--no-warn-return-any", "--no-warn-unused-ignores",
              "--allow-subclassing-any", "--allow-untyped-calls", "--allow-untyped-decorators",
              "--allow-any-generics"]


def hot_path() -> list[str]:
    """indexer.build.HOT_PATH, the one list of compiled modules, as source files (read from
    the module's text: the package cannot be imported before it is built)."""
    tree = ast.parse((HERE / "indexer" / "build.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "HOT_PATH" for t in node.targets):
            return [name.replace(".", "/") + ".py" for name in ast.literal_eval(node.value)]
    raise LookupError("indexer/build.py has no HOT_PATH")


def extensions() -> list[Any]:
    if os.environ.get("INDEXER_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify

        built = mypycify([*TYPE_CHECK, *hot_path()], opt_level="3",
                         group_name="indexer.hot_path")
    except (Exception, SystemExit) as exc:  # mypyc missing, or refusing
        print(f"indexer: not compiling ({exc!r}); installing pure Python", file=sys.stderr)
        return []
    for extension in built:
        extension.optional = True  # no C compiler: a warning, and the .py files are used
    return built


def rust_extensions() -> list[Any]:
    if os.environ.get("INDEXER_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from setuptools_rust import Binding, RustExtension
    except ImportError as exc:
        print(f"indexer: no native path ({exc!r})", file=sys.stderr)
        return []
    # optional: no Rust toolchain (or a failed build) is a warning, and Python does it all;
    # debug=False: an editable install (dev/venv.sh) would otherwise get a debug build, ~10x
    # slower than the Python it stands in for
    return [RustExtension("indexer._native", path="native/Cargo.toml", binding=Binding.PyO3,
                          optional=True, debug=False)]


if __name__ == "__main__":  # as pip runs it; dev/venv.sh imports hot_path() alone
    from setuptools import setup

    setup(ext_modules=extensions(), rust_extensions=rust_extensions())
