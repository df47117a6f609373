"""Lag in time: the age of a queue's oldest unconsumed tuple, read by
:class:`pipeline.queues.age.QueueAge` from the record at the slowest consumer group's
committed offset on a real broker, and from the BLOB that holds it once swept."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.kafka.topics import ensure_topics
from pipeline.queues.age import QueueAge
from pipeline.queues.probe import QueueProbe
from pipeline.swept.blob import write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import BlobReader, read_partition

#: Epoch milliseconds of the first record (an hour ago: older would be deleted by the
#: broker's retention.ms, seven days); record i is ``i`` seconds later.
BASE_MS = (int(time.time()) - 3_600) * 1_000


@pytest.fixture
def topic(bootstrap: str) -> str:
    name = f"lag.{uuid.uuid4().hex[:10]}"
    ensure_topics(bootstrap, {name: (2, 1)})
    return name


def produce(bootstrap: str, topic: str, partition: int, seconds: list[int]) -> None:
    """One record per entry, timestamped ``BASE_MS + s * 1000`` (CreateTime)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for s in seconds:
        producer.produce(topic, value=b"x", partition=partition, timestamp=BASE_MS + s * 1000)
    assert producer.flush(30) == 0


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def probe(
    bootstrap: str, topic: str, group: str, catalog: SweepCatalog | None = None
) -> QueueProbe:
    return QueueProbe(
        bootstrap_servers=bootstrap,
        stream="s",
        topic=topic,
        groups=[group],
        max_queue_size=1_000,
        swept=catalog,
    )


def test_lag_is_the_age_of_the_oldest_tuple_at_the_slowest_commit(
    bootstrap: str, topic: str
) -> None:
    produce(bootstrap, topic, 0, list(range(10)))  # offsets 0..9 at 0..9 s
    produce(bootstrap, topic, 1, [3, 20])  # offsets 0, 1 at 3 s and 20 s
    group = f"g.{topic}"
    now_s = BASE_MS / 1000 + 100
    queue = probe(bootstrap, topic, group)
    age = QueueAge(bootstrap_servers=bootstrap, topic=topic)
    try:
        # No commit yet: the oldest tuple of the queue is offset 0 of partition 0.
        assert age.timestamps(queue.snapshot()) == {0: BASE_MS, 1: BASE_MS + 3_000}
        assert age.age_seconds(queue.snapshot(), now_s) == 100.0

        commit(bootstrap, group, topic, {0: 4, 1: 1})
        assert age.timestamps(queue.snapshot()) == {0: BASE_MS + 4_000, 1: BASE_MS + 20_000}
        assert age.age_seconds(queue.snapshot(), now_s) == 96.0

        commit(bootstrap, group, topic, {0: 10, 1: 1})  # partition 0 consumed
        assert age.age_seconds(queue.snapshot(), now_s) == 80.0
        commit(bootstrap, group, topic, {0: 10, 1: 2})  # nothing left: no age
        assert age.timestamps(queue.snapshot()) == {}
        assert age.age_seconds(queue.snapshot(), now_s) == 0.0
    finally:
        age.close()


def test_a_swept_queue_s_oldest_tuple_is_read_from_its_blob(
    bootstrap: str, topic: str, tmp_path: Path
) -> None:
    produce(bootstrap, topic, 0, list(range(10)))
    group = f"g.{topic}"
    commit(bootstrap, group, topic, {0: 2})
    # Sweep [2, 6) as the sweeper does: a BLOB of the broker's records, registered,
    # then the broker truncated to 6.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r.{topic}"})
    batches = list(read_partition(consumer, topic, 0, 2, 6))
    consumer.close()
    path = tmp_path / "0-2-6.avro"
    seal = write_sealed_blob(path, batches)
    catalog = SweepCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    catalog.register(topic, 0, 2, 6, path=str(path), size=seal.bytes, tuples=4, now=0.0, seal=seal)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result(timeout=30)

    queue = probe(bootstrap, topic, group, catalog)
    snapshot = queue.snapshot()
    assert snapshot.partitions[0].log_start == 6
    swept = QueueAge(bootstrap_servers=bootstrap, topic=topic, blobs=BlobReader(catalog))
    broker_only = QueueAge(bootstrap_servers=bootstrap, topic=topic)
    try:
        assert swept.timestamps(snapshot) == {0: BASE_MS + 2_000}
        # Without the BLOBs the oldest tuple left is the broker's log start.
        assert broker_only.timestamps(snapshot) == {0: BASE_MS + 6_000}
    finally:
        swept.close()
        broker_only.close()
        catalog.close()


def test_a_queue_age_reader_keeps_nothing_assigned_between_readings(
    bootstrap: str, topic: str
) -> None:
    """An assigned partition is fetched all along; at its end the embedded broker answers
    every fetch at once (it does not wait ``fetch.wait.max.ms``), so an assignment left
    behind by a reading kept the reader and the broker busy for as long as it lived."""
    produce(bootstrap, topic, 0, [1, 2])
    queue = probe(bootstrap, topic, f"g.{topic}")
    age = QueueAge(bootstrap_servers=bootstrap, topic=topic)
    try:
        assert age.timestamps(queue.snapshot()) == {0: BASE_MS + 1_000}
        assert age._consumer is not None
        assert age._consumer.assignment() == []
    finally:
        age.close()
