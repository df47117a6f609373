"""Real services for the integration tests, started once per test session.

* ``broker``: resolved by :func:`pipeline.brokers.local.resolve_broker` --
  ``FLOODGATE_KAFKA_BOOTSTRAP`` when set (the same tests then run unchanged against
  that cluster), else a broker of the engine ``FLOODGATE_KAFKA_ENGINE`` names
  (``noida-db`` or ``apache-kafka``), else a Docker engine through testcontainers,
  else the embedded ``noida-db`` broker.
* ``kafka_engine_name`` / ``new_broker``: the engine of the run, and a factory of
  private brokers of that engine for tests that stop, restart or kill one.
  ``make test`` runs on ``noida-db``; CI runs the integration tests again with
  ``FLOODGATE_KAFKA_ENGINE=apache-kafka``. A test of a ``noida-db`` quirk carries
  the ``noida_db`` marker and runs on that engine only.
* ``postgres``: a PostgreSQL server (``FLOODGATE_TEST_POSTGRES_URL``, else a private
  cluster from the installed server binaries; see ``postgres.py``).
* ``spark``: one SparkSession for the whole run (``local[2]``, UI off,
  2 shuffle partitions, ``PYSPARK_PYTHON=sys.executable``).
* ``start_query_group``: a factory of started query groups in that session (against
  the session's broker, or ``bootstrap_servers=``), each stopped after the test;
  ``drain`` runs one over what its input holds now. A query group file a command or
  driver reads: ``helpers.write_query_group``; one never started (its endpoint alone):
  ``helpers.idle_query_group``.
* ``serve``: a factory of ``floodgate admission serve`` processes (the admission
  tests, the Kafka SASL test; ``admission_service.py``), each stopped after the test.

Every test gets its own topics, consumer groups and checkpoints (a uuid run id),
so tests never see each other's data, even on a shared cluster.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from pipeline.brokers.engines import KafkaEngine, kafka_engine
from pipeline.brokers.local import Broker, LocalBroker, local_broker, resolve_broker
from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.flights import flight_tuples, load_flights
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from pipeline.swept.store import object_filesystem
from tests.integration.admission_service import SLEEP, TOKEN, Service
from tests.integration.helpers import Drained, flights_raw_config
from tests.integration.jvm_classes import ensure_archive, submit_args
from tests.integration.postgres import postgres_server
from tests.integration.s3proxy import S3Server, s3_server


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
    # A test of one engine's behaviour (marker ``noida_db`` or ``apache_kafka``) is
    # deselected, not skipped, on a run of the other engine; so is a test of users'
    # deployment (``deployment``: the installed wheel, a Spark cluster) on noida-db,
    # and a test that touches no Kafka at all (``no_kafka``) on apache-kafka: each runs
    # in one of CI's two passes (.ci/run).
    others = (
        {"apache_kafka", "deployment"} if kafka_engine() == "noida-db" else {"noida_db", "no_kafka"}
    )
    # The compose stack's test runs alone, in `make test-compose` (it builds images first).
    if not os.environ.get("FLOODGATE_TEST_COMPOSE"):
        others.add("compose")
    elsewhere = [
        item for item in items if any(item.get_closest_marker(m) is not None for m in others)
    ]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if item not in elsewhere]


def pytest_report_header() -> str:
    engine = kafka_engine()
    if engine == "apache-kafka":
        from pipeline.brokers.apache_kafka import APACHE_KAFKA_VERSION

        return f"kafka engine: apache-kafka {APACHE_KAFKA_VERSION} (KRaft)"
    return f"kafka engine: {engine}"


@pytest.fixture(scope="session", autouse=True)
def jvm_class_data() -> Iterator[Path | None]:
    """The Spark drivers of the run start on a class-data-sharing archive
    (:mod:`tests.integration.jvm_classes`), made once per virtualenv: each JVM maps
    Spark's classes instead of loading them. Unless ``PYSPARK_SUBMIT_ARGS`` is set
    already (the user's, left alone) or ``FLOODGATE_TEST_CDS=0``."""
    if "PYSPARK_SUBMIT_ARGS" in os.environ or os.environ.get("FLOODGATE_TEST_CDS") == "0":
        yield None
        return
    archive = ensure_archive()
    if archive is None:
        yield None
        return
    os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args(archive)
    try:
        yield archive
    finally:
        os.environ.pop("PYSPARK_SUBMIT_ARGS", None)


@pytest.fixture(scope="session")
def kafka_engine_name() -> KafkaEngine:
    """The engine of this run (``FLOODGATE_KAFKA_ENGINE``, default ``noida-db``)."""
    return kafka_engine()


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    resolved = resolve_broker()
    try:
        yield resolved
    finally:
        resolved.stop()


@pytest.fixture
def new_broker(kafka_engine_name: KafkaEngine) -> Iterator[Callable[..., LocalBroker]]:
    """A factory of private brokers of this run's engine, not started; every broker
    made is stopped (by PID) when the test ends. Keyword arguments go to
    :func:`pipeline.brokers.local.local_broker` (``data_dir``, ``port``, ``nodes``)."""
    made: list[LocalBroker] = []

    def make(**kwargs: Any) -> LocalBroker:
        one = local_broker(kafka_engine_name, **kwargs)
        made.append(one)
        return one

    yield make
    for one in made:
        one.stop()


@pytest.fixture(scope="session")
def bootstrap(broker: Broker) -> str:
    return broker.bootstrap_servers


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """The SQLAlchemy URL of a real PostgreSQL server; tests make their own databases."""
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A real S3-compatible server (S3Proxy); the process's AWS environment points at
    it for the session, as a deployment's would (pyarrow's S3 filesystem reads it)."""
    with s3_server() as server:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in server.environment().items():
                patch.setenv(name, value)
            object_filesystem.cache_clear()
            yield server
        object_filesystem.cache_clear()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipeline.spark.session import build_spark_session

    session = build_spark_session(app_name="floodgate-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def schemas() -> SchemaRepository:
    return SchemaRepository.load()


@pytest.fixture(scope="session")
def flights() -> list[dict[str, Any]]:
    """The first 3 000 flights in event-time order, as ``flight`` tuples."""
    return list(flight_tuples(load_flights(3_000)))


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def flights_config(run_id: str, tmp_path: Path) -> Callable[..., QueryGroupConfig]:
    def make(**kwargs: Any) -> QueryGroupConfig:
        return parse_query_group(
            flights_raw_config(run_id, tmp_path / "checkpoints", **kwargs), env={}
        )

    return make


@pytest.fixture
def start_query_group(
    request: pytest.FixtureRequest, spark: Any, schemas: SchemaRepository
) -> Iterator[Callable[..., QueryGroup]]:
    """Start a query group of ``config`` in the session's SparkSession and return it.
    Every group started is stopped when the test ends; stop one earlier with ``with
    start_query_group(config) as group:`` (a stopped group's :meth:`QueryGroup.stop`
    is a no-op).

    Keyword arguments: ``bootstrap_servers`` (default: the session's broker, the
    ``bootstrap`` fixture, started only then), ``available_now``
    (:meth:`QueryGroup.start`), and any other :class:`QueryGroup` takes (``registry``).
    """
    groups: list[QueryGroup] = []

    def start(
        config: QueryGroupConfig,
        *,
        bootstrap_servers: str | None = None,
        available_now: bool = False,
        **options: Any,
    ) -> QueryGroup:
        servers = bootstrap_servers or request.getfixturevalue("bootstrap")
        group = QueryGroup(
            config, bootstrap_servers=servers, spark=spark, schemas=schemas, **options
        )
        groups.append(group)
        return group.start(available_now=available_now)

    yield start
    for group in groups:
        group.stop()


@pytest.fixture
def drain(start_query_group: Callable[..., QueryGroup]) -> Callable[[QueryGroupConfig], Drained]:
    """Start a query group in the shared session, process all input there now, stop it."""

    def run(config: QueryGroupConfig) -> Drained:
        with start_query_group(config) as group:
            group.process_all_available()
            group.sample_queues()
            return Drained(
                stats=group.stats(),
                batches_written={q: s.batches_written for q, s in group.sinks().items()},
                registry=group.registry,
            )

    return run


@pytest.fixture
def produce(
    bootstrap: str, schemas: SchemaRepository
) -> Callable[[QueryGroupConfig, list[dict[str, Any]]], None]:
    """Put flight tuples into a query group's ``flights`` input stream through the
    back-pressure client (topic created if missing), and wait for every ack."""

    def send(config: QueryGroupConfig, records: list[dict[str, Any]]) -> None:
        stream = config.input_streams["flights"]
        settings = config.input_settings("flights")
        ensure_topics(bootstrap, {stream.topic: (settings.partitions, settings.replication_factor)})
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
            stream_input = connector.open_stream_input(config.name, "flights")
            for i in range(0, len(records), 1_000):
                stream_input.put(records[i : i + 1_000])
            stream_input.put_end()

    return send


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """Start the service with the settings given (over test defaults); stopped after.

    ``user``: run it as that user (``setpriv``; takes root) with its files in a folder of
    that user's under ``/tmp`` (the test's own ``tmp_path`` is root's alone)."""
    started: list[Service] = []
    folders: list[Path] = []

    def start(
        *, service_env: dict[str, str] | None = None, user: str | None = None, **settings: Any
    ) -> Service:
        files, as_user = tmp_path, []
        if user is not None:
            assert os.geteuid() == 0, "running the service as another user takes root"
            account = pwd.getpwnam(user)
            files = Path(tempfile.mkdtemp(prefix="floodgate-admission-", dir="/tmp"))
            folders.append(files)
            os.chown(files, account.pw_uid, account.pw_gid)
            as_user = [
                "setpriv",
                f"--reuid={account.pw_uid}",
                f"--regid={account.pw_gid}",
                "--clear-groups",
            ]
        config = {
            "port": 0,
            "allowlist": [SLEEP, "true", "false"],
            # The variables the tests' jobs set of their own (the default allows none).
            "job_env_allowlist": ["MARK", "MODE", "PART_SECRET", "DB_PASSWORD"],
            "database_url": f"sqlite:///{files / 'jobs.db'}",
            "log_dir": str(files / "logs"),
            **settings,
        }
        path = files / f"admission-{len(started)}.toml"
        path.write_text(tomli_w.dumps({"admission": config}))
        path.chmod(0o600)  # it may hold the intake key: a secret in a file is its owner's
        if user is not None:
            os.chown(path, account.pw_uid, account.pw_gid)  # the service's own file
        log_path = tmp_path / f"service-{len(started)}.log"
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                [
                    *as_user,
                    *[sys.executable, "-m", "pipeline.cli", "admission", "serve"],
                    *["--config", str(path)],
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # No Kafka intake unless a test names a cluster in its settings.
                env={
                    **{k: v for k, v in os.environ.items() if k != "FLOODGATE_KAFKA_BOOTSTRAP"},
                    "FLOODGATE__ADMISSION__TOKEN": TOKEN,
                    **(service_env or {}),
                },
            )
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            text = log_path.read_text()
            for line in text.splitlines():
                if line.startswith("FLOODGATE_ADMISSION_URL="):
                    url = line.split("=", 1)[1]
            assert process.poll() is None, text
            assert time.monotonic() < deadline, text
            time.sleep(0.05)
        service = Service(process, url, log_path)
        started.append(service)
        return service

    yield start
    for service in started:
        if service.process.poll() is None:
            service.process.send_signal(signal.SIGTERM)
            service.process.wait(timeout=30)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
