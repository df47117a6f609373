"""The JVM source (``floodgate_kafka``) over several topics
(docs/reference/spark-kafka-options.md): with ``subscribePattern`` a topic created
after the query started is read from its first offset, as Spark's Kafka source reads
one; the source's own dead-letter topic, which the pattern matches too, is never read;
a dead letter from the second topic names it; the consumer group holds a commit per
topic-partition. Spark's own connector reading the same topics is
``test_spark_connector_compare.py``."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import wait_until


def test_a_pattern_reads_new_topics_commits_per_topic_partition_and_names_dead_letters_topic(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    first, second, dead = f"several.{run}.a", f"several.{run}.b", f"several.{run}.dead"
    ensure_topics(bootstrap, {first: (2, None), dead: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, flight in enumerate(flights[:6]):
        producer.produce(first, value=codec.encode(flight), partition=i % 2)
    assert producer.flush(30) == 0
    group = f"several-{run}"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"several\.{run}\.[a-z]+",  # the dead-letter topic matches too
        "startingOffsets": "earliest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "deadLetterTopic": dead,
        "kafka.group.id": group,  # commitOffsets: true by default with a group
    }
    table = f"several_{run}"
    df = spark.readStream.format(SOURCE_NAME).options(**options).load()
    query = (
        df.select("topic", "partition", "offset")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )

    def read() -> set[tuple[str, int, int]]:
        query.processAllAvailable()
        rows = spark.sql(f"SELECT topic, partition, offset FROM {table}").collect()
        return {(r.topic, r.partition, r.offset) for r in rows}

    try:
        expected = {(first, i % 2, i // 2) for i in range(6)}
        wait_until(lambda: read() == expected, 120, "the first topic's rows")
        # A topic created while the query runs, whose name matches: read from offset 0,
        # its undecodable tuple (offset 1) dead-lettered.
        ensure_topics(bootstrap, {second: (1, None)})
        for value in (
            codec.encode(flights[6]),
            b"this is not avro",
            codec.encode(flights[7]),
            codec.encode(flights[8]),
        ):
            producer.produce(second, value=value, partition=0)
        assert producer.flush(30) == 0
        expected |= {(second, 0, offset) for offset in (0, 2, 3)}
        wait_until(lambda: read() == expected, 120, "the new topic's rows, from its first offset")
        # Spark commits a micro-batch's end offsets to the source once it plans the next
        # micro-batch: one more tuple makes one.
        producer.produce(first, value=codec.encode(flights[9]), partition=0)
        assert producer.flush(30) == 0
        wait_until(lambda: (first, 0, 3) in read(), 120, "the last tuple's row")
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        tps = [TopicPartition(first, 0), TopicPartition(first, 1), TopicPartition(second, 0)]
        try:

            def committed() -> list[int]:
                return [tp.offset for tp in consumer.committed(tps, timeout=10)]

            wait_until(
                lambda: committed()[0] >= 3 and committed()[1:] == [3, 4],
                120,
                "a commit per topic-partition in the group",
            )
        finally:
            consumer.close()
    finally:
        query.stop()
    assert query.exception() is None, query.exception()

    letters = read_all(bootstrap, dead)
    assert len(letters) == 1
    headers = {k: v.decode() for k, v in letters[0].headers()}
    assert (headers["floodgate.topic"], headers["floodgate.partition"]) == (second, "0")
    assert headers["floodgate.offset"] == "1"
    assert headers["floodgate.stream"] == f"several\\.{run}\\.[a-z]+"
    assert letters[0].value() == b"this is not avro"


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "drop"])
def test_a_deleted_topic_of_a_pattern_fails_the_query_or_is_dropped(
    spark: Any, bootstrap: str, fail_on_data_loss: bool
) -> None:
    """A topic the query read that is deleted: with ``failOnDataLoss`` the query fails
    naming its topic-partitions, as Spark's Kafka source ("... are gone"); without, it
    is dropped (``FG-SOURCE-004``) and the other topics are read on."""
    run = uuid.uuid4().hex[:8]
    first, second = f"gone.{run}.a", f"gone.{run}.b"
    ensure_topics(bootstrap, {first: (1, None), second: (1, None)})
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in (first, second):
        for i in range(2):
            producer.produce(topic, value=f"{topic}-{i}".encode())
    assert producer.flush(30) == 0
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"gone\.{run}\.[a-z]",
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        # Commits each micro-batch's end, the deleted topic's too until it is gone.
        "kafka.group.id": f"gone-{run}",
        # A read of the deleted topic's offsets waits this long (Kafka's default: 60 s)
        # before the topic-partitions are listed again without it.
        "kafka.default.api.timeout.ms": "10000",
    }
    table = f"gone_{run}_{fail_on_data_loss}"
    df = spark.readStream.format(SOURCE_NAME).options(**options).load()
    query = df.select("topic", "offset").writeStream.format("memory").queryName(table).start()

    def read() -> set[tuple[str, int]]:
        query.processAllAvailable()
        return {(r.topic, r.offset) for r in spark.sql(f"SELECT * FROM {table}").collect()}

    try:
        wait_until(lambda: len(read()) == 4, 120, "both topics' rows")
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need it
        admin.delete_topics([second])[second].result(30)
        producer.produce(first, value=b"after")
        assert producer.flush(30) == 0
        # A read of offsets the broker lists the deleted topic for meanwhile waits out its
        # timeout (above) before the topic-partitions are listed again: deadlines of 300 s.
        if fail_on_data_loss:
            wait_until(lambda: query.exception() is not None, 300, "the query's failure")
            message = str(query.exception())
            assert f"[{second}-0] are gone" in message, message
            assert "failOnDataLoss" in message, message
        else:
            wait_until(lambda: (first, 2) in read(), 300, "the first topic's new row")
            assert query.isActive
    finally:
        query.stop()


def test_a_pattern_that_matches_nothing_yet_plans_empty_micro_batches_until_it_does(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """No topic matches: the offsets are ``{}`` and no micro-batch reads anything, with
    no error (as Spark); the first topic that comes to match is read from its start."""
    run = uuid.uuid4().hex[:8]
    topic = f"empty.{run}.first"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"empty\.{run}\..*",
        "startingOffsets": "latest",
    }
    rows: list[Any] = []

    def collect(batch: Any, _batch_id: int) -> None:
        rows.extend(batch.select("topic", "offset").collect())

    df = spark.newSession().readStream.format(SOURCE_NAME).options(**options).load()
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert rows == [] and query.exception() is None
        ensure_topics(bootstrap, {topic: (1, None)})
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(3):
            producer.produce(topic, value=f"v{i}".encode())
        assert producer.flush(30) == 0
        # The pattern is matched again as each micro-batch is planned.
        wait_until(lambda: len(rows) == 3 or query.exception() is not None, 120, "3 rows")
        assert query.exception() is None, query.exception()
        assert sorted((r.topic, r.offset) for r in rows) == [(topic, o) for o in range(3)]
    finally:
        query.stop()
