"""What continuous verification's record of a table says is wrong, for `indexer check` and
`indexer status` (the daemon writes the record: :mod:`indexer.run.verify`). Pure."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from indexer.settings import TableConfig, VerifySettings


def record_problems(table: TableConfig, record: dict[str, Any] | None,
                    settings: VerifySettings, now_s: float | None = None) -> list[str]:
    """What a table's verification record says is wrong: rows found differing and not
    repaired, or (verification on) no whole pass for two periods."""
    if not record:
        return []
    found = []
    unrepaired: dict[str, str] = record.get("unrepaired", {})
    if count := int(record.get("unrepaired_count", 0)):
        sample = ", ".join(f"{i} ({k})" for i, k in list(unrepaired.items())[:5])
        fix = "" if record.get("repair") else ", or set verify.repair = true"
        found.append(f"{table.name}: {count:,} rows differ from MySQL (found "
                     f"{record.get('found_at') or record.get('reconciled_at') or '-'}; e.g. "
                     f"{sample}): `indexer explain {table.table} <id>` says why, `indexer "
                     f"reconcile --repair {table.table}` repairs them{fix}")
    if settings.enabled:
        now_s = time.time() if now_s is None else now_s
        last = record.get("last_pass_at") or record.get("pass_started_at")
        if last and now_s - datetime.fromisoformat(last).timestamp() > 2 * settings.period_s:
            found.append(f"{table.name}: no whole verification pass since {last} (verify."
                         f"period_s is {settings.period_s:g} s): is `indexer run` running? Its "
                         "log says why verification paused")
    return found
