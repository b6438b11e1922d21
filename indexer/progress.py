"""Rich progress bars for the long-running commands (the cores only report numbers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@contextmanager
def reindex_progress(console: Console, name: str) -> Iterator[Callable[[str, int, int], None]]:
    """A ``progress(phase, done, total)`` callback drawing one bar per phase."""
    columns = (
        TextColumn("[bold]{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>12}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bars:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bars.add_task(f"{name} {phase}", total=total or None, rate="")
            task = tasks[phase]
            if total:
                bars.update(task, total=total)
            bars.update(task, completed=done)
            speed = bars.tasks[task].speed
            bars.update(task, rate=f"{speed:,.0f}/s" if speed and phase == "load" else "")
            # The row count is an estimate: let the bar grow rather than overflow.
            current = bars.tasks[task].total
            if current is not None and done > current:
                bars.update(task, total=done)

        yield update
