"""The text summary of `indexer reconcile`: a table on a terminal, plain aligned columns
anywhere else (a file, a pipe, CI logs), where nothing may be cut to fit a width."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from indexer.jobs.reconcile import Report

SHOWN_IDS = 10  # ids listed per kind; --format json has them all
COLUMNS = ("table", "rows", "documents", "chunks", "differing", "missing", "extra", "stale",
           "repaired", "seconds")
TITLE = "reconciliation: MySQL (authority) vs Elasticsearch"


def render(console: Console, reports: Sequence[Report]) -> None:
    rows = [_cells(r) for r in reports]
    if console.is_terminal:
        table = Table(title=TITLE)
        for column in COLUMNS:
            table.add_column(column, justify="left" if column == "table" else "right")
        for r, cells in zip(reports, rows, strict=True):
            style = "green" if r.clean else "red"
            table.add_row(f"[{style}]{cells[0]}[/{style}]", *cells[1:])
        console.print(table)
    else:
        for line in plain_lines(rows):
            console.out(line, highlight=False)
    for r in reports:
        for note in r.notes:
            console.out(f"{r.table}: {note}", highlight=False)
        for kind in ("missing", "extra", "stale"):
            ids: list[str] = getattr(r, kind)
            if ids:
                more = f" … and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
                console.out(f"{r.table} {kind}: {', '.join(ids[:SHOWN_IDS])}{more}",
                            highlight=False)
        for doc_id, parts in list(r.stale_fields.items())[:SHOWN_IDS]:
            console.out(f"{r.table} stale {doc_id}: {', '.join(parts)}", highlight=False)


def _cells(r: Report) -> list[str]:
    repaired = "-" if r.repaired is None else str(
        r.repaired.get("rewritten", 0) + r.repaired.get("tombstoned", 0))
    return [r.table, f"{r.rows:,}", f"{r.documents:,}", f"{r.chunks:,}",
            f"{r.chunks_differing:,}", str(len(r.missing)), str(len(r.extra)),
            str(len(r.stale)), repaired, f"{r.seconds:.1f}"]


def plain_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """The title, a header and one line per table, every column as wide as its widest cell."""
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [TITLE, line(COLUMNS), *(line(row) for row in rows)]
