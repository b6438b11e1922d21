"""Logging set-up: human-readable console lines or one JSON object per line."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

from indexer.security import Redactor

# aiokafka logs every transient coordinator hiccup at ERROR; they are retried and expected.
# elastic-transport's node-pool warnings repeat what the sink's retry log and start-up errors say.
NOISY = {"aiokafka": logging.WARNING, "elastic_transport": logging.ERROR}


# A fresh broker elects the group coordinator in its first seconds; longer is a problem.
COORDINATOR_PATIENCE_S = 30.0
# Lookups fail every retry backoff (0.1 s); a quiet gap this long ends a streak of failures.
COORDINATOR_STREAK_GAP_S = 5.0


class CoordinatorWait(logging.Filter):
    """aiokafka's "Group Coordinator Request failed" (ERROR at each retry) while a coordinator
    is elected is waiting, not failing: DEBUG, and one WARNING naming what to check once the
    coordinator has stayed away ``COORDINATOR_PATIENCE_S``."""

    def __init__(self) -> None:
        super().__init__()
        self._streak_start = self._last = -COORDINATOR_STREAK_GAP_S
        self._warned = False

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.args[0] if isinstance(record.args, tuple) and record.args else None
        if not (str(record.msg).startswith("Group Coordinator Request failed")
                and getattr(err, "retriable", False)):
            return True
        now = record.created
        if now - self._last > COORDINATOR_STREAK_GAP_S:
            self._streak_start, self._warned = now, False
        self._last = now
        waited = now - self._streak_start
        if waited < COORDINATOR_PATIENCE_S or self._warned:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        self._warned = True
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = (f"no Kafka group coordinator for {waited:.0f}s (%s): check that the "
                      "brokers are up and that offsets.topic.replication.factor does not "
                      "exceed their number")
        return True


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time, so that a progress display which
    redirects it (rich) prints log lines above its bars instead of through them."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return orjson.dumps(entry).decode()


def configure(fmt: str = "console", level: str = "INFO",
              redactor: Redactor | None = None) -> None:
    """One handler on stderr; ``redactor`` masks secrets in every record it writes."""
    handler = _StderrHandler()
    handler.addFilter(redactor or Redactor())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name, noisy_level in NOISY.items():
        logging.getLogger(name).setLevel(max(noisy_level, root.level))
    coordinator = logging.getLogger("aiokafka.consumer.group_coordinator")
    coordinator.filters[:] = [f for f in coordinator.filters if not isinstance(f, CoordinatorWait)]
    coordinator.addFilter(CoordinatorWait())
