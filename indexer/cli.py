"""Command line: parse, configure logging, build the config, run. Nothing else lives here."""

from __future__ import annotations

import asyncio
import functools
import gc
import signal
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from indexer import logs
from indexer.config import load_config
from indexer.errors import ConfigError, IndexerError, MappingError
from indexer.security import Redactor
from indexer.settings import Config, TableConfig

if TYPE_CHECKING:
    pass

app = typer.Typer(help="Keeps Elasticsearch in sync with MySQL/MariaDB via Debezium.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
mappings_app = typer.Typer(help="Index definitions under mappings/.", no_args_is_help=True)
dlq_app = typer.Typer(help="The dead-letter topic.", no_args_is_help=True)
tombstones_app = typer.Typer(help="Tombstones of deleted rows.", no_args_is_help=True)
source_app = typer.Typer(help="Where binlog-versioned tables' changes come from: version "
                         "epochs and source switches (fail-over, RESET MASTER), and the binlog "
                         "source's position.",
                         no_args_is_help=True)


def _print_version(value: bool) -> None:
    if value:
        from indexer.build import current_build

        print(current_build().describe)
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="print the version and whether the per-event path is compiled, then exit")] = False,
             ) -> None:
    pass


app.add_typer(mappings_app, name="mappings")
app.add_typer(source_app, name="source")
app.add_typer(dlq_app, name="dlq")
app.add_typer(tombstones_app, name="tombstones")

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="TOML config file",
                                                   envvar="INDEXER_CONFIG")]
LogLevel = Annotated[str | None, typer.Option(
    "--log-level", help="DEBUG, INFO, WARNING or ERROR; default: logging.level (INFO)")]
TablesArg = Annotated[list[str] | None, typer.Argument(help="tables (name, table or alias)")]
AllTables = Annotated[bool, typer.Option("--all", help="every configured table")]
# Lines are never wrapped: an error is one line, whatever reads it.
err = Console(stderr=True, soft_wrap=True)

T = TypeVar("T")
# Gen-0 collections every this many allocations: above the few batches in flight (~150k
# objects), so most of a batch's objects are freed by their count before a collection sees them.
GC_THRESHOLD = 500_000
EXIT_DRIFT = 1  # `reconcile` found differences (`check`: unhealthy)
EXIT_ERROR = 2  # configuration or runtime error
DEFAULT_SINCE_S = 24 * 3600  # `status` counts a day of dead letters unless told


