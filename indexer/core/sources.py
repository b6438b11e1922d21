"""Which server a table's changes come from, and version epochs that stay ordered when that
server changes.

Pure. Binlog versions pack a server's binlog coordinates (file number, position, row). Those
coordinates belong to one server's binlog: after a fail-over to a replica, or RESET MASTER,
new changes can carry *lower* coordinates than changes already indexed, and Elasticsearch
would refuse every one of them as stale. So each partition's coordinates are followed, and
when they go back for a change that is new (not Debezium re-sending what it sent before),
the table starts a new **epoch**: a fixed offset added to the file-number field of every later
version, chosen above every version issued before. Versions stay ordered, nothing is dropped,
no reindex is needed.

A change is new rather than re-sent when its GTID is above the highest one seen for its
replication domain (MariaDB ``domain-server-seq``) or source (MySQL ``uuid:n``), or when its
commit time is later than the last change seen (a reset restarts the sequence numbers).
Snapshot events (``op r``) below the coordinates already seen mean the connector snapshotted
a reset or another server. Where the two cannot be told apart, it is taken as a switch: a new
epoch for a re-sent change only replays that change's tail in order again (the final state is
the same), while a missed switch would drop changes.

Epochs are recorded durably (:class:`Registry`, stored by :mod:`indexer.search.state`) with
the position where each stream entered them (a Kafka offset), so replays, restarts and dead-letter
replays give every change the version it had; the reindex and reconcile's repair check their
snapshot against the same record and start an epoch themselves when their server is not the
one the record followed.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from indexer.core.versions import MAX_FILE
from indexer.errors import SourceError

# The file-number field of a version (indexer.core.versions), which epochs offset.
MAX_FIELD = MAX_FILE
# Commit times in MariaDB's binlog have whole seconds: a snapshot is only known to come after
# an epoch's first change when it is at least this much later.
SAME_SECOND_MS = 1000
# A new epoch starts this many binlog files above the highest file field seen: room for
# coordinates of the old server that this process did not see (other partitions, other
# daemons, a lagging reader) but that were indexed all the same.
EPOCH_MARGIN_FILES = 64

_BINLOG_NUMBER = re.compile(r"\.(\d+)$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_GTID = re.compile(r"^([0-9a-fA-F-]{36}):(\d+)$")


@functools.lru_cache(maxsize=64)
def binlog_file_number(file: str) -> int:
    match = _BINLOG_NUMBER.search(file)
    if not match:
        raise SourceError(f"binlog file name {file!r} has no numeric suffix")
    return int(match.group(1))


def binlog_order(coordinates: tuple[str, int]) -> tuple[int, int]:
    """(file number, position): binlog coordinates of one server in the order they grow."""
    return binlog_file_number(coordinates[0]), coordinates[1]


def parse_gtid(gtid: str | None) -> tuple[str, int] | None:
    """(the sequence's owner, sequence number) of a GTID; None if absent. MariaDB numbers
    transactions per replication domain, and a promoted server that missed the last ones
    reuses their numbers under its own server id: the owner is domain and server. MySQL
    numbers them per source server uuid."""
    if not gtid:
        return None
    if match := _MARIADB_GTID.match(gtid):
        return f"domain {match.group(1)} server {match.group(2)}", int(match.group(3))
    if match := _MYSQL_GTID.match(gtid):
        return match.group(1).lower(), int(match.group(2))
    return None


_MYSQL_INTERVALS = re.compile(r"^([0-9a-fA-F-]{36})((?::\d+(?:-\d+)?)+)$")


def gtid_set_tops(gtids: str) -> dict[str, int] | None:
    """The highest sequence number of each owner in a GTID set as servers and Debezium write
    it: MariaDB's ``domain-server-seq`` list (numbers grow per domain, whichever server) or
    MySQL's ``uuid:1-100:105`` intervals. None when it is not one."""
    tops: dict[str, int] = {}
    for part in (p.strip() for p in gtids.replace("\n", "").split(",")):
        if not part:
            continue
        if match := _MARIADB_GTID.match(part):
            owner, top = f"domain {match.group(1)}", int(match.group(3))
        elif match := _MYSQL_INTERVALS.match(part):
            owner = match.group(1).lower()
            top = max(int(n) for n in re.split(r"[:-]", match.group(2)) if n)
        else:
            return None
        tops[owner] = max(top, tops.get(owner, 0))
    return tops


def gtid_set_reached(done: str, target: str) -> bool | None:
    """Whether the GTID set ``done`` has reached every owner's newest transaction in
    ``target``; None when either cannot be read."""
    have, want = gtid_set_tops(done), gtid_set_tops(target)
    if have is None or want is None:
        return None
    return all(have.get(owner, 0) >= top for owner, top in want.items())


@dataclass(frozen=True)
class Epoch:
    """Versions of this epoch put ``tier + file - base`` in the file-number field."""

    number: int
    tier: int
    base: int
    started_ms: int = 0  # commit time of its first change (or of the snapshot that began it)

    def field(self, file_number: int) -> int:
        return self.tier + file_number - self.base

    def as_json(self) -> dict[str, int]:
        return {"number": self.number, "tier": self.tier, "base": self.base,
                "started_ms": self.started_ms}


EPOCH_ZERO = Epoch(0, 0, 0)  # the plain layout: versions from before epochs existed


@dataclass(frozen=True)
class Point:
    """A change's place in its server's binlog, as Debezium's source block gives it."""

    file: int
    pos: int
    row: int
    ts_ms: int
    gtid: str | None
    snapshot: bool

    @property
    def coordinates(self) -> tuple[int, int, int]:
        return self.file, self.pos, self.row

    def describe(self) -> str:
        gtid = f", GTID {self.gtid}" if self.gtid else ""
        return f"binlog file {self.file} position {self.pos}{gtid}"


@dataclass(slots=True)
class Cursor:
    """What one stream has seen: the last observed position and the highest coordinates."""

    position: int = -1
    file: int = 0
    pos: int = 0
    row: int = 0
    ts_ms: int = 0
    gtid: str | None = None
    epoch: int = 0

    @property
    def coordinates(self) -> tuple[int, int, int]:
        return self.file, self.pos, self.row

    def advance(self, position: int, point: Point) -> None:
        self.position = position
        self.file, self.pos, self.row = point.coordinates
        self.ts_ms, self.gtid = point.ts_ms, point.gtid

    def describe(self) -> str:
        gtid = f", GTID {self.gtid}" if self.gtid else ""
        return f"binlog file {self.file} position {self.pos}{gtid}"

    def as_json(self) -> dict[str, Any]:
        # Stored as "offset", as registries stored before streams had positions.
        return {"offset": self.position, "file": self.file, "pos": self.pos, "row": self.row,
                "ts_ms": self.ts_ms, "gtid": self.gtid, "epoch": self.epoch}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Cursor:
        return cls(int(raw.get("offset", -1)), int(raw.get("file", 0)), int(raw.get("pos", 0)),
                   int(raw.get("row", 0)), int(raw.get("ts_ms", 0)), raw.get("gtid"),
                   int(raw.get("epoch", 0)))


@dataclass(frozen=True)
class Switch:
    """The source of a partition's changes changed: why, from where to where."""

    reason: str
    old: str
    new: str
    old_file: int = 0  # the file number the partition had reached before


def observe(cursor: Cursor, position: int, point: Point) -> Switch | None:
    """Follows one partition: the switch this change reveals, if any. Offsets already
    observed (a re-read after a restart or rebalance) say nothing new."""
    if position <= cursor.position:
        return None
    if cursor.position < 0 or point.coordinates >= cursor.coordinates:
        cursor.advance(position, point)
        return None
    return _went_back(cursor, position, point)


def observe_fast(cursor: Cursor, position: int, file: int, pos: int, row: int, ts_ms: int,
                 gtid: str | None, snapshot: str | bool | None) -> Switch | None:
    """:func:`observe` without building a :class:`Point` for the common case (coordinates
    moving forward): it runs once per event. ``snapshot`` is Debezium's field as it is."""
    if position <= cursor.position:
        return None
    if cursor.position < 0 or (file, pos, row) >= (cursor.file, cursor.pos, cursor.row):
        cursor.position, cursor.file, cursor.pos, cursor.row = position, file, pos, row
        cursor.ts_ms, cursor.gtid = ts_ms, gtid
        return None
    return _went_back(cursor, position, Point(file, pos, row, ts_ms, gtid, in_snapshot(snapshot)))


def in_snapshot(snapshot: str | bool | None) -> bool:
    """Debezium's ``source.snapshot``: "true", "first", "last", ... while snapshotting;
    "false" (or false) when streaming, "incremental" for reads between streamed changes."""
    return snapshot not in (None, False, "false", "incremental")


def _went_back(cursor: Cursor, position: int, point: Point) -> Switch | None:
    if point.snapshot:
        switch = Switch("a snapshot starts below the binlog coordinates already indexed (the "
                        "connector snapshotted a reset or another server)",
                        cursor.describe(), point.describe(), cursor.file)
    elif _resent(cursor, point):
        cursor.position = position  # Debezium sends what it sent before: the highest stays
        return None
    else:
        switch = Switch("binlog coordinates went back for a new change (a fail-over to "
                        "another server, or RESET MASTER)", cursor.describe(), point.describe(),
                        cursor.file)
    cursor.advance(position, point)
    return switch


def _resent(cursor: Cursor, point: Point) -> bool:
    """Whether a change below the cursor is one already seen, sent again."""
    if point.ts_ms > cursor.ts_ms:
        return False  # committed after the last change seen: new
    seen, new = parse_gtid(cursor.gtid), parse_gtid(point.gtid)
    if seen is None or new is None:
        return True
    return new[0] == seen[0] and new[1] <= seen[1]


@dataclass
class Registry:
    """A table's version epochs, where each partition entered them, the partitions' cursors,
    and the switches seen (until an operator acknowledges them). Stored as one document."""

    epochs: list[Epoch] = field(default_factory=lambda: [EPOCH_ZERO])
    # stream key ("topic/partition") -> [(first position, epoch number)], in position order
    boundaries: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    high_field: int = 0  # the highest file-number field value any version used
    switches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def current(self) -> Epoch:
        return self.epochs[-1]

    def epoch(self, number: int) -> Epoch:
        return self.epochs[number]

    def epoch_at(self, key: str, position: int) -> Epoch:
        """The epoch of the change at ``position`` of a stream."""
        starts = self.boundaries.get(key)
        if not starts:
            return EPOCH_ZERO
        if starts[-1][0] <= position:  # the common case: past the last switch
            return self.epochs[starts[-1][1]]
        i = bisect.bisect_right(starts, (position, len(self.epochs))) - 1
        return self.epochs[starts[i][1]] if i >= 0 else EPOCH_ZERO

    def cursor(self, key: str) -> Cursor:
        found = self.cursors.get(key)
        if found is None:
            found = self.cursors[key] = Cursor(epoch=self.epoch_at(key, 1 << 62).number)
        return found

    def note(self, epoch: Epoch, file_number: int) -> None:
        self.high_field = max(self.high_field, epoch.field(file_number))

    def start_epoch(self, file_number: int, started_ms: int) -> Epoch:
        """A new epoch whose first file is ``file_number``, above every version issued."""
        tier = max([self.high_field, *(self.epochs[c.epoch].field(c.file)
                                       for c in self.cursors.values())])
        epoch = Epoch(len(self.epochs), tier + EPOCH_MARGIN_FILES, file_number, started_ms)
        if epoch.field(file_number) > MAX_FIELD - EPOCH_MARGIN_FILES:
            raise SourceError(f"no room for another version epoch (file field {tier} of "
                              f"{MAX_FIELD}); reindex the table with column versions")
        self.epochs.append(epoch)
        self.note(epoch, file_number)
        return epoch

    def enter(self, key: str, position: int, file_number: int, started_ms: int, switch: Switch,
              at: str, where: str) -> Epoch:
        """Records a switch seen at ``position`` of a stream and the epoch its changes take
        from there: the newest one if another partition or a reindex already started it
        for the new server (its first file is not after this change's), else a new one."""
        cursor = self.cursor(key)
        self.note(self.epochs[cursor.epoch], switch.old_file)  # the old server's reach
        latest = self.current
        if latest.number > cursor.epoch and latest.base <= file_number:
            epoch = latest
        else:
            epoch = self.start_epoch(file_number, started_ms)
        self.boundaries.setdefault(key, []).append((position, epoch.number))
        self.boundaries[key].sort()
        cursor.epoch = epoch.number
        self.switches.append({"at": at, "where": where, "offset": position, "epoch": epoch.number,
                              "reason": switch.reason, "old": switch.old, "new": switch.new,
                              "acknowledged": False})
        return epoch

    def snapshot_epoch(self, file_number: int, pos: int, snapshot_ms: int, at: str,
                       where: str) -> Epoch:
        """The epoch for versions taken from a snapshot at these coordinates and server time
        (reindex, repair). A snapshot taken before the current epoch began (a fail-over
        during a reindex) keeps the epoch of its time: the stream's later changes beat it.
        Otherwise the current epoch, or a new one if a partition already saw coordinates of
        it beyond the snapshot's (its server is not the one the stream follows)."""
        in_force = [e for e in self.epochs if e.started_ms + SAME_SECOND_MS <= snapshot_ms]
        epoch = in_force[-1] if in_force else EPOCH_ZERO
        ahead = [c for c in self.cursors.values()
                 if c.epoch == epoch.number and (c.file, c.pos) > (file_number, pos)]
        if epoch.number != self.current.number or not ahead:
            if epoch.field(file_number) <= 0:
                raise SourceError(f"a snapshot at binlog file {file_number} is older than version "
                                  f"epoch {epoch.number}, which began at file {epoch.base}")
            self.note(epoch, file_number)
            return epoch
        seen = max(ahead, key=lambda c: c.coordinates)
        epoch = self.start_epoch(file_number, snapshot_ms)
        self.switches.append({
            "at": at, "where": where, "offset": None, "epoch": epoch.number,
            "reason": "a snapshot of the table's server is below the binlog coordinates "
                      "already indexed (a fail-over to another server, or RESET MASTER)",
            "old": seen.describe(), "new": f"binlog file {file_number} position {pos}",
            "acknowledged": False})
        return epoch

    @property
    def unacknowledged(self) -> list[dict[str, Any]]:
        return [s for s in self.switches if not s.get("acknowledged")]

    def acknowledge(self) -> int:
        pending = self.unacknowledged
        for switch in pending:
            switch["acknowledged"] = True
        return len(pending)

    def as_json(self) -> dict[str, Any]:
        return {
            "epochs": [e.as_json() for e in self.epochs],
            "boundaries": {k: [list(b) for b in v] for k, v in self.boundaries.items()},
            "cursors": {k: c.as_json() for k, c in self.cursors.items()},
            "high_field": self.high_field,
            "switches": self.switches,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Registry:
        epochs = [Epoch(int(e["number"]), int(e["tier"]), int(e["base"]),
                        int(e.get("started_ms", 0))) for e in raw.get("epochs") or []]
        epochs = epochs or [EPOCH_ZERO]
        return cls(
            epochs=epochs,
            boundaries={k: sorted((int(o), int(e)) for o, e in v)
                        for k, v in (raw.get("boundaries") or {}).items()},
            cursors={k: Cursor.from_json(c) for k, c in (raw.get("cursors") or {}).items()},
            high_field=int(raw.get("high_field", 0)),
            switches=list(raw.get("switches") or []),
        )


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"
