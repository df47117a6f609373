"""A Spark standalone cluster for the tests: a master and workers started from the
PySpark wheel of an installed Floodgate (``spark-class ...deploy.master.Master`` /
``...deploy.worker.Worker``), on loopback, on free ports, each stopped by its PID.

Its RPC is authenticated and encrypted as docs/spark-cluster.md says to run one:
``spark.authenticate`` with one random secret in the ``spark-defaults.conf`` (0600, in
a 0700 ``SPARK_CONF_DIR``) that the master, the workers and the driver all read (a
worker hands it to its executors in their environment, never on a command line).

Executors run the installed virtualenv's Python (``spark.pyspark.python``), so the
tasks import Floodgate from the wheel, never from this checkout; the driver is
``spark-submit "$(floodgate driver-path)" run ...`` in that virtualenv.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from pipeline.brokers.engines import free_ports
from tests.integration.deployment.installed import InstalledFloodgate

#: The class of an executor JVM's main (standalone mode).
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each)."""

    installed: InstalledFloodgate
    workdir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master_port: int = field(init=False)
    master_ui_port: int = field(init=False)
    worker_ui_ports: list[int] = field(init=False)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # One call: ports taken one by one may repeat (see free_ports).
        self.master_port, self.master_ui_port, *self.worker_ui_ports = free_ports(2 + self.workers)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def conf_dir(self) -> Path:
        """The ``SPARK_CONF_DIR`` of the master, the workers and the driver."""
        return self.workdir / "conf"

    def _write_conf(self) -> None:
        self.conf_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        defaults = self.conf_dir / "spark-defaults.conf"
        fd = os.open(defaults, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(
                "spark.authenticate true\n"
                f"spark.authenticate.secret {secrets.token_hex(32)}\n"
                "spark.network.crypto.enabled true\n"
            )

    @property
    def secret(self) -> str:
        """The cluster's ``spark.authenticate.secret``."""
        for line in (self.conf_dir / "spark-defaults.conf").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "spark.authenticate.secret":
                return value
        raise LookupError(f"no spark.authenticate.secret in {self.conf_dir}")

    def _env(self) -> dict[str, str]:
        return self.installed.env(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
            SPARK_WORKER_DIR=str(self.workdir / "work"),
        )

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [str(self.installed.bin / "spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self.workdir,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def start(self, timeout_s: float = 120.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_conf()
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.master_port),
            "--webui-port", str(self.master_ui_port),
        )  # fmt: skip
        for i in range(self.workers):
            self._spawn(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1",
                "--webui-port", str(self.worker_ui_ports[i]),
                "--cores", str(self.cores),
                "--memory", self.memory,
                "--work-dir", str(self.workdir / f"work-{i}"),
                self.url,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if self.state()["aliveworkers"] == self.workers:
                    return self
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited: {self.logs()}")
            time.sleep(0.5)
        raise RuntimeError(f"{self.workers} workers not registered in {timeout_s} s: {self.logs()}")

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's ``/json``): workers, applications."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5
        ) as r:
            return dict(json.load(r))

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}"
            for p in sorted(self.workdir.glob("*.log"))
        )

    def executors(self) -> list[psutil.Process]:
        """The executor JVMs the workers run now."""
        found = []
        for process in self.processes[1:]:
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in psutil.Process(process.pid).children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        if EXECUTOR_MAIN in " ".join(child.cmdline()):
                            found.append(child)
        return found

    def stop(self) -> None:
        """SIGTERM every daemon (and its executors), then SIGKILL what is left."""
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self.processes.clear()


def driver_program(installed: InstalledFloodgate) -> str:
    """``floodgate driver-path`` of the installed Floodgate."""
    done = subprocess.run(
        [str(installed.bin / "floodgate"), "driver-path"],
        capture_output=True,
        text=True,
        check=True,
        env=installed.env(),
        timeout=60,
    )
    return done.stdout.strip()


def spark_submit(
    installed: InstalledFloodgate,
    cluster: StandaloneCluster,
    args: list[str],
    *,
    cwd: Path,
    log_path: Path,
    conf: Mapping[str, str] | None = None,
    **env: str,
) -> subprocess.Popen[bytes]:
    """``spark-submit --master <cluster> [--conf k=v ...] "$(floodgate driver-path)"
    <args>``, in a process group of its own (a kill takes the driver's JVM and Python
    down together), with the cluster's ``SPARK_CONF_DIR`` (its RPC secret)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                str(installed.bin / "spark-submit"),
                "--master",
                cluster.url,
                "--conf",
                f"spark.pyspark.python={installed.python}",
                "--conf",
                f"spark.pyspark.driver.python={installed.python}",
                "--conf",
                "spark.executor.memory=768m",
                *(a for key, value in (conf or {}).items() for a in ("--conf", f"{key}={value}")),
                driver_program(installed),
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=installed.env(
                **{"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(cluster.conf_dir), **env}
            ),
            start_new_session=True,
        )
