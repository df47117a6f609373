"""``floodgate admission ...``: run the admission service, and talk to it.

Registered with the ``floodgate`` command through the ``floodgate.commands`` entry
point (``pyproject.toml``), so ``pipeline/`` does not import this package.

* ``floodgate admission serve [--config FILE]`` -- run the service (REST API and
  ``/metrics`` on ``admission.host:port``; with ``admission.intake`` on, the signed
  request topic and the events topic too, on the cluster named by
  ``admission.bootstrap_servers`` or ``FLOODGATE_KAFKA_BOOTSTRAP``,
  :mod:`admission.intake`) until SIGTERM / Ctrl-C;
* ``floodgate admission submit [--no-queue] [--lane L] [--expected-s S] -- CMD ...``;
* ``floodgate admission jobs [--state S]``, ``status``, ``stalls``,
  ``start-now ID``, ``cancel ID``, ``enable-lane NAME``, ``reschedule STALL``.

The client commands reach ``--url`` (``FLOODGATE_ADMISSION_URL``, default
``http://127.0.0.1:8787``) with the token of ``FLOODGATE__ADMISSION__TOKEN`` or of
``--token-file`` (``FLOODGATE_ADMISSION_TOKEN_FILE``); ``--token`` is refused, since
``ps`` shows a process's arguments to every user of the host.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
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
    usage_error,
)
from pipeline.errors import ConfigError
from pipeline.http.client import error_detail
from pipeline.logs import LogFormat
from pipeline.security.credentials import read_secret_file

if TYPE_CHECKING:
    from admission.config import AdmissionSettings

app = typer.Typer(
    help="The admission service: starts jobs when CPU and memory allow.",
    no_args_is_help=True,
    rich_markup_mode=None,  # help as plain text, "[...]" printed, not read as markup
)
console = Console()

DEFAULT_URL = "http://127.0.0.1:8787"
Url = Annotated[str, typer.Option(envvar="FLOODGATE_ADMISSION_URL", help="The service's base URL.")]
#: The variable the client commands take the admission token from.
TOKEN_VARIABLE = "FLOODGATE__ADMISSION__TOKEN"
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        hidden=True,
        help="Refused: a token in argv is shown by ps. Use the environment or --token-file.",
        show_default=False,
    ),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        envvar="FLOODGATE_ADMISSION_TOKEN_FILE",
        help=f"A file holding the bearer token (default: ${TOKEN_VARIABLE}).",
        show_default=False,
    ),
]


def bearer_token(token: str | None, token_file: Path | None) -> str | None:
    """The admission token of a client command: from ``token_file`` (its text, one
    trailing line break dropped, as a Docker or Kubernetes secret is mounted; only a
    file group and others may not read,
    :func:`~pipeline.security.credentials.read_secret_file`), else from
    ``$FLOODGATE__ADMISSION__TOKEN``; never from the command line, where ``ps`` and the
    shell's history show it (as ``kafka-configs --command-config`` and ``curl -H
    @file`` keep secrets off argv).

    Raises:
        typer.Exit: ``--token`` was given (status 2, naming both ways), or the file
            cannot be read, is empty, or group or others may read it (status 1, naming
            the path and its mode).
    """
    if token is not None:
        raise usage_error(
            f"--token is refused: a token on the command line is shown by ps; set "
            f"{TOKEN_VARIABLE} or pass --token-file FILE"
        )
    if token_file is None:
        return os.environ.get(TOKEN_VARIABLE) or None
    try:
        return read_secret_file(token_file, what="--token-file")
    except ConfigError as exc:
        raise fail(str(exc)) from exc


@app.command()
@reports_errors
def serve(
    config: Annotated[Path | None, config_file_option("Admission")] = None,
    verbose: Verbose = False,
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Run the admission service until SIGTERM / Ctrl-C."""
    from admission.api import build_app
    from admission.config import load_admission_config
    from admission.service import AdmissionService
    from pipeline.http.serving import listen, log_service, serve_until_signal
    from pipeline.security.privacy import keep_to_ourselves, take_secret_variables

    keep_to_ourselves()  # no job (a process of our user) reads our environ or memory
    log_service(verbose, log_format)
    settings = load_admission_config(config)
    take_secret_variables()  # read: held in ``settings`` only, inherited by nothing
    if settings.intake:
        intake_bootstrap(settings)  # refused before anything starts
    service = AdmissionService(settings)
    server = listen(
        build_app(service),
        host=settings.host,
        port=settings.port,
        name="admission",
        what="the API",
        allowed_hosts=settings.allowed_hosts,
        hosts_setting="admission.allowed_hosts",
    )
    # Bound before the service takes the leadership and records where it answers.
    service.start(address=server.url)
    intake = None
    if settings.intake:
        from admission.intake import KafkaIntake

        intake = KafkaIntake(service, bootstrap_servers=intake_bootstrap(settings)).start()
    elif settings.bootstrap_servers or os.environ.get("FLOODGATE_KAFKA_BOOTSTRAP"):
        logging.getLogger(__name__).warning(
            "admission intake off: job requests on %s are not read (admission.intake "
            "turns it on, with admission.intake_key to sign them)",
            settings.request_topic,
        )

    def stop() -> None:
        if intake is not None:
            intake.stop()
        service.stop()

    # Where it listens, as bound (0.0.0.0: every interface), then one line a
    # supervisor (or a test) can read the URL from.
    everywhere = " (every interface)" if server.bound.startswith("0.0.0.0:") else ""
    serve_until_signal(
        server,
        announce=[
            f"admission API listening on {server.bound}{everywhere}",
            f"FLOODGATE_ADMISSION_URL={server.url}",
        ],
        stop=stop,
    )


