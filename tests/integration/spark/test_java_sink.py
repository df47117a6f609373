"""The JVM sink (``writeStream.format("floodgate_kafka")``, docs/spark-source.md, "The
sink"): each write task produces its partition of a micro-batch in a Kafka transaction
of its own, with a batch marker that lets a replayed batch skip the partitions already
committed. Through a real SparkSession and broker: the output is byte for byte what the
Python codec writes, exactly once for ``read_committed`` readers across replays (after
Spark's commit log is lost, after a task failed once its transaction committed), the
query's consumer group ends at the input's end offsets, and several writer tasks never
fill an output stream queue past its ``max_queue_size``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline.serde.schemas import SchemaRepository
from tests.integration.spark.sink_pipeline import (
    FLIGHTS,
    Pipeline,
    expected_records,
    written,
)


@pytest.fixture
def pipeline(spark: Any, bootstrap: str, schemas: SchemaRepository, tmp_path: Path) -> Pipeline:
    return Pipeline(spark, bootstrap, schemas, tmp_path)


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
    # The failed attempt's commit never reached the driver: its tuples count once, as
    # the retry's skipped ones, and every other tuple as written.
    totals = query.lastProgress["sink"]["metrics"]
    skipped, committed = int(totals["tuplesSkipped"]), int(totals["tuplesWritten"])
    assert 0 < skipped < FLIGHTS
    assert skipped + committed == FLIGHTS
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


CARRIER_COUNT = {
    "type": "record",
    "name": "CarrierCount",
    "fields": [{"name": "carrier", "type": "string"}, {"name": "flights", "type": "long"}],
}


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_an_aggregation_writes_in_update_and_complete_mode(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
    mode: str,
) -> None:
    """Flights per carrier, as Spark's Kafka sink takes the two modes of an aggregation:
    update appends each micro-batch's changed rows, complete its whole result; read in
    order, the last row per carrier is its count over every flight."""
    from collections import Counter

    from pipeline.demo.reception import read_all
    from pipeline.serde.codec import StreamCodec
    from pipeline.spark.options import SOURCE_NAME

    pipeline = Pipeline(spark, bootstrap, schemas, tmp_path)
    pipeline.produce(flights[:FLIGHTS])
    repository = SchemaRepository({**json.loads(schemas.as_json()), "carrier_count": CARRIER_COUNT})
    df = (
        spark.readStream.format(SOURCE_NAME)
        .options(
            **{
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": pipeline.input,
                "startingOffsets": "earliest",
                "schema": "flight",
                "schemas": schemas.as_json(),
                "maxOffsetsPerTrigger": "200",
            }
        )
        .load()
    )
    query = (
        df.groupBy("carrier")
        .count()
        .withColumnRenamed("count", "flights")
        .writeStream.format(SOURCE_NAME)
        .outputMode(mode)
        .options(
            **{
                "kafka.bootstrap.servers": bootstrap,
                "topic": pipeline.output,
                "schema": "carrier_count",
                "schemas": repository.as_json(),
                "key": "carrier",
                "transactionalIdPrefix": f"{pipeline.group}.{mode}.sink",
            }
        )
        .option("checkpointLocation", str(tmp_path / mode))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    codec = StreamCodec("carrier_count", repository.get("carrier_count"), repository)
    last: dict[str, int] = {}
    rows = 0
    for record in read_all(bootstrap, pipeline.output):
        row = codec.decode(record.value())
        assert record.key() == row["carrier"].encode()
        last[row["carrier"]] = row["flights"]
        rows += 1
    assert last == dict(Counter(f["carrier"] for f in flights[:FLIGHTS]))
    if mode == "complete":
        assert rows > len(last)  # the earlier micro-batches' whole results came first
