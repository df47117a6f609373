"""``floodgate audit``: the tuple ledger of a query group's streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from pipeline.cli.app import (
    BootstrapOption,
    app,
    bootstrap_servers_for,
    console,
    query_group_file,
)
from pipeline.cli.conventions import print_table, reports_errors
from pipeline.errors import FloodgateError

if TYPE_CHECKING:
    from pipeline.queues.replays import ReplayRow


@app.command()
@reports_errors
def audit(
    configs: Annotated[
        list[Path] | None,
        typer.Argument(
            parser=query_group_file,
            help="Query group files or shipped names (default: the shipped flights).",
        ),
    ] = None,
    query_group: Annotated[
        str | None, typer.Option("--query-group", help="Audit only this query group.")
    ] = None,
    bootstrap: BootstrapOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """The tuple ledger: per input stream partition, tuples written = processed +
    dead-lettered + swept + queued. Exit status 0 only when every row balances. For an
    at-least-once query group, per query, the output tuples its batches wrote more than
    once (replayed) and those of a batch not committed yet. ``--json``: ``{"ledger":
    [...], "replays": [...]}``."""
    import dataclasses

    from pipeline.config import load_query_group
    from pipeline.queues.ledger import reconcile
    from pipeline.queues.replays import replays

    groups = [load_query_group(p) for p in configs or [query_group_file("flights")]]
    if query_group is not None:
        groups = [g for g in groups if g.name == query_group]
        if not groups:
            raise FloodgateError(
                f"no query group {query_group!r} in {[str(p) for p in configs or []]}"
            )
    rows = []
    replayed = []
    for group in groups:
        servers = bootstrap_servers_for(bootstrap, group)
        rows.extend(reconcile(group, bootstrap_servers=servers))
        replayed.extend(replays(group, bootstrap_servers=servers))
    balanced = all(r.balanced for r in rows)
    if as_json:
        ledger = [{**dataclasses.asdict(r), "balanced": r.balanced} for r in rows]
        shown = {"ledger": ledger, "replays": [dataclasses.asdict(r) for r in replayed]}
        typer.echo(json.dumps(shown, indent=2))
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
        print_table(console, table)
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
        if replayed:
            print_replays(replayed)
    if not balanced:
        raise typer.Exit(code=1)


def print_replays(rows: list[ReplayRow]) -> None:
    """The at-least-once queries' output: tuples written twice by their batches' runs."""
    table = Table(
        title="at-least-once output: written = committed + replayed + uncommitted",
    )
    columns = ("query group", "query", "stream")
    for column in (*columns, "written", "committed", "replayed", "uncommitted"):
        table.add_column(column, justify="left" if column in columns else "right")

    def shown(n: int | None) -> str:
        return "-" if n is None else f"{n:,}"

    for r in rows:
        table.add_row(
            r.query_group,
            r.query,
            r.stream,
            f"{r.written:,}",
            shown(r.committed),
            shown(r.replayed),
            shown(r.uncommitted),
        )
    print_table(console, table)
    console.print(
        "replayed: tuples of a batch's earlier run that its committed run wrote again "
        "(duplicates); uncommitted: of a batch running, or cut short and run again at the "
        "next start; '-': no batch committed yet, or the checkpoint is not local"
    )
