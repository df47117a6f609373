"""Floodgate on a real Spark cluster: a standalone master and two workers
(``spark_cluster.py``), executors running a virtualenv in which only the built wheel
is installed, the driver started with ``spark-submit`` as the docs say.

In standalone mode no task runs in the driver: every micro-batch's tasks (the Kafka
reads of the ``floodgate_kafka`` source, the swept BLOB reads, the aggregations) run
in the workers' executor JVMs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.queues.ledger import reconcile
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from sweeper.service import Sweeper
from tests.integration.deployment.installed import InstalledFloodgate
from tests.integration.deployment.spark_cluster import StandaloneCluster, spark_submit
from tests.integration.helpers import ROOT, flights_raw_config
from tests.integration.s3proxy import S3Server
from tests.integration.spark.drivers import committed_and_end, wait_until
from tests.integration.spark.figures import (
    actual,
    assert_same_figures,
    expected_by_carrier_day,
    expected_by_origin_hour,
    read_outputs,
)
from tests.integration.sweeper.sweeping import sample, sequenced, swept_group

pytestmark = [pytest.mark.integration, pytest.mark.deployment]

DRIVER_TIMEOUT_S = 300.0
#: Runs of the flights group in a row (``FLOODGATE_TEST_CLUSTER_RUNS``, default 1; the
#: 5 in a row of docs/spark-cluster.md were run with 5).
CLUSTER_RUNS = int(os.environ.get("FLOODGATE_TEST_CLUSTER_RUNS", "1"))


@pytest.fixture(scope="module")
def spark_cluster(
    installed: InstalledFloodgate, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(installed, tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def write_config(path: Path, raw: dict[str, Any]) -> QueryGroupConfig:
    path.write_text(tomli_w.dumps(raw))
    return parse_query_group(raw, env={})


def tail(path: Path, chars: int = 5000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def stop_driver(driver: subprocess.Popen[bytes]) -> None:
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGTERM)
        try:
            driver.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)


def kill_driver(driver: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)


def executor_task_logs(cluster: StandaloneCluster) -> list[Path]:
    """The stderr files of executors that ran tasks (``<work-dir>/<app>/<executor>``)."""
    return [
        p
        for p in cluster.workdir.glob("work-*/app-*/*/stderr")
        if "Running task" in p.read_text(errors="replace")
    ]


def assert_flights_figures(bootstrap: str, config: QueryGroupConfig, records: list[Any]) -> None:
    """Each aggregation equals pandas' on the same flights (a lost or duplicated
    tuple changes a count), and the tuple ledger balances."""
    schemas = SchemaRepository.load()
    outputs = read_outputs(bootstrap, config, schemas)
    assert_same_figures(
        actual(outputs["delays_by_origin_hour"], ["origin", "hour_start"]),
        expected_by_origin_hour(records),
    )
    assert_same_figures(
        actual(outputs["delays_by_carrier_day"], ["carrier", "day"]),
        expected_by_carrier_day(records),
    )
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert rows and all(r.balanced for r in rows), rows
    assert sum(r.processed for r in rows) == len(records)


def flights_group(run_id: str, tmp_path: Path, **settings: Any) -> tuple[Path, QueryGroupConfig]:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", watermark="60 days", **settings)
    raw["query_group"]["control_dir"] = str(tmp_path / "run")
    path = tmp_path / "group.toml"
    return path, write_config(path, raw)


@pytest.mark.parametrize("attempt", range(1, CLUSTER_RUNS + 1))
def test_the_flights_group_on_the_cluster_processes_every_tuple_once(
    spark_cluster: StandaloneCluster,
    installed: InstalledFloodgate,
    bootstrap: str,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    produce: Callable[..., None],
    attempt: int,
) -> None:
    """``CLUSTER_RUNS`` runs in a row (``attempt``), each on topics of its own."""
    path, config = flights_group(run_id, tmp_path)
    produce(config, flights)
    log_path = tmp_path / "driver.log"
    before = set(executor_task_logs(spark_cluster))
    driver = spark_submit(
        installed,
        spark_cluster,
        ["run", str(path), "--bootstrap", bootstrap, "--available-now"],
        cwd=tmp_path,
        log_path=log_path,
    )
    try:
        assert driver.wait(timeout=DRIVER_TIMEOUT_S) == 0, tail(log_path)
    finally:
        kill_driver(driver)
    log = log_path.read_text(errors="replace")
    assert "Starting executor ID driver" not in log  # no local mode
    assert set(executor_task_logs(spark_cluster)) - before, "no executor ran a task"
    assert_flights_figures(bootstrap, config, flights)


def test_a_driver_without_the_clusters_secret_is_refused_before_spark_starts(
    spark_cluster: StandaloneCluster,
    installed: InstalledFloodgate,
    bootstrap: str,
    run_id: str,
    tmp_path: Path,
) -> None:
    """Floodgate refuses a driver on a standalone master without ``spark.authenticate``
    (an empty ``SPARK_CONF_DIR``), naming the setting and the way out; the master
    never sees an application."""
    path, _ = flights_group(run_id, tmp_path)
    empty = tmp_path / "no-conf"
    empty.mkdir()
    log_path = tmp_path / "driver.log"
    applications = len(spark_cluster.state()["completedapps"] + spark_cluster.state()["activeapps"])
    driver = spark_submit(
        installed,
        spark_cluster,
        ["run", str(path), "--bootstrap", bootstrap, "--available-now"],
        cwd=tmp_path,
        log_path=log_path,
        SPARK_CONF_DIR=str(empty),
    )
    try:
        assert driver.wait(timeout=DRIVER_TIMEOUT_S) != 0, tail(log_path)
    finally:
        kill_driver(driver)
    log = log_path.read_text(errors="replace")
    assert "spark.authenticate" in log and "allow_unauthenticated_spark" in log, tail(log_path)
    state = spark_cluster.state()
    assert len(state["completedapps"] + state["activeapps"]) == applications


def status(tmp_path: Path, config: QueryGroupConfig) -> dict[str, Any] | None:
    """The running driver's ``GET /status`` (its URL from the control file)."""
    try:
        control = json.loads((tmp_path / "run" / f"{config.name}.json").read_text())
        with urllib.request.urlopen(f"{control['url']}/status", timeout=5) as response:
            return dict(json.load(response))
    except (OSError, ValueError, KeyError):
        return None


