"""``floodgate broker``, ``floodgate metrics-doc``, ``floodgate alert-rules`` and
``floodgate driver-path``."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from pipeline.alert_rules import (
    DEFAULT_INPUT_LAG_THRESHOLD_S,
    DEFAULT_OUTPUT_LAG_THRESHOLD_S,
    DEFAULT_RUNBOOK_URL,
)
from pipeline.cli.app import (
    Engine,
    app,
    setup_logging,
)
from pipeline.cli.conventions import fail, reports_errors, usage_error
from pipeline.errors import ConfigError, FloodgateError


@app.command("driver-path")
def driver_path() -> None:
    """Print the path of Floodgate's driver program, the file `spark-submit` runs:
    spark-submit --master spark://host:7077 "$(floodgate driver-path)" run flights
    (docs/spark-cluster.md)."""
    # The package's __main__.py: run as a script, it runs the same app.
    typer.echo(Path(__file__).resolve().with_name("__main__.py"))


def _generated(text: str, output: Path | None, *, check: bool, command: str) -> None:
    """A generated file's ``text``: printed (no ``output``), compared with ``output``
    (``check``: exit 1 naming the command that regenerates it when they differ), or
    written to ``output``."""
    if output is None:
        typer.echo(text, nl=False)
    elif check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            raise fail(f"{output} is out of date: run floodgate {command} --output {output}")
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")


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

    _generated(metrics_markdown(), output, check=check, command="metrics-doc")


@app.command("alert-rules")
@reports_errors
def alert_rules(
    output: Annotated[
        Path | None, typer.Option(help="Write here (default: print to stdout).")
    ] = None,
    check: Annotated[
        bool, typer.Option(help="Exit 1 when OUTPUT differs from what these options make.")
    ] = False,
    runbook_url: Annotated[
        str,
        typer.Option(
            help="Absolute URL of the runbook page; each alert's runbook_url is this URL "
            "and '#' its section (the alert's name in lower case)."
        ),
    ] = DEFAULT_RUNBOOK_URL,
    input_lag_threshold_s: Annotated[
        float,
        typer.Option(help="FloodgateInputLagHigh fires when an input stream lags more (seconds)."),
    ] = DEFAULT_INPUT_LAG_THRESHOLD_S,
    output_lag_threshold_s: Annotated[
        float,
        typer.Option(
            help="FloodgateOutputLagHigh fires when an output stream lags more (seconds)."
        ),
    ] = DEFAULT_OUTPUT_LAG_THRESHOLD_S,
) -> None:
    """The Prometheus alerting and recording rules (prometheus/rules/floodgate.yml),
    with the runbook's URL and the lag thresholds given: floodgate alert-rules
    --runbook-url https://docs.example.org/runbook/ --output rules/floodgate.yml."""
    from pipeline.alert_rules import RuleSettings, render_rules

    text = render_rules(
        RuleSettings(
            runbook_url=runbook_url,
            input_lag_threshold_s=input_lag_threshold_s,
            output_lag_threshold_s=output_lag_threshold_s,
        )
    )
    _generated(text, output, check=check, command="alert-rules")


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
            help="NAME of a SASL/PLAIN user (repeat for more; apache-kafka only); its "
            f"password from --sasl-password-file or, for one user, ${SASL_PASSWORD_ENV}, "
            "never the command line. Given: the broker's listener is SASL_PLAINTEXT and "
            "every client must authenticate ([kafka] client: security.protocol, "
            "sasl.mechanism = PLAIN, sasl.username, sasl.password).",
        ),
    ] = None,
    sasl_password_file: Annotated[
        Path | None,
        typer.Option(
            envvar="FLOODGATE_SASL_PASSWORD_FILE",
            help="A file of NAME:PASSWORD lines, the passwords of the --sasl-user "
            "names (mode 0600: a file group or others may read is refused).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a Kafka broker (or an Apache Kafka cluster) in the foreground until
    SIGTERM/Ctrl-C, then stop every process it started.

    Prints ``FLOODGATE_KAFKA_BOOTSTRAP=host:port[,...]`` once it answers, for other
    processes (or a test run) to use as an existing cluster.
    """
    from pipeline.brokers.local import local_broker

    setup_logging(False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    started: Any
    if sasl_user:
        try:
            passwords = sasl_passwords(sasl_user, sasl_password_file)
            started = _sasl_cluster(engine, passwords, nodes=nodes, data_dir=data_dir, port=port)
        except ConfigError as exc:  # the command line's --sasl-user / --engine
            raise usage_error(str(exc)) from exc
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


#: The password of the one ``--sasl-user`` of ``floodgate broker``.
SASL_PASSWORD_ENV = "FLOODGATE_SASL_PASSWORD"


def sasl_passwords(users: list[str], password_file: Path | None) -> dict[str, str]:
    """``{name: password}`` of the ``--sasl-user`` names: from ``password_file``
    (``NAME:PASSWORD`` lines, read by
    :func:`~pipeline.security.credentials.read_secret_file`), else, for one user, from
    :data:`SASL_PASSWORD_ENV`. Never from the command line, where ``ps`` shows every
    process's arguments to every user of the host.

    Raises:
        ConfigError: a ``--sasl-user`` holds ``:`` (the old ``NAME:PASSWORD`` form; the
            value not shown), the file is refused or has a line without ``:``, or a
            user has no password; names the option, the file or the user.
    """
    from pipeline.security.credentials import read_secret_file

    if any(":" in user for user in users):
        raise ConfigError(
            "--sasl-user takes a NAME only: a password on the command line is shown by "
            "ps (the entry is not shown); put NAME:PASSWORD lines in --sasl-password-file "
            f"FILE (mode 0600), or the one user's password in ${SASL_PASSWORD_ENV}",
            key="sasl_user",
            allowed="NAME",
        )
    known: dict[str, str] = {}
    if password_file is not None:
        text = read_secret_file(password_file, what="--sasl-password-file")
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            name, colon, password = line.partition(":")
            if not colon:
                raise ConfigError(
                    f"--sasl-password-file {password_file}: line {number} has no ':' "
                    "(not shown); write NAME:PASSWORD",
                    key="sasl_password_file",
                    allowed="NAME:PASSWORD lines",
                )
            known[name.strip()] = password
    elif len(users) == 1 and os.environ.get(SASL_PASSWORD_ENV):
        known[users[0]] = os.environ[SASL_PASSWORD_ENV]
    missing = [user for user in users if user not in known]
    if missing:
        raise ConfigError(
            f"--sasl-user {', '.join(missing)}: no password; give --sasl-password-file "
            f"FILE with a NAME:PASSWORD line for each user, or, for one user, "
            f"${SASL_PASSWORD_ENV}",
            key="sasl_password_file",
            allowed="NAME:PASSWORD lines",
        )
    return {user: known[user] for user in users}


def _sasl_cluster(
    engine: Engine, users: dict[str, str], *, nodes: int, data_dir: Path | None, port: int | None
) -> Any:
    """An Apache Kafka cluster whose listener requires SASL/PLAIN as one of ``users``
    (``{name: password}``, :func:`sasl_passwords`).

    Raises:
        ConfigError: the engine is not apache-kafka (noida-db has no SASL), or a user is
            refused by :func:`pipeline.brokers.apache_kafka.config.check_sasl_users`.
    """
    from pipeline.brokers.apache_kafka import ApacheKafkaCluster

    if engine != Engine.apache_kafka:
        raise ConfigError(
            f"--sasl-user needs --engine apache-kafka (the {engine.value} engine has no SASL)",
            key="engine",
            value=engine.value,
            allowed="apache-kafka",
        )
    return ApacheKafkaCluster(nodes=nodes, data_dir=data_dir, port=port, sasl_users=users)
