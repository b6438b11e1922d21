"""Which build of the per-event path is running: modules compiled by mypyc, or pure Python,
and the native per-batch path (``indexer._native``, built from ``native/``) or not.

``setup.py`` compiles the modules it lists when the machine can; a compiled module is an
extension module beside its ``.py``, which Python imports first. An extension older than its
source is stale: an edit to the source is not what runs until the package is built again.
"""

from __future__ import annotations

import importlib
import importlib.machinery
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from types import ModuleType

# The modules every event goes through (envelope decoding, value encodings, checksums,
# documents and versions, bulk lines, joined documents' assembly, the binlog's rows and their
# per-change bookkeeping, and the daemon's per-message bookkeeping, source following and bulk
# settling): setup.py compiles these when it can.
HOT_PATH = ("indexer.core.values", "indexer.core.checksums", "indexer.core.events",
            "indexer.core.documents", "indexer.core.versions", "indexer.core.sources",
            "indexer.core.bulk", "indexer.core.trees", "indexer.run.follower",
            "indexer.run.daemon", "indexer.search.sink", "indexer.core.writes",
            "indexer.core.binlog_events", "indexer.core.binlog_rows",
            "indexer.core.binlog_changes", "indexer.core.mysql_json", "indexer.core.streams",
            "indexer.core.binlog_outstanding")
# The native per-batch path (native/), built by setup.py when cargo is there.
NATIVE_MODULE = "indexer._native"


@dataclass(frozen=True)
class Build:
    version: str
    compiled: tuple[str, ...]  # hot-path modules running as extension modules
    stale: tuple[str, ...]  # ... of which the source was changed after the build
    native: bool = False  # the native per-batch path is there

    @property
    def describe(self) -> str:
        if not self.compiled:
            what = "pure Python"
        elif len(self.compiled) == len(HOT_PATH):
            what = "compiled with mypyc"
        else:
            what = f"partly compiled with mypyc: {', '.join(self.compiled)}"
        if self.native:
            what += " + native per-batch path"
        if self.stale:
            what += (f"; STALE, older than their source: {', '.join(self.stale)} "
                     "(run dev/venv.sh or pip install again)")
        return f"indexer {self.version} ({what})"


def is_compiled(module_name: str) -> bool:
    origin = importlib.import_module(module_name).__file__ or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def built_files(module_name: str) -> tuple[Path, list[Path]]:
    """A hot-path module's source and the extension modules built from it: its own (a thin
    shim) and the group's shared library, which holds the code. Found from the package's
    folder: a compiled module's ``__file__`` does not always name where it was loaded from."""
    package = Path(__file__).parent
    source = package.joinpath(*module_name.split(".")[1:]).with_suffix(".py")
    built = [source.with_suffix(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    built += package.glob("*__mypyc.*")
    return source, [path for path in built if path.exists()]


def native_files() -> tuple[list[Path], Path | None]:
    """The native module's sources (in a checkout; none in an installed wheel) and the
    extension module built from them."""
    package = Path(__file__).parent
    sources = sorted((package.parent / "native").glob("src/*.rs"))
    built = [package / f"_native{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    return sources, next((path for path in built if path.exists()), None)


def current_build() -> Build:
    compiled, stale = [], []
    # Only a checkout (an editable install) can be edited behind its build: an installed
    # wheel's files carry the times they were unpacked at, in no useful order.
    checkout = (Path(__file__).parent.parent / "pyproject.toml").is_file()
    for name in HOT_PATH:
        if not is_compiled(name):
            continue
        compiled.append(name)
        source, built = built_files(name)
        if checkout and (not built or source.stat().st_mtime > max(
                path.stat().st_mtime for path in built)):
            stale.append(name)
    sources, native = native_files()
    if checkout and native is not None and sources and (
            max(path.stat().st_mtime for path in sources) > native.stat().st_mtime):
        stale.append(NATIVE_MODULE)
    try:
        version = package_version("indexer")
    except PackageNotFoundError:  # run from a checkout that was never installed
        version = "unknown"
    return Build(version, tuple(compiled), tuple(stale), load_native() is not None)


def load_native() -> ModuleType | None:
    """The native module, or None when this build has none (pure Python, no cargo) or it
    does not load."""
    try:
        module = importlib.import_module(NATIVE_MODULE)
    except ImportError:
        return None
    # An editable install's finder serves a module this package lacks from the checkout it
    # was installed from: a copy of the sources without one must not use that checkout's.
    here = Path(__file__).resolve().parent
    return module if Path(module.__file__ or "").resolve().parent == here else None