def running_on_executors(tmp_path: Path, config: QueryGroupConfig) -> bool:
    """Whether a micro-batch's tasks run now (in standalone mode only executors run
    tasks), as the driver's ``/status`` tells from Spark's status tracker."""
    seen = status(tmp_path, config)
    if seen is None or seen["spark"] is None:
        return False
    return sum(e["running_tasks"] for e in seen["spark"]["executors"]) > 0


def all_processed(bootstrap: str, config: QueryGroupConfig) -> bool:
    topic = config.input_streams["flights"].topic
    return all(
        (lambda c, e: c == e)(*committed_and_end(bootstrap, config.consumer_group(q), topic))
        for q in config.queries
    )


def start_streaming(
    cluster: StandaloneCluster,
    installed: InstalledFloodgate,
    bootstrap: str,
    records: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    produce: Callable[..., None],
) -> tuple[QueryGroupConfig, list[str], Path, subprocess.Popen[bytes]]:
    """The flights group, ``records`` queued, run by ``spark-submit`` until stopped in
    micro-batches of 300 back to back: ``(config, driver args, log, driver)``."""
    path, config = flights_group(
        run_id, tmp_path, max_tuples_per_trigger=300, trigger_interval_ms=0
    )
    produce(config, records)
    log_path = tmp_path / "driver.log"
    args = ["run", str(path), "--bootstrap", bootstrap]
    driver = spark_submit(installed, cluster, args, cwd=tmp_path, log_path=log_path)
    return config, args, log_path, driver


def committed(bootstrap: str, config: QueryGroupConfig) -> int:
    """Input offsets the group's queries have committed, summed over its queries."""
    topic = config.input_streams["flights"].topic
    return sum(
        committed_and_end(bootstrap, config.consumer_group(q), topic)[0] for q in config.queries
    )


def test_an_executor_then_the_driver_killed_lose_and_duplicate_nothing(
    spark_cluster: StandaloneCluster,
    installed: InstalledFloodgate,
    bootstrap: str,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    produce: Callable[..., None],
) -> None:
    """An executor killed mid-batch: Spark runs its tasks again on another and the
    driver goes on. Then the driver killed mid-stream and submitted again: it resumes
    from its checkpoint. Each aggregation counts every flight once. (One driver's run
    for both faults: a submit to the cluster costs tens of seconds.)"""
    config, args, log_path, driver = start_streaming(
        spark_cluster, installed, bootstrap, flights, run_id, tmp_path, produce
    )
    try:
        wait_until(
            lambda: running_on_executors(tmp_path, config),
            DRIVER_TIMEOUT_S,
            "a micro-batch's tasks on an executor",
            log_path,
        )
        victims = spark_cluster.executors()
        assert victims, spark_cluster.logs()
        for executor in victims:  # authenticated: the worker handed it the secret, privately
            assert executor.environ().get("_SPARK_AUTH_SECRET") == spark_cluster.secret
            assert spark_cluster.secret not in " ".join(executor.cmdline())
        victims[0].send_signal(signal.SIGKILL)
        killed = victims[0].pid
        at_kill = committed(bootstrap, config)
        assert not all_processed(bootstrap, config), "the executor's kill must land mid-stream"
        wait_until(
            lambda: committed(bootstrap, config) > at_kill,
            DRIVER_TIMEOUT_S,
            "a micro-batch committed after the executor's death",
            log_path,
        )
        assert driver.poll() is None, tail(log_path)
        assert killed not in {p.pid for p in spark_cluster.executors()}
        assert "Lost executor" in log_path.read_text(errors="replace")  # Spark saw it
    finally:
        kill_driver(driver)
    assert not all_processed(bootstrap, config), "the driver's kill must land mid-stream"

    driver = spark_submit(installed, spark_cluster, args, cwd=tmp_path, log_path=log_path)
    try:
        wait_until(
            lambda: all_processed(bootstrap, config),
            DRIVER_TIMEOUT_S,
            "the resubmitted driver to process every tuple",
            log_path,
        )
    finally:
        stop_driver(driver)
    assert_flights_figures(bootstrap, config, flights)


