"""The ``floodgate_kafka`` source read with Spark's Kafka source options alone:
``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets`` as Spark's JSON,
``maxOffsetsPerTrigger``, ``includeHeaders``, ``failOnDataLoss``; and Spark's columns
``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
``timestampType``, ``headers``. The same query against Spark's own connector is
``test_spark_connector_compare.py``."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException

from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import offsets_read_available_now, wait_until
from tests.integration.sweeper.sweeping import deleted_before, sweep_head


def _produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition * partitions):
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("n", str(i).encode()), ("empty", None)] if i % 3 else None
        )
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=i % partitions,
            headers=headers,
        )
    assert producer.flush(30) == 0


def _session(spark: Any) -> Any:
    """A session of its own, as a query group has."""
    return spark.newSession()


def _read(spark: Any, options: dict[str, str], name: str) -> tuple[list[Any], list[int], list[str]]:
    """Run ``options`` under Trigger.AvailableNow into a memory table.

    Returns:
        The rows by partition and offset, each micro-batch's number of rows, and the
        columns.
    """
    spark = _session(spark)
    df = spark.readStream.format(SOURCE_NAME).options(**options).load()
    name = f"{name}_{SOURCE_NAME}"
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        rows = spark.sql(f"SELECT * FROM {name} ORDER BY partition, offset").collect()
    finally:
        query.stop()
    return rows, batches, spark.table(name).columns


def test_sparks_options_read_sparks_columns(spark: Any, bootstrap: str) -> None:
    topic = f"dialect.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, None)})
    _produce(bootstrap, topic, per_partition=6, partitions=2)
    rows, batches, columns = _read(
        spark,
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "startingOffsets": json.dumps({topic: {"0": -2, "1": 2}}),
            "maxOffsetsPerTrigger": "4",
            "includeHeaders": "true",
            "failOnDataLoss": "true",
        },
        "dialect_columns",
    )
    assert [(r.partition, r.offset) for r in rows] == [
        *((0, o) for o in range(6)),
        *((1, o) for o in range(2, 6)),
    ]
    assert batches == [4, 4, 2]  # maxOffsetsPerTrigger tuples a micro-batch, at most
    first = rows[0]
    assert (first.key, first.value, first.topic, first.timestampType) == (
        b"k0",
        b"v0",
        topic,
        0,  # CreateTime: librdkafka's producer stamps the record
    )
    assert first.timestamp is not None
    assert first.headers is None  # record 0 was sent without headers
    second = rows[1]  # record 2: partition 0, offset 1
    assert [(h.key, h.value) for h in second.headers] == [("n", b"2"), ("empty", None)]
    assert columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "skip"])
def test_offsets_no_longer_on_the_broker_fail_or_are_skipped(
    spark: Any, bootstrap: str, fail: bool
) -> None:
    """``failOnDataLoss``: a micro-batch that starts at offsets the broker deleted
    fails the query (the default), or starts at the first offset it still holds."""
    topic = f"dialect.lost.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    _produce(bootstrap, topic, per_partition=8, partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(30)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": json.dumps({topic: {"0": 0}}),
        "failOnDataLoss": str(fail).lower(),
    }
    if fail:
        df = _session(spark).readStream.format(SOURCE_NAME).options(**options).load()
        query = (
            df.writeStream.format("memory")
            .queryName(f"dialect_lost_fail_{SOURCE_NAME}")
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(StreamingQueryException, match=r"DataLossException"):
            query.awaitTermination(180)
        return
    rows, _, _ = _read(spark, options, "dialect_lost_skip")
    assert [r.offset for r in rows] == [5, 6, 7]


def test_decoded_tuples_carry_sparks_columns_beside_their_fields(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
) -> None:
    """With ``schema``, a row holds the stream's decoded fields and, beside them,
    Spark's columns: the raw ``value`` is the bytes the producer wrote."""
    topic = f"dialect.decoded.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    values = [codec.encode(f) for f in flights[:5]]
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, key=b"k", value=value)
    assert producer.flush(30) == 0
    rows, _, columns = _read(
        spark,
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "schema": "flight",
            "schemas": schemas.as_json(),
        },
        "dialect_decoded",
    )
    assert columns[: len(schemas.get("flight").field_names)] == schemas.get("flight").field_names
    assert [(r.carrier, r.flight) for r in rows] == [
        (f["carrier"], f["flight"]) for f in flights[:5]
    ]
    assert [bytes(r.value) for r in rows] == values
    assert {(r.topic, r.key, r._key, r.partition, r._partition) for r in rows} == {
        (topic, b"k", b"k", 0, 0)
    }
    assert [r.offset for r in rows] == [r._offset for r in rows] == list(range(5))


