"""What every ``floodgate`` command shares, the pipeline's (:mod:`pipeline.cli`) and the
services' (``floodgate admission ...``, ``floodgate sweeper ...``): how an error ends a
command, the options they all take, and how they print a table.

Exit status, for every command:

* ``0`` -- done (``floodgate audit``: every row balances);
* ``1`` (:data:`FAILED`) -- the operation failed: a refused config file or setting, an
  unreachable broker or service, an endpoint that refused, an unbalanced ledger, a
  damaged BLOB;
* ``2`` (:data:`USAGE`) -- the command line itself is wrong: an unknown option, a
  missing or invalid argument or option value (Click's usage errors, and
  :func:`usage_error`).

An error ends a command with one line on standard error, ``error: <message>`` (red,
never wrapped, so it can be grepped and copied; the message is printed as it is, not
read as markup). A command decorated with :func:`reports_errors` ends so, with status
1, on any :class:`~pipeline.errors.FloodgateError` it raises; :func:`fail` gives the
same ending for a failure found by the command itself, :func:`usage_error` for a
command line it refuses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table

from pipeline.errors import FloodgateError
from pipeline.logs import LOG_FORMAT_ENV, LogFormat
from pipeline.redaction import redact_text

#: The exit status of a command whose operation failed.
FAILED = 1
#: The exit status of a command refused for its command line (Click's own, too).
USAGE = 2

#: ``--verbose`` / ``-v``: log at INFO instead of WARNING.
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO.")]

#: ``--log-format text|json`` of the long-running commands (:mod:`pipeline.logs`).
LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar=LOG_FORMAT_ENV,
        case_sensitive=False,
        help="Log lines on standard error as text (time, level, logger, message) or as "
        "json (one object a line: time, level, logger, message).",
    ),
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_stderr = Console(stderr=True)


def fail(message: str, *, code: int = FAILED) -> typer.Exit:
    """Print ``error: <message>`` on standard error; the ``typer.Exit`` (status ``code``,
    default 1) for the caller to raise: ``raise fail("...") from exc``."""
    _stderr.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code=code)


def usage_error(message: str) -> typer.Exit:
    """:func:`fail` with status 2: the command line is wrong (options that do not go
    together, a value the option's parser could not judge alone)."""
    return fail(message, code=USAGE)


def reports_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorate a Typer command (below ``@app.command()``) so that a
    :class:`~pipeline.errors.FloodgateError` it raises ends it through :func:`fail`:
    its message on one line of standard error, exit status 1 (a failed operation;
    status 2 is left to usage errors of the command line), URL passwords and
    ``password=`` values in it as ``***`` (:func:`pipeline.redaction.redact_text`: a
    broker's output or a library's error quoted in it). Its ``finally`` blocks run
    first. The command's signature, and so its options, are unchanged."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except FloodgateError as exc:
            raise fail(redact_text(str(exc))) from exc

    return run


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` with no cell cut short ("fligh…"): in a terminal, at the
    terminal's width, a cell too long for its column folded onto the next line; anywhere
    else (a pipe, a file, a container's log), as wide as the table needs, however many
    columns that is (a reader of a log scrolls; it cannot widen a column afterwards)."""
    for column in table.columns:
        if column.overflow == "ellipsis":
            column.overflow = "fold"
    if console.is_terminal:
        console.print(table)
        return
    whole = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
    options = console.options.update_width(max(console.width, whole))
    console.print(Segments(console.render(table, options)), crop=False)


def config_file_option(what: str) -> Any:
    """``--config FILE``: an existing file (not a folder), ``what``'s configuration in
    TOML; for ``Annotated[Path | None, config_file_option("Admission")]``."""
    return typer.Option(exists=True, dir_okay=False, help=f"{what} config (TOML).")
