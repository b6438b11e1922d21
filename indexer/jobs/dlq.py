"""`indexer dlq replay`: dead letters sent back to their tables' topics after a fix, chosen
by table (a joined table's letters come from every table of its tree), error kind and time;
on the binlog source, written again from the search server (:mod:`indexer.jobs.binlog_letters`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from indexer.core.trees import tree_topics
from indexer.jobs.binlog_letters import replay_letters
from indexer.settings import Config, TableConfig
from indexer.source.kafka.dead_letters import ReplayFilter, ReplayReport
from indexer.source.kafka.dead_letters import replay as send_back


async def replay(config: Config, tables: Sequence[TableConfig], kinds: Sequence[str],
                 since: datetime | None, *, dry_run: bool) -> ReplayReport:
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    if config.source.kind == "binlog":  # its letters are kept in the search server
        return await replay_letters(config, tables, kinds, since, dry_run=dry_run)
    selection = ReplayFilter(topics=frozenset(t for table in tables for t in tree_topics(table)),
                             kinds=frozenset(kinds), since=since)
    return await send_back(config.kafka, selection, dry_run=dry_run)
