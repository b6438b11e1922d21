from datetime import UTC, datetime

from indexer.core.streams import Delivery, Stream
from indexer.source.kafka.dead_letters import (
    DeadLetter,
    ReplayFilter,
    dead_letter_for,
    original_headers,
)


def record() -> Delivery:
    """Offset 41 of partition 2 of a table's topic, as the consumer delivers it."""
    return Delivery(Stream("mysql.shop.items", 2), 41, b'{"id":1}', b"garbage", 15,
                    headers=(("trace", b"t-1"),))


def test_dead_letter_headers_round_trip_and_keep_the_original() -> None:
    letter = dead_letter_for(record(), "undecodable", "not JSON", 1,
                             datetime(2026, 1, 2, tzinfo=UTC))
    headers = [*record().headers, *letter.headers()]
    assert DeadLetter.from_headers(headers) == letter
    assert letter.topic == "mysql.shop.items" and letter.partition == 2 and letter.offset == 41
    assert original_headers(headers) == [("trace", b"t-1")]


def test_replay_filters() -> None:
    letter = dead_letter_for(record(), "undecodable", "x", 1, datetime(2026, 1, 2, tzinfo=UTC))
    assert ReplayFilter().matches(letter)
    assert ReplayFilter(topics=frozenset({"mysql.shop.items"})).matches(letter)
    assert not ReplayFilter(topics=frozenset({"other"})).matches(letter)
    assert not ReplayFilter(kinds=frozenset({"bad-value"})).matches(letter)
    assert ReplayFilter(since=datetime(2026, 1, 1, tzinfo=UTC)).matches(letter)
    assert not ReplayFilter(since=datetime(2026, 1, 3, tzinfo=UTC)).matches(letter)


def test_headers_without_indexer_fields_are_not_a_dead_letter() -> None:
    assert DeadLetter.from_headers([("trace", b"x")]) is None
