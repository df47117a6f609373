"""The ``floodgate`` command.

* ``floodgate demo`` -- the main job (``make demo``; :mod:`pipeline.demo`).
* ``floodgate run CONFIG`` -- run a query group until it is stopped (SIGTERM,
  Ctrl-C or ``floodgate query-group stop`` stop it cleanly: the micro-batch in
  flight is not committed and is replayed on the next start). It serves its
  metrics and control endpoint (:mod:`pipeline.spark.control`).
* ``floodgate query-group status|release|stop NAME`` -- talk to a running query
  group's endpoint (found through its control file, or ``--url``); ``release`` and
  ``stop`` send its control token (``FLOODGATE_CONTROL_TOKEN``, else the group's
  ``<control_dir>/<name>.token``).
* ``floodgate broker`` -- run a broker (embedded, or Apache Kafka) in the foreground.
* ``floodgate metrics-doc`` -- the metrics reference (``docs/metrics.md``).
* ``floodgate admission ...`` (and any other service's commands) -- registered
  through the ``floodgate.commands`` entry point group; this package imports none
  of them.
"""

from __future__ import annotations

import enum
import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipeline.commands import Verbose, reports_errors
from pipeline.config import DEFAULT_CONTROL_DIR
from pipeline.errors import FloodgateError

