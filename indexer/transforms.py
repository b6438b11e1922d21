"""A table's transform: the user's function from the document as projected to the document
indexed (``transform = "package.module:function"``).

It receives a fresh dict of the document's fields (canonical values: what the index would
hold without it) and returns the document to index, or None: this row has no document (a
tombstone at the change's version, as for a row a ``where`` leaves out). The stream, the
reindex, repairs, reconciliation, verification and explain all call it, so they agree on the
document as long as the function depends on nothing but its argument.
"""

from __future__ import annotations

import functools
import importlib
import re
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from indexer.errors import ConfigError, DecodeError

Transform = Callable[[dict[str, Any]], Mapping[str, Any] | None]

SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")
RESERVED = "_indexer"  # the indexer's own fields: a transform may not write them
# A dead letter's reason keeps the traceback's last frames: where in the user's code it broke.
TRACEBACK_FRAMES = 5


@functools.cache
def load(spec: str) -> Transform:
    """The function named ``package.module:function``, imported once per process."""
    if not SPEC.match(spec):
        raise ConfigError(f"transform {spec!r}: expected \"package.module:function\"")
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        raise ConfigError(f"transform {spec!r}: cannot import {module_name}: "
                          f"{type(exc).__name__}: {exc}") from exc
    found = getattr(module, name, None)
    if not callable(found):
        raise ConfigError(f"transform {spec!r}: {module_name} has no function {name!r}")
    function: Transform = found
    return function


def apply(function: Transform, spec: str, doc_id: str,
          document: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The transformed document, or None. What the function raises, or a result that is not a
    document, is this row's dead letter (kind ``transform-failed``) with where it broke."""
    try:
        shaped = function(dict(document))
    except Exception as exc:
        frames = traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)
        raise DecodeError("transform-failed", f"transform {spec} raised on row {doc_id}: "
                          f"{type(exc).__name__}: {exc}\n{''.join(frames).rstrip()}") from exc
    if shaped is None:
        return None
    if not isinstance(shaped, Mapping):
        raise DecodeError("transform-failed", f"transform {spec} returned a "
                          f"{type(shaped).__name__} for row {doc_id}; expected a document "
                          "(a dict) or None")
    if RESERVED in shaped:
        raise DecodeError("transform-failed", f"transform {spec} returned a document with "
                          f"{RESERVED!r} for row {doc_id}; that field is the indexer's own")
    return shaped
