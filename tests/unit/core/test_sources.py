import pytest

from indexer.core.documents import pack_binlog_version
from indexer.core.sources import (
    EPOCH_MARGIN_FILES,
    EPOCH_ZERO,
    Cursor,
    Epoch,
    Point,
    Registry,
    Switch,
    observe,
    observe_fast,
    parse_gtid,
)

T0 = 1_800_000_000_000


def point(file: int, pos: int, row: int = 0, ts: int = T0, gtid: str | None = None,
          snapshot: bool = False) -> Point:
    return Point(file, pos, row, ts, gtid, snapshot)


def follow(points: list[Point]) -> list[Switch | None]:
    cursor = Cursor()
    return [observe(cursor, offset, p) for offset, p in enumerate(points)]


def test_gtids_name_their_sequence() -> None:
    assert parse_gtid("0-1-28887") == ("domain 0 server 1", 28887)
    uuid = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
    assert parse_gtid(f"{uuid}:23") == (uuid.lower(), 23)
    assert parse_gtid(None) is None and parse_gtid("weird") is None


def test_one_server_moving_forward_is_no_switch() -> None:
    points = [point(1, 100), point(1, 100, 1), point(1, 200), point(2, 4), point(2, 4)]
    assert follow(points) == [None] * 5


@pytest.mark.parametrize(("later", "why"), [
    # Debezium sends the tail again after a crash: older GTIDs, older commit times.
    (point(1, 150, gtid="0-1-11", ts=T0 - 1000), None),
    (point(1, 150, ts=T0 - 1000), None),
    # A fail-over: lower coordinates, a transaction never seen.
    (point(1, 150, gtid="0-1-13", ts=T0), "went back"),
    # ... on a promoted server that missed the last transactions: their numbers again,
    # under its own server id.
    (point(1, 150, gtid="0-2-11", ts=T0), "went back"),
    (point(1, 150, gtid="5c5b0f7a-71ca-11e1-9e33-c80aa9429562:3", ts=T0), "went back"),
    # RESET MASTER: the sequence starts again, but the commit is later.
    (point(1, 4, gtid="0-1-1", ts=T0 + 1000), "went back"),
    (point(1, 4, ts=T0 + 1000), "went back"),
    # A snapshot of a reset or another server starts below what was indexed.
    (point(1, 4, snapshot=True, ts=T0 - 5000), "snapshot"),
])
def test_changes_below_the_cursor_are_resent_or_a_switch(later: Point, why: str | None) -> None:
    *_, verdict = follow([point(1, 100, gtid="0-1-11"), point(1, 200, gtid="0-1-12"), later])
    if why is None:
        assert verdict is None
    else:
        assert verdict is not None and why in verdict.reason
        assert "position 200" in verdict.old and f"position {later.pos}" in verdict.new


def test_offsets_already_observed_say_nothing_and_the_fast_path_agrees() -> None:
    cursor, fast = Cursor(), Cursor()
    for offset, p in enumerate([point(3, 100), point(3, 200), point(1, 50, gtid="0-1-9")]):
        assert (observe(cursor, offset, p) is None) == (observe_fast(
            fast, offset, p.file, p.pos, p.row, p.ts_ms, p.gtid, p.snapshot) is None)
    # The last was sent again (no GTID, no later commit): the highest coordinates stay.
    assert cursor == fast and (cursor.file, cursor.pos, cursor.position) == (3, 200, 2)
    assert observe(cursor, 1, point(1, 1, ts=T0 + 9)) is None  # a re-read: not observed
    assert cursor.position == 2


def test_each_epoch_versions_above_every_earlier_one() -> None:
    registry = Registry()
    key = "mysql.shop.items/0"
    cursor = registry.cursor(key)
    observe(cursor, 0, point(9, 500))
    old = pack_binlog_version("mysql-bin.000009", 500, 0, registry.epoch_at(key, 0))
    switch = observe(cursor, 1, point(2, 40, ts=T0 + 1))
    assert switch is not None
    epoch = registry.enter(key, 1, 2, T0 + 1, switch, "now", "here")
    assert epoch == Epoch(1, 9 + EPOCH_MARGIN_FILES, 2, T0 + 1) and cursor.epoch == 1
    new = pack_binlog_version("mysql-bin.000002", 40, 0, registry.epoch_at(key, 1))
    assert new > old
    # The old epoch still versions what came before the switch (replays, dead letters).
    assert registry.epoch_at(key, 0) == EPOCH_ZERO and registry.epoch_at(key, 99) == epoch
    assert [s["epoch"] for s in registry.unacknowledged] == [1]
    assert registry.acknowledge() == 1 and not registry.unacknowledged


