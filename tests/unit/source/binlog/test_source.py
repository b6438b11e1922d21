from indexer.source.binlog.source import BINLOG_PART, position_base


def test_a_first_starts_positions_go_on_above_every_binlog_stream_seen_before() -> None:
    assert position_base({}) == 0  # a new deployment: the coordinates as they are
    cursors = {f"mysql.shop.items/{BINLOG_PART}": 7_000, f"mysql.shop.tags/{BINLOG_PART}": 9_000,
               "mysql.shop.items/0": 10**12}  # a Kafka partition's offset: not a position
    assert position_base(cursors) == 9_001

