import logging

from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError

from indexer.logs import COORDINATOR_PATIENCE_S, CoordinatorWait


def _failure(at: float, err: Exception) -> logging.LogRecord:
    record = logging.LogRecord("aiokafka.consumer.group_coordinator", logging.ERROR, __file__,
                               1, "Group Coordinator Request failed: %s", (err,), None)
    record.created = at
    return record


def test_a_coordinator_being_elected_is_no_error_and_one_that_stays_away_is_a_warning() -> None:
    wait = CoordinatorWait()
    first = _failure(1000.0, GroupCoordinatorNotAvailableError())
    wait.filter(first)
    assert first.levelno == logging.DEBUG
    levels = []
    at = 1000.0
    while at < 1000.0 + COORDINATOR_PATIENCE_S + 2:
        at += 0.5
        record = _failure(at, GroupCoordinatorNotAvailableError())
        if wait.filter(record):
            levels.append(record.levelno)
    assert levels.count(logging.WARNING) == 1  # once per streak, with what to check
    warned = [r for r in [_failure(at + 100, GroupCoordinatorNotAvailableError())]
              if wait.filter(r)]
    assert not warned  # a new streak starts quiet again


def test_other_records_pass_unchanged() -> None:
    wait = CoordinatorWait()
    fatal = _failure(1.0, GroupAuthorizationFailedError())
    assert wait.filter(fatal) and fatal.levelno == logging.ERROR
