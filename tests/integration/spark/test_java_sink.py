"""The JVM sink (``writeStream.format("floodgate_kafka")``, docs/spark-source.md, "The
sink"): each write task produces its partition of a micro-batch in a Kafka transaction
of its own, with a batch marker that lets a replayed batch skip the partitions already
committed. Through a real SparkSession and broker: the output is byte for byte what the
Python codec writes, exactly once for ``read_committed`` readers across replays (after
Spark's commit log is lost, after a task failed once its transaction committed), the
query's consumer group ends at the input's end offsets, and several writer tasks never
fill an output stream queue past its ``max_queue_size``."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.errors import StreamingQueryException

from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec, TupleKey
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME

FLIGHTS = 600
KEY = ["carrier", "flight"]


@pytest.fixture
def failpoint(spark: Any) -> Iterator[Any]:
    """Arms a sink failpoint in the test session's JVM (its executors, in local mode)."""
    failpoints = spark._jvm.io.floodgate.spark.write.SinkFailpoints
    yield failpoints.arm
    failpoints.arm(None)


class Pipeline:
    """An input topic of flights read by the JVM source, written by the JVM sink."""

    def __init__(
        self, spark: Any, bootstrap: str, schemas: SchemaRepository, tmp_path: Path
    ) -> None:
        run = uuid.uuid4().hex[:8]
        self.spark, self.bootstrap, self.schemas = spark, bootstrap, schemas
        self.input, self.output = f"jsink.{run}.in", f"jsink.{run}.out"
        self.group = f"jsink-{run}"
        self.checkpoint = str(tmp_path / "checkpoint")
        self.codec = StreamCodec("flights", schemas.get("flight"), schemas)
        ensure_topics(bootstrap, {self.input: (2, None), self.output: (3, None)})

    def produce(self, flights: list[dict[str, Any]]) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for i, flight in enumerate(flights):
            producer.produce(self.input, value=self.codec.encode(flight), partition=i % 2)
        assert producer.flush(30) == 0

    def run(self, **sink: str) -> Any:
        """Write every input tuple (``availableNow``, 100 input tuples a micro-batch);
        return the finished query."""
        df = (
            self.spark.readStream.format(SOURCE_NAME)
            .options(
                **{
                    "kafka.bootstrap.servers": self.bootstrap,
                    "subscribe": self.input,
                    "startingOffsets": "earliest",
                    "schema": "flight",
                    "schemas": self.schemas.as_json(),
                    "maxOffsetsPerTrigger": "100",
                }
            )
            .load()
        )
        fields = self.schemas.get("flight").field_names
        options = {
            "kafka.bootstrap.servers": self.bootstrap,
            "topic": self.output,
            "stream": "flights-out",
            "schema": "flight",
            "schemas": self.schemas.as_json(),
            "key": ",".join(KEY),
            "transactionalIdPrefix": f"{self.group}.sink",
            "consumerGroup": self.group,
            "inputTopics": self.input,
            **sink,
        }
        query = (
            df.select(*fields)
            .writeStream.format(SOURCE_NAME)
            .options(**options)
            .option("checkpointLocation", self.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(180)  # raises the query's failure: query.exception()
        return query

    def output_records(self) -> list[Any]:
        return read_all(self.bootstrap, self.output)

    def committed(self) -> list[int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            tps = [TopicPartition(self.input, p) for p in (0, 1)]
            return [tp.offset for tp in consumer.committed(tps, timeout=30)]
        finally:
            consumer.close()


@pytest.fixture
def pipeline(spark: Any, bootstrap: str, schemas: SchemaRepository, tmp_path: Path) -> Pipeline:
    return Pipeline(spark, bootstrap, schemas, tmp_path)


def expected_records(
    codec: StreamCodec, flights: list[dict[str, Any]]
) -> Counter[tuple[bytes | None, bytes]]:
    key = TupleKey(KEY)
    return Counter((key(codec.normalise(f)), codec.encode(f)) for f in flights)


def written(records: list[Any]) -> Counter[tuple[bytes | None, bytes]]:
    return Counter((r.key(), r.value()) for r in records)


def test_the_output_is_the_python_codec_s_bytes_once_and_the_group_ends_at_the_input_s_end(
    pipeline: Pipeline, flights: list[dict[str, Any]]
) -> None:
    pipeline.produce(flights[:FLIGHTS])
    query = pipeline.run()
    assert query.exception() is None, query.exception()
    assert written(pipeline.output_records()) == expected_records(pipeline.codec, flights[:FLIGHTS])
    assert pipeline.committed() == [FLIGHTS // 2, FLIGHTS // 2]
    metrics = query.lastProgress["sink"]["metrics"]
    assert int(metrics["tuplesSkipped"]) == 0
    assert int(metrics["batches"]) == len(query.recentProgress)


def test_a_batch_replayed_after_spark_lost_its_commit_skips_what_its_tasks_committed(
    pipeline: Pipeline, flights: list[dict[str, Any]]
) -> None:
    """Every task committed, then the driver died before Spark's commit log: the
    replayed batch's tasks find their markers and write nothing again."""
    pipeline.produce(flights[:FLIGHTS])
    first = pipeline.run()
    assert first.exception() is None, first.exception()
    commits = Path(pipeline.checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    shutil.rmtree(commits / f".{last}.crc", ignore_errors=True)
    (commits / f".{last}.crc").unlink(missing_ok=True)

    replay = pipeline.run()
    assert replay.exception() is None, replay.exception()
    assert int(replay.lastProgress["sink"]["metrics"]["tuplesSkipped"]) > 0
    assert int(replay.lastProgress["sink"]["metrics"]["tuplesWritten"]) == 0
    assert written(pipeline.output_records()) == expected_records(pipeline.codec, flights[:FLIGHTS])


def test_a_task_retried_after_its_commit_skips_its_partition(
    pipeline: Pipeline, flights: list[dict[str, Any]], failpoint: Any
) -> None:
    """A task's transaction committed, then its attempt failed before it reported to
    the driver (an executor lost): Spark retries the task (the session's local master
    has a cluster's four attempts), and the retry finds the partition's marker and
    writes nothing again."""
    pipeline.produce(flights[:FLIGHTS])
    failpoint("after-commit:2:fail")
    query = pipeline.run()
    assert query.exception() is None, query.exception()
    skipped = sum(int(p["sink"]["metrics"]["tuplesSkipped"]) for p in query.recentProgress[-1:])
    assert skipped > 0
    assert written(pipeline.output_records()) == expected_records(pipeline.codec, flights[:FLIGHTS])
    assert pipeline.committed() == [FLIGHTS // 2, FLIGHTS // 2]


def test_several_writer_tasks_never_fill_the_output_queue_past_its_max_and_the_group_holds(
    pipeline: Pipeline, flights: list[dict[str, Any]]
) -> None:
    """An output stream queue of 250 that nobody reads, fed 600 tuples by two writer
    tasks a micro-batch: the tasks share its free space, so the batch that does not fit
    fails with FG-QG-002 and nothing of it is visible; the queue holds at most 250."""
    pipeline.produce(flights[:FLIGHTS])
    query = pipeline.run(
        maxQueueSize="250",
        queueReaders=f"{pipeline.group}-reception",
        sleepOnOverStoreMs="50",
        sleepOnOverStoreRetryCount="2",
    )
    assert query.exception() is not None
    assert "FG-QG-002" in str(query.exception())
    records = pipeline.output_records()
    assert 0 < len(records) <= 250
    visible = written(records)
    assert all(n == 1 for n in visible.values())
    assert not visible - expected_records(pipeline.codec, flights[:FLIGHTS])
