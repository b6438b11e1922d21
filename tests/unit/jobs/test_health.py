from datetime import UTC, datetime, timedelta

from indexer.jobs.health import STALLED_S, BinlogPlace, place_problems

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
FILES = [("mysql-bin.000007", 1000), ("mysql-bin.000008", 500)]


def saved(file: str = "mysql-bin.000008", pos: int = 200, still_s: float = 1.0,
          server_id: int | None = 1) -> dict[str, object]:
    return {"file": file, "pos": pos, "server_id": server_id,
            "saved_at": (NOW - timedelta(seconds=still_s)).isoformat()}


def test_a_moving_or_caught_up_position_is_healthy() -> None:
    assert place_problems("shop", BinlogPlace(saved(), 1, FILES), NOW) == []
    idle = BinlogPlace(saved(pos=500, still_s=3600), 1, FILES)  # nothing to read: not stalled
    assert idle.behind() == 0 and place_problems("shop", idle, NOW) == []
    # A position saved before server ids were recorded is not judged by one.
    assert place_problems("shop", BinlogPlace(saved(server_id=None), 9, FILES), NOW) == []
    # Another server, with a GTID position saved: `run` follows it there (MariaDB).
    followed = {**saved(file="mysql-bin.000001"), "gtid": "0-1-4711"}
    assert place_problems("shop", BinlogPlace(followed, 2, FILES), NOW) == []


def test_each_way_the_position_cannot_be_read_on_from_is_one_line() -> None:
    (first,) = place_problems("shop", BinlogPlace(None, 1, FILES), NOW)
    assert "no saved position" in first
    (away,) = place_problems("shop", BinlogPlace(saved(), error="refused"), NOW)
    assert "cannot list MySQL's binlog files (refused)" in away
    (other,) = place_problems("shop", BinlogPlace(saved(), 2, FILES), NOW)
    assert "belongs to server_id 1, and the server is now server_id 2" in other
    assert "indexer source reset" in other
    (purged,) = place_problems("shop", BinlogPlace(saved(file="mysql-bin.000003"), 1, FILES), NOW)
    assert "no longer has its position mysql-bin.000003:200 (purged)" in purged
    (stalled,) = place_problems("shop", BinlogPlace(saved(still_s=STALLED_S + 1), 1, FILES), NOW)
    assert "has not moved for 61 s while the binlog is 300 bytes ahead" in stalled
