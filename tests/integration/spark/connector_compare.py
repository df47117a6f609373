"""One query text run on Spark's own Kafka connector (``format("kafka")``) and on
Floodgate's source (``format("floodgate_kafka")``) with the same options, in a
SparkSession of its own: Spark's connector jars must be on the JVM's class path when
it starts (``--jars``), and the test session's JVM started without them.

Run by ``test_spark_connector_compare.py`` as
``python -m tests.integration.spark.connector_compare <request JSON>``; prints one
line, ``RESULT <JSON>``: per case and format, the source's schema and the query's
rows (or its error), and the data-loss scenarios' outcomes.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

#: The query both sources are read with, over the temporary view ``src``: every column of
#: Spark's Kafka source schema, the binary ones as text so the rows print as JSON.
QUERY = """
SELECT CAST(key AS STRING) AS key,
       CAST(value AS STRING) AS value,
       topic, partition, offset,
       CAST(timestamp AS STRING) AS timestamp,
       timestampType,
       transform(headers, h -> named_struct('key', h.key, 'value', CAST(h.value AS STRING)))
         AS headers
FROM src
"""

#: The formats compared, in streaming queries, batch queries (``spark.read``) and the
#: data-loss scenarios.
FORMATS = ("kafka", "floodgate_kafka")


def run(spark: Any, fmt: str, options: dict[str, str], name: str = "") -> dict[str, Any]:
    """``QUERY`` over ``format(fmt)`` with ``options``, run to the end of the topic
    (Trigger.AvailableNow) into a memory table (its name ends with ``name``).

    Returns:
        ``{"schema": <the source's schema as DDL>, "rows": [<row as a list>, ...]}``,
        rows by topic, partition and offset.
    """
    df = spark.readStream.format(fmt).options(**options).load()
    df.createOrReplaceTempView("src")
    table = f"compare_{fmt}{name}"
    query = (
        spark.sql(QUERY)
        .writeStream.format("memory")
        .queryName(table)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    rows = spark.sql(f"SELECT * FROM {table} ORDER BY topic, partition, offset").collect()
    return {
        "schema": df.schema.simpleString(),
        "rows": [json.loads(json.dumps(row.asDict(recursive=True), default=str)) for row in rows],
    }


def run_batch(spark: Any, fmt: str, options: dict[str, str]) -> dict[str, Any]:
    """``QUERY`` over a batch read (``spark.read.format(fmt)``) with ``options``.

    Returns:
        As :func:`run`, and ``"tasks"``: the read's input partitions (Spark tasks).
    """
    df = spark.read.format(fmt).options(**options).load()
    df.createOrReplaceTempView("src")
    rows = spark.sql(f"SELECT * FROM ({QUERY}) ORDER BY topic, partition, offset").collect()
    return {
        "tasks": df.rdd.getNumPartitions(),
        "schema": df.schema.simpleString(),
        "rows": [json.loads(json.dumps(row.asDict(recursive=True), default=str)) for row in rows],
    }


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def _create(bootstrap: str, topic: str) -> None:
    """Create ``topic`` (one partition), asking again while the broker still deletes an
    earlier topic of that name (Apache Kafka deletes asynchronously)."""
    import time

    from pipeline.kafka.topics import ensure_topics

    deadline = time.monotonic() + 60
    while True:
        try:
            ensure_topics(bootstrap, {topic: (1, None)})
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _delete(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and wait until the broker no longer lists it."""
    import time

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed"
        time.sleep(0.2)


def _offsets_by_batch(spark: Any, fmt: str, options: dict[str, str], checkpoint: str) -> Any:
    """A streaming query of ``format(fmt)`` whose micro-batches append ``(batch id,
    offset)`` to the list returned with it (``foreachBatch``, run in the driver)."""
    seen: list[list[int]] = []

    def record(batch: Any, batch_id: int) -> None:
        seen.extend([batch_id, row.offset] for row in batch.select("offset").collect())

    query = (
        spark.readStream.format(fmt)
        .options(**options)
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    return query, seen


def restart_before_commit(spark: Any, fmt: str, bootstrap: str, run: str) -> dict[str, Any]:
    """``startingOffsets = earliest``: micro-batch 0 reads offsets 0 to 4; the driver
    "dies" after logging it and before committing it (``commits/0`` removed); the log
    start moves to 2 (``DeleteRecords``, as retention would); the query restarts on its
    checkpoint. Micro-batch 0 runs again from the first offsets the checkpoint keeps,
    0, which the broker no longer holds: data loss, which ``failOnDataLoss`` (the
    default) fails on. Planned again from ``earliest`` instead, it would start at 2 and
    skip 0 and 1 without a word. Returns run 1's ``[batch id, offset]`` pairs and the
    restart's error (or pairs)."""
    import shutil
    import tempfile
    from pathlib import Path

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"loss.restart.{fmt}.{run}"
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 5)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
    }
    checkpoint = tempfile.mkdtemp(prefix="loss-restart-")
    try:
        query, first = _offsets_by_batch(spark, fmt, options, checkpoint)
        query.processAllAvailable()
        query.stop()
        (Path(checkpoint) / "commits" / "0").unlink()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for done in admin.delete_records([TopicPartition(topic, 0, 2)]).values():
            done.result(30)
        _produce(bootstrap, topic, 2)
        query, seen = _offsets_by_batch(spark, fmt, options, checkpoint)
        try:
            query.processAllAvailable()
        except Exception as e:  # the query failed: StreamingQueryException
            return {"first": sorted(first), "error": str(e)}
        finally:
            query.stop()
        return {"first": sorted(first), "batches": sorted(seen)}
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def topic_created_again(
    spark: Any, fmt: str, bootstrap: str, run: str, fail_on_data_loss: bool
) -> dict[str, Any]:
    """Five tuples read; the topic deleted and created again (empty, its offsets back
    at 0); then three tuples in the new topic. Returns the offsets read, or the error
    the query failed with."""
    topic = f"loss.again.{fmt}.{fail_on_data_loss}.{run}"
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 5)
    table = f"again_{fmt}_{fail_on_data_loss}_{run}"
    query = (
        spark.readStream.format(fmt)
        .options(
            **{
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": topic,
                "startingOffsets": "earliest",
                "failOnDataLoss": str(fail_on_data_loss).lower(),
            }
        )
        .load()
        .select("offset")
        .writeStream.format("memory")
        .queryName(table)
        .start()
    )
    try:
        query.processAllAvailable()
        _delete(bootstrap, topic)
        _create(bootstrap, topic)
        try:
            query.processAllAvailable()
            _produce(bootstrap, topic, 3)
            query.processAllAvailable()
        except Exception as e:  # the query failed: StreamingQueryException
            return {"error": str(e)}
        rows = spark.sql(f"SELECT offset FROM {table}").collect()
        return {"offsets": [r.offset for r in rows]}
    finally:
        query.stop()


