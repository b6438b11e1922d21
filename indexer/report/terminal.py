"""The terminal summary of `indexer reconcile`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from indexer.reconcile import Report

SHOWN_IDS = 10  # ids listed per kind; --format json has them all


def render(console: Console, reports: Sequence[Report]) -> None:
    table = Table(title="reconciliation: MySQL (authority) vs Elasticsearch")
    for column in ("table", "rows", "documents", "chunks", "differing", "missing", "extra",
                   "stale", "repaired", "seconds"):
        table.add_column(column, justify="left" if column == "table" else "right")
    for r in reports:
        repaired = "-" if r.repaired is None else str(sum(
            v for k, v in r.repaired.items() if k != "refused_as_newer"))
        style = "green" if r.clean else "red"
        table.add_row(f"[{style}]{r.table}[/{style}]", f"{r.rows:,}", f"{r.documents:,}",
                      f"{r.chunks:,}", f"{r.chunks_differing:,}", str(len(r.missing)),
                      str(len(r.extra)), str(len(r.stale)), repaired, f"{r.seconds:.1f}")
    console.print(table)
    for r in reports:
        for kind in ("missing", "extra", "stale"):
            ids: list[str] = getattr(r, kind)
            if ids:
                more = f" … and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
                console.print(f"{r.table} {kind}: {', '.join(ids[:SHOWN_IDS])}{more}",
                              soft_wrap=True)
