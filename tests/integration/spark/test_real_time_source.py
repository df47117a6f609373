"""The JVM source in Spark's Real-Time Mode (``trigger(realTime=...)``): one long-running
task per topic-partition, reading records as they are written until the batch's deadline,
each batch starting where the last ended."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from pipeline.kafka.topics import ensure_topics
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import wait_until


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
    # A batch of 2 s (Spark's least is 5 s), and Spark's memory sink, which is not on
    # Real-Time Mode's sink allowlist (it shows the rows at each batch's end).
    settings = {
        "spark.sql.streaming.realTimeMode.minBatchDuration": "1000",
        "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        query = (
            spark.readStream.format(SOURCE_NAME)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
            .writeStream.format("memory")
            .queryName(table)
            .outputMode("update")
            .trigger(realTime="2 seconds")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
    finally:
        for key in settings:
            spark.conf.unset(key)

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
