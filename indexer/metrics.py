"""Prometheus metrics in one place, on a registry the caller owns (no global state)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from indexer.errors import ConfigError

BULK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
AGE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
CANARY_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)
FANOUT_BUCKETS = (1, 2, 5, 10, 100, 1_000, 10_000, 100_000, 1_000_000)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = registry or CollectorRegistry()
        self._clock = clock
        r = self.registry
        self.events = Counter("indexer_events", "Change events consumed", ["table", "op"],
                              registry=r)
        self.native_events = Counter("indexer_native_events", "Change events decoded and "
                                     "built by the native per-batch path", ["table"], registry=r)
        self.indexed = Counter("indexer_indexed", "Documents written", ["table"], registry=r)
        self.deleted = Counter("indexer_deleted", "Deletes written as tombstones", ["table"],
                               registry=r)
        self.stale = Counter("indexer_stale", "Writes refused as stale or duplicate (409)",
                             ["table"], registry=r)
        self.dead_lettered = Counter("indexer_dead_lettered", "Messages sent to the dead-letter "
                                     "topic", ["table", "kind"], registry=r)
        self.skipped = Counter("indexer_skipped", "Debezium tombstones acknowledged", ["table"],
                               registry=r)
        self.kept_index_rejected = Counter(
            "indexer_kept_index_rejected", "Writes refused by an index that is not live (kept "
            "for rollback, or being rebuilt) while the live index was asked to take them",
            ["index"], registry=r)
        self.retries = Counter("indexer_retries", "Bulk retries of transient failures",
                               ["reason"], registry=r)
        self.bulk_seconds = Histogram("indexer_bulk_seconds", "Bulk request latency",
                                      buckets=BULK_BUCKETS, registry=r)
        self.lag = Gauge("indexer_consumer_lag", "Messages behind the partition's end",
                         ["topic", "partition"], registry=r)
        self.freshness = Gauge("indexer_freshness_seconds", "Now (at the scrape) minus the "
                               "source commit time of the newest change written; grows while "
                               "nothing is written", ["table"], registry=r)
        self._newest_s: dict[str, float] = {}
        self.event_age = Histogram("indexer_event_age_seconds", "Now minus the source commit "
                                   "time of the oldest change of each written batch",
                                   ["table"], buckets=AGE_BUCKETS, registry=r)
        self.committed = Counter("indexer_offsets_committed", "Offset commits", registry=r)
        self.source_switches = Counter("indexer_source_switches", "Switches of a table's source "
                                       "server (fail-over, RESET MASTER) turned into a new "
                                       "version epoch", ["table"], registry=r)
        self.layout_changes = Counter("indexer_layout_changes", "New row layouts seen in a "
                                      "table's events (columns added, dropped, renamed or "
                                      "retyped)", ["table"], registry=r)
        self.version_epoch = Gauge("indexer_version_epoch", "The version epoch a table's "
                                   "binlog versions are in (0 until a source switch)",
                                   ["table"], registry=r)
        self.canaries_written = Counter("indexer_canaries_written", "Canary beats written into "
                                        "MySQL by this daemon", registry=r)
        self.canary_write_failures = Counter("indexer_canary_write_failures", "Canary beats "
                                             "MySQL refused or could not take", registry=r)
        self.canary_latency = Histogram("indexer_canary_latency_seconds", "From a canary beat "
                                        "written into MySQL to its document confirmed by the "
                                        "search server", buckets=CANARY_BUCKETS, registry=r)
        self.canary_age = Gauge("indexer_canary_age_seconds", "Now (at the scrape) minus the "
                                "time the newest canary beat indexed was written (since the "
                                "daemon started, until one is)", registry=r)
        self._canary_ms = 0
        self.verify_rows = Counter("indexer_verify_rows", "Rows covered by continuous "
                                   "verification's checks", ["table", "pass"], registry=r)
        self.verify_drift = Counter("indexer_verify_drift", "Rows continuous verification found "
                                    "differing from MySQL (after a second look)",
                                    ["table", "kind"], registry=r)
        self.verify_repaired = Counter("indexer_verify_repaired", "Rows continuous verification "
                                       "rewrote or tombstoned", ["table"], registry=r)
        self.verify_unrepaired = Gauge("indexer_verify_unrepaired_rows", "Rows found differing "
                                       "and not repaired (verify.repair off), as of the last "
                                       "look", ["table"], registry=r)
        self.verify_busy = Counter("indexer_verify_busy_seconds", "Time continuous "
                                   "verification's queries kept each server busy",
                                   ["table", "server"], registry=r)
        self.verify_pass_seconds = Gauge("indexer_verify_pass_seconds", "How long the last "
                                         "whole pass over the table took", ["table"], registry=r)
        self.verify_passed = Gauge("indexer_verify_last_pass_timestamp_seconds", "When the last "
                                   "whole pass over the table ended", ["table"], registry=r)

        self.rebuilt = Counter("indexer_rebuilt", "Joined documents rebuilt from MySQL after "
                               "a change of a table of their tree, by outcome (indexed, deleted, "
                               "stale, failed)", ["table", "outcome"], registry=r)
        self.rebuild_fanout = Histogram("indexer_rebuild_fanout", "Joined documents one change "
                                        "touched, for changes touching none or more than one "
                                        "(most touch one: indexer_events_total counts them)",
                                        ["table"], buckets=FANOUT_BUCKETS, registry=r)
        self.rebuild_seconds = Histogram("indexer_rebuild_seconds", "From a batch's changes to "
                                         "their joined documents confirmed by the search server "
                                         "(a fan-out's pages each)", ["table"],
                                         buckets=BULK_BUCKETS, registry=r)
        self.rebuild_pending = Gauge("indexer_rebuild_pending_documents", "Documents of fan-outs "
                                     "(one change touching many) not rebuilt yet", ["table"],
                                     registry=r)
        self.truncated = Counter("indexer_children_truncated", "Joined documents written with a "
                                 "children array cut at its max", ["table", "path"], registry=r)

    def written_up_to(self, table: str, ts_ms: int) -> None:
        """The newest source commit time written for a table: freshness is computed from it
        when scraped, so a stalled pipeline does not look fresh."""
        if table not in self._newest_s:
            newest, clock = self._newest_s, self._clock
            self.freshness.labels(table).set_function(
                lambda: max(0.0, clock() - newest[table]))
        self._newest_s[table] = max(self._newest_s.get(table, 0.0), ts_ms / 1000)

    def canary_from(self, started_ms: int) -> None:
        """Starts the canary's age: from now until the first beat is indexed."""
        self._canary_ms = started_ms
        clock = self._clock
        self.canary_age.set_function(lambda: max(0.0, clock() - self._canary_ms / 1000))

    def canary_indexed(self, beat_ms: int) -> None:
        """A beat confirmed by the search server."""
        self.canary_latency.observe(max(0.0, self._clock() - beat_ms / 1000))
        self._canary_ms = max(self._canary_ms, beat_ms)

    def serve(self, host: str, port: int) -> None:
        """Exposes /metrics on host:port (port 0 = off)."""
        if port:
            try:
                start_http_server(port, addr=host, registry=self.registry)
            except OSError as exc:
                raise ConfigError(f"metrics: cannot listen on {host}:{port}: "
                                  f"{exc.strerror or exc}; set metrics.host and metrics.port, "
                                  "or port 0 to turn metrics off") from exc
