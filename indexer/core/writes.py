"""Writes and what becomes of them: what the run wing, the reindex and repairs hand the sink,
and the outcome the sink settles each one with. Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from indexer.core.documents import Write

# Refusals a mapping change fixes: dead-lettered as MAPPING_CONFLICT, the server's own type
# kept in the reason.
MAPPING_ERRORS = ("mapper_parsing_exception", "document_parsing_exception",
                  "strict_dynamic_mapping_exception", "illegal_argument_exception")
MAPPING_CONFLICT = "mapping-conflict"


class Outcome(enum.Enum):
    WRITTEN = "written"
    STALE = "stale"
    FAILED = "failed"


@dataclass(slots=True)
class Op:
    """A write for one table; fans out to every index in the table's sync alias."""

    alias: str
    write: Write
    index: str | None = None  # one concrete index instead of the alias's (reindex)
    # "external_gte" only for repairs, where an equal version must win (chunk_check.repair).
    version_type: str = "external"
    outcome: Outcome | None = None
    error_kind: str = ""
    error_reason: str = ""
    attempts: int = 0
    server_errors: int = 0

    # mypyc leaves a dataclass's generated __init__ interpreted (5x slower); one per change.
    def __init__(self, alias: str, write: Write, index: str | None = None,
                 version_type: str = "external", outcome: Outcome | None = None,
                 error_kind: str = "", error_reason: str = "", attempts: int = 0,
                 server_errors: int = 0) -> None:
        self.alias, self.write, self.index, self.version_type = alias, write, index, version_type
        self.outcome, self.error_kind, self.error_reason = outcome, error_kind, error_reason
        self.attempts, self.server_errors = attempts, server_errors
