"""The JVM source in Spark's Real-Time Mode (``trigger(realTime=...)``): one long-running
task per topic-partition, reading records as they are written until the batch's deadline,
each batch starting where the last ended; decoding several topics, and the dead letters
of what it cannot decode, as in micro-batches."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from pipeline.deadletter import DLQ_REASON, DLQ_TOPIC
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import wait_until
from tests.integration.sweeper.sweeping import sweep_head


def start_real_time(
    spark: Any, options: dict[str, str], columns: list[str], table: str, checkpoint: Path
) -> Any:
    """A real-time query of the source with ``options`` into Spark's memory table
    ``table`` (which shows the rows at each batch's end), its ``columns``: batches of 2 s
    (Spark's least is 5 s), the memory sink let past Real-Time Mode's sink allowlist."""
    settings = {
        "spark.sql.streaming.realTimeMode.minBatchDuration": "1000",
        "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return (
            spark.readStream.format(SOURCE_NAME)
            .options(**options)
            .load()
            .selectExpr(*columns)
            .writeStream.format("memory")
            .queryName(table)
            .outputMode("update")
            .trigger(realTime="2 seconds")
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
    finally:
        for key in settings:
            spark.conf.unset(key)


def table_rows(spark: Any, table: str, enough: Callable[[int], bool], what: str) -> list[Any]:
    """The rows of memory table ``table`` once ``enough`` holds of their number (waiting
    up to 60 s for ``what``)."""
    rows: list[Any] = []

    def count() -> int:
        rows[:] = spark.sql(f"SELECT * FROM {table}").collect()
        return len(rows)

    wait_until(lambda: enough(count()), 60, what)
    return rows


def test_a_real_time_query_reads_records_as_they_come_across_batches(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"realtime.{run}"
    ensure_topics(bootstrap, {topic: (2, None)})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        producer.produce(topic, value=f"before-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    table = f"realtime_{run}"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
    }
    query = start_real_time(
        spark,
        options,
        ["CAST(value AS STRING) AS value", "partition", "offset"],
        table,
        tmp_path / "checkpoint",
    )

    def values() -> set[str]:
        return {r.value for r in spark.sql(f"SELECT value FROM {table}").collect()}

    try:
        wait_until(lambda: len(values()) == 4, 60, "the records written before")
        for i in range(4):
            producer.produce(topic, value=f"after-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        wait_until(lambda: len(values()) == 8, 60, "the records written during")
        wait_until(lambda: len(query.recentProgress) >= 3, 60, "three real-time batches")
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.sql(f"SELECT partition, offset FROM {table}").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(4)
    ]
    # Each batch ends where its tasks stopped (mergeOffsets), and the next starts there.
    batches = [
        (p["sources"][0]["startOffset"], p["sources"][0]["endOffset"]) for p in query.recentProgress
    ]
    assert json.loads(batches[-1][1]) == {topic: {"0": 4, "1": 4}}, batches
    for (_, end), (start, _) in itertools.pairwise(batches):
        assert json.loads(start) == json.loads(end), batches


def test_a_real_time_query_decodes_two_topics_and_dead_letters_what_it_cannot_decode(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    first, second, dead = f"rt2.{run}.a", f"rt2.{run}.b", f"rt2.{run}.dead"
    # One partition each: a task slot each on local[2].
    ensure_topics(bootstrap, {first: (1, None), second: (1, None), dead: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, flight in enumerate(flights[:6]):
        producer.produce(first if i % 2 else second, value=codec.encode(flight))
    producer.produce(second, value=b"this is not avro")
    assert producer.flush(30) == 0
    table = f"rt2_{run}"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": f"{first},{second}",
        "startingOffsets": "earliest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "deadLetterTopic": dead,
    }
    columns = ["carrier", "flight", "topic"]
    query = start_real_time(spark, options, columns, table, tmp_path / "checkpoint")
    try:
        rows = table_rows(spark, table, lambda n: n == 6, "the six flights, decoded")
        letters = []

        def dead_letters() -> int:
            letters[:] = read_all(bootstrap, dead)
            return len(letters)

        # Sent when the task that read it ends: at its batch's deadline.
        wait_until(lambda: dead_letters() == 1, 60, "the undecodable record, dead-lettered")
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted((r.carrier, r.flight) for r in rows) == sorted(
        (f["carrier"], f["flight"]) for f in flights[:6]
    )
    assert {r.topic for r in rows} == {first, second}
    headers = dict(letters[0].headers() or ())
    assert headers[DLQ_TOPIC].decode() == second
    assert headers[DLQ_REASON]


def test_a_real_time_query_reads_its_swept_range_back_from_the_blob(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    topic = f"rtswept.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    url = sweep_head(bootstrap, topic, 10, tmp_path)  # [0, 10) only in the BLOB now
    table = f"rtswept_{topic.split('.')[1]}"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        # From offset 0, below the broker's log start now, as a query that was behind
        # when the sweeper moved its backlog (a stream's "earliest" is the log start).
        "startingOffsets": json.dumps({topic: {"0": 0}}),
        "sweepCatalog": url,
    }
    columns = ["offset", "CAST(value AS STRING) AS value"]
    query = start_real_time(spark, options, columns, table, tmp_path / "checkpoint")
    try:
        rows = table_rows(spark, table, lambda n: n >= 20, "the swept and the queued records")
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted((r.offset, r.value) for r in rows) == [(i, f"v{i}") for i in range(20)]