app = typer.Typer(
    name="floodgate",
    help="A back-pressured, Kafka-fronted stream processing pipeline on Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
query_group_app = typer.Typer(
    help="Status, release and stop of a running query group (its HTTP control endpoint). "
    "release and stop send the control token: FLOODGATE_CONTROL_TOKEN, else the group's "
    "<control_dir>/<name>.token on this host.",
    no_args_is_help=True,
)
app.add_typer(query_group_app, name="query-group")


def _add_service_commands() -> None:
    """Sub-commands of the services (``floodgate admission ...``), found through the
    ``floodgate.commands`` entry point group, so this package imports none of them."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="floodgate.commands"):
        app.add_typer(entry.load(), name=entry.name)


_add_service_commands()


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False)],
    )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class Engine(enum.StrEnum):
    """The brokers ``floodgate`` can start (:data:`pipeline.brokers.engines.ENGINES`)."""

    noida_db = "noida-db"
    apache_kafka = "apache-kafka"


_BootstrapOption = Annotated[
    str | None,
    typer.Option(
        help="Kafka bootstrap servers (default: FLOODGATE_KAFKA_BOOTSTRAP, "
        "then [kafka] bootstrap_servers)."
    ),
]


def _bind_host(value: str) -> str:
    """A ``--metrics-host`` an endpoint can listen on (:func:`check_bind_host`)."""
    from pipeline.config import check_bind_host

    try:
        return check_bind_host(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _query_group_file(value: str) -> Path:
    """A query group file argument: a path, or the name of a file Floodgate ships
    (``flights``: ``pipeline/resources.py``), so an installed Floodgate runs its demo
    group from any directory."""
    from pipeline.resources import shipped_configs

    path = Path(value)
    if path.is_file():
        return path
    shipped = shipped_configs()
    if value in shipped:
        return shipped[value]
    raise typer.BadParameter(
        f"{value}: no such file, nor a shipped query group file (shipped: {', '.join(shipped)})"
    )


_QUERY_GROUP_FILE_HELP = "Query group file (TOML), or the name of a shipped one (flights)."


def _bootstrap_servers(bootstrap: str | None, config: Any) -> str:
    """``--bootstrap``, else the environment, else the query group file's ``[kafka]``.

    Raises:
        FloodgateError: none of them names a cluster.
    """
    from pipeline.config import bootstrap_from

    servers = bootstrap or bootstrap_from(config.kafka)
    if not servers:
        raise FloodgateError(
            "no Kafka cluster: pass --bootstrap, set FLOODGATE_KAFKA_BOOTSTRAP, "
            "or set [kafka] bootstrap_servers in the file"
        )
    return servers


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
        Path | None, typer.Option(parser=_query_group_file, help=_QUERY_GROUP_FILE_HELP)
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="Rows in each result table.")] = 10,
    verbose: Verbose = False,
) -> None:
    """Replay the NYC 2013 flights through Kafka into the `flights` query group."""
    from pipeline.demo.run import DEFAULT_CONFIG, run_demo

    _setup_logging(verbose)
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


_HEADINGS = {
    "flights": "flights",
    "departures": "departures",
    "mean_dep_delay": "mean dep delay (min)",
    "mean_arr_delay": "mean arr delay (min)",
}


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
    console.print(
        _hours_table(
            f"Busiest origin-hours (top {top})",
            busiest,
            ("flights", "departures", "mean_dep_delay", "mean_arr_delay"),
        )
    )
    delayed = sorted(
        (r for r in hours if r["departures"] >= 10 and r["mean_dep_delay"] is not None),
        key=lambda r: (-r["mean_dep_delay"], r["hour_start"], r["origin"]),
    )[:top]
    console.print(
        _hours_table(
            f"Most delayed origin-hours, at least 10 departures (top {top})",
            delayed,
            ("departures", "mean_dep_delay", "mean_arr_delay"),
        )
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
    console.print(summary)


def _stop_on_signals(stop: threading.Event, what: str) -> None:
    """Set ``stop`` on SIGTERM (``docker stop``, the admission service) or Ctrl-C, saying
    ``what`` happens next."""

    def on_signal(signum: int, _frame: Any) -> None:
        console.print(f"signal {signal.Signals(signum).name}: {what}")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


@app.command()
@reports_errors
def run(
    config: Annotated[Path, typer.Argument(parser=_query_group_file, help=_QUERY_GROUP_FILE_HELP)],
    bootstrap: _BootstrapOption = None,
    available_now: Annotated[
        bool, typer.Option(help="Process what is available now, then stop (Trigger.AvailableNow).")
    ] = False,
    verbose: Verbose = False,
) -> None:
    """Run a query group until it is stopped (SIGTERM/Ctrl-C) or, with --available-now, drained."""
    from pipeline.config import load_query_group
    from pipeline.errors import QueryGroupHeld
    from pipeline.spark.control import resolve_token
    from pipeline.spark.query_group import QueryGroup

    _setup_logging(verbose)
    cfg = load_query_group(config)
    servers = _bootstrap_servers(bootstrap, cfg)
    resolve_token()  # a control token that cannot serve is refused before Spark starts
    group = QueryGroup(cfg, bootstrap_servers=servers)
    stop = group.stop_requested
    _stop_on_signals(stop, f"stopping query group {cfg.name}")
    group.start(available_now=available_now)
    url = group.serve()
    console.print(
        f"query group {cfg.name} {group.state} ({len(cfg.queries)} queries) on {servers}; "
        f"metrics {url}/metrics, control {url}/status"
    )
    try:
        if available_now:
            while not stop.is_set():
                try:
                    if group.await_termination(0.5):
                        break
                except QueryGroupHeld:
                    stop.wait(0.5)  # held: wait for release or stop
        else:
            while not stop.wait(0.5):
                group.check()
    finally:
        group.stop()
    console.print(f"query group {cfg.name} {group.state}")


@app.command()
@reports_errors
def produce(
    config: Annotated[
        Path, typer.Argument(parser=_query_group_file, help=_QUERY_GROUP_FILE_HELP)
    ] = Path("flights"),
    bootstrap: _BootstrapOption = None,
    stream: Annotated[str, typer.Option(help="Input stream to replay into.")] = "flights",
    rate: Annotated[
        float | None,
        typer.Option(min=1, help="Replay rate in tuples/s (default: as fast as it goes)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Replay only the first N flights in event-time order.")
    ] = None,
    rounds: Annotated[
        int, typer.Option(min=0, help="Replay the flights this many times; 0: until stopped.")
    ] = 1,
    read_outputs: Annotated[
        bool,
        typer.Option(help="Read the group's output streams too, as a reception application."),
    ] = True,
    metrics_host: Annotated[
        str,
        typer.Option(
            callback=_bind_host,
            help="Interface of /metrics (0.0.0.0 in a container; empty is refused).",
        ),
    ] = "127.0.0.1",
    metrics_port: Annotated[
        int, typer.Option(min=0, max=65_535, help="Port of /metrics; 0 picks a free one.")
    ] = 8791,
    verbose: Verbose = False,
) -> None:
    """Replay the flights into a running query group through the back-pressure client
    (the docker-compose stack's demo producer), serving the client's metrics."""
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry

    from pipeline.config import load_query_group
    from pipeline.demo.producer import ProducerStatus, run_producer
    from pipeline.metrics import add_metrics_route
    from pipeline.services.serving import listen

    _setup_logging(verbose)
    cfg = load_query_group(config)
    servers = _bootstrap_servers(bootstrap, cfg)
    registry = CollectorRegistry()
    api = FastAPI(title="floodgate producer")
    add_metrics_route(api, registry)
    server = listen(api, host=metrics_host, port=metrics_port, name="producer")
    server.start()
    console.print(f"FLOODGATE_PRODUCER_URL={server.url}", soft_wrap=True)
    stop = threading.Event()
    _stop_on_signals(stop, "stopping the replay")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[queue]}"),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task(f"{stream} round 1", total=None, queue="")

    last_line = [0.0]

    def on_progress(status: ProducerStatus) -> None:
        done = status.produced - (status.round - 1) * status.total
        if not console.is_terminal and time.monotonic() - last_line[0] >= 10:
            # No live bar in a container's log: a line every 10 s instead.
            last_line[0] = time.monotonic()
            received = ", ".join(f"{s} {n:,}" for s, n in sorted(status.received.items()))
            console.print(
                f"round {status.round}: {max(0, done):,}/{status.total:,} {stream}, "
                f"{status.produced:,} in all; queue {status.queue_length:,}/"
                f"{status.max_queue_size:,}; received {received or '-'}",
                soft_wrap=True,
            )
        progress.update(
            task,
            description=f"{stream} round {status.round}",
            completed=max(0, done),
            total=status.total,
            queue=f"queue {status.queue_length:,}/{status.max_queue_size:,}",
        )

    try:
        with progress:
            produced = run_producer(
                bootstrap_servers=servers,
                config=cfg,
                stream=stream,
                rate=rate,
                limit=limit,
                rounds=rounds or None,
                read_outputs=read_outputs,
                registry=registry,
                stop=stop,
                on_progress=on_progress,
            )
    finally:
        server.stop()
    console.print(f"{produced:,} flights produced into {cfg.name}.{stream}")


@app.command()
@reports_errors
def audit(
    configs: Annotated[
        list[Path] | None,
        typer.Argument(
            parser=_query_group_file,
            help="Query group files or shipped names (default: the shipped flights).",
        ),
    ] = None,
    query_group: Annotated[
        str | None, typer.Option("--query-group", help="Audit only this query group.")
    ] = None,
    bootstrap: _BootstrapOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """The tuple ledger: per input stream partition, tuples written = processed +
    dead-lettered + swept + queued. Exit status 0 only when every row balances."""
    import dataclasses

    from pipeline.config import load_query_group
    from pipeline.services.ledger import reconcile

    groups = [load_query_group(p) for p in configs or [_query_group_file("flights")]]
    if query_group is not None:
        groups = [g for g in groups if g.name == query_group]
        if not groups:
            raise FloodgateError(
                f"no query group {query_group!r} in {[str(p) for p in configs or []]}"
            )
    rows = []
    for group in groups:
        rows.extend(reconcile(group, bootstrap_servers=_bootstrap_servers(bootstrap, group)))
    balanced = all(r.balanced for r in rows)
    if as_json:
        typer.echo(
            json.dumps([{**dataclasses.asdict(r), "balanced": r.balanced} for r in rows], indent=2)
        )
    else:
        table = Table(title="tuple ledger: written = processed + dead-lettered + swept + queued")
        columns = ("query group", "stream", "partition", "written", "processed")
        for column in (*columns, "dead-lettered", "swept", "queued", "unaccounted"):
            table.add_column(column, justify="left" if column in columns[:2] else "right")
        for r in rows:
            table.add_row(
                r.query_group,
                r.stream,
                str(r.partition),
                f"{r.written:,}",
                f"{r.processed:,}",
                f"{r.dead_lettered:,}",
                f"{r.swept:,}",
                f"{r.queued:,}",
                f"{r.unaccounted:,}" if r.balanced else f"[bold red]{r.unaccounted:,}[/]",
            )
        console.print(table)
        if balanced:
            console.print(f"[bold green]balanced:[/] {len(rows)} partitions, nothing unaccounted")
        else:
            lost = [r for r in rows if not r.balanced]
            for r in lost:
                console.print(
                    f"[bold red]unaccounted:[/] {r.unaccounted:,} tuples of "
                    f"{r.topic}[{r.partition}] between offset {r.committed or 0} (committed) "
                    f"and {r.log_start} (log start) are in no BLOB: deleted before they "
                    "were processed (retention.ms / retention.bytes, or DeleteRecords)"
                )
    if not balanced:
        raise typer.Exit(code=1)


_URL_OPTION = typer.Option(
    help="Base URL of the group's endpoint (default: from its control file on this host)."
)
_CONTROL_DIR_OPTION = typer.Option(
    envvar="FLOODGATE_CONTROL_DIR",
    help="Directory of the control files of running query groups ([query_group] control_dir).",
)


def _query_group_call(name: str, action: str, url: str | None, control_dir: str) -> dict[str, Any]:
    """``action`` (status, release, stop) of the running query group ``name``: its JSON
    answer.

    Raises:
        FloodgateError: no endpoint found, or the endpoint refused or did not answer
            (:func:`pipeline.services.http_client.call`).
    """
    from pipeline.services.http_client import call

    return call(name, action, url=url, control_dir=control_dir)


def _print_status(status: dict[str, Any]) -> None:
    state = status["state"]
    colour = {"EXECUTING": "green", "SLEEPING": "yellow", "HELD": "red", "FAILED": "red"}.get(
        state, "white"
    )
    console.print(f"query group [bold]{status['query_group']}[/]: [{colour}]{state}[/]")
    held = status.get("held")
    if held:
        console.print(
            f"  held on output stream {held['stream']!r}: micro-batch {held['batch_id']} of "
            f"query {held['query']!r} needs {held['required']:,} tuples of room, "
            f"{held['free_queue_size']:,} of {held['max_queue_size']:,} free "
            f"(after {held['sleeps']} sleeps); on_hold_input = {status['on_hold_input']}"
        )
    queries = Table(title="queries")
    for column in ("query", "active", "batches", "input tuples", "tuples written", "tuples/s"):
        queries.add_column(column, justify="left" if column == "query" else "right")
    for name, q in status["queries"].items():
        queries.add_row(
            name,
            "yes" if q["active"] else "no",
            f"{q['batches']:,}",
            f"{q['input_rows']:,}",
            f"{q['tuples_written']:,}",
            f"{q['processed_rows_per_second']:,.0f}",
        )
    console.print(queries)
    outputs = Table(title="output stream queues")
    for column in ("stream", "length", "max", "full"):
        outputs.add_column(column, justify="left" if column == "stream" else "right")
    for name, o in status["output_queues"].items():
        full = o["length"] / o["max_queue_size"] if o["max_queue_size"] else 0.0
        outputs.add_row(name, f"{o['length']:,}", f"{o['max_queue_size']:,}", f"{full:.0%}")
    console.print(outputs)
    for stream, count in status.get("discarded", {}).items():
        console.print(f"  discarded on release from {stream}: {count:,} tuples")


@query_group_app.command("status")
@reports_errors
def query_group_status(
    name: Annotated[str, typer.Argument(help="The query group's name.")],
    url: Annotated[str | None, _URL_OPTION] = None,
    control_dir: Annotated[str, _CONTROL_DIR_OPTION] = DEFAULT_CONTROL_DIR,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """Show a running query group's state, queries and output stream queues."""
    status = _query_group_call(name, "status", url, control_dir)
    if as_json:
        print(json.dumps(status, indent=2))
    else:
        _print_status(status)


@query_group_app.command("release")
@reports_errors
def query_group_release(
    name: Annotated[str, typer.Argument(help="The query group's name.")],
    url: Annotated[str | None, _URL_OPTION] = None,
    control_dir: Annotated[str, _CONTROL_DIR_OPTION] = DEFAULT_CONTROL_DIR,
) -> None:
    """Release a HELD query group: its queries start again (the held batch is replayed,
    or the input skipped with on_hold_input = discard)."""
    status = _query_group_call(name, "release", url, control_dir)
    console.print(f"query group {name} released: {status['state']}")


@query_group_app.command("stop")
@reports_errors
def query_group_stop(
    name: Annotated[str, typer.Argument(help="The query group's name.")],
    url: Annotated[str | None, _URL_OPTION] = None,
    control_dir: Annotated[str, _CONTROL_DIR_OPTION] = DEFAULT_CONTROL_DIR,
) -> None:
    """Stop a running query group (the micro-batch in flight is replayed on the next start)."""
    _query_group_call(name, "stop", url, control_dir)
    console.print(f"query group {name} stopping")


@app.command("driver-path")
def driver_path() -> None:
    """Print the path of Floodgate's driver program, the file `spark-submit` runs:
    spark-submit --master spark://host:7077 "$(floodgate driver-path)" run flights
    (docs/spark-cluster.md)."""
    typer.echo(Path(__file__).resolve())


@app.command("metrics-doc")
def metrics_doc(
    output: Annotated[
        Path | None, typer.Option(help="Write here (default: print to stdout).")
    ] = None,
    check: Annotated[
        bool, typer.Option(help="Exit 1 when OUTPUT differs from what the code exports.")
    ] = False,
) -> None:
    """The metrics reference (docs/metrics.md), generated from every component's
    registry: name, type, labels, unit and meaning of each metric."""
    from pipeline.metrics import metrics_markdown

    text = metrics_markdown()
    if output is None:
        typer.echo(text, nl=False)
    elif check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            console.print(
                f"[bold red]error:[/] {output} is out of date: "
                f"run floodgate metrics-doc --output {output}"
            )
            raise typer.Exit(code=1)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")


@app.command()
@reports_errors
def broker(
    engine: Annotated[
        Engine,
        typer.Option(
            help="noida-db (embedded, Python and Java only) or apache-kafka (Apache "
            "Kafka's own broker, fetched with Maven on first use).",
            envvar="FLOODGATE_KAFKA_ENGINE",
        ),
    ] = Engine.noida_db,
    nodes: Annotated[
        int,
        typer.Option(
            min=1,
            max=9,
            help="Brokers in the cluster (apache-kafka only; 3 for a replicated cluster).",
        ),
    ] = 1,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Kafka port (default: a free one).")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Data directory, kept on exit (default: a temporary one, removed).",
        ),
    ] = None,
    sasl_user: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME:PASSWORD of a SASL/PLAIN user (repeat for more; apache-kafka only). "
            "Given: the broker's listener is SASL_PLAINTEXT and every client must "
            "authenticate ([kafka] client: security.protocol, sasl.mechanism = PLAIN, "
            "sasl.username, sasl.password).",
        ),
    ] = None,
) -> None:
    """Run a Kafka broker (or an Apache Kafka cluster) in the foreground until
    SIGTERM/Ctrl-C, then stop every process it started.

    Prints ``FLOODGATE_KAFKA_BOOTSTRAP=host:port[,...]`` once it answers, for other
    processes (or a test run) to use as an existing cluster.
    """
    from pipeline.brokers.local import local_broker

    _setup_logging(False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    started: Any
    if sasl_user:
        started = _sasl_cluster(engine, sasl_user, nodes=nodes, data_dir=data_dir, port=port)
    else:
        started = local_broker(engine.value, nodes=nodes, data_dir=data_dir, port=port)
    started.start()
    if started.engine == "apache-kafka":
        print(f"Apache Kafka {getattr(started, 'version', '')}", flush=True)
    if sasl_user:
        users = ", ".join(sorted(u for u in started.sasl_users if u != "floodgate-broker"))
        print(f"listener SASL_PLAINTEXT, mechanism PLAIN, users: {users}", flush=True)
    print(f"FLOODGATE_KAFKA_BOOTSTRAP={started.bootstrap_servers}", flush=True)
    try:
        while not stop.wait(0.5):
            if started.pid is None:
                raise FloodgateError(f"broker exited:\n{started.output_tail()}")
    finally:
        started.stop()


def _sasl_cluster(
    engine: Engine, users: list[str], *, nodes: int, data_dir: Path | None, port: int | None
) -> Any:
    """An Apache Kafka cluster whose listener requires SASL/PLAIN as one of ``users``
    (``NAME:PASSWORD`` each).

    Raises:
        ConfigError: the engine is not apache-kafka (noida-db has no SASL), or a user is
            not ``NAME:PASSWORD`` (named, the password never shown), or is refused by
            :func:`pipeline.brokers.apache_kafka.cluster.check_sasl_users`.
    """
    from pipeline.brokers.apache_kafka import ApacheKafkaCluster
    from pipeline.errors import ConfigError

    if engine != Engine.apache_kafka:
        raise ConfigError(
            f"--sasl-user needs --engine apache-kafka (the {engine.value} engine has no SASL)",
            key="engine",
            value=engine.value,
            allowed="apache-kafka",
        )
    pairs: dict[str, str] = {}
    for entry in users:
        name, colon, password = entry.partition(":")
        if not colon:
            raise ConfigError(
                "--sasl-user: an entry has no ':' (not shown: it may be a password); "
                "give NAME:PASSWORD",
                key="sasl_user",
                allowed="NAME:PASSWORD",
            )
        pairs[name] = password
    return ApacheKafkaCluster(nodes=nodes, data_dir=data_dir, port=port, sasl_users=pairs)


def main() -> None:
    """Entry point for ``python -m pipeline.cli``."""
    app()


if __name__ == "__main__":
    main()
