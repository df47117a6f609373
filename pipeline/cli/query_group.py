"""``floodgate query-group status|release|stop``: a running query group's control endpoint."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from pipeline.cli.app import (
    console,
    query_group_app,
)
from pipeline.cli.conventions import print_table, reports_errors
from pipeline.config import DEFAULT_CONTROL_DIR

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
            (:func:`pipeline.http.client.call`).
    """
    from pipeline.http.client import call

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
            f"{q['input_tuples']:,}",
            f"{q['tuples_written']:,}",
            f"{q['processed_tuples_per_second']:,.0f}",
        )
    print_table(console, queries)
    outputs = Table(title="output stream queues")
    for column in ("stream", "length", "max", "full"):
        outputs.add_column(column, justify="left" if column == "stream" else "right")
    for name, o in status["output_queues"].items():
        full = o["length"] / o["max_queue_size"] if o["max_queue_size"] else 0.0
        outputs.add_row(name, f"{o['length']:,}", f"{o['max_queue_size']:,}", f"{full:.0%}")
    print_table(console, outputs)
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
