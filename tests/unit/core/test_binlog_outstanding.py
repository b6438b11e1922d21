from collections import deque

from indexer.core.binlog_changes import RowChange
from indexer.core.binlog_outstanding import Outstanding
from indexer.core.envelope import Position
from indexer.core.events import BuiltRows, Change
from indexer.core.streams import Delivery, Stream
from indexer.core.versions import pack

A, B = Stream("a", -1), Stream("b", -1)
FIRST, SECOND = ("mysql-bin.000002", 100), ("mysql-bin.000002", 900)


def _change(table: str, pos: int, resume: tuple[str, int], half: int = 0,
            file: str = "mysql-bin.000002") -> RowChange:
    where = Position(file, pos, 0, 0, None, "false", "mariadb")
    return RowChange(table, where, frozenset(), resume,
                     Change("u", {"id": pos}, {"id": pos}, {"id": pos}, where), half=half)


def test_positions_are_the_coordinates_doubled_above_the_base_each_half_its_own() -> None:
    out, ready = Outstanding({"shop.a": A}, base=1000), deque[Delivery]()
    out.deliver([_change("shop.a", 120, FIRST), _change("shop.a", 120, FIRST, half=1)], ready)
    assert [(d.stream, d.position) for d in ready] == [
        (A, 1000 + pack(2, 120, 0) * 2), (A, 1000 + pack(2, 120, 0) * 2 + 1)]
    assert ready[0].change is not None and out.last == ready[1].position


def test_changes_read_again_after_a_reconnect_are_not_delivered_twice() -> None:
    out, ready = Outstanding({"shop.a": A}, base=0), deque[Delivery]()
    out.deliver([_change("shop.a", 120, FIRST), _change("shop.a", 130, FIRST)], ready)
    out.deliver([_change("shop.a", 120, FIRST), _change("shop.a", 130, FIRST),
                 _change("shop.a", 140, FIRST)], ready)
    assert [d.position for d in ready] == [pack(2, p, 0) * 2 for p in (120, 130, 140)]


def test_the_oldest_uncommitted_transaction_is_where_a_restart_reads_from() -> None:
    out, ready = Outstanding({"shop.a": A, "shop.b": B}, base=0), deque[Delivery]()
    assert not out and out.oldest() is None
    out.deliver([_change("shop.a", 120, FIRST), _change("shop.b", 140, FIRST),
                 _change("shop.a", 150, FIRST), _change("shop.a", 920, SECOND)], ready)
    positions = [d.position for d in ready]
    out.commit({A: positions[2] + 1})  # a's changes of the first transaction, not b's
    assert out.oldest() == (FIRST, "")
    out.commit({B: positions[1] + 1})
    assert out.oldest() == (SECOND, "")
    out.commit({A: positions[3] + 1})
    assert not out and out.oldest() is None


def test_a_new_server_s_series_starts_above_the_last_and_forgets_the_outstanding() -> None:
    out, ready = Outstanding({"shop.a": A}, base=0), deque[Delivery]()
    out.deliver([_change("shop.a", 920, SECOND)], ready)
    out.base = out.last + 1
    out.forget()
    assert out.oldest() is None
    # The promoted server's coordinates start lower, its positions above every one before.
    out.deliver([_change("shop.a", 4, ("mysql-bin.000001", 4), file="mysql-bin.000001")], ready)
    assert ready[-1].position > ready[0].position and out.oldest() == (("mysql-bin.000001", 4), "")


def test_a_rows_event_s_built_documents_are_one_delivery_at_the_last_row_s_position() -> None:
    out, ready = Outstanding({"shop.a": A}, base=1000), deque[Delivery]()
    where = Position("mysql-bin.000002", 120, 0, 0, None, "false", "mariadb")
    rows = BuiltRows("u", where, [("1", b'{"id":1}'), ("2", b'{"id":2}'), ("3", b'{"id":3}')],
                     "id")
    event = RowChange("shop.a", where, frozenset(), FIRST, None, size=300, built_rows=rows)
    assert out.deliver([event, _change("shop.a", 130, FIRST)], ready) == 4
    assert out.deliver([event], ready) == 0  # read again after a reconnect: not twice
    first = 1000 + pack(2, 120, 0) * 2
    (delivery, after) = ready
    assert (delivery.position, delivery.changes, delivery.rows) == (first + 4, 3, rows)
    assert after.position == 1000 + pack(2, 130, 0) * 2 and after.changes == 1
    # Each row on its own (a dead letter) at the position it would have had alone.
    second = delivery.row(1)
    assert (second.position, second.size, second.layout) == (first + 2, 100, frozenset())
    assert second.built is not None and second.built.position.row == 1
    assert (second.built.id, second.built.document, second.built.op) == ("2", b'{"id":2}', "u")