def collected_twice(spark: Any, fmt: str, bootstrap: str, run: str) -> dict[str, Any]:
    """One batch DataFrame (``endingOffsets`` latest, the default) collected, two
    tuples written, collected again: the offsets of each collect."""
    topic = f"loss.twice.{fmt}.{run}"
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 3)
    df = (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .select("offset")
    )
    first = sorted(r.offset for r in df.collect())
    _produce(bootstrap, topic, 2)
    second = sorted(r.offset for r in df.collect())
    return {"collects": [first, second]}


def loss_scenarios(spark: Any, bootstrap: str) -> dict[str, Any]:
    """Every data-loss scenario on each format of :data:`FORMATS`, in this session.

    Returns:
        ``{scenario: {format: result}}``.
    """
    import uuid

    run = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {}
    for fmt in FORMATS:
        out.setdefault("restart_before_commit", {})[fmt] = restart_before_commit(
            spark, fmt, bootstrap, run
        )
        for fail in (True, False):
            name = f"topic_created_again_{'fail' if fail else 'skip'}"
            out.setdefault(name, {})[fmt] = topic_created_again(spark, fmt, bootstrap, run, fail)
        out.setdefault("collected_twice", {})[fmt] = collected_twice(spark, fmt, bootstrap, run)
    return out


def cases(spark: Any, given: dict[str, Any], formats: list[str]) -> dict[str, Any]:
    """Several comparisons in this one session: per case name, ``{"mode": "stream" or
    "batch", "options": {...}}`` run on each of ``formats``.

    Returns:
        ``{case: {format: result of run or run_batch, or {"error": <message>}}}``.
    """
    out: dict[str, Any] = {}
    for i, (name, case) in enumerate(given.items()):
        for fmt in formats:
            try:
                if case["mode"] == "batch":
                    result = run_batch(spark, fmt, case["options"])
                else:
                    result = run(spark, fmt, case["options"], f"_{i}")
            except Exception as e:  # the query failed: its message, for the test to show
                result = {"error": str(e)[:3000]}
            out.setdefault(name, {})[fmt] = result
    return out


def main(request: dict[str, Any]) -> dict[str, Any]:
    """Every comparison of ``request["cases"]`` (:func:`cases`, on :data:`FORMATS`) and,
    when ``request["bootstrap"]`` is given, the data-loss scenarios of
    :func:`loss_scenarios` on it, in this one session: ``{"cases": ..., "loss": ...}``.
    The session's JVM starts with ``request["jars"]`` (Spark's connector) given to
    ``--jars`` in ``PYSPARK_SUBMIT_ARGS``, as ``spark-submit --jars`` would: a
    ``spark.jars`` set once the JVM runs does not reach the class path data sources are
    looked up in. One session for all: each costs a JVM's start (10-30 s on 2 cores)."""
    from pipeline.spark.session import build_spark_session

    # The run's own arguments (the class-data archive, tests/integration/jvm_classes.py) kept.
    given = os.environ.get("PYSPARK_SUBMIT_ARGS", "").removesuffix("pyspark-shell").strip()
    jars = f"--jars {','.join(request['jars'])}"
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join(a for a in (given, jars, "pyspark-shell") if a)
    spark = build_spark_session(app_name="floodgate-connector-compare", master="local[2]")
    try:
        out: dict[str, Any] = {"cases": cases(spark, request.get("cases") or {}, list(FORMATS))}
        if request.get("bootstrap"):
            out["loss"] = loss_scenarios(spark, request["bootstrap"])
        return out
    finally:
        spark.stop()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