def test_a_swept_input_is_read_back_by_tasks_on_the_workers(
    spark_cluster: StandaloneCluster,
    installed: InstalledFloodgate,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    s3: S3Server,
) -> None:
    """A producer at about three times the group's service rate: the sweeper moves the
    backlog into BLOBs on object storage (S3Proxy) and truncates the broker past what
    the group has read, so the group, on the cluster, reads those ranges from the
    objects in tasks on the executors, through Hadoop's s3a (the jars of
    ``scripts/s3a-jars``, configured with ``spark.hadoop.fs.s3a.*`` as the docs say);
    its output is every tuple once, in the producer's order."""
    from sweeper.config import SweeperSettings

    s3.create_bucket(f"swept-{run_id}")
    jars = subprocess.run(
        [str(ROOT / "scripts" / "s3a-jars")], capture_output=True, text=True, check=True
    ).stdout.strip()
    s3a = {
        "spark.jars": jars,
        "spark.hadoop.fs.s3a.endpoint": s3.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": s3.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": s3.access_key,
        "spark.hadoop.fs.s3a.secret.key": s3.secret_key,
    }

    config = swept_group(run_id, tmp_path, max_tuples_per_trigger=200, trigger_interval_ms=500)
    path = tmp_path / "group.toml"
    raw = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["query_group"]["control_dir"] = str(tmp_path / "run")
    config = write_config(path, raw)
    ensure_topics(bootstrap, {config.input_streams["flights"].topic: (1, 1)})
    sweeper = Sweeper(
        SweeperSettings(
            catalog_url=config.query_group.sweep_catalog_url or "",
            blob_store=f"s3://swept-{run_id}/blobs",
            sweep_interval_s=1.0,
        ),
        [config],
        bootstrap_servers=bootstrap,
    )
    records = sequenced(flights, 8_000)
    samples: list[tuple[int, int]] = []
    outcomes: list[Any] = []
    stop = threading.Event()

    def sweep_loop() -> None:
        while not stop.wait(1.0):
            outcomes.extend(sweeper.cycle())
            samples.append(sample(sweeper))

    log_path = tmp_path / "driver.log"
    driver = spark_submit(
        installed,
        spark_cluster,
        ["run", str(path), "--bootstrap", bootstrap],
        cwd=tmp_path,
        log_path=log_path,
        conf=s3a,
        **s3.environment(),
    )
    thread = threading.Thread(target=sweep_loop, daemon=True)
    try:
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
            stream_input = conn.open_stream_input(config.name, "flights")
            stream_input.put(records[:200])
            stream_input.put_end()
            wait_until(lambda: sample(sweeper)[0] == 0, 240, "the first 200 serviced", log_path)
            thread.start()
            # About three times what the group takes (200 per 0.5 s trigger).
            for i in range(200, len(records), 300):
                stream_input.put(records[i : i + 300])
                stream_input.put_end()
                time.sleep(0.25)
        wait_until(lambda: sample(sweeper)[0] == 0, 300, "every tuple serviced", log_path)
        assert driver.poll() is None, tail(log_path)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=60)
        stop_driver(driver)
        sweeper.catalog.close()
    swept = [o.blob for o in outcomes if o.blob is not None]
    assert swept, [o.decision for o in outcomes]
    assert all(blob.path.startswith(f"s3://swept-{run_id}/blobs/") for blob in swept)
    # The broker was truncated past what the group had read: it read that from BLOBs.
    assert any(resident < backlog for backlog, resident in samples), samples
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    output = read_all(bootstrap, config.output_streams["flights_copy"].topic)
    assert [codec.decode(m.value())["flight"] for m in output] == list(range(len(records)))
