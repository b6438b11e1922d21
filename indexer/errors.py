"""Every error indexer raises on purpose, in the three kinds its loops tell apart.

* :class:`Transient`: a server cannot answer now (away, busy, restarting, a replica behind).
  A loop that meets one waits and tries again with its server's retry policy, and its
  :class:`~indexer.outages.Outage` tells it once; a one-shot command stops with one line.
* :class:`Permanent`: trying again changes nothing (a setting, a mapping, a privilege, an
  index another table owns). The command, or the daemon, stops with one line and exit 2.
* :class:`Poison`: one message cannot become a write. It is dead-lettered with the reason
  while the rest flows.

Adapters turn their drivers' errors into these (pymysql's, aiokafka's and the transport's
stay inside them); control-flow signals of the per-event path (a new row layout, a source
switch) are not errors and live with the code that raises them.
"""

from __future__ import annotations


class IndexerError(Exception):
    """An error indexer raises on purpose; its message is the one line a user sees."""


class Transient(IndexerError):
    """Wait and try again."""


class Permanent(IndexerError):
    """Stop with one line: nothing changes by trying again."""


class Poison(IndexerError):
    """Dead-letter the one message."""


# --- permanent -----------------------------------------------------------------------------

class ConfigError(Permanent, ValueError):
    """A setting is missing or invalid, or a server refuses it; the message names it."""


class MappingError(Permanent, ValueError):
    """A mapping file is missing or invalid; the message names the file and the place."""


class UnsupportedServer(ConfigError):
    """The search server is not one indexer works with."""


class JoinError(ConfigError):
    """A join of a table's document cannot work; the message says why and what to do."""


class MissingTable(Permanent, LookupError):
    """MySQL has no such table (or database): a misspelt name in the configuration."""


class OwnershipError(Permanent):
    """An index belongs to another table or source, or cannot be told to be this table's:
    nothing was written, mapped or compared. The message names both."""


class ReindexError(Permanent):
    """A reindex cannot complete; the live alias is unchanged."""


class SourceError(Permanent, ValueError):
    """A position that cannot be versioned (the message says why and what to do)."""


class BinlogPurged(Permanent):
    """The binlog no longer holds the position to resume from (purged, or the server is
    another one, whose coordinates mean nothing for it): changes in between are lost to the
    stream, and only loading every table again brings the index back to the tables."""


class IntoReplica(Permanent):
    """The canary's beats would be written into a replica (errant transactions)."""


# --- transient -----------------------------------------------------------------------------

class Unavailable(Transient):
    """A server could not be reached, or cannot answer now."""


class SearchUnavailable(Unavailable):
    """The search server could not be reached at all (as opposed to refusing the settings)."""


class SearchBusy(Transient):
    """The search server could not take the request now (429, 5xx, items refused)."""


class NoTarget(SearchBusy):
    """No index behind a table's sync alias to write to (yet)."""


class KafkaUnavailable(Unavailable):
    """No broker could be reached at all (as opposed to one refusing the settings)."""


class ConnectUnavailable(Unavailable):
    """Kafka Connect's REST API did not answer."""


class MySQLUnreachable(Unavailable):
    """No MySQL server answered at the configured address (now)."""


class ReplicaBehind(Transient):
    """A replica has not applied the changes a read must see yet."""


# --- poison --------------------------------------------------------------------------------

class DecodeError(Poison, ValueError):
    """A message that cannot become a change: ``kind`` names the dead letter's error kind."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, str]]:
        # Raised in a worker process (reconcile's), it crosses back by pickling.
        return DecodeError, (self.kind, self.reason)


class VersionError(DecodeError):
    """A change whose version cannot be packed."""

    def __init__(self, reason: str) -> None:
        super().__init__("bad-version", reason)
