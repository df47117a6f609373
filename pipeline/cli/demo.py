"""``floodgate demo``: the main job, with a live view of its queues and its results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipeline.cli.app import (
    QUERY_GROUP_FILE_HELP,
    Engine,
    app,
    console,
    query_group_file,
    setup_logging,
)
from pipeline.cli.conventions import Verbose, print_table, reports_errors

_HEADINGS = {
    "flights": "flights",
    "departures": "departures",
    "mean_dep_delay": "mean dep delay (min)",
    "mean_arr_delay": "mean arr delay (min)",
}


@app.command()
@reports_errors
def demo(
    bootstrap: Annotated[
        str | None,
        typer.Option(
            help="Kafka bootstrap servers; default: FLOODGATE_KAFKA_BOOTSTRAP, else a "
            "broker of --engine started for the run."
        ),
    ] = None,
    engine: Annotated[
        Engine | None,
        typer.Option(
            help="The broker to start when no cluster is named: noida-db (the default, "
            "embedded) or apache-kafka (needs Maven on first use).",
            envvar="FLOODGATE_KAFKA_ENGINE",
            show_default=False,
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(min=1, help="Replay rate in tuples/s (default: as fast as it goes)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Replay only the first N flights in event-time order.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(parser=query_group_file, help=QUERY_GROUP_FILE_HELP)
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="Rows in each result table.")] = 10,
    verbose: Verbose = False,
) -> None:
    """Replay the NYC 2013 flights through Kafka into the `flights` query group."""
    from pipeline.demo.run import DEFAULT_CONFIG, run_demo

    setup_logging(verbose)
    view = _DemoView()
    live = Live(view, console=console, refresh_per_second=4, transient=False)
    status = console.status("starting")

    def on_phase(text: str) -> None:
        if text == "replaying flights":
            status.stop()
            live.start()
        elif not live.is_started:
            status.update(text)
        else:
            live.console.log(text)

    status.start()
    try:
        result = run_demo(
            bootstrap_servers=bootstrap,
            engine=engine.value if engine else None,
            rate=rate,
            limit=limit,
            config_path=config or DEFAULT_CONFIG,
            on_progress=view.update,
            on_phase=on_phase,
            spark_log_level="WARN" if verbose else "ERROR",
        )
    finally:
        status.stop()
        if live.is_started:
            live.stop()

    _print_results(result, top)
    if not result.balanced:
        console.print(
            "[bold red]MISMATCH:[/] tuples produced != tuples processed (+ dead-lettered)"
        )
        raise typer.Exit(code=1)
    console.print("[bold green]OK:[/] every flight produced was processed by every query.")


class _DemoView:
    """What ``floodgate demo`` shows while it runs: progress bars for producing and
    processing, and the reception's live table of the latest hour's figures."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description:<30}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        self._tasks: dict[str, Any] = {}
        self._status: Any = None

    def update(self, status: Any) -> None:
        """``on_progress`` of :func:`pipeline.demo.run.run_demo` (a ``DemoStatus``)."""
        self._status = status
        self._advance("produced (flights)", status.produced, status.total)
        for query, rows in status.processed.items():
            self._advance(f"processed by {query}", rows, status.total)

    def _advance(self, label: str, completed: int, total: int) -> None:
        label = label[:30]
        if label not in self._tasks:
            self._tasks[label] = self.progress.add_task(label, total=total)
        self.progress.update(self._tasks[label], completed=completed)

    def __rich__(self) -> Any:
        status = self._status
        if status is None:
            return self.progress
        hour = status.latest_hour[0]["hour_start"] if status.latest_hour else None
        table = _hours_table(
            f"latest hour received: {hour:%Y-%m-%d %H:%M} UTC" if hour else "latest hour received",
            status.latest_hour,
            ("flights", "departures", "mean_dep_delay", "mean_arr_delay"),
        )
        queues = ", ".join(
            f"{stream} {status.received.get(stream, 0):,} read, queue {length:,}/{size:,}"
            for stream, (length, size) in sorted(status.output_queues.items())
        )
        colour = {"EXECUTING": "green", "SLEEPING": "yellow", "HELD": "red"}.get(status.state, "")
        table.caption = f"query group [{colour}]{status.state}[/]; output streams: {queues}"
        return Group(self.progress, table)


def _hours_table(title: str, rows: list[dict[str, Any]], figures: tuple[str, ...]) -> Table:
    """A table of origin-hours: origin, hour, then the named figures."""
    table = Table(title=title)
    table.add_column("origin")
    table.add_column("hour (UTC)")
    for name in figures:
        table.add_column(_HEADINGS[name], justify="right")
    for r in rows:
        cells = [
            str(r[n]) if isinstance(r[n], int) else "-" if r[n] is None else f"{r[n]:.1f}"
            for n in figures
        ]
        table.add_row(r["origin"], f"{r['hour_start']:%Y-%m-%d %H:%M}", *cells)
    return table


def _print_results(result: Any, top: int) -> None:
    hours = result.origin_hours
    busiest = sorted(hours, key=lambda r: (-r["flights"], r["hour_start"], r["origin"]))[:top]
    print_table(
        console,
        _hours_table(
            f"Busiest origin-hours (top {top})",
            busiest,
            ("flights", "departures", "mean_dep_delay", "mean_arr_delay"),
        ),
    )
    delayed = sorted(
        (r for r in hours if r["departures"] >= 10 and r["mean_dep_delay"] is not None),
        key=lambda r: (-r["mean_dep_delay"], r["hour_start"], r["origin"]),
    )[:top]
    print_table(
        console,
        _hours_table(
            f"Most delayed origin-hours, at least 10 departures (top {top})",
            delayed,
            ("departures", "mean_dep_delay", "mean_arr_delay"),
        ),
    )

    summary = Table(title="Figures", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("broker", f"{result.broker_kind} at {result.bootstrap_servers}")
    summary.add_row("tuples produced", f"{result.produced:,}")
    summary.add_row(
        "  producer blocked by back-pressure",
        f"{result.blocked_s:.1f} s (queue max {result.max_queue_size:,})",
    )
    for query, rows in result.processed.items():
        summary.add_row(f"tuples processed by {query}", f"{rows:,}")
        summary.add_row(f"  dead-lettered by {query}", f"{result.dead_lettered.get(query, 0):,}")
        summary.add_row(
            f"  dropped as late by {query}", f"{result.dropped_by_watermark.get(query, 0):,}"
        )
    for stream, received in sorted(result.received.items()):
        summary.add_row(f"tuples read from {stream}", f"{received:,}")
        summary.add_row(
            "  output queue peak / max",
            f"{result.output_queue_peak.get(stream, 0):,} / "
            f"{result.output_max_queue_size.get(stream, 0):,}",
        )
    summary.add_row("query group sleeps / holds", f"{result.sleeps:,} / {result.holds:,}")
    summary.add_row(
        "origin-hours / carrier-days",
        f"{len(result.origin_hours):,} / {len(result.carrier_days):,}",
    )
    summary.add_row("seconds, first tuple to all processed and read", f"{result.seconds:.1f}")
    summary.add_row("tuples/s end to end", f"{result.produced / max(result.seconds, 1e-9):,.0f}")
    print_table(console, summary)
