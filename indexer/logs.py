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