def test_a_partition_added_later_above_offset_0_fails_or_is_read_from_its_earliest(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """A partition added to the topic while the query is stopped, whose first 5 records
    were deleted before the query saw it (retention would do the same), is data loss, as
    in Spark's Kafka source: with ``failOnDataLoss`` the query fails, naming the
    partition and its earliest offset ("Added partition ... starts from 5 instead of
    0"); without, the query goes on from that offset, not from 0."""
    topic = f"dialect.added.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    _produce(bootstrap, topic, per_partition=4, partitions=1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
    }
    checkpoint = str(tmp_path / "checkpoint")

    def run(fail_on_data_loss: bool) -> list[tuple[int, int]]:
        given = {**options, "failOnDataLoss": str(fail_on_data_loss).lower()}
        return offsets_read_available_now(_session(spark), given, checkpoint)

    assert run(True) == [(0, o) for o in range(4)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 2)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(8):
        producer.produce(topic, value=f"added{i}".encode(), partition=1)
    assert producer.flush(30) == 0
    # An admin client made before the partition was added keeps answering "no leaders
    # found" for it: a new one each try.
    wait_until(
        lambda: deleted_before(bootstrap, TopicPartition(topic, 1, 5)), 30, "records deleted"
    )
    with pytest.raises(
        StreamingQueryException,
        match=re.escape(f"added partition {topic}-1 starts from 5 instead of 0"),
    ):
        run(True)
    assert run(False) == [(1, 5), (1, 6), (1, 7)]


def test_a_batch_query_reads_from_earliest_to_latest_its_swept_range_from_the_blob(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """``spark.read`` on the JVM source, as Spark's guide backfills a topic: from
    ``earliest`` (a batch query's default) to ``latest``, the range swept into a BLOB
    (and deleted from the broker) read back from it, byte for byte."""
    topic = f"dialect.batch.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    _produce(bootstrap, topic, per_partition=20, partitions=1)
    url = sweep_head(bootstrap, topic, 10, tmp_path)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "sweepCatalog": url}
    rows = (
        _session(spark).read.format(SOURCE_NAME).options(**options).load()
        .orderBy("offset").collect()
    )  # fmt: skip
    assert [(r.offset, r.key, r.value) for r in rows] == [
        (i, f"k{i}".encode(), f"v{i}".encode()) for i in range(20)
    ]
    # endingOffsets as Spark's JSON (-1: latest), from a given start.
    bounded = {
        **options,
        "startingOffsets": json.dumps({topic: {"0": 5}}),
        "endingOffsets": json.dumps({topic: {"0": 12}}),
    }
    rows = _session(spark).read.format(SOURCE_NAME).options(**bounded).load().collect()
    assert sorted(r.offset for r in rows) == list(range(5, 12))


def test_batch_and_streaming_queries_refuse_each_others_bounds(spark: Any, bootstrap: str) -> None:
    """As Spark's Kafka source: a batch query cannot start at latest, and a streaming
    query takes no endingOffsets."""
    topic = f"dialect.bounds.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    session = _session(spark)
    with pytest.raises(Exception, match="a batch query cannot start at latest"):
        session.read.format(SOURCE_NAME).options(
            **options, startingOffsets="latest"
        ).load().collect()
    stream = session.readStream.format(SOURCE_NAME).options(**options, endingOffsets="latest")
    query = stream.load().writeStream.format("memory").queryName(f"bounds_{topic[-8:]}").start()
    with pytest.raises(Exception, match="'endingOffsets' is not supported in a streaming query"):
        query.awaitTermination(120)