def _config(path: Path | None, level: str | None) -> Config:
    try:
        config = load_config(path)
    except ConfigError as exc:
        err.print(f"[red]configuration error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_ERROR) from exc
    logs.configure(config.logging.format, level or config.logging.level, Redactor(config.secrets()))
    return config


@app.command()
def run(config: ConfigOption = None, log_level: LogLevel = None) -> None:
    """Stream Debezium change events from Kafka into Elasticsearch until stopped."""
    from indexer.run.daemon import Daemon

    cfg = _config(config, log_level)
    _tune_gc()

    async def main() -> None:
        daemon = Daemon(cfg)
        daemon.install_signal_handlers()
        daemon.metrics.serve(cfg.metrics.host, cfg.metrics.port)
        await daemon.run()

    _run(cfg, main())


@app.command()
def check(config: ConfigOption = None, log_level: LogLevel = None) -> None:
    """Health as exit code: 0 when Elasticsearch, Kafka and every table's alias answer."""
    from indexer.build import current_build
    from indexer.jobs.health import check_health

    cfg = _config(config, log_level)
    problems = _run(cfg, check_health(cfg))
    err.print(current_build().describe)
    redact = Redactor(cfg.secrets())
    for problem in problems:
        err.print(f"[red]unhealthy:[/red] {escape(redact(problem))}")
    if problems:
        raise typer.Exit(EXIT_DRIFT)
    err.print("[green]healthy[/green]")


@app.command()
def explain(
    table: Annotated[str, typer.Argument(help="table (name, table or alias)")],
    key: Annotated[str, typer.Argument(help="primary key as the document id: the value, or "
                                       "a composite key's values joined by '|'")],
    output_format: Annotated[str, typer.Option("--format", help="text or json")] = "text",
    scan: Annotated[int, typer.Option(min=1, help="records read back per partition looking "
                                      "for the key's events")] = 50_000,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """Why the index shows what it shows for one row: MySQL, every index, the key's events
    and dead letters, and the fix. Exit 0 in sync, 1 differs, 2 error."""
    from indexer.jobs.explain import explain as explain_row
    from indexer.jobs.explain import render_text

    cfg = _config(config, log_level)
    _check_format(output_format, ("text", "json"))
    result = _run(cfg, explain_row(cfg, _table(cfg, table), key, scan_budget=scan))
    _emit(cfg, output_format, result.as_json, lambda: render_text(result))
    if not result.verdict.in_sync:
        raise typer.Exit(EXIT_DRIFT)


@app.command()
def status(
    output_format: Annotated[str, typer.Option("--format", help="text or json")] = "text",
    since: Annotated[datetime | None, typer.Option(
        help="count dead letters since (UTC unless it says); default: the last 24 hours")] = None,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """Each table's lag, freshness, dead letters, indices and consumers; exit codes like check."""
    import time
    from datetime import UTC

    from indexer.jobs.status import gather, render_text

    cfg = _config(config, log_level)
    _check_format(output_format, ("text", "json"))
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    since_ms = int((since.timestamp() if since else time.time() - DEFAULT_SINCE_S) * 1000)
    result = _run(cfg, gather(cfg, since_ms))
    _emit(cfg, output_format, result.as_json, lambda: render_text(result))
    if result.problems:
        raise typer.Exit(EXIT_DRIFT)


@app.command()
def reindex(
    tables: TablesArg = None,
    all_tables: AllTables = False,
    parallel: Annotated[int, typer.Option(min=1, max=32, help="readers over key ranges")] = 1,
    rollback: Annotated[bool, typer.Option("--rollback", help="point the alias back at the "
                                           "previous index instead")] = False,
    delete_old: Annotated[bool, typer.Option("--delete-old", help="delete every index of the "
                                             "table but the live one")] = False,
    force: Annotated[bool, typer.Option("--force", help="--rollback even to an index that "
                                        "refused writes since the swap")] = False,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """Rebuild tables from MySQL into fresh indices and swap the alias, with no downtime."""
    from indexer.jobs import reindex as rebuild
    from indexer.progress import reindex_progress

    cfg = _config(config, log_level)
    selected = _select(cfg, tables, all_tables)
    _tune_gc()
    for table in selected:
        if rollback:
            current, previous = _run(cfg, rebuild.rollback(cfg, table, force=force))
            err.print(f"{table.name}: alias {table.alias} -> {previous} (was {current})")
        elif delete_old:
            deleted = _run(cfg, rebuild.delete_old(cfg, table))
            err.print(f"{table.name}: deleted {', '.join(deleted) or 'nothing'}")
        else:
            with reindex_progress(err, table.name) as progress:
                result = _run(cfg, rebuild.reindex(cfg, table, parallel=parallel,
                                                   progress=progress))
            err.print(
                f"{table.name}: {result.rows:,} rows in {result.seconds:.1f}s "
                f"({result.rows / max(result.seconds, 1e-9):,.0f}/s) into {result.index}; "
                f"{result.written:,} written, {result.stale:,} already newer, "
                f"{result.tombstones:,} tombstones kept; snapshot {', '.join(result.positions)}; "
                f"alias {table.alias} now -> {result.index}"
                + (f" (previous: {', '.join(result.replaced)}, kept for --rollback)"
                   if result.replaced else ""), soft_wrap=True)


@app.command()
def reconcile(
    tables: TablesArg = None,
    all_tables: AllTables = False,
    repair: Annotated[bool, typer.Option("--repair", help="fix what differs")] = False,
    output_format: Annotated[str, typer.Option("--format", help="text, json or html")] = "text",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the report "
                                                "here instead of stdout")] = None,
    settle: Annotated[float, typer.Option(help="seconds to wait before re-checking rows that "
                                          "differ (live writes)")] = 2.0,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """Compare MySQL with the index: exit 0 when they match, 1 on drift, 2 on errors."""
    from indexer import report
    from indexer.jobs import reconcile as checker
    from indexer.progress import reindex_progress

    cfg = _config(config, log_level)
    _check_format(output_format, report.FORMATS)
    selected = _select(cfg, tables, all_tables)
    reports = []
    failed: dict[str, str] = {}  # table -> why it was not reconciled; the others still are
    for table in selected:
        try:
            with reindex_progress(err, table.name) as progress:
                reports.append(_run(cfg, checker.reconcile(cfg, table, repair=repair,
                                                           settle_s=settle, progress=progress),
                                    failed=functools.partial(failed.__setitem__, table.name)))
        except typer.Exit:
            if len(selected) == 1:
                raise
            err.print(f"[red]{table.name}: not reconciled[/red]; going on with the others")
    report.write(reports, failed, output_format, output, Console())
    if failed:
        err.print(f"[red]error:[/red] not reconciled: {', '.join(failed)}")
        raise typer.Exit(EXIT_ERROR)
    if not all(r.clean for r in reports):
        raise typer.Exit(EXIT_DRIFT)


@mappings_app.command("validate")
def mappings_validate(
    files_only: Annotated[bool, typer.Option("--files-only", help="check the files, not the "
                                             "tables in MySQL")] = False,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """Check every table's mapping file, and each mapping against the live table: every
    column whose values it would refuse or lose. Exit 0 fits, 1 would refuse or lose, 2 error."""
    from indexer.jobs.mappings import validate

    cfg = _config(config, log_level)
    failed = False
    for table in cfg.tables:
        try:
            found = _run(cfg, validate(cfg, table, files_only=files_only), passes=(MappingError,))
        except MappingError as exc:
            err.print(f"[red]invalid mapping:[/red] {escape(str(exc))}")
            raise typer.Exit(EXIT_ERROR) from exc
        if files_only:
            err.print(f"{table.name}: {found.source} ok")
            continue
        for note in found.notes:
            err.print(f"{table.name}: note: {escape(note)}")
        for problem in found.problems:
            err.print(f"[red]{table.name}:[/red] {escape(problem)}")
        failed = failed or bool(found.problems)
        err.print(f"{table.name}: {found.source} "
                  + ("[red]refuses or loses values[/red]" if found.problems
                     else "fits the table"))
    if failed:
        raise typer.Exit(EXIT_DRIFT)


@mappings_app.command("generate")
def mappings_generate(
    tables: TablesArg = None,
    all_tables: AllTables = False,
    server: Annotated[str | None, typer.Option(help="es9, es8, opensearch2 or opensearch3; "
                                               "default: ask the configured server")] = None,
    write: Annotated[bool, typer.Option("--write", help="write mappings/<mapping> instead of "
                                        "printing it")] = False,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """A mapping for each table from its columns in MySQL (include/exclude/rename applied)."""
    import orjson

    from indexer.core.field_types import SERVERS
    from indexer.jobs.mappings import capabilities, generated

    cfg = _config(config, log_level)
    selected = _select(cfg, tables, all_tables)
    if server is not None and server not in SERVERS:
        err.print(f"[red]--server is one of {', '.join(SERVERS)}[/red]")
        raise typer.Exit(EXIT_ERROR)
    caps = _run(cfg, capabilities(cfg, server, selected[0].alias))
    for table in selected:
        text = orjson.dumps(_run(cfg, generated(cfg, table, caps)),
                            option=orjson.OPT_INDENT_2).decode() + "\n"
        if write:
            path = cfg.elasticsearch.mappings_dir / table.mapping
            path.write_text(text, encoding="utf-8")
            err.print(f"{table.name}: wrote {path} for {caps.name}")
        else:
            sys.stdout.write(text)


@mappings_app.command("apply")
def mappings_apply(
    config: ConfigOption = None,
    table: Annotated[list[str] | None, typer.Option(help="only these tables")] = None,
    log_level: LogLevel = None,
) -> None:
    """Create each table's versioned index and aliases from its mapping file, if missing."""
    from indexer.jobs.mappings import apply

    cfg = _config(config, log_level)
    tables = [_table(cfg, t) for t in table] if table else list(cfg.tables)
    for t, state in zip(tables, _run(cfg, apply(cfg, tables)), strict=True):
        err.print(f"{t.name}: alias {t.alias} -> {', '.join(state.live)}")


@mappings_app.command("adopt")
def mappings_adopt(
    tables: TablesArg = None,
    all_tables: AllTables = False,
    force: Annotated[bool, typer.Option("--force", help="also take over indices recorded for "
                                        "another table or source (a renamed table)")] = False,
    config: ConfigOption = None,
    log_level: LogLevel = None,
) -> None:
    """Record each table as the owner of the indices behind its alias (those made before
    indexer recorded owners, or with --force another's)."""
    from indexer.jobs.mappings import adopt_all

    cfg = _config(config, log_level)
    selected = _select(cfg, tables, all_tables)
    for t, changed in zip(selected, _run(cfg, adopt_all(cfg, selected, force=force)),
                          strict=True):
        for index, before in changed:
            was = "no owner recorded" if before is None else f"was {before.describe()}"
            err.print(f"{t.name}: {index} recorded as {t.name}'s ({was})")
        if not changed:
            err.print(f"{t.name}: every index behind {t.alias} is already its own")


@dlq_app.command("replay")
def dlq_replay(
    config: ConfigOption = None,
    table: Annotated[list[str] | None, typer.Option(help="only these tables' letters")] = None,
    kind: Annotated[list[str] | None, typer.Option(help="only these error kinds")] = None,
    since: Annotated[datetime | None, typer.Option(help="only dead letters failed since")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, do not send")] = False,
    log_level: LogLevel = None,
) -> None:
    """Re-deliver dead letters to their source topics (after fixing what failed); on the
    binlog source, write their changes again at their own versions."""
    from indexer.jobs.binlog_letters import LetterReplay
    from indexer.jobs.dlq import replay

    cfg = _config(config, log_level)
    selected = [_table(cfg, t) for t in table or []]
    report = _run(cfg, replay(cfg, selected, kind or [], since, dry_run=dry_run))
    if isinstance(report, LetterReplay):  # the binlog source's, from the search server
        err.print(f"read {report.read}, written {report.replayed}, stale {report.stale} "
                  f"(older than the document), refused again {report.refused}, not "
                  f"replayable {report.skipped} (no change held, or joined documents: "
                  "`indexer reconcile --repair`)")
        return
    err.print(f"read {report.read}, matched {report.matched}, replayed {report.replayed}, "
              f"unreadable {report.unreadable}")


@tombstones_app.command("purge")
def tombstones_purge(config: ConfigOption = None, log_level: LogLevel = None) -> None:
    """Delete tombstones older than deletes.tombstone_retention_s."""
    from indexer.jobs.mappings import purge

    cfg = _config(config, log_level)
    for t, purged in zip(cfg.tables, _run(cfg, purge(cfg)), strict=True):
        err.print(f"{t.name}: purged {purged} tombstones")


@source_app.command("status")
def source_status(tables: TablesArg = None, all_tables: AllTables = False,
                  config: ConfigOption = None, log_level: LogLevel = None) -> None:
    """Each table's version epochs, stream cursors and the switches not acknowledged."""
    from indexer.jobs.sources import registries

    cfg = _config(config, log_level)
    selected = _select(cfg, tables, all_tables)
    for table, registry in zip(selected, _run(cfg, registries(cfg, selected)), strict=True):
        err.print(f"{table.name}: version epoch {registry.current.number}, "
                  f"{len(registry.epochs) - 1} source switches seen")
        for key, cursor in sorted(registry.cursors.items()):
            err.print(f"  {key}: position {cursor.position}, {cursor.describe()}, "
                      f"epoch {cursor.epoch}")
        for switch in registry.unacknowledged:
            err.print(f"  [red]not acknowledged:[/red] {switch['at']} "
                      f"{escape(switch['where'])}: {escape(switch['reason'])} "
                      f"(epoch {switch['epoch']})")


@source_app.command("reset")
def source_reset(config: ConfigOption = None, log_level: LogLevel = None) -> None:
    """Forget the binlog source's saved position (purged, or another server's): the next
    `indexer run` loads every table from a snapshot, then reads on from the binlog's end."""
    from indexer.jobs.sources import reset_position

    cfg = _config(config, log_level)
    saved = _run(cfg, reset_position(cfg))
    where = f"{saved['file']}:{saved['pos']}" if saved else "none was saved"
    err.print(f"binlog source {cfg.source.name}: position forgotten ({where}); the next "
              "`indexer run` loads every table from a snapshot, then reads on from the "
              "binlog's end")


@source_app.command("ack")
def source_ack(tables: TablesArg = None, all_tables: AllTables = False,
               config: ConfigOption = None, log_level: LogLevel = None) -> None:
    """Acknowledge the source switches seen (after checking with `indexer reconcile`):
    `indexer check` is healthy again."""
    from indexer.jobs.sources import acknowledge

    cfg = _config(config, log_level)
    selected = _select(cfg, tables, all_tables)
    for table, count in zip(selected, _run(cfg, acknowledge(cfg, selected)), strict=True):
        err.print(f"{table.name}: {count} source switches acknowledged")


def _check_format(output_format: str, allowed: tuple[str, ...]) -> None:
    if output_format not in allowed:
        err.print(f"[red]--format is {', '.join(allowed[:-1])} or {allowed[-1]}[/red]")
        raise typer.Exit(EXIT_ERROR)


def _emit(cfg: Config, output_format: str, as_json: Callable[[], dict[str, Any]],
          text: Callable[[], list[str]]) -> None:
    """A report on stdout, as indented JSON or as lines; secrets masked either way."""
    import orjson

    redact = Redactor(cfg.secrets())
    if output_format == "json":
        sys.stdout.write(redact(orjson.dumps(as_json(), option=orjson.OPT_INDENT_2).decode())
                         + "\n")
    else:
        sys.stdout.write("".join(redact(line) + "\n" for line in text()))


def _select(cfg: Config, tables: list[str] | None, all_tables: bool) -> list[TableConfig]:
    """The tables a command names, or every configured one with ``--all``."""
    if all_tables == bool(tables):
        err.print("[red]name the tables or pass --all[/red]")
        raise typer.Exit(EXIT_ERROR)
    if all_tables:
        return list(cfg.tables)
    return [_table(cfg, t) for t in tables or []]


def _table(cfg: Config, name: str) -> TableConfig:
    try:
        return cfg.table(name)
    except ConfigError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_ERROR) from None


def _tune_gc() -> None:
    """For commands that stream rows: each allocates a few short-lived objects, and with the
    default gen-0 threshold (700) the collector would walk the batches in flight every few
    hundred rows (~8% of the daemon's CPU; still ~7% at 50,000)."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 100)


async def _stoppable(coro: Coroutine[object, object, T]) -> T:
    """Runs ``coro`` as a task that SIGTERM cancels, as Ctrl-C does: a supervisor's stop gets
    the same clean ending (a reindex takes its half-built index out of the sync alias). The
    daemon installs its own handlers over this one."""
    task = asyncio.ensure_future(coro)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await task
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _run(cfg: Config, coro: Coroutine[object, object, T],
         failed: Callable[[str], object] = lambda line: None,
         passes: tuple[type[Exception], ...] = ()) -> T:
    """Runs a command's coroutine; an error is one line (secrets masked, also handed to
    ``failed``) and exit 2, but for those it ``passes`` to the command."""
    redact = Redactor(cfg.secrets())
    try:
        return asyncio.run(_stoppable(coro))
    except passes:
        raise
    except asyncio.CancelledError:
        err.print("[red]stopped[/red] (SIGTERM)")
        raise typer.Exit(EXIT_ERROR) from None
    except Exception as exc:  # exit 1 means drift/unhealthy: errors must not look like it
        known = isinstance(exc, IndexerError | LookupError)
        line = redact(str(exc) if known else f"{type(exc).__name__}: {exc}")
        failed(line)
        err.print(f"[red]error:[/red] {escape(line)}")
        raise typer.Exit(EXIT_ERROR) from None


def main() -> None:
    sys.exit(app())  # pragma: no cover
