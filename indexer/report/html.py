"""`indexer reconcile --format html`: one self-contained file, a summary table and a chart of
drift per primary-key range (inline SVG, no scripts or external assets)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from indexer.jobs.reconcile import Report

COLOURS = {"missing": "#d62728", "extra": "#1f77b4", "stale": "#ff7f0e"}
BAR_WIDTH, CHART_HEIGHT = 18, 160


def _chart(report: Report) -> str:
    chunks = report.differing_chunks
    if not chunks:
        return "<p class='ok'>No drift: every chunk matches.</p>"
    peak = max(c.missing + c.extra + c.stale for c in chunks)
    width = max(320, len(chunks) * (BAR_WIDTH + 6) + 60)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' "
             f"height='{CHART_HEIGHT + 70}' role='img' aria-label='drift per key range'>"]
    for i, chunk in enumerate(chunks):
        x = 50 + i * (BAR_WIDTH + 6)
        y = CHART_HEIGHT + 10
        for kind in ("missing", "extra", "stale"):
            count = getattr(chunk, kind)
            if not count:
                continue
            h = count / peak * CHART_HEIGHT
            y -= h
            parts.append(f"<rect x='{x}' y='{y:.1f}' width='{BAR_WIDTH}' height='{h:.1f}' "
                         f"fill='{COLOURS[kind]}'><title>{kind}: {count} in "
                         f"{html.escape(chunk.low)}..{html.escape(chunk.high)}</title></rect>")
        label = html.escape(chunk.low)
        parts.append(f"<text x='{x + BAR_WIDTH / 2}' y='{CHART_HEIGHT + 24}' font-size='9' "
                     f"transform='rotate(45 {x + BAR_WIDTH / 2} {CHART_HEIGHT + 24})'>"
                     f"{label}</text>")
    parts.append(f"<text x='4' y='18' font-size='11'>{peak}</text>"
                 f"<text x='4' y='{CHART_HEIGHT + 10}' font-size='11'>0</text></svg>")
    legend = " ".join(f"<span style='color:{c}'>&#9632; {k}</span>" for k, c in COLOURS.items())
    return f"<p>{legend} (per differing key range; hover for counts)</p>" + "".join(parts)


def render(reports: Sequence[Report]) -> str:
    rows = "".join(
        f"<tr class='{'ok' if r.clean else 'drift'}'><td>{html.escape(r.table)}</td>"
        f"<td>{r.rows:,}</td><td>{r.documents:,}</td><td>{r.chunks:,}</td>"
        f"<td>{r.chunks_differing:,}</td><td>{len(r.missing)}</td><td>{len(r.extra)}</td>"
        f"<td>{len(r.stale)}</td><td>{r.seconds:.1f}</td></tr>" for r in reports)
    sections = []
    for r in reports:
        ids = "".join(
            f"<details><summary>{kind}: {len(getattr(r, kind))}</summary><p>"
            f"{html.escape(', '.join(getattr(r, kind)))}</p></details>"
            for kind in ("missing", "extra", "stale") if getattr(r, kind))
        sections.append(f"<h2>{html.escape(r.table)} → {html.escape(r.alias)}</h2>"
                        f"<p>{html.escape(r.chunking)}; started {html.escape(r.started_at)}</p>"
                        f"{_chart(r)}{ids}")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<title>indexer reconciliation</title><style>"
        "body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right}td:first-child{text-align:left}.drift td:first-child{color:#c00}"
        ".ok{color:#080}</style></head><body><h1>Reconciliation: MySQL vs Elasticsearch</h1>"
        "<table><tr><th>table</th><th>rows</th><th>documents</th><th>chunks</th>"
        "<th>differing</th><th>missing</th><th>extra</th><th>stale</th><th>seconds</th></tr>"
        f"{rows}</table>{''.join(sections)}</body></html>"
    )
