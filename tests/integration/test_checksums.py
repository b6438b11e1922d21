"""The server's text of a double against checksums.double_text, over every magnitude."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from indexer.core.checksums import double_text
from tests.integration.conftest import sql

pytestmark = pytest.mark.servers


def doubles(seed: int) -> list[float]:
    """Each decimal exponent with 1 to 17 significant digits, random bit patterns, prices."""
    rng = random.Random(seed)
    found: list[float] = []
    for exponent in range(-330, 310, 3):
        for digits in (1, 2, 9, 15, 16, 17):
            value = float(f"{rng.randrange(10 ** (digits - 1), 10 ** digits)}e{exponent}")
            if value not in (0.0, float("inf")):
                found += [value, -value]
    for _ in range(2000):
        (value,) = struct.unpack("<d", rng.randbytes(8))
        if value == value and abs(value) != float("inf"):
            found.append(value)
    return found + [round(rng.uniform(0, 10_000), 2) for _ in range(500)]


def test_doubles_are_written_as_the_server_writes_them(db: Any) -> None:
    values = doubles(20261201)
    for start in range(0, len(values), 500):
        part = values[start:start + 500]
        # repr is exact: the server parses each literal to the same double.
        (texts,) = sql(db, "SELECT " + ", ".join(f"CAST({v!r} + 0e0 AS CHAR)" for v in part))
        assert [double_text(v) for v in part] == list(texts)
