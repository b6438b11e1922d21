"""The daemon's side of table changes.

A row of a layout the decoder has not accepted (:class:`~indexer.core.events.LayoutChanged`: a
column added, dropped, renamed or retyped) stops its slice of the batch before it is decoded.
Here it is logged once and counted; the table's column types are read again from MySQL's
information_schema (messages without schemas are decoded with them); with
``new_columns = "map"`` each new field gets its generated type in every index behind the sync
alias, before its first value is written. Then the decoder accepts the layout and the message
is decoded again. Values the mapping still refuses are dead-lettered as ``mapping-conflict``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from indexer.core import conditions, field_types, routing
from indexer.core.documents import DocumentBuilder
from indexer.core.events import (
    EnvelopeDecoder,
    LayoutChanged,
    column_hint,
    describe_change,
    layout_changes,
)
from indexer.core.layout import Column, TableLayout
from indexer.core.mappings import sync_alias
from indexer.core.ownership import conflict, owner_in, owner_of
from indexer.errors import ConfigError, MissingTable
from indexer.metrics import Metrics
from indexer.search import admin
from indexer.search.client import SearchClient, SearchError
from indexer.search.retry import retrying
from indexer.settings import Config, TableConfig
from indexer.source.mysql import retry as mysql_retry
from indexer.source.mysql import schema

log = logging.getLogger(__name__)
# A table's layout cannot be read: MySQL away or refusing, or the table is not there.
_UNREADABLE: tuple[type[Exception], ...] = (LookupError, *mysql_retry.FAILURES)


class SchemaWatch:
    def __init__(self, config: Config, client: SearchClient, metrics: Metrics) -> None:
        self._config = config
        self._client = client
        self._metrics = metrics
        self._capabilities: field_types.Capabilities | None = None  # probed once, if needed
        self._unreadable: set[str] = set()  # tables whose columns could not be read

    async def start(self, table: TableConfig, decoder: EnvelopeDecoder) -> None:
        """Column types from MySQL for messages without schemas (or hints only, said once).
        A table MySQL does not have stops the start: its name is misspelt."""
        layout = await self._read(table, at_start=True)
        if layout is not None:
            conditions.bind(table.rows, layout, table.name)  # what it refuses stops the start
            if not table.joins:
                routing.check_column(table.routing, layout, table.name)
            decoder.learn_types(column_hints(layout))

    async def changed(self, table: TableConfig, decoder: EnvelopeDecoder,
                      change: LayoutChanged) -> None:
        first = change.previous is None  # after a start or a rebalance
        if table.canary:
            decoder.accept(change.current)
            return
        if not first:
            log.warning("table %s: the rows' layout changed (%s): %s", table.name,
                        change.origin, describe_change(change.previous, change.current))
            self._metrics.layout_changes.labels(table.name).inc()
        layout = await self._read(table)
        if layout is not None:
            decoder.learn_types(column_hints(layout))
            # A transform's fields are the function's, not the columns': the mapping is the
            # user's (a column's type put under its name could refuse what the function makes).
            if table.new_columns == "map" and not table.transform:
                mapped, looked_at = await self._map_new_fields(table, change, layout)
                if first and mapped and len(mapped) < looked_at:
                    # Columns added while indexer was not running: a change like any other.
                    # Or NULL in every document so far: a dynamic mapping maps no null.
                    log.warning("table %s: the first rows since the start have fields the "
                                "index did not map (columns added while indexer was stopped, "
                                "or NULL in every row indexed so far?): %s; mapped",
                                table.name, ", ".join(mapped))
                    self._metrics.layout_changes.labels(table.name).inc()
                elif first and mapped:  # a new index whose mapping names no field
                    log.info("table %s: mapped the rows' fields as `indexer mappings generate` "
                             "would: %s", table.name, ", ".join(mapped))
        decoder.accept(change.current)

    async def _read(self, table: TableConfig, at_start: bool = False) -> TableLayout | None:
        try:
            layout = await asyncio.to_thread(schema.read_layout, self._config.mysql,
                                             table.database, table.table)
        except _UNREADABLE as exc:
            if at_start and isinstance(exc, MissingTable):
                raise ConfigError(schema.missing_table(self._config.mysql, table, exc)) from exc
            if table.name not in self._unreadable:
                log.warning("table %s: cannot read its columns from MySQL (%s): messages "
                            "without schemas are decoded with column_types hints only, and "
                            "new columns are left to the mapping", table.name, exc)
            self._unreadable.add(table.name)
            return None
        self._unreadable.discard(table.name)
        return layout

    async def _map_new_fields(self, table: TableConfig, change: LayoutChanged,
                              layout: TableLayout) -> tuple[list[str], int]:
        """Maps the change's added fields that no index behind the sync alias maps yet (on a
        first layout, every field is looked at): (the fields mapped, sorted; how many were
        looked at)."""
        added, _, _ = layout_changes(change.previous, change.current)
        names = DocumentBuilder(table).field_names(added)
        columns = {c.name: c for c in layout.columns}
        wanted = {field: columns[column] for column, field in names.items() if column in columns}
        if not wanted:
            return [], 0
        try:
            # While the search server is away, as a bulk would: the fields must exist first.
            async for attempt in retrying(self._config.batch.max_backoff_s):
                with attempt:
                    return await self._put_fields(table, wanted), len(wanted)
        except SearchError as exc:
            log.warning("table %s: could not map the new fields %s (%s); documents the "
                        "mapping refuses are dead-lettered as mapping-conflict", table.name,
                        ", ".join(sorted(wanted)), exc)
        return [], len(wanted)

    async def _put_fields(self, table: TableConfig, wanted: dict[str, Column]) -> list[str]:
        mappings = await self._client.request("GET", f"/{sync_alias(table.alias)}/_mapping")
        mine = owner_of(self._config, table)
        for index, body in list(mappings.items()):
            found = owner_in(body.get("mappings", {}).get("_meta"))
            if found is not None and not found.same(mine):  # added to the alias since the start
                log.error("table %s: not mapping new fields into %s: %s", table.name, index,
                          conflict(table.alias, index, found, mine))
                del mappings[index]
        unmapped = {index: [f for f in wanted if f not in _properties(body)]
                    for index, body in mappings.items()}
        if not any(unmapped.values()):
            return []  # the usual answer after a start: nothing to probe or put
        if self._capabilities is None:
            self._capabilities = await admin.field_capabilities(self._client, table.alias)
        mapped: set[str] = set()
        for index, fields in unmapped.items():
            new = {field: field_types.field_for(wanted[field], self._capabilities)
                   for field in fields}
            if new:
                await self._client.put_mapping(index, new)
                mapped.update(new)
                log.info("table %s: mapped new fields in %s: %s", table.name, index,
                         ", ".join(f"{f} ({spec['type']})" for f, spec in new.items()))
        return sorted(mapped)


def column_hints(layout: TableLayout) -> dict[str, str]:
    return {c.name: column_hint(c.data_type, c.column_type, c.scale) for c in layout.columns}


def _properties(index_mapping: Any) -> dict[str, Any]:
    found = index_mapping.get("mappings", {}).get("properties", {})
    return found if isinstance(found, dict) else {}
