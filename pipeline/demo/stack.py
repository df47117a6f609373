"""The config files of a whole stack: a query group, the admission service that starts
its driver, and the sweeper that sweeps its input queues, each on a free port of this
host, their databases and folders under one directory.

What the soak (``bench/soak.py``) and the dashboards test run, each service its own
process (``floodgate run``, ``floodgate admission serve``, ``floodgate sweeper serve``:
:func:`spawn`).
The three files are wired together: the query group and the admission service share
the control directory (the admission service finds the driver's endpoint there), the
query group and the sweeper share the sweep catalog, and the sweeper sweeps the query
group's file. Under ``directory``::

    <query group name>.toml   admission.toml   sweeper.toml
    run/                      control files of the running query group
    admission/jobs.db         the admission job queue; admission/logs/ the jobs' output
    sweeper/catalog.db        the sweep catalog; sweeper/blobs/ the BLOBs
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.brokers.engines import free_ports
from pipeline.state.files import private_file, write_private_text

#: The services of a stack, and so the keys of :attr:`StackFiles.ports`.
SERVICES = ("group", "admission", "sweeper")


@dataclass(frozen=True)
class StackFiles:
    """The files :func:`write_stack` wrote.

    Attributes:
        group: the query group file (``floodgate run``).
        admission: the admission service's file (``floodgate admission serve --config``).
        sweeper: the sweeper's file (``floodgate sweeper serve --config``).
        ports: the TCP port on 127.0.0.1 of each of :data:`SERVICES`: the query group's
            metrics and control endpoint, the admission API, the sweeper's endpoint.
    """

    group: Path
    admission: Path
    sweeper: Path
    ports: dict[str, int]


def write_stack(
    directory: Path,
    group: Mapping[str, Any],
    *,
    bootstrap_servers: str,
    allowlist: Sequence[str],
    sweep_interval_s: float = 1.0,
) -> StackFiles:
    """Write the config files of a stack under ``directory`` (made if missing; layout in
    the module's doc), each service on a port free now.

    Args:
        group: the query group's settings, as its TOML file parses (e.g.
            ``conf/flights.toml`` with a run's names); copied, not changed. The stack
            sets its ``[query_group]`` ``metrics_port``, ``control_dir`` and
            ``sweep_catalog_url``.
        bootstrap_servers: the Kafka cluster the sweeper reads (``host:port[,...]``).
        allowlist: the commands the admission service may start (its ``allowlist``).
        sweep_interval_s: seconds between the sweeper's cycles.

    Returns:
        Where the files are, and the ports they give.

    Raises:
        OSError: a folder or file cannot be written.
    """
    import tomli_w

    ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
    control_dir = directory / "run"
    catalog_url = f"sqlite:///{directory / 'sweeper' / 'catalog.db'}"
    raw = copy.deepcopy(dict(group))
    raw["query_group"].update(
        metrics_port=ports["group"],
        control_dir=str(control_dir),
        sweep_catalog_url=catalog_url,
    )
    for folder in ("admission", "sweeper"):
        (directory / folder).mkdir(parents=True, exist_ok=True)
    files = StackFiles(
        group=directory / f"{raw['query_group']['name']}.toml",
        admission=directory / "admission.toml",
        sweeper=directory / "sweeper.toml",
        ports=ports,
    )
    write_private_text(files.group, tomli_w.dumps(raw))
    admission = {
        "port": ports["admission"],
        "allowlist": list(allowlist),
        "database_url": f"sqlite:///{directory / 'admission' / 'jobs.db'}",
        "log_dir": str(directory / "admission" / "logs"),
        "driver_control_dir": str(control_dir),
    }
    write_private_text(files.admission, tomli_w.dumps({"admission": admission}))
    sweeper = {
        "port": ports["sweeper"],
        "query_groups": [str(files.group)],
        "catalog_url": catalog_url,
        "blob_dir": str(directory / "sweeper" / "blobs"),
        "sweep_interval_s": sweep_interval_s,
        "bootstrap_servers": bootstrap_servers,
    }
    write_private_text(files.sweeper, tomli_w.dumps({"sweeper": sweeper}))
    return files


def spawn(
    argv: Sequence[str], log: Path, *, cwd: Path | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """Start a process of a stack in a session, and so a process group, of its own: a
    signal to the caller's group (Ctrl-C) does not reach it, and ``os.killpg`` of its
    pid ends it with its children (a driver's JVM and workers).

    Args:
        argv: the command line.
        log: the file its standard output and error are appended to (made if missing).
        cwd: its working directory (default: the caller's).
        env: variables set on top of this process's environment.

    Returns:
        The started process; standard input is ``/dev/null``.

    Raises:
        OSError: the log cannot be opened or the command cannot be started.
    """
    with os.fdopen(private_file(log, os.O_WRONLY | os.O_APPEND), "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
            env={**os.environ, **env},
        )
