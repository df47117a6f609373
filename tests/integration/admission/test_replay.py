"""A signed request runs once, whoever rewinds the intake's consumer group.

`floodgate admission serve` with the request intake on, in a process of its own, on
the session's broker. The attacker holds neither the intake key nor the admission
token: it joins the service's consumer group, commits offset 0 for the request topic
and leaves, as any client the broker lets into the group can. The service's consumer
then gets the partition back at offset 0 and reads the request again.

And two service instances on one PostgreSQL database (leader election) that read one
request at the same moment: the database lets one of them record its signature.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from admission.intake import RequestTaker
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from tests.intake_takers import assert_one_job_each, intake_service, job_request_codec
from tests.integration.admission_service import (
    Service,
    intake_settings,
    wait_for,
    write_request,
)
from tests.integration.postgres import fresh_database

#: Errors of a group coordinator that is not ready yet, retried by :func:`committed`.
COORDINATOR_NOT_READY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The offset ``group`` committed for partition 0 of ``topic`` (negative: none),
    read without joining the group."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                [partition] = reader.committed([TopicPartition(topic, 0)], timeout=10)
                return int(partition.offset)
            except KafkaException as exc:
                # The group's coordinator is still being elected or loading its offsets
                # (a fresh cluster under load): Kafka's own clients retry these errors.
                if exc.args[0].code() not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        reader.close()


def rewind(bootstrap: str, group: str, topic: str) -> None:
    """Join ``group``, commit offset 0 of ``topic``'s partition 0 and leave: what any
    client may do that the broker lets into the group (no key, no token)."""
    joined = threading.Event()
    attacker = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        attacker.subscribe([topic], on_assign=lambda _consumer, _partitions: joined.set())

        def in_group() -> bool:
            attacker.poll(0.2)  # serves the join; whatever it assigns, nothing is read
            return joined.is_set()

        wait_for(in_group, "the attacker to join the consumer group")
        attacker.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        attacker.close()  # leaves the group: the service's consumer is assigned again


def test_a_rewound_consumer_group_runs_no_signed_request_twice(
    serve: Callable[..., Service], bootstrap: str, run_id: str
) -> None:
    """At 3d81ac5 the request read again at offset 0 counted as the same record
    delivered again after a crash, and ran a second job."""
    settings = {**intake_settings(bootstrap, run_id), "intake_key": secrets.token_hex(16)}
    topic, group = settings["request_topic"], settings["consumer_group"]
    service = serve(**settings)
    schemas = SchemaRepository.load()
    codec = StreamCodec("job_request", schemas.get("job_request"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    write_request(
        producer,
        topic,
        codec.encode({"argv": ["true"]}),
        key=b"once",
        secret=settings["intake_key"],
    )
    assert producer.flush(30) == 0
    wait_for(lambda: committed(bootstrap, group, topic) == 1, "the request to be taken")
    [job] = service.call("GET", "/jobs", token=None).json()

    rewind(bootstrap, group, topic)

    def read_again() -> bool:
        jobs = service.call("GET", "/jobs", token=None).json()
        return len(jobs) > 1 or "not run again" in service.log()

    wait_for(read_again, "the service to read the request again")
    assert [j["id"] for j in service.call("GET", "/jobs", token=None).json()] == [job["id"]]
    assert f"already taken as job {job['id']}" in service.log()
    wait_for(lambda: committed(bootstrap, group, topic) == 1, "the re-read to be committed")


@pytest.mark.no_kafka
def test_on_postgresql_two_instances_reading_one_request_at_once_make_one_job(
    postgres: str, tmp_path: Path
) -> None:
    """The run-once record's primary key is the signature, in PostgreSQL as in SQLite:
    of two instances that take one record at the same moment, one makes the job and
    the other gets it back. At 3d81ac5 both ran it."""
    database = fresh_database(postgres)
    codec = job_request_codec()
    takers = [
        RequestTaker(intake_service(tmp_path / str(i), database_url=database), codec)
        for i in range(2)
    ]
    assert_one_job_each(takers, list(range(20)))
