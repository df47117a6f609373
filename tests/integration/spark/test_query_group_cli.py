"""``floodgate query-group status|release|stop`` against a ``floodgate run`` driver process.

The driver serves its control endpoint and writes ``<control_dir>/<name>.json``; the
commands find it by name. Nobody reads the output stream at first, so the group is
HELD (retry count 0); the test reads, releases through the CLI whenever it holds,
then stops the driver through the CLI. The admission service's reader of driver heaps
finds the same driver by its control file.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from typer.testing import CliRunner

from admission.load import DriverHeaps
from pipeline.cli import app
from pipeline.client import connect
from pipeline.demo.reception import read_all
from pipeline.http.client import CONTROL_TOKEN_ENV
from pipeline.serde.schemas import SchemaRepository
from tests.integration.helpers import flights_raw_config, write_query_group
from tests.integration.promtool import check_metrics
from tests.integration.spark.drivers import DRIVER_TIMEOUT_S, kill_group, start_driver

runner = CliRunner()


def cli(*args: str) -> Any:
    return runner.invoke(app, ["query-group", *args])


def wait_for_control_file(
    driver: subprocess.Popen[bytes], path: Path, log_path: Path, deadline: float
) -> None:
    """Until the driver wrote its control file ``path``; fails, with the end of its log,
    when the driver ended first or ``deadline`` (``time.monotonic()``) passed."""
    while not path.exists():
        assert driver.poll() is None, log_path.read_text()[-4000:]
        assert time.monotonic() < deadline, "the driver never wrote its control file"
        time.sleep(0.25)


def test_status_release_and_stop_reach_a_running_driver_by_name(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    run_id: str,
    tmp_path: Path,
) -> None:
    raw = flights_raw_config(
        run_id, tmp_path / "checkpoints", max_tuples_per_trigger=250, only_passthrough=True
    )
    control_dir = tmp_path / "run"
    raw["query_group"].update(
        sleep_on_over_store_retry_count=0, control_dir=str(control_dir), auto_release=False
    )
    raw["output_streams"]["flights_copy"]["max_queue_size"] = 700
    config_path = tmp_path / "group.toml"
    config = write_query_group(raw, config_path)
    name = config.name
    records = flights[:1_000]
    produce(config, records)
    log_path = tmp_path / "driver.log"
    where = ("--control-dir", str(control_dir))

    def state() -> str:
        result = cli("status", name, *where, "--json")
        assert result.exit_code == 0, result.output
        return str(json.loads(result.output)["state"])

    driver = start_driver(config_path, bootstrap, log_path)
    try:
        deadline = time.monotonic() + DRIVER_TIMEOUT_S
        wait_for_control_file(driver, control_dir / f"{name}.json", log_path, deadline)
        while state() != "HELD":
            assert time.monotonic() < deadline, log_path.read_text()[-4000:]
            time.sleep(0.25)
        shown = cli("status", name, *where)
        assert shown.exit_code == 0
        url = json.loads((control_dir / f"{name}.json").read_text())["url"].rstrip("/")
        check_metrics(httpx.get(f"{url}/metrics", timeout=10).text)  # Prometheus' own lint
        assert "HELD" in shown.output and "flights_copy" in shown.output

        refused = cli("stop", "no-such-group", *where)
        assert refused.exit_code == 1 and "no running endpoint found" in refused.stderr

        # The admission service finds the driver through its control file and reads
        # its JVM heap (counted in the memory usage that decides emergency mode).
        heaps = DriverHeaps(control_dir=control_dir)
        ratios = heaps.refresh()
        assert set(ratios) == {name}, ratios
        assert 0.0 < ratios[name] < 1.0

        got: list[dict[str, Any]] = []
        releases = 0
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
            output = connector.open_stream_output(name, "flights_copy")
            while len(got) < len(records):
                assert time.monotonic() < deadline, f"read {len(got)} of {len(records)}"
                got.extend(output.get(max_tuples=500, timeout_s=0.5))
                if output.queue_length() == 0 and state() == "HELD":
                    released = cli("release", name, *where)
                    assert released.exit_code == 0, released.output + log_path.read_text()[-6000:]
                    releases += 1
        assert releases >= 1
        not_held = cli("release", name, *where)
        assert not_held.exit_code == 1 and "not HELD" in not_held.stderr

        stopped = cli("stop", name, *where)
        assert stopped.exit_code == 0, stopped.output
        assert driver.wait(timeout=60) == 0, log_path.read_text()[-4000:]
        assert not (control_dir / f"{name}.json").exists()
        gone = cli("status", name, *where)
        assert gone.exit_code == 1 and "no running endpoint found" in gone.stderr
    finally:
        if driver.poll() is None:
            kill_group(driver)

    def identity(t: dict[str, Any]) -> tuple[Any, ...]:
        return (t["carrier"], t["flight"], t["origin"], t["sched_dep_time"], t["day"])

    assert Counter(identity(t) for t in got) == Counter(identity(r) for r in records)
    assert len(read_all(bootstrap, config.output_streams["flights_copy"].topic)) == len(records)


def test_the_driver_s_spark_jvm_inherits_no_control_token(
    bootstrap: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark starts the JVM with a copy of the driver's environment,
    so ``FLOODGATE_CONTROL_TOKEN`` was readable in ``/proc/<jvm pid>/environ``, by any
    process of the user (the JVM is dumpable). ``floodgate run`` takes it out of its
    environment once read and still holds it: the CLI stops the group with it."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    control_dir = tmp_path / "run"
    raw["query_group"]["control_dir"] = str(control_dir)
    config_path = tmp_path / "group.toml"
    name = write_query_group(raw, config_path).name
    token = secrets.token_hex(32)
    log_path = tmp_path / "driver.log"

    driver = start_driver(config_path, bootstrap, log_path, **{CONTROL_TOKEN_ENV: token})
    try:
        deadline = time.monotonic() + DRIVER_TIMEOUT_S
        wait_for_control_file(driver, control_dir / f"{name}.json", log_path, deadline)
        children = psutil.Process(driver.pid).children(recursive=True)
        jvms = [p for p in children if p.name() == "java"]
        assert jvms, [p.name() for p in children]
        for jvm in jvms:
            environ = jvm.environ()
            assert CONTROL_TOKEN_ENV not in environ
            assert token not in "\0".join(environ.values())
        assert not (control_dir / f"{name}.token").exists()  # taken as given, not made

        monkeypatch.setenv(CONTROL_TOKEN_ENV, token)
        stopped = cli("stop", name, "--control-dir", str(control_dir))
        assert stopped.exit_code == 0, stopped.output
        assert driver.wait(timeout=60) == 0, log_path.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            kill_group(driver)
