"""``floodgate sweeper ...``: run the sweeper service, and look at its BLOBs.

Registered with the ``floodgate`` command through the ``floodgate.commands`` entry
point (``pyproject.toml``), so ``pipeline/`` does not import this package.

* ``floodgate sweeper serve [--config FILE] [--bootstrap H:P]`` -- sweep the input
  queues of the configured query groups every ``sweep_interval_s`` (the leader of
  the instances on one catalog), serving ``/metrics`` and ``/status`` on
  ``sweeper.host:port``, until SIGTERM / Ctrl-C;
* ``floodgate sweeper blobs [--config FILE] [--verify]`` -- the BLOB chains of the
  catalog; ``--verify`` checks each BLOB's size and SHA-256 against the catalog
  (exit 1 when one fails).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pipeline.cli.conventions import (
    LogFormatOption,
    Verbose,
    config_file_option,
    fail,
    print_table,
    reports_errors,
)
from pipeline.logs import LogFormat

app = typer.Typer(
    help="The sweeper service: moves the backlog of slow queues into BLOBs.",
    no_args_is_help=True,
    rich_markup_mode=None,  # help as plain text, "[...]" printed, not read as markup
)
console = Console()

Config = Annotated[Path | None, config_file_option("Sweeper")]


@app.command()
@reports_errors
def serve(
    config: Config = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (else the config, the env).")
    ] = None,
    verbose: Verbose = False,
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Run the sweeper until SIGTERM / Ctrl-C."""
    from fastapi import FastAPI

    from pipeline.config import BOOTSTRAP_ENV, bootstrap_from
    from pipeline.http.serving import listen, log_service, serve_until_signal
    from pipeline.metrics import add_metrics_route
    from pipeline.security.privacy import keep_to_ourselves, take_secret_variables
    from sweeper.config import load_sweeper_config
    from sweeper.service import Sweeper

    keep_to_ourselves()  # no process of our user reads our environ or memory
    log_service(verbose, log_format)
    settings, groups = load_sweeper_config(config)
    take_secret_variables()  # read: held in ``settings`` only, inherited by nothing
    servers = (
        bootstrap
        or settings.bootstrap_servers
        or os.environ.get(BOOTSTRAP_ENV)
        or next((b for b in (bootstrap_from(g.kafka) for g in groups) if b), None)
    )
    if not servers:
        raise fail(
            "no Kafka cluster: pass --bootstrap, set sweeper.bootstrap_servers or "
            "FLOODGATE_KAFKA_BOOTSTRAP"
        )
    sweeper = Sweeper(settings, groups, bootstrap_servers=servers)
    api = FastAPI(
        title="floodgate sweeper",
        description="Sweeps the backlog of slow-but-serviced queues into BLOBs",
    )

    @api.get("/status")
    def status() -> dict[str, Any]:
        """Leader, BLOB store, BLOB chains, the last cycle."""
        return sweeper.status()

    add_metrics_route(api, sweeper.registry)
    server = listen(
        api,
        host=settings.host,
        port=settings.port,
        name="sweeper",
        allowed_hosts=settings.allowed_hosts,
        hosts_setting="sweeper.allowed_hosts",
    )
    sweeper.election.address = server.url
    sweeper.start()
    serve_until_signal(server, announce=[f"FLOODGATE_SWEEPER_URL={server.url}"], stop=sweeper.stop)


Verify = Annotated[
    bool,
    typer.Option(
        "--verify",
        help="Check each BLOB's size and SHA-256 against the catalog; exit 1 if one fails.",
    ),
]


@app.command()
@reports_errors
def blobs(
    config: Config = None,
    verify: Verify = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the BLOBs as JSON (the catalog's rows, with 'check')."),
    ] = False,
) -> None:
    """The BLOB chains of the sweep catalog (with ``--verify``: each BLOB checked
    against its catalog row; exit status 1 when one is damaged)."""
    import dataclasses
    import json

    from pipeline.errors import BlobIntegrityError
    from pipeline.redaction import redact_url
    from pipeline.swept.catalog import SweepCatalog
    from pipeline.swept.registered import check_blob
    from sweeper.config import load_sweeper_config

    settings, _groups = load_sweeper_config(config)
    catalog = SweepCatalog(settings.catalog_url)
    table = Table(title=f"BLOBs of {redact_url(settings.catalog_url)}")
    columns = ["topic", "partition", "offsets", "tuples", "bytes", "sha256", "file"]
    for column in [*columns, *(["check"] if verify else [])]:
        table.add_column(column)
    held = catalog.all()
    damaged = 0
    rows: list[dict[str, Any]] = []
    for blob in held:
        row = [
            blob.topic,
            str(blob.partition),
            f"[{blob.start_offset}, {blob.end_offset})",
            f"{blob.tuples:,}",
            f"{blob.bytes:,}",
            blob.sha256[:12] if blob.sha256 else "(none)",
            Path(blob.path).name,
        ]
        fields = dataclasses.asdict(blob)
        if verify:
            try:
                check_blob(blob)
                row.append("ok")
            except BlobIntegrityError as exc:
                damaged += 1
                row.append(f"DAMAGED ({exc.reason})")
            fields["check"] = row[-1]
        table.add_row(*row)
        rows.append(fields)
    catalog.close()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        print_table(console, table)
        console.print(f"{len(held)} BLOBs, {sum(b.bytes for b in held):,} bytes")
    if damaged:
        if not as_json:
            console.print(f"[bold red]{damaged} damaged BLOBs[/] (the log has FG-BLOB-002 lines)")
        raise typer.Exit(code=1)
