"""What every ``floodgate`` command shares, the pipeline's (:mod:`pipeline.cli`) and the
services' (``floodgate admission ...``, ``floodgate sweeper ...``): how an error ends a
command, and the options they all take.

An error ends a command with one line, ``error: <message>`` (red, never wrapped, so it
can be grepped and copied; the message is printed as it is, not read as markup), and
exit status 2. A command decorated with :func:`reports_errors` ends so on any
:class:`~pipeline.errors.FloodgateError` it raises; :func:`fail` gives the same ending
for an error of the command line itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.errors import FloodgateError

#: The exit status of a command ended by an error.
ERROR_EXIT_CODE = 2

#: ``--verbose`` / ``-v``: log at INFO instead of WARNING.
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO.")]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_console = Console()


def fail(message: str) -> typer.Exit:
    """Print ``error: <message>`` on standard output; the ``typer.Exit`` (status 2) for
    the caller to raise: ``raise fail("...") from exc``."""
    _console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code=ERROR_EXIT_CODE)


def reports_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorate a Typer command (below ``@app.command()``) so that a
    :class:`~pipeline.errors.FloodgateError` it raises ends it through :func:`fail`:
    its message on one line, exit status 2. Its ``finally`` blocks run first. The
    command's signature, and so its options, are unchanged."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except FloodgateError as exc:
            raise fail(str(exc)) from exc

    return run


def config_file_option(what: str) -> Any:
    """``--config FILE``: an existing file (not a folder), ``what``'s configuration in
    TOML; for ``Annotated[Path | None, config_file_option("Admission")]``."""
    return typer.Option(exists=True, dir_okay=False, help=f"{what} config (TOML).")
