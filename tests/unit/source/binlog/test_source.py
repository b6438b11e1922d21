import asyncio
from typing import Any

from indexer.core.binlog_changes import RowChange
from indexer.core.envelope import Position
from indexer.core.events import Change
from indexer.core.streams import Stream
from indexer.outages import Outage
from indexer.settings import MySQLSettings, TableConfig, VersionSource
from indexer.source.binlog.source import BINLOG_PART, BinlogSource, position_base


def test_a_first_starts_positions_go_on_above_every_binlog_stream_seen_before() -> None:
    assert position_base({}) == 0  # a new deployment: the coordinates as they are
    cursors = {f"mysql.shop.items/{BINLOG_PART}": 7_000, f"mysql.shop.tags/{BINLOG_PART}": 9_000,
               "mysql.shop.items/0": 10**12}  # a Kafka partition's offset: not a position
    assert position_base(cursors) == 9_001


def _change(table: str, pos: int, resume: tuple[str, int]) -> RowChange:
    where = Position("mysql-bin.000001", pos, 0, 0, None, "false", "mariadb")
    return RowChange(table, where, frozenset(), resume,
                     Change("u", {"id": pos}, {"id": pos}, {"id": pos}, where))


def _table(name: str) -> TableConfig:
    return TableConfig("shop", name, f"mysql.shop.{name}", name, f"{name}.json",
                       VersionSource("binlog"))


def test_a_restart_reads_from_the_oldest_transaction_with_a_change_not_committed() -> None:
    saved: list[dict[str, Any]] = []

    async def save(record: dict[str, Any]) -> None:
        saved.append(record)

    start = ("mysql-bin.000001", 4)
    source = BinlogSource(MySQLSettings(), 1, {"a": _table("a"), "b": _table("b")}, start,
                          save, Outage("MySQL", "changes"), 1.0)
    first, second = ("mysql-bin.000001", 100), ("mysql-bin.000001", 900)
    # One transaction's changes of two tables, interleaved; then a second transaction.
    for table, pos, resume in [("shop.a", 120, first), ("shop.a", 130, first),
                               ("shop.b", 140, first), ("shop.a", 150, first),
                               ("shop.a", 920, second)]:
        source._out.deliver([_change(table, pos, resume)], source._ready)
    a, b = (Stream(name, BINLOG_PART) for name in ("a", "b"))
    ordered = [delivery.position for delivery in source._ready]
    assert ordered == sorted(set(ordered)) and len(ordered) == 5

    async def commit(stream: Stream, through: int) -> tuple[str, int]:
        await source.commit({stream: through + 1})
        return source.read_through()

    async def go() -> None:
        # Table a committed up to its third change: b's change of the first transaction is not.
        assert await commit(a, ordered[3]) == first
        assert await commit(b, ordered[2]) == second  # the first transaction, whole
        assert await commit(a, ordered[4]) == start  # nothing outstanding, nothing read on

    asyncio.run(go())
    # Saved at most every second: the first commit's point, the first transaction's start.
    assert [(record["file"], record["pos"]) for record in saved] == [first]


class _OtherTablesEvents:
    """A stream that never runs dry: another table's events, without end."""

    async def read(self, max_events: int, timeout_s: float) -> list[bytes]:
        await asyncio.sleep(0)
        return [b"event"] * 10


class _NoneOfOurs:
    """Reads each event as a whole transaction of another table: no change to deliver."""

    resume, resume_gtids = ("mysql-bin.000001", 4), ""

    def feed(self, event: bytes) -> list[RowChange]:
        self.resume = (self.resume[0], self.resume[1] + 100)
        return []


def test_while_only_other_tables_change_a_fetch_returns_and_the_resume_point_moves_on() -> None:
    saved: list[dict[str, Any]] = []

    async def save(record: dict[str, Any]) -> None:
        saved.append(record)

    source = BinlogSource(MySQLSettings(), 1, {"a": _table("a")}, ("mysql-bin.000001", 4),
                          save, Outage("MySQL", "changes"), 1.0)
    internals: Any = source
    internals._stream, internals._reader = _OtherTablesEvents(), _NoneOfOurs()

    async def go() -> None:
        # Without end of events, the fetch still returns once its 50 ms are spent.
        assert await asyncio.wait_for(source.fetch(100, 50), 10) == {}

    asyncio.run(go())
    # Saved past the other tables' transactions read (once: at most every second).
    assert [(record["file"], record["pos"] > 4) for record in saved] == [
        ("mysql-bin.000001", True)]
