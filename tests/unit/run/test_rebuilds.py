"""Rebuilds of joined documents, their I/O replaced: a change whose documents cannot be found
or read for good is dead-lettered alone, and the batch's other changes are rebuilt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pytest

from indexer.config import build_config
from indexer.core.trees import Touch, Values
from indexer.metrics import Metrics
from indexer.run import rebuilds as rebuilds_module
from indexer.run.ports import Request
from indexer.run.rebuilds import REBUILD_FAILED, Rebuilds

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


class Removing(Refusing):
    """The index in memory: documents 7 and 8 hold tag 1, document 9 tag 2; a document
    written in flight shows up at the second look."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    async def _add_referring(self, alias: str, requests: Sequence[Request]) -> None:
        self.looks += 1
        held = {(7,): {"t#1"}, (8,): {"t#1"}, (9,): {"t#2"}}
        if self.looks > 1:
            held[(10,)] = {"t#2"}
        for request in requests:
            request.roots |= {root for root, refs in held.items() if refs & request.touch.refs}


async def test_removed_lookup_rows_are_looked_up_together_and_once_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rebuilds_module, "SETTLE_S", 0)
    rebuilds = Removing()
    first = Request("products", Touch(refs={"t#1"}), 1, 0, None, "p0")
    second = Request("products", Touch(refs={"t#2"}), 2, 0, None, "p0")
    later = await rebuilds.rebuild([first, second])
    assert later == {"p0": [first, second]} and rebuilds.written == []
    await rebuilds.finish(later["p0"])
    assert rebuilds.looks == 2  # one look for both, and one more for both
    assert rebuilds.written == [(7,), (8,), (9,), (10,)]
    assert first.roots == {(7,), (8,)} and second.roots == {(9,), (10,)}
