"""`indexer dlq replay`: dead letters sent back to their tables' topics after a fix, chosen
by table (a joined table's letters come from every table of its tree), error kind and time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from indexer.core.trees import tree_topics
from indexer.errors import ConfigError
from indexer.settings import Config, TableConfig
from indexer.source.kafka.dead_letters import ReplayFilter, ReplayReport
from indexer.source.kafka.dead_letters import replay as send_back


async def replay(config: Config, tables: Sequence[TableConfig], kinds: Sequence[str],
                 since: datetime | None, *, dry_run: bool) -> ReplayReport:
    if config.source.kind == "binlog":
        # Its letters hold the change, not a message a topic could take back.
        raise ConfigError(
            "the binlog source keeps its dead letters in the index indexer-dead-letters, and "
            "`indexer dlq replay` cannot send them back yet: fix the cause, then `indexer "
            "reconcile --repair <table>` writes the rows they were about as MySQL has them")
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    selection = ReplayFilter(topics=frozenset(t for table in tables for t in tree_topics(table)),
                             kinds=frozenset(kinds), since=since)
    return await send_back(config.kafka, selection, dry_run=dry_run)
