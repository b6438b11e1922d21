"""Before a command writes, maps, compares or repairs a table's index: is it this table's?

Every index behind the table's alias and sync alias must record this table of this source as
its owner (:mod:`indexer.core.ownership`). One recorded for another is refused with one line
naming both (exit 2; `indexer check` names it). One with no record (made by a release before
records) is adopted, its record written, when its documents are this table's; else refused,
pointing at `indexer mappings adopt`, which records it (``--force``: over another's record).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from indexer.core.ownership import ADOPTION_SAMPLE, Owner, adoption_problem, conflict, owner_of
from indexer.errors import OwnershipError
from indexer.jobs.table_reads import reads_for
from indexer.search.admin import alias_state, index_owners, record_owner, sample_documents
from indexer.search.client import SearchClient
from indexer.settings import Config, TableConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """Who each index behind a table's aliases belongs to, as found."""

    alias: str
    owners: dict[str, Owner | None]  # index -> its recorded owner (None: none)

    def problems(self, wanted: Owner) -> list[str]:
        """Lines refusing the indices another owns (unrecorded ones are not problems yet)."""
        return [conflict(self.alias, index, found, wanted)
                for index, found in sorted(self.owners.items())
                if found is not None and not found.same(wanted)]

    @property
    def unrecorded(self) -> list[str]:
        return sorted(index for index, found in self.owners.items() if found is None)


async def look(client: SearchClient, table: TableConfig) -> Claim:
    """The owners of every index behind the table's alias and sync alias (none: no index)."""
    state = await alias_state(client, table.alias)
    return Claim(table.alias, await index_owners(client, {*state.live, *state.synced}))


async def claim(config: Config, client: SearchClient, table: TableConfig) -> None:
    """Raises OwnershipError unless every index behind the table's aliases is this table's;
    adopts unrecorded ones whose documents are (writing the record)."""
    wanted = owner_of(config, table)
    found = await look(client, table)
    if problems := found.problems(wanted):
        raise OwnershipError(problems[0])
    for index in found.unrecorded:
        why = await _not_adoptable(config, client, table, index)
        if why is not None:
            raise OwnershipError(
                f"alias {table.alias}: index {index} records no owner (made before indexer "
                f"recorded them) and cannot be taken to be {table.name}'s: {why}; if it is, "
                f"`indexer mappings adopt {table.table}` records it, else give "
                f"{table.name} another alias")
        await record_owner(client, index, wanted)
        log.info("table %s: adopted index %s (made before indexer recorded owners; its "
                 "documents are this table's)", table.name, index)


async def adopt(config: Config, client: SearchClient, table: TableConfig, *,
                force: bool = False) -> list[tuple[str, Owner | None]]:
    """Records the table as the owner of every index behind its aliases that records none
    (``force``: or another); returns (index, the owner it recorded before) for each changed."""
    wanted = owner_of(config, table)
    found = await look(client, table)
    if not force and (problems := found.problems(wanted)):
        raise OwnershipError(problems[0])
    changed = [(index, before) for index, before in sorted(found.owners.items())
               if before is None or not before.same(wanted)]
    for index, _ in changed:
        await record_owner(client, index, wanted)
    return changed


async def _not_adoptable(config: Config, client: SearchClient, table: TableConfig,
                         index: str) -> str | None:
    samples = await sample_documents(client, index, ADOPTION_SAMPLE)
    if not samples or table.canary:  # the canary's beats are the product's own
        return None
    reads = await asyncio.to_thread(reads_for, config, table)
    ids = [str(s["_id"]) for s in samples]

    def fields() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for doc_id in ids:
            document, _ = reads.now(doc_id)
            if document is not None:
                found[doc_id] = set(document)
        return found

    return adoption_problem(samples, await asyncio.to_thread(fields))

