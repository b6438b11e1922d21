"""Rebuilds of joined documents, their I/O replaced: a change whose documents cannot be found
or read for good is dead-lettered alone, and the batch's other changes are rebuilt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pymysql

from indexer.config import build_config
from indexer.core.trees import Touch, Values
from indexer.jobs.rebuilds import REBUILD_FAILED, Rebuilds, Request
from indexer.metrics import Metrics

CONFIG = build_config({"tables": [{"name": "shop.products", "lookups": {"category": {
    "table": "categories", "on": {"category_id": "id"}}}}]}, Path())


class Refusing(Rebuilds):
    """Walks and reads in memory; refuses what names a poison value."""

    def __init__(self) -> None:
        super().__init__(CONFIG, Any, Any, Metrics())  # type: ignore[arg-type]
        self.written: list[Values] = []

    async def _walk(self, alias: str, requests: Sequence[Request]) -> None:
        for request in requests:
            values = {v for found in request.touch.starts.values() for v in found}
            if ("poison",) in values:
                raise pymysql.err.DataError(1366, "Incorrect integer value: 'poison'")
            request.roots |= {(int(v[0]),) for v in values}

    async def _write_documents(self, alias: str, page: list[Values],
                               touched: Mapping[Values, list[Request]]) -> None:
        if (13,) in page:
            raise ValueError("a row no finisher can read")
        self.written += page

    def _name(self, alias: str) -> str:
        return "shop.products"


def request(*values: Any) -> Request:
    return Request("products", Touch(starts={1: {(v,) for v in values}}), 1, 0, None, "p0")


async def test_a_change_that_cannot_be_walked_fails_alone() -> None:
    rebuilds = Refusing()
    good, poison, other = request(1, 2), request("poison"), request(3)
    assert await rebuilds.rebuild([good, poison, other]) == {}
    assert sorted(rebuilds.written) == [(1,), (2,), (3,)]
    assert good.failure is None and other.failure is None
    assert poison.failure is not None and poison.failure[0] == REBUILD_FAILED
    assert "finding its documents: DataError" in poison.failure[1]


async def test_a_document_that_cannot_be_read_fails_its_changes_only() -> None:
    rebuilds = Refusing()
    first, bad = request(*range(1, 13)), request(13, 14)
    await rebuilds.rebuild([first, bad])
    assert sorted(rebuilds.written) == [(i,) for i in range(1, 13)] + [(14,)]
    assert first.failure is None
    assert bad.failure is not None and "reading its documents: ValueError" in bad.failure[1]
