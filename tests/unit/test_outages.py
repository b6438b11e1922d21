import logging

import pytest

from indexer.outages import REMIND_S, SETTLE_S, Outage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_one_warning_reminders_a_minute_apart_and_one_info(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outage = Outage("Kafka", "consuming", clock)
    caplog.set_level(logging.DEBUG, "indexer.outages")
    outage.ok()  # reachable all along: nothing to say
    assert not caplog.records and not outage.down
    for second in range(130):  # a failed attempt every second for over two minutes
        clock.now = 100.0 + second
        outage.failed(ConnectionError("refused"))
    assert outage.down
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == "Kafka unreachable (ConnectionError: refused); consuming wait for it"
    assert len(warnings) == 1 + int(129 // REMIND_S)
    assert "still unreachable since" in warnings[1] and "(60 s;" in warnings[1]
    assert all(r.levelno == logging.DEBUG for r in caplog.records
               if r.levelno != logging.WARNING)
    clock.now = 250.0
    outage.ok()  # a first answer: it may still fail a moment (a restart's first seconds)
    clock.now = 252.0
    outage.failed("503")
    clock.now = 253.0
    outage.ok()
    clock.now = 253.0 + SETTLE_S
    outage.ok()  # answered for SETTLE_S without a failure: back since its first answer
    outage.ok()
    back = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert back == ["Kafka is back after 153.0 s"] and not outage.down
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 3  # no new outage


def test_a_new_outage_after_one_ended_is_told_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outage = Outage("MySQL", "verification", clock)
    caplog.set_level(logging.INFO, "indexer.outages")
    outage.failed("gone", "not answering")
    clock.now += 1
    outage.ok()
    clock.now += SETTLE_S
    outage.ok()
    clock.now += 1
    outage.failed("gone again")
    assert [r.getMessage() for r in caplog.records] == [
        "MySQL not answering (gone); verification wait for it", "MySQL is back after 1.0 s",
        "MySQL unreachable (gone again); verification wait for it"]