def intake_bootstrap(settings: AdmissionSettings) -> str:
    """The Kafka cluster of the request intake: ``admission.bootstrap_servers``, else
    ``FLOODGATE_KAFKA_BOOTSTRAP``.

    Raises:
        ConfigError: ``admission.intake`` is on and neither names a cluster.
    """
    bootstrap = settings.bootstrap_servers or os.environ.get("FLOODGATE_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise ConfigError(
            "admission.intake is on but no Kafka cluster is named: set "
            "admission.bootstrap_servers or FLOODGATE_KAFKA_BOOTSTRAP, or turn the "
            "intake off",
            key="admission.bootstrap_servers",
            allowed="host:port[,host:port...]",
        )
    return bootstrap


def _call(method: str, url: str, path: str, token: str | None, **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.request(
            method, f"{url.rstrip('/')}{path}", headers=headers, timeout=30, **kwargs
        )
    except httpx.HTTPError as exc:
        raise fail(f"admission service at {url}: {exc}") from exc
    if response.status_code >= 400:
        raise fail(f"admission service: {response.status_code}: {error_detail(response)}")
    return response.json()


def _jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table()
    for column in ("id", "state", "lane", "command", "exit", "start"):
        table.add_column(column, justify="right" if column in ("id", "exit") else "left")
    for job in jobs:
        table.add_row(
            str(job["id"]),
            job["state"],
            job["lane"],
            " ".join(job["argv"])[:60],
            "" if job["exit_code"] is None else str(job["exit_code"]),
            job["start_reason"] or "",
        )
    return table


@app.command()
def submit(
    command: Annotated[list[str], typer.Argument(help="The command line (after --).")],
    no_queue: Annotated[
        bool, typer.Option("--no-queue", help="Not queueable: start at once, whatever the load.")
    ] = False,
    lane: Annotated[str, typer.Option(help="The job's lane.")] = "default",
    expected_s: Annotated[
        float | None, typer.Option(help="Expected run time (s); past it: long-running.")
    ] = None,
    abnormal_exit: Annotated[
        bool, typer.Option(help="A non-zero exit is a hard stall, not only an error.")
    ] = False,
    url: Url = DEFAULT_URL,
    token: Token = None,
    token_file: TokenFile = None,
) -> None:
    """Submit a job: `floodgate admission submit -- spark-submit app.py`."""
    job = _call(
        "POST",
        url,
        "/jobs",
        bearer_token(token, token_file),
        json={
            "argv": command,
            "queueable": not no_queue,
            "lane": lane,
            "expected_s": expected_s,
            "abnormal_exit": abnormal_exit,
        },
    )
    console.print(f"job {job['id']}: {job['state']}")


@app.command()
def jobs(
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    url: Url = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """List jobs, newest first."""
    found = _call("GET", url, "/jobs", None, params={"state": state} if state else {})
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        print_table(console, _jobs_table(found))


@app.command()
def status(url: Url = DEFAULT_URL) -> None:
    """Load, emergency mode, load step, jobs by state, disabled lanes."""
    print(json.dumps(_call("GET", url, "/status", None), indent=2))


@app.command()
def stalls(
    url: Url = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """The stall array: hard stalls and long-running jobs."""
    found = _call("GET", url, "/stalls", None)
    if as_json:
        print(json.dumps(found, indent=2))
        return
    table = Table(title="stall array")
    for column in ("id", "job", "kind", "reason"):
        table.add_column(column)
    for stall in found:
        table.add_row(str(stall["id"]), str(stall["job_id"]), stall["kind"], stall["reason"])
    print_table(console, table)


@app.command("start-now")
def start_now(
    job_id: int,
    url: Url = DEFAULT_URL,
    token: Token = None,
    token_file: TokenFile = None,
) -> None:
    """Start an enqueued job at once, whatever the load."""
    job = _call("POST", url, f"/jobs/{job_id}/start-now", bearer_token(token, token_file))
    console.print(f"job {job['id']}: {job['state']} (forced)")


@app.command()
def cancel(
    job_id: int,
    url: Url = DEFAULT_URL,
    token: Token = None,
    token_file: TokenFile = None,
) -> None:
    """Abort a job."""
    job = _call("POST", url, f"/jobs/{job_id}/cancel", bearer_token(token, token_file))
    console.print(f"job {job['id']}: {job['state']}")


@app.command("enable-lane")
def enable_lane(
    name: str, url: Url = DEFAULT_URL, token: Token = None, token_file: TokenFile = None
) -> None:
    """Enable a lane disabled by a hard stall."""
    _call("POST", url, f"/lanes/{name}/enable", bearer_token(token, token_file))
    console.print(f"lane {name} enabled")


@app.command()
def reschedule(
    stall_id: int,
    url: Url = DEFAULT_URL,
    token: Token = None,
    token_file: TokenFile = None,
) -> None:
    """Enqueue a hard-stalled job's command again."""
    job = _call("POST", url, f"/stalls/{stall_id}/reschedule", bearer_token(token, token_file))
    console.print(f"stall {stall_id} rescheduled as job {job['id']}: {job['state']}")
