"""Floodgate on a Kafka cluster that requires SASL/PLAIN (``[kafka] client`` reaches
every Kafka client Floodgate makes; the admission intake once ignored it) and
authorizes with ACLs (only a principal with WRITE on the request topic reaches the
admission queue; only the service's principal, with READ on the intake's consumer
group, joins it or commits its offsets).

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
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from admission.signing import sign
from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.brokers.apache_kafka.config import INTER_BROKER_USER
from pipeline.brokers.local import resolve_broker
from pipeline.client import connect
from pipeline.config import parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import BrokerError
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from tests.integration.admission_service import (
    INTAKE_KEY,
    Service,
    intake_settings,
    wait_for,
    write_request,
)
from tests.integration.helpers import flights_raw_config

pytestmark = pytest.mark.apache_kafka

USER = "floodgate"
PASSWORD = "sasl-plain-test-password"


#: A principal that may write job requests (an ACL grants it WRITE on the request topic).
REQUESTER = "requester"
#: Kafka's own authorizer for KRaft clusters (KIP-801), with the ACLs of the test below.
#: Resources no ACL names stay open to every authenticated user (the other tests here
#: need no ACLs); the controller listener is PLAINTEXT, its principal ANONYMOUS.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "super.users": f"User:ANONYMOUS;User:{INTER_BROKER_USER}",
}


@pytest.fixture(scope="module")
def sasl_cluster() -> Iterator[ApacheKafkaCluster]:
    cluster = ApacheKafkaCluster(
        sasl_users={USER: PASSWORD, "reader": "another-password", REQUESTER: "requests-pw"},
        overrides=AUTHORIZER,
    )
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


def group_refusal(bootstrap: str, client: dict[str, Any], group: str, topic: str) -> list[int]:
    """The error codes a client with ``client`` settings gets when it joins ``group``
    (a consumer subscribing to ``topic``) and when it commits offset 0 of ``topic`` for
    ``group`` (OffsetCommit through the admin API, as ``kafka-consumer-groups
    --reset-offsets`` sends it; a consumer outside the group is never given a
    coordinator to commit to): what an attacker does to make the intake read a request
    again."""
    codes: list[int] = []
    joiner = Consumer({"bootstrap.servers": bootstrap, **client, "group.id": group})
    try:
        joiner.subscribe([topic])
        deadline = time.monotonic() + 60
        while not codes:
            assert time.monotonic() < deadline, f"{client['sasl.username']} was not refused"
            message = joiner.poll(0.5)
            if message is not None and message.error() is not None:
                codes.append(message.error().code())
    finally:
        joiner.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, **client})
    rewind = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])]
    for future in admin.alter_consumer_group_offsets(rewind, request_timeout=30).values():
        try:
            future.result(timeout=60)
        except KafkaException as exc:
            codes.append(exc.args[0].code())
        else:
            pytest.fail(f"{client['sasl.username']} committed an offset for {group}")
    return codes


def test_only_a_principal_with_write_on_the_request_topic_reaches_the_admission_queue(
    sasl_cluster: ApacheKafkaCluster, serve: Callable[..., Service], run_id: str
) -> None:
    """The request topic was once a way around the admission token. On a cluster
    with SASL and ACLs (StandardAuthorizer) the broker refuses a request from a
    principal without WRITE on the topic, even one signed with the intake key; the
    intake, with its own principal in ``admission.kafka_client``, takes the
    requester's and publishes its events.

    With READ on the intake's consumer group for the service's principal
    only, the requester can neither join the group nor commit an offset for it
    (``GROUP_AUTHORIZATION_FAILED``), so it cannot make the intake read a request
    again; the service's own offset stays."""
    bootstrap = sasl_cluster.bootstrap_servers
    client = sasl_cluster.client_config(USER)
    settings = intake_settings(bootstrap, run_id)
    topics = {k: settings[k] for k in ("request_topic", "events_topic", "dead_letter_topic")}
    ensure_topics(bootstrap, {t: (1, 1) for t in topics.values()}, client=client)
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, **sasl_cluster.client_config(INTER_BROKER_USER)}
    )
    grants = [
        (ResourceType.TOPIC, topics["request_topic"], REQUESTER, AclOperation.WRITE),
        (ResourceType.TOPIC, topics["request_topic"], USER, AclOperation.READ),
        (ResourceType.GROUP, settings["consumer_group"], USER, AclOperation.READ),
    ]
    created = admin.create_acls(
        [
            AclBinding(
                kind,
                name,
                ResourcePatternType.LITERAL,
                f"User:{principal}",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            for kind, name, principal, operation in grants
        ],
        request_timeout=30,
    )
    for future in created.values():
        future.result(timeout=30)
    service = serve(**settings, kafka_client=client)
    schemas = SchemaRepository.load()
    requests = StreamCodec("job_request", schemas.get("job_request"), schemas)
    value = requests.encode({"argv": ["true"]})

    refused: list[KafkaError] = []
    stranger = Producer({"bootstrap.servers": bootstrap, **sasl_cluster.client_config("reader")})
    stranger.produce(
        topics["request_topic"],
        key=b"stranger",
        value=value,
        headers=sign(
            INTAKE_KEY,
            topic=topics["request_topic"],
            key=b"stranger",
            value=value,
            signed_at_ms=int(time.time() * 1000),
        ),
        on_delivery=lambda err, _msg: refused.append(err),
    )
    stranger.flush(30)
    assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], refused

    producer = Producer({"bootstrap.servers": bootstrap, **sasl_cluster.client_config(REQUESTER)})
    write_request(producer, topics["request_topic"], value, key=b"sasl-1")
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
    # The stranger's request never reached the topic: the requester's is its only record.
    taken = read_all(bootstrap, topics["request_topic"], timeout_s=10, client=client)
    assert [m.key() for m in taken] == [b"sasl-1"]
    assert [j["client_key"] for j in service.call("GET", "/jobs").json()] == ["sasl-1"]

    group, request_topic = settings["consumer_group"], topics["request_topic"]
    requester = sasl_cluster.client_config(REQUESTER)
    refusals = group_refusal(bootstrap, requester, group, request_topic)
    assert refusals == [KafkaError.GROUP_AUTHORIZATION_FAILED] * 2, refusals
    # The ACL refuses it, nothing else: a group no ACL names takes the same commit.
    unguarded = [
        ConsumerGroupTopicPartitions(f"{group}.open", [TopicPartition(request_topic, 0, 0)])
    ]
    requester_admin = AdminClient({"bootstrap.servers": bootstrap, **requester})
    for future in requester_admin.alter_consumer_group_offsets(unguarded).values():
        future.result(timeout=60)
    own = Consumer({"bootstrap.servers": bootstrap, **client, "group.id": group})
    try:
        [position] = own.committed([TopicPartition(request_topic, 0)], timeout=30)
    finally:
        own.close()
    assert position.offset == 1
    assert [j["client_key"] for j in service.call("GET", "/jobs").json()] == ["sasl-1"]


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
