"""Rich progress bars for the long-running commands (the cores only report numbers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich import progress as rich_progress
from rich.console import Console

Progress = Callable[[str, int, int], None]  # (phase, done, total): what the cores report


def no_progress(phase: str, done: int, total: int) -> None:
    return None


@contextmanager
def reindex_progress(console: Console, name: str) -> Iterator[Progress]:
    """A ``progress(phase, done, total)`` callback drawing one bar per phase."""
    columns = (
        rich_progress.TextColumn("[bold]{task.description:<24}"),
        rich_progress.BarColumn(),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TextColumn("{task.fields[rate]:>12}"),
        rich_progress.TimeElapsedColumn(),
        rich_progress.TextColumn("eta"),
        rich_progress.TimeRemainingColumn(),
    )
    with rich_progress.Progress(*columns, console=console, transient=False) as bars:
        tasks: dict[str, rich_progress.TaskID] = {}

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