def test_another_partition_adopts_the_new_epoch_of_the_same_switch() -> None:
    registry = Registry()
    a, b = registry.cursor("t/0"), registry.cursor("t/1")
    observe(a, 0, point(9, 500))
    observe(b, 0, point(9, 600))
    switch = observe(a, 1, point(2, 40, ts=T0 + 1))
    assert switch is not None
    first = registry.enter("t/0", 1, 2, T0 + 1, switch, "now", "t 0")
    later = observe(b, 1, point(2, 90, ts=T0 + 1))
    assert later is not None
    assert registry.enter("t/1", 1, 2, T0 + 1, later, "now", "t 1") == first
    # ... but a switch below the epoch's first file needs one of its own, above it.
    c = registry.cursor("t/2")
    observe(c, 0, point(9, 700))
    earlier = observe(c, 1, point(1, 10, ts=T0 + 1))
    assert earlier is not None
    third = registry.enter("t/2", 1, 1, T0 + 1, earlier, "now", "t 2")
    assert third.number == 2 and third.field(1) > first.field(2)


def test_a_snapshot_of_another_server_starts_an_epoch_and_one_of_the_same_does_not() -> None:
    registry = Registry()
    cursor = registry.cursor("t/0")
    observe(cursor, 0, point(5, 900))
    assert registry.snapshot_epoch(5, 1000, T0, "now", "reindex") == EPOCH_ZERO
    assert not registry.switches
    moved = registry.snapshot_epoch(1, 300, T0 + 5000, "now", "reindex")
    assert moved.number == 1 and moved.base == 1
    assert registry.unacknowledged[0]["where"] == "reindex"
    # The stream's own switch then adopts it when its changes are not before the snapshot.
    switch = observe(cursor, 1, point(1, 300, ts=T0 + 1))
    assert switch is not None
    assert registry.enter("t/0", 1, 1, T0 + 1, switch, "now", "t 0") == moved


def test_a_snapshot_taken_before_a_switch_keeps_the_epoch_of_its_time() -> None:
    # A fail-over during a reindex: its snapshot (old server) predates epoch 1, whose
    # changes must beat it.
    registry = Registry()
    cursor = registry.cursor("t/0")
    observe(cursor, 0, point(9, 500))
    switch = observe(cursor, 1, point(1, 40, ts=T0 + 60_000))
    assert switch is not None
    new = registry.enter("t/0", 1, 1, T0 + 60_000, switch, "now", "t 0")
    snapshot = registry.snapshot_epoch(9, 400, T0 + 59_000, "now", "reindex")
    assert snapshot == EPOCH_ZERO
    assert pack_binlog_version("b.000009", 400, 0, snapshot) < pack_binlog_version(
        "b.000001", 40, 0, new)
    assert registry.snapshot_epoch(1, 90, T0 + 61_000, "now", "reindex") == new


def test_the_registry_round_trips_through_json() -> None:
    registry = Registry()
    cursor = registry.cursor("t/0")
    observe(cursor, 0, point(9, 500, gtid="0-1-4"))
    switch = observe(cursor, 1, point(2, 40, ts=T0 + 1))
    assert switch is not None
    registry.enter("t/0", 1, 2, T0, switch, "now", "here")
    assert Registry.from_json(registry.as_json()) == registry
    assert Registry.from_json({}) == Registry()


def test_no_room_for_another_epoch_is_said_clearly() -> None:
    registry = Registry(high_field=(1 << 19) - 10)
    with pytest.raises(ValueError, match="no room for another version epoch"):
        registry.start_epoch(3, T0)


def test_gtid_sets_are_compared_per_owner_in_both_flavors() -> None:
    from indexer.core.sources import gtid_set_reached, gtid_set_tops

    assert gtid_set_tops("0-1-488880,1-2-5") == {"domain 0": 488880, "domain 1": 5}
    uuid = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
    assert gtid_set_tops(f"{uuid}:1-100:105,\n{uuid.replace('3E', '4E')}:7") == {
        uuid.lower(): 105, uuid.replace("3E", "4E").lower(): 7}
    assert gtid_set_tops("nonsense") is None
    # MariaDB numbers grow per domain whichever server wrote them (a promotion keeps them).
    assert gtid_set_reached("0-2-500", "0-1-499") is True
    assert gtid_set_reached("0-1-499", "0-1-500") is False
    assert gtid_set_reached("0-1-500", "0-1-500,1-1-3") is False  # a domain not reached
    assert gtid_set_reached(f"{uuid}:1-100", f"{uuid}:1-99") is True
    assert gtid_set_reached("", "0-1-1") is False
    assert gtid_set_reached("0-1-5", "x") is None
