"""Event-time alignment in the JVM source (``format("floodgate_kafka")`` with
``maxEventTimeDriftMs``) on a real broker: two partitions skewed in event time, read
under Trigger.AvailableNow a few tuples a micro-batch, and no micro-batch reads a
partition more than the drift past where the other stands.

Where a partition "stands" after a micro-batch is the event time of its first tuple not
yet read. Alignment caps every micro-batch at the least planned event time plus the
drift; a partition that keeps its planned end stands at or past its planned event time,
and a capped one at its first tuple past the bound, so every tuple read so far is within
the drift of where each partition that has more to read stands. Planned by offsets,
partition 1 (its first tuple 50 minutes after partition 0's) would be read 50 minutes
ahead.

With ``timestampMode = server`` the Kafka timestamp is the event time (the cuts come
from the broker's time index); with ``data_source`` it is the field ``at`` (the cuts
from the interpolation search over decoded tuples), the Kafka timestamp the time of
the produce.

It runs in the test session's shared SparkSession, which loads the package's jar
(:func:`pipeline.spark.session.build_spark_session`), in a session of its own.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

#: Event times a minute apart, ending before the produce: a broker deletes records by
#: their timestamps (``retention.ms``, 7 days by default), so under ``server`` the tuples
#: must be recent ones, or they are gone before the query starts.

STEP_MS = 60_000
BASE_MS = (int(time.time() * 1000) // STEP_MS - 240) * STEP_MS
#: Tuples a partition; partition 1's event times start SKEW_STEPS after partition 0's.
PER_PARTITION = 150
SKEW_STEPS = 50
DRIFT_MS = 2 * STEP_MS
#: Offsets a micro-batch at most, so that the run takes several.
PER_TRIGGER = 60

TICK = {
    "type": "record",
    "name": "tick",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def event_times() -> dict[int, list[int]]:
    """The event times (epoch ms) of each partition's tuples in offset order: a minute
    apart, partition 1 starting :data:`SKEW_STEPS` after partition 0's."""
    return {
        p: [BASE_MS + (start + i) * STEP_MS for i in range(PER_PARTITION)]
        for p, start in ((0, 0), (1, SKEW_STEPS))
    }


def produce_skewed(bootstrap: str, topic: str, mode: str) -> SchemaRepository:
    """Write :func:`event_times` to ``topic`` (two partitions), the Kafka timestamp the
    event time under ``server`` and the produce time under ``data_source``."""
    repository = SchemaRepository({"tick": TICK})
    codec = StreamCodec("ticks", repository.get("tick"), repository)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p, times in event_times().items():
        for i, at in enumerate(times):
            value = codec.encode({"id": i, "at": at})
            if mode == "server":
                producer.produce(topic, value, partition=p, timestamp=at)
            else:
                producer.produce(topic, value, partition=p)
    assert producer.flush(30) == 0
    return repository


def source_options(
    bootstrap: str, topic: str, mode: str, repository: SchemaRepository
) -> dict[str, str]:
    """The source's options: ``topic`` aligned with :data:`DRIFT_MS`, event time of ``mode``."""
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "schema": "tick",
        "schemas": repository.as_json(),
        "timestampMode": mode,
        "maxEventTimeDriftMs": str(DRIFT_MS),
        "maxOffsetsPerTrigger": str(PER_TRIGGER),
    }
    if mode == "data_source":
        options["timestampField"] = "at"
    return options


def read_aligned(shared: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Read with ``request["options"]`` under Trigger.AvailableNow, in a session of its
    own of the shared SparkSession ``shared``.

    Returns:
        ``{"batches": [[[partition, offset, event time ms], ...], ...] in batch order
        (micro-batches without rows left out), "metrics": the last progress's source
        metrics}``.
    """
    from pipeline.spark.options import SOURCE_NAME

    spark = shared.newSession()
    batches: dict[int, list[tuple[int, int, int]]] = {}

    def keep(df: Any, batch_id: int) -> None:
        rows = df.selectExpr(
            "_partition", "_offset", "CAST(unix_micros(event_time) / 1000 AS BIGINT)"
        ).collect()
        batches[batch_id] = [(int(r[0]), int(r[1]), int(r[2])) for r in rows]

    df = spark.readStream.format(SOURCE_NAME).options(**request["options"]).load()
    query = (
        df.writeStream.foreachBatch(keep)
        .trigger(availableNow=True)
        .option("checkpointLocation", request["checkpoint"])
        .start()
    )
    try:
        query.awaitTermination(300)
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["sources"]]
        metrics = dict(progress[-1]["sources"][0].get("metrics") or {}) if progress else {}
    finally:
        query.stop()
    result = {"batches": [batches[b] for b in sorted(batches) if batches[b]], "metrics": metrics}
    return dict(json.loads(json.dumps(result)))


def check_aligned(batches: list[list[list[int]]]) -> None:
    """Every tuple read once, in order; after each micro-batch, every tuple read so far
    within :data:`DRIFT_MS` of where each partition with more to read stands."""
    times = event_times()
    position = dict.fromkeys(times, 0)
    furthest = dict.fromkeys(times, -1)
    for n, rows in enumerate(batches):
        for p, offset, at in sorted(map(tuple, rows)):
            assert offset == position[p], f"micro-batch {n}: partition {p} read {offset}"
            assert at == times[p][offset]
            position[p] = offset + 1
            furthest[p] = max(furthest[p], at)
        read_to = max(furthest.values())
        for q, series in times.items():
            if position[q] < len(series):
                stands = series[position[q]]
                assert read_to <= stands + DRIFT_MS, (
                    f"micro-batch {n} read up to step {(read_to - BASE_MS) // STEP_MS}, "
                    f"partition {q} stands at step {(stands - BASE_MS) // STEP_MS} (drift "
                    f"{DRIFT_MS // STEP_MS} steps); read so far: {position}"
                )
    assert position == {p: len(s) for p, s in times.items()}


@pytest.mark.parametrize("mode", ["server", "data_source"])
def test_no_micro_batch_reads_a_partition_more_than_the_drift_past_the_other(
    bootstrap: str, mode: str, tmp_path: Path, spark: Any
) -> None:
    topic = f"jvm-align-{mode.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, 1)})
    repository = produce_skewed(bootstrap, topic, mode)
    request = {
        "checkpoint": str(tmp_path / "checkpoint"),
        "options": source_options(bootstrap, topic, mode, repository),
    }
    answer = read_aligned(spark, request)
    check_aligned(answer["batches"])
    # Partition 1 was held back: planned by offsets, the first micro-batches would have
    # read it 50 minutes ahead of partition 0.
    assert int(answer["metrics"]["alignmentCaps"]) > 0, answer["metrics"]
    assert int(answer["metrics"]["alignmentReads"]) > 0, answer["metrics"]
    assert len(answer["batches"]) >= 2 * PER_PARTITION // PER_TRIGGER
