"""Floodgate on a Kafka cluster that requires SASL/PLAIN (issue 26: ``[kafka] client``
reaches every Kafka client Floodgate makes; the admission intake ignored it).

Apache Kafka's own broker with a ``SASL_PLAINTEXT`` listener (PLAIN mechanism; the
KRaft controller listener stays PLAINTEXT), started once for this module. A client
without credentials, or with a wrong password, is refused. With the credentials in
``admission.kafka_client`` a ``floodgate admission serve`` process takes a job request
from the request topic and publishes its events; with them in a query group's
``[kafka] client`` the back-pressure client puts flights, the query group (in the
session's SparkSession: its sources read Kafka on the executors with the same
settings) copies them, and a reader gets every one back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.brokers.local import resolve_broker
from pipeline.client import connect
from pipeline.config import parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import BrokerError
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from tests.integration.admission_service import Service, wait_for
from tests.integration.helpers import flights_raw_config

pytestmark = pytest.mark.apache_kafka

USER = "floodgate"
PASSWORD = "sasl-plain-test-password"


@pytest.fixture(scope="module")
def sasl_cluster() -> Iterator[ApacheKafkaCluster]:
    cluster = ApacheKafkaCluster(sasl_users={USER: PASSWORD, "reader": "another-password"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def first_error(bootstrap: str, client: dict[str, Any]) -> KafkaError:
    """The first error a Kafka client with ``client`` settings gets from the cluster;
    fails the test if the cluster answers it instead."""
    errors: list[KafkaError] = []
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, **client}
    settings["error_cb"] = errors.append
    admin = AdminClient(settings)
    deadline = time.monotonic() + 60
    while not errors:
        assert time.monotonic() < deadline, "no error reported"
        try:
            admin.list_topics(timeout=1.0)
        except KafkaException:
            admin.poll(0.5)  # not answered: the error callback tells why
        else:
            pytest.fail(f"the cluster answered a client with {sorted(client)}")
    return errors[0]


def test_a_client_without_credentials_or_with_a_wrong_password_is_refused(
    sasl_cluster: ApacheKafkaCluster,
) -> None:
    bootstrap = sasl_cluster.bootstrap_servers
    wrong = {**sasl_cluster.client_config(USER), "sasl.password": "not-the-password"}

    assert first_error(bootstrap, wrong).code() == KafkaError._AUTHENTICATION
    # A plaintext client: the broker drops the connection at its first request.
    assert first_error(bootstrap, {}).code() in (
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def test_a_named_cluster_is_asked_with_the_client_settings(
    sasl_cluster: ApacheKafkaCluster,
) -> None:
    """``floodgate demo --bootstrap`` asks the named cluster whether it answers before
    anything else: with the file's ``[kafka] client``, or a SASL cluster never does."""
    bootstrap = sasl_cluster.bootstrap_servers

    resolved = resolve_broker(bootstrap, env={}, client=sasl_cluster.client_config(USER))

    assert resolved.kind == "external" and resolved.bootstrap_servers == bootstrap
    with pytest.raises(BrokerError, match="did not answer"):
        resolve_broker(bootstrap, env={}, timeout_s=3)


def test_the_admission_intake_reads_requests_and_writes_events_with_kafka_client(
    sasl_cluster: ApacheKafkaCluster, serve: Callable[..., Service], run_id: str
) -> None:
    bootstrap = sasl_cluster.bootstrap_servers
    client = sasl_cluster.client_config(USER)
    topics = {
        "request_topic": f"admission.requests.{run_id}",
        "events_topic": f"admission.events.{run_id}",
        "dead_letter_topic": f"admission.dead-letter.{run_id}",
    }
    ensure_topics(bootstrap, {t: (1, 1) for t in topics.values()}, client=client)
    service = serve(
        bootstrap_servers=bootstrap,
        consumer_group=f"admission.{run_id}",
        kafka_client=client,
        **topics,
    )
    schemas = SchemaRepository.load()
    requests = StreamCodec("job_request", schemas.get("job_request"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap, **client})
    producer.produce(
        topics["request_topic"], key=b"sasl-1", value=requests.encode({"argv": ["true"]})
    )
    assert producer.flush(30) == 0

    try:
        wait_for(lambda: len(service.call("GET", "/jobs").json()) == 1, "the request to be taken")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the service's log:\n{service.log()[-4000:]}") from None
    [job] = service.call("GET", "/jobs").json()
    assert job["client_key"] == "sasl-1"
    events = StreamCodec("job_event", schemas.get("job_event"), schemas)

    def states() -> list[str]:
        return [
            events.decode(m.value())["state"]
            for m in read_all(bootstrap, topics["events_topic"], timeout_s=10, client=client)
            if m.key() == str(job["id"]).encode()
        ]

    wait_for(lambda: states()[-1:] == ["FINISHED_OK"], "the job's events")


def test_a_query_group_and_its_producers_and_readers_work_with_kafka_client(
    sasl_cluster: ApacheKafkaCluster,
    spark: Any,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    bootstrap = sasl_cluster.bootstrap_servers
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["kafka"] = {"client": sasl_cluster.client_config(USER)}
    raw["query_group"]["control_dir"] = str(tmp_path / "run")
    config = parse_query_group(raw, env={})
    records = flights[:300]
    stream = config.input_streams["flights"]
    settings = config.input_settings("flights")
    ensure_topics(
        bootstrap,
        {stream.topic: (settings.partitions, settings.replication_factor)},
        client=config.kafka.client,
    )
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        stream_input = connector.open_stream_input(config.name, "flights")
        stream_input.put(records)
        stream_input.put_end()

    with QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas) as group:
        group.start()
        group.process_all_available()
        assert group.sinks()["copy"].tuples_written == len(records)

    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        output = connector.open_stream_output(config.name, "flights_copy")
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while len(got) < len(records):
            assert time.monotonic() < deadline, f"read {len(got)} of {len(records)}"
            got.extend(output.get(max_tuples=500, timeout_s=1.0))
    assert sorted((t["carrier"], t["flight"], t["day"]) for t in got) == sorted(
        (r["carrier"], r["flight"], r["day"]) for r in records
    )
