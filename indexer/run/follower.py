"""The daemon's side of following where binlog-versioned tables' changes come from.

For every change it gives the version epoch (:mod:`indexer.core.sources`); a switch of source
server becomes a new epoch, stored before any change of that epoch is written, with one log
line, a metric and an entry ``indexer check`` reports until an operator acknowledges it.
Cursors are saved every few seconds so the next owner of a stream (after a restart or a
rebalance) keeps following from where this one was.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

from indexer.core.documents import file_number
from indexer.core.envelope import Position
from indexer.core.sources import EPOCH_ZERO, Cursor, Epoch, Registry, Switch, observe_fast
from indexer.core.streams import Delivery, Stream
from indexer.metrics import Metrics
from indexer.run.ports import RegistryStore
from indexer.settings import TableConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

# Cursors are saved at most this often: a save lost in a crash only means re-reading a few
# seconds of changes, which observe() recognises as sent before.
SAVE_EVERY_S = 5.0


class SwitchFound(Exception):
    """A change that starts a new epoch: :meth:`Follower.enter` records it."""

    def __init__(self, table: TableConfig, key: str, position: int, file: int, ts_ms: int,
                 switch: Switch) -> None:
        super().__init__(table.name, key, position)
        self.table, self.key, self.position, self.file = table, key, position, file
        self.ts_ms, self.switch = ts_ms, switch


class NotFollowed(Exception):
    """The first change of a stream this process had not followed yet: load its cursor."""

    def __init__(self, table: TableConfig, stream: Stream) -> None:
        super().__init__(table.name, stream.key)
        self.table, self.stream, self.key = table, stream, stream.key


class Follower:
    def __init__(self, store: RegistryStore, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        self._registries: dict[str, Registry] = {}  # by table alias
        self._tables: dict[str, TableConfig] = {}  # by table alias
        self._owned: dict[str, set[str]] = {}  # alias -> stream keys this process follows
        self._keys: dict[Stream, str] = {}
        self._saved_at = time.monotonic()
        # The stream of the previous change and its (key, cursor): most changes follow one.
        # A stream may be followed twice (its table's registry, a joined document's), so the
        # registry's alias is part of what the cache matches.
        self._last_alias = ""
        self._last_stream: Stream | None = None
        self._last: tuple[Registry, str, Cursor] = (Registry(), "", Cursor())

    def epoch(self, table: TableConfig, delivery: Delivery, position: Position) -> Epoch:
        """The epoch of this change; raises :class:`SwitchFound` or :class:`NotFollowed`
        when I/O must come first. Runs once per change: the common case (the stream of the
        previous change, coordinates moving forward, no switch yet) stays inline."""
        if delivery.replay_of is not None:  # a dead letter sent back: its first epoch
            return self._registries[table.alias].epoch_at(*delivery.replay_of)
        alias = table.alias
        stream = delivery.stream
        if stream is self._last_stream and alias == self._last_alias:
            registry, key, cursor = self._last
        else:
            registry = self._registries[alias]
            found = self._keys.get(stream)
            if found is None or found not in self._owned[alias]:
                raise NotFollowed(table, stream)
            key, cursor = found, registry.cursors[found]
            self._last_alias, self._last_stream = alias, stream
            self._last = (registry, key, cursor)
        at = delivery.position
        if at > cursor.position:
            number = file_number(position.file)
            pos, row = position.pos, position.row
            if cursor.position >= 0 and (number, pos, row) < (cursor.file, cursor.pos,
                                                               cursor.row):
                switch = observe_fast(cursor, at, number, pos, row, position.ts_ms,
                                      position.gtid, position.snapshot)
                if switch is not None:
                    raise SwitchFound(table, key, at, number, position.ts_ms, switch)
            else:  # observe_fast's common case, inline: this runs once per change
                cursor.position, cursor.file, cursor.pos, cursor.row = at, number, pos, row
                cursor.ts_ms, cursor.gtid = position.ts_ms, position.gtid
        if not registry.boundaries:  # no switch yet: the common case
            return EPOCH_ZERO
        return registry.epoch_at(key, at)

    async def follow(self, missing: NotFollowed) -> None:
        """Loads the stored registry (it may hold epochs a reindex started, and the cursor
        the stream's previous owner saved) and starts following the stream."""
        alias = missing.table.alias
        stored = await self._store.load(alias)
        self._adopt(alias, stored)
        self._owned.setdefault(alias, set()).add(missing.key)
        stored.cursor(missing.key)
        self._keys[missing.stream] = missing.key

    async def enter(self, found: SwitchFound) -> None:
        table, key = found.table, found.key
        mine = self._registries[table.alias].cursors[key]
        at = datetime.now(UTC).isoformat(timespec="seconds")

        def record(registry: Registry) -> Epoch:
            registry.cursors[key] = replace(mine)
            return registry.enter(key, found.position, found.file, found.ts_ms, found.switch, at,
                                  f"{table.topic} partition {key.rpartition('/')[2]}")

        stored, epoch = await self._store.update(table.alias, record)
        self._adopt(table.alias, stored, keep=key)
        self._metrics.source_switches.labels(table.name).inc()
        log.error("source switch for %s at %s position %d: %s; before: %s, now: %s. Changes from "
                  "here take version epoch %d, above every earlier version, so none is refused "
                  "as stale. Check the table with `indexer reconcile %s`, then `indexer "
                  "source ack %s`.", table.name, key, found.position, found.switch.reason,
                  found.switch.old, found.switch.new, epoch.number, table.table, table.table)

    def forget(self, stream: Stream) -> None:
        """A stream was revoked: its next owner saves its cursor from now on."""
        self._last_stream = None
        key = self._keys.pop(stream, None)
        for owned in self._owned.values():
            owned.discard(key or "")

    async def save(self, *, force: bool = False) -> None:
        """Stores the cursors of the streams this process follows (every few seconds)."""
        if not force and time.monotonic() - self._saved_at < SAVE_EVERY_S:
            return
        self._saved_at = time.monotonic()
        for alias, keys in self._owned.items():
            if not keys:
                continue
            mine = {k: replace(self._registries[alias].cursors[k]) for k in keys}

            def merge(registry: Registry, mine: dict[str, Cursor] = mine) -> None:
                for key, cursor in mine.items():
                    registry.cursors[key] = cursor
                    registry.note(registry.epoch(cursor.epoch), cursor.file)

            stored, _ = await self._store.update(alias, merge)
            self._adopt(alias, stored)

    def _adopt(self, alias: str, stored: Registry, keep: str | None = None) -> None:
        """Takes the stored registry as this process's, with this process's own cursors (more
        recent than the stored ones) except ``keep``'s, which the stored one already has."""
        current = self._registries.get(alias)
        for key in self._owned.get(alias, set()):
            if current is not None and key != keep and key in current.cursors:
                stored.cursors[key] = current.cursors[key]
        self._registries[alias] = stored
        self._last_stream = None  # cursors may be other objects now
        self._metrics.version_epoch.labels(self._tables[alias].name).set(stored.current.number)

    async def load(self, table: TableConfig) -> None:
        self._tables[table.alias] = table
        self._owned.setdefault(table.alias, set())
        self._adopt(table.alias, await self._store.load(table.alias))

