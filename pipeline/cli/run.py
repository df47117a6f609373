"""``floodgate run``: a query group until it is stopped; ``floodgate produce``: the flights
into it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.cli.app import (
    QUERY_GROUP_FILE_HELP,
    BootstrapOption,
    app,
    bind_host,
    bootstrap_servers_for,
    console,
    query_group_file,
    setup_logging,
    stop_on_signals,
)
from pipeline.cli.conventions import LogFormatOption, Verbose, reports_errors
from pipeline.logs import LogFormat

if TYPE_CHECKING:
    from pipeline.demo.producer import ProducerStatus


@app.command()
@reports_errors
def run(
    config: Annotated[Path, typer.Argument(parser=query_group_file, help=QUERY_GROUP_FILE_HELP)],
    bootstrap: BootstrapOption = None,
    available_now: Annotated[
        bool, typer.Option(help="Process what is available now, then stop (Trigger.AvailableNow).")
    ] = False,
    verbose: Verbose = False,
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Run a query group until it is stopped (SIGTERM/Ctrl-C) or, with --available-now, drained."""
    from pipeline.config import load_query_group
    from pipeline.errors import QueryGroupHeld
    from pipeline.security.privacy import keep_to_ourselves, take_secret_variables
    from pipeline.spark.control import check_control_dir, resolve_token
    from pipeline.spark.query_group import QueryGroup

    keep_to_ourselves()  # no process of our user reads our environ or memory
    setup_logging(verbose, log_format)
    cfg = load_query_group(config)
    servers = bootstrap_servers_for(bootstrap, cfg)
    # A control token that cannot serve, or a control folder others can change, is
    # refused before Spark starts.
    token, generated = resolve_token()
    check_control_dir(cfg.query_group.control_dir)
    # Read: held here, never inherited by the Spark JVM PySpark launches with a copy of
    # the environment, nor by its Python workers.
    take_secret_variables()
    group = QueryGroup(cfg, bootstrap_servers=servers)
    stop = group.stop_requested
    stop_on_signals(stop, f"stopping query group {cfg.name}")
    group.start(available_now=available_now)
    url = group.serve(token=None if generated else token)
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
        Path, typer.Argument(parser=query_group_file, help=QUERY_GROUP_FILE_HELP)
    ] = Path("flights"),
    bootstrap: BootstrapOption = None,
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
            callback=bind_host,
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
    from pipeline.demo.producer import run_producer
    from pipeline.http.serving import listen
    from pipeline.metrics import add_metrics_route

    setup_logging(verbose)
    cfg = load_query_group(config)
    servers = bootstrap_servers_for(bootstrap, cfg)
    registry = CollectorRegistry()
    api = FastAPI(title="floodgate producer")
    add_metrics_route(api, registry)
    server = listen(
        api,
        host=metrics_host,
        port=metrics_port,
        name="producer",
        allowed_hosts=cfg.query_group.allowed_hosts,
        hosts_setting="query_group.allowed_hosts",
    )
    server.start()
    console.print(f"FLOODGATE_PRODUCER_URL={server.url}", soft_wrap=True)
    stop = threading.Event()
    stop_on_signals(stop, "stopping the replay")
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
    last: list[ProducerStatus] = []

    def on_progress(status: ProducerStatus) -> None:
        last[:] = [status]
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
    console.print(
        produced_line(produced, f"{cfg.name}.{stream}", last[0] if last else None), soft_wrap=True
    )


def produced_line(produced: int, where: str, status: ProducerStatus | None) -> str:
    """The last line of ``floodgate produce``: tuples produced into ``where``
    (``<query group>.<stream>``) and, from the final ``status`` (its queue read from the
    broker after the last delivery), the queue as ``floodgate audit`` counts it: tuples
    written and not yet processed, of the bound. Without a status (stopped before the
    first), the count alone."""
    line = f"{produced:,} flights produced into {where}"
    if status is None:
        return line
    return (
        f"{line}; queue {status.queue_length:,}/{status.max_queue_size:,} "
        "(written, not yet processed by the query group)"
    )
