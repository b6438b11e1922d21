"""The end-to-end canary, pure: what a beat is, its index, and what its whereabouts mean.

`indexer run` changes one row per consumer group (its "beat": a sequence number and the
writer's clock) in a table the connector captures, at a fixed interval, and consumes that
table's change events like any other. A beat is therefore in MySQL first, then in Kafka, then
in the canary index. Where the newest beats stop tells what broke:

* not written: no daemon of the group is running, or it may not write the table;
* written, not in Kafka, while Debezium's heartbeats still arrive: the connector reads the
  binlog but emits no row changes, so changes are being lost upstream (what heartbeats and
  consumer lag cannot show);
* written, not in Kafka, no heartbeats either: the connector is stopped or cut off;
* in Kafka, not indexed: the daemon is behind or stuck.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from indexer.settings import CanarySettings, TableConfig

# The canary's own index: one small document per consumer group, never searched by users.
CANARY_MAPPING: dict[str, Any] = {
    "settings": {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1"}},
    "mappings": {"dynamic": False, "properties": {
        "group_id": {"type": "keyword"}, "seq": {"type": "long"},
        "beat_ms": {"type": "long"}, "writer": {"type": "keyword"}}},
}


@dataclass(frozen=True)
class Beat:
    """One state of a group's canary row: the ``seq``-th beat, written at ``beat_ms`` (the
    writer's clock) by ``writer``."""

    group: str
    seq: int
    beat_ms: int
    writer: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Beat:
        return cls(str(row["group_id"]), int(row["seq"]), int(row["beat_ms"]),
                   str(row.get("writer", "")))

    @classmethod
    def from_document(cls, body: bytes) -> Beat | None:
        """The beat a canary document holds (None for a tombstone)."""
        doc = orjson.loads(body)
        return cls.from_row(doc) if "seq" in doc else None

    def age_s(self, now_ms: int) -> float:
        return max(0.0, (now_ms - self.beat_ms) / 1000)


@dataclass(frozen=True)
class Sighting:
    """Where the group's newest beat is seen: in MySQL, in Kafka, in the canary index; and
    the age of Debezium's newest heartbeat (None: none found)."""

    written: Beat | None
    in_kafka: Beat | None
    indexed: Beat | None
    heartbeat_age_s: float | None
    # False: that side could not be read (its server is away, reported on its own), so
    # nothing is concluded from it.
    kafka_read: bool = True
    index_read: bool = True
    direct: bool = False  # the binlog source: no Kafka between MySQL and the index

    def as_json(self, now_ms: int) -> dict[str, Any]:
        def beat(b: Beat | None) -> dict[str, Any] | None:
            return None if b is None else {"seq": b.seq, "age_s": round(b.age_s(now_ms), 1),
                                           "writer": b.writer}

        return {"written": beat(self.written), "in_kafka": beat(self.in_kafka),
                "indexed": beat(self.indexed), "heartbeat_age_s": self.heartbeat_age_s}


def problems(settings: CanarySettings, table: TableConfig, group: str, seen: Sighting,
             now_ms: int | None = None, restart_hint: str = "") -> list[str]:
    """What the canary's whereabouts say is wrong (empty: every beat written more than
    ``max_age_s`` ago has arrived)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    bound = settings.max_age_s
    where = f"canary {table.name} (group {group})"
    written = seen.written
    if written is None:
        return [f"{where}: no beat has been written yet: is `indexer run` running, and may its "
                f"MySQL user create {table.name} and change its rows (CREATE, INSERT, UPDATE)?"]
    found = []
    if written.age_s(now_ms) > bound:
        found.append(f"{where}: the newest beat was written {written.age_s(now_ms):,.0f} s ago "
                     f"(by {written.writer}): no daemon of the group writes beats. Is `indexer "
                     "run` running, and may it write the table? (its log says why not)")

    def waiting_s(arrived: Beat | None) -> float:
        return _waiting_s(arrived, written, settings.interval_s, now_ms)

    not_indexed = waiting_s(seen.indexed)
    if seen.index_read and not_indexed <= bound:
        return found
    if seen.direct:
        if seen.index_read:
            found.append(f"{where}: a beat written {not_indexed:,.0f} s ago is not indexed "
                         "yet: `indexer run` is not reading the binlog, or is behind (`indexer "
                         "check` says how far; its log says why)")
        return found
    if not seen.kafka_read:
        if seen.index_read:
            found.append(f"{where}: a beat written {not_indexed:,.0f} s ago is not indexed "
                         "yet, and Kafka cannot be read to tell where it is")
        return found
    if (not_in_kafka := waiting_s(seen.in_kafka)) <= bound:
        if seen.index_read:
            found.append(f"{where}: beats reach Kafka but a beat written {not_indexed:,.0f} s "
                         "ago is not indexed yet: `indexer run` is behind or stuck (`indexer "
                         "status` shows its lag; its log says why)")
        return found
    heartbeat = seen.heartbeat_age_s
    if heartbeat is not None and heartbeat <= bound:
        found.append(
            f"{where}: no beat written in the last {not_in_kafka:,.0f} s has reached Kafka "
            f"although Debezium's heartbeats still arrive (newest {heartbeat:,.0f} s old): the "
            "connector reads the binlog but emits no row changes: changes are being lost "
            f"upstream. Restart the connector's task{restart_hint}; what it skipped is not in "
            "Kafka and never will be: `indexer reconcile --repair --all` rewrites it (with "
            "verify.repair = true the continuous verification does). If the canary table is "
            f"not captured, add {table.name} to the connector's include lists")
    else:
        beat = "no heartbeat either" if heartbeat is None else (
            f"its newest heartbeat is {heartbeat:,.0f} s old")
        found.append(f"{where}: no beat written in the last {not_in_kafka:,.0f} s has reached "
                     f"Kafka, and {beat}: the connector is stopped, failed or cannot reach "
                     "MySQL or Kafka (set [connect] to see its state)")
    return found


def _waiting_s(arrived: Beat | None, written: Beat, interval_s: float, now_ms: int) -> float:
    """How long the oldest beat written but not ``arrived`` has been on its way: it followed
    the arrived one by an interval (or, with none arrived, the row's first beat, as many
    intervals before the newest as there were beats)."""
    if arrived is not None and arrived.seq >= written.seq:
        return 0.0
    interval_ms = int(interval_s * 1000)
    if arrived is not None:
        first_ms = arrived.beat_ms + interval_ms
    else:
        first_ms = written.beat_ms - (written.seq - 1) * interval_ms
    return max(0.0, (now_ms - min(first_ms, written.beat_ms)) / 1000)
