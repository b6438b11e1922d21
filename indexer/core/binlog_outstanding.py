"""The binlog source's bookkeeping of each change it delivers (compiled: it runs once per row):
the change's position in its table's stream, and the changes delivered and not committed yet,
whose oldest transaction is where a restart reads from.

Pure. A stream's positions are the changes' binlog coordinates packed as versions are (file
number, position, row), doubled (an update of a primary key is two changes: a delete of the
old key, an insert of the new), plus a base (:mod:`indexer.source.binlog.source` says which),
so they grow in commit order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from indexer.core.binlog_changes import RowChange
from indexer.core.sources import binlog_file_number
from indexer.core.streams import ROW_STEP, Delivery, Stream
from indexer.core.versions import pack

Resume = tuple[str, int]


class _Run:
    """A run of one transaction's changes of one stream, up to ``last``, not all committed
    yet; a restart reads again from ``resume`` (with MariaDB's GTID position ``gtids``)."""

    __slots__ = ("gtids", "last", "resume", "stream")

    def __init__(self, last: int, stream: Stream, resume: Resume, gtids: str) -> None:
        self.last, self.stream, self.resume, self.gtids = last, stream, resume, gtids


class Outstanding:
    """Changes delivered and not committed yet, as runs in the order delivered."""

    def __init__(self, streams: Mapping[str, Stream], base: int) -> None:
        self._streams = dict(streams)  # table ("database.table") -> its stream
        self.base = base  # added to every position
        self.last = -1  # the last position delivered: a reconnect skips up to it
        self._file = ("", 0)  # the last change's binlog file, and its number
        self._runs: deque[_Run] = deque()
        self._committed: dict[Stream, int] = {}

    def __bool__(self) -> bool:
        return bool(self._runs)

    def deliver(self, changes: list[RowChange], ready: deque[Delivery]) -> int:
        """Appends each change not delivered before (a reconnect reads some again) to
        ``ready`` at its position (a rows event's built documents at their last row's), and
        records it as outstanding; returns how many changes that delivered."""
        runs, streams = self._runs, self._streams
        delivered = 0
        for change in changes:
            p = change.position
            if p.file != self._file[0]:
                self._file = (p.file, binlog_file_number(p.file))
            rows = change.built_rows
            count = 1 if rows is None else len(rows.documents)
            position = (self.base + pack(self._file[1], p.pos, p.row) * ROW_STEP + change.half
                        + (count - 1) * ROW_STEP)
            if position <= self.last:
                continue
            self.last = position
            stream = streams[change.table]
            run = runs[-1] if runs else None
            if (run is not None and run.stream is stream and run.resume == change.resume
                    and run.gtids == change.resume_gtids):
                run.last = position
            else:
                runs.append(_Run(position, stream, change.resume, change.resume_gtids))
            ready.append(Delivery(stream, position, None, None, change.size,
                                  change=change.change, layout=change.layout,
                                  error=change.error, rows=rows))
            delivered += count
        return delivered

    def commit(self, positions: Mapping[Stream, int]) -> None:
        """Every change below each stream's position is committed (written or
        dead-lettered)."""
        self._committed.update(positions)
        runs, committed = self._runs, self._committed
        while runs and runs[0].last < committed.get(runs[0].stream, -1):
            runs.popleft()

    def oldest(self) -> tuple[Resume, str] | None:
        """Where a restart reads from to see every outstanding change again, with MariaDB's
        GTID position there; None with none outstanding."""
        if not self._runs:
            return None
        run = self._runs[0]
        return run.resume, run.gtids

    def forget(self) -> None:
        """Drops every outstanding change: they are to be read again from elsewhere."""
        self._runs.clear()
