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

Every test gets its own topics, consumer groups and checkpoints (a uuid run id),
so tests never see each other's data, even on a shared cluster.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.brokers.engines import KafkaEngine, kafka_engine
from pipeline.brokers.local import Broker, LocalBroker, local_broker, resolve_broker
from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.flights import flight_records, load_flights
from pipeline.kafka.topics import ensure_topics
from pipeline.serde import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryStats

from .installed import InstalledFloodgate, build_and_install
from .postgres import postgres_server

ROOT = Path(__file__).resolve().parents[2]
FLIGHTS_TOML = ROOT / "conf" / "flights.toml"

#: A query that copies every flight to an output stream: an identity to count by.
PASSTHROUGH_SQL = "SELECT * FROM flights"


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
    return list(flight_records(load_flights(3_000)))


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:10]


def flights_raw_config(
    run_id: str,
    checkpoint_dir: Path,
    *,
    max_rows_per_trigger: int | None = None,
    passthrough: bool = False,
    only_passthrough: bool = False,
    trigger_interval_ms: int = 100,
    no_data_micro_batches: bool | None = None,
    watermark: str = "2 hours",
) -> dict[str, Any]:
    """``conf/flights.toml`` with this run's names: topics, group and checkpoints.

    The watermark is 2 hours, not the demo's 60 days (``conf/flights.toml`` says why): a
    short delay lets a test close an hour with a few thousand flights
    (``test_refused_tuples``).
    """
    raw = tomllib.loads(FLIGHTS_TOML.read_text())
    raw["input_streams"]["flights"]["watermark"] = watermark
    group = raw["query_group"]
    group["name"] = f"t{run_id}"
    group["checkpoint_dir"] = str(checkpoint_dir)
    group["trigger_interval_ms"] = trigger_interval_ms
    if no_data_micro_batches is not None:
        group["no_data_micro_batches"] = no_data_micro_batches
    if max_rows_per_trigger is not None:
        group["max_rows_per_trigger"] = max_rows_per_trigger
    for section in ("input_streams", "output_streams"):
        for stream in raw[section].values():
            stream["topic"] = f"{stream['topic']}.{run_id}"
    if only_passthrough:
        raw["queries"] = {}
        raw["output_streams"] = {}
    if passthrough or only_passthrough:
        raw["output_streams"]["flights_copy"] = {
            "topic": f"flights.copy.{run_id}",
            "schema": "flight",
            "key": ["carrier", "flight", "time_hour"],
        }
        raw["queries"]["copy"] = {
            "sql": PASSTHROUGH_SQL,
            "output": "flights_copy",
            "output_mode": "append",
        }
    return raw


@pytest.fixture
def flights_config(run_id: str, tmp_path: Path) -> Callable[..., QueryGroupConfig]:
    def make(**kwargs: Any) -> QueryGroupConfig:
        return parse_query_group(
            flights_raw_config(run_id, tmp_path / "checkpoints", **kwargs), env={}
        )

    return make


@dataclass
class Drained:
    """What a query group did in one :func:`drain` run."""

    stats: dict[str, QueryStats]
    batches_written: dict[str, int]


@pytest.fixture
def drain(
    bootstrap: str, spark: Any, schemas: SchemaRepository
) -> Callable[[QueryGroupConfig], Drained]:
    """Start a query group in the shared session, process all input there now, stop it."""

    def run(config: QueryGroupConfig) -> Drained:
        with QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas) as group:
            group.start()
            group.process_all_available()
            return Drained(
                stats=group.stats(),
                batches_written={q: s.batches_written for q, s in group.sinks().items()},
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


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledFloodgate:
    """This checkout's wheel installed in a virtualenv of its own (``installed.py``)."""
    return build_and_install(tmp_path_factory.mktemp("installed"))
