"""Renderings of a reconciliation report: terminal summary, JSON, one-file HTML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson
from rich.console import Console

from indexer.jobs.reconcile import Report
from indexer.report.html import render as html_page
from indexer.report.terminal import render as terminal_summary

FORMATS = ("text", "json", "html")


def write(reports: Sequence[Report], failed: Mapping[str, str], output_format: str,
          output: Path | None, stdout: Console) -> None:
    """The reports (and the tables that could not be reconciled, with why) in a format, to
    ``output`` or the terminal."""
    if output_format == "text":
        if output is None:
            terminal_summary(stdout, reports)
            return
        with output.open("w", encoding="utf-8") as file:
            terminal_summary(Console(file=file), reports)
        return
    text = (orjson.dumps({"tables": [r.as_json() for r in reports],
                          "errors": [{"table": t, "error": e} for t, e in failed.items()]},
                         option=orjson.OPT_INDENT_2).decode()
            if output_format == "json" else html_page(reports))
    if output is None:
        stdout.file.write(text + "\n")
    else:
        output.write_text(text, encoding="utf-8")
