"""The ``floodgate`` Typer app, and the options and helpers its commands share."""

from __future__ import annotations

import enum
import logging
import signal
import threading
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from typer.core import TyperGroup

from pipeline.errors import FloodgateError

QUERY_GROUP_FILE_HELP = "Query group file (TOML), or the name of a shipped one (flights)."


BootstrapOption = Annotated[
    str | None,
    typer.Option(
        help="Kafka bootstrap servers (default: FLOODGATE_KAFKA_BOOTSTRAP, "
        "then [kafka] bootstrap_servers)."
    ),
]


class _WithServiceCommands(TyperGroup):
    """The ``floodgate`` command group, with the services' command groups
    (``floodgate admission ...``) found through the ``floodgate.commands`` entry point
    group, so this package imports none of them.

    They are added when the command is built (the app called, its help or reference
    made), not when :mod:`pipeline.cli` is imported: a service's command module imports
    :mod:`pipeline.cli.conventions`, and so this package, before its own app exists."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for entry in entry_points(group="floodgate.commands"):
            group = typer.main.get_group(entry.load())
            group.name = entry.name
            self.add_command(group, entry.name)


app = typer.Typer(
    name="floodgate",
    cls=_WithServiceCommands,
    help="A back-pressured, Kafka-fronted stream processing pipeline on Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help as plain text: "[kafka] bootstrap_servers" is printed, not read as markup.
    rich_markup_mode=None,
)


console = Console()


query_group_app = typer.Typer(
    help="Status, release and stop of a running query group (its HTTP control endpoint). "
    "release and stop send the control token: FLOODGATE_CONTROL_TOKEN, else the group's "
    "<control_dir>/<name>.token on this host.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


app.add_typer(query_group_app, name="query-group")


def setup_logging(verbose: bool, log_format: str | None = None) -> None:
    """Log on standard error at INFO when ``verbose``, else WARNING; a no-op once
    logging is set up.

    Args:
        log_format: ``text`` or ``json`` for a long-running command (``floodgate run``):
            each line with its time, level and logger
            (:func:`pipeline.logs.configure_logging`); ``None``: an
            interactive command's lines through rich (level, logger, message).

    Raises:
        ValueError: ``log_format`` is neither ``text``, ``json`` nor ``None``.
    """
    from pipeline.logs import configure_logging

    if log_format is not None:
        configure_logging(verbose, log_format)
    else:
        logging.basicConfig(
            level=logging.INFO if verbose else logging.WARNING,
            format="%(name)s: %(message)s",
            handlers=[RichHandler(console=Console(stderr=True), show_path=False)],
        )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class Engine(enum.StrEnum):
    """The brokers ``floodgate`` can start (:data:`pipeline.brokers.engines.ENGINES`)."""

    noida_db = "noida-db"
    apache_kafka = "apache-kafka"


def bind_host(value: str) -> str:
    """A ``--metrics-host`` an endpoint can listen on (:func:`check_bind_host`)."""
    from pipeline.config import check_bind_host

    try:
        return check_bind_host(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def query_group_file(value: str) -> Path:
    """A query group file argument: a path, or the name of a file Floodgate ships
    (``flights``: ``pipeline/resources.py``), so an installed Floodgate runs its demo
    group from any directory."""
    from pipeline.errors import ConfigError
    from pipeline.resources import query_group_file as resolve

    try:
        return resolve(value)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None


def bootstrap_servers_for(bootstrap: str | None, config: Any) -> str:
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


def stop_on_signals(stop: threading.Event, what: str) -> None:
    """Set ``stop`` on SIGTERM (``docker stop``, the admission service) or Ctrl-C, saying
    ``what`` happens next."""

    def on_signal(signum: int, _frame: Any) -> None:
        console.print(f"signal {signal.Signals(signum).name}: {what}")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
