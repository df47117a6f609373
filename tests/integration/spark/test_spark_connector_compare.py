"""One query text, the same options, two sources: Spark's own Kafka connector
(``format("kafka")``, the JVM connector from Maven Central) and Floodgate's
(``format("floodgate_kafka")``) read the same topic to the same rows (issue 29).

The versions differ, on purpose: the project runs pyspark 4.3.0, and Maven Central
serves ``spark-sql-kafka-0-10_2.13`` only up to 4.2.0
(:data:`~pipeline.brokers.spark_connector.SPARK_CONNECTOR_VERSION`). The 4.2.0
connector loads and runs in the 4.3.0 session (``--jars``; the DataSource V2 API
it implements did not change between them), so both sources run in one SparkSession
on the project's pyspark; a pyspark 4.2.0 virtualenv (as the benchmark's peer uses)
would cost a ~450 MB download on every fresh CI machine for no truer comparison of
the source. The session is a child process of its own
(``tests/integration/spark/connector_compare.py``): the connector's jars must be on
the JVM's class path when it starts.

The comparisons of rows are marked ``apache_kafka``: they run on the second CI pass,
on Apache Kafka's own broker (the reference), where Maven -- which fetches the
connector on first use into ``~/.cache/floodgate/spark-kafka-4.2.0`` -- is there for
the broker's jars anyway. The data-loss scenarios (fixture ``loss``: a restart before
micro-batch 0 was committed, a topic deleted and created again, a batch DataFrame
collected twice) run on both engines, in one session of their own.

What is compared: the source's schema (Spark's Kafka source schema with
``includeHeaders``) and every row of the query, ``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``, ``timestampType`` and ``headers``, read with
``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets`` as Spark's JSON (-2
earliest, a given offset), ``maxOffsetsPerTrigger``, ``includeHeaders`` and
``failOnDataLoss``. Not compared: how the rows are cut into micro-batches, which
``maxOffsetsPerTrigger`` bounds in both but which each shares out over partitions by
its own rule (Spark rounds each partition's share down, Floodgate takes the whole
budget: docs/reference/spark-kafka-options.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyspark
import pytest
from confluent_kafka import Producer

from pipeline.brokers.spark_connector import fetch_connector, jars_spark_lacks
from pipeline.kafka.topics import ensure_topics

ROOT = Path(__file__).resolve().parents[3]


def _produce(bootstrap: str, topic: str, count: int = 23, partitions: int = 2) -> None:
    """Tuples as producers write them: keyed and not, with headers and without, a
    header without a value, a tombstone (no value); two partitions, uneven (one:
    all in partition 0)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(
            topic,
            key=None if i % 7 == 3 else f"key-{i}".encode(),
            value=None if i == 11 else f"value-{i}".encode(),
            partition=(0 if i % 3 else 1) % partitions,
            headers=[("n", str(i).encode()), ("none", None)] if i % 2 else None,
        )
    assert producer.flush(30) == 0


@pytest.mark.apache_kafka
def test_one_query_reads_the_same_rows_from_sparks_connector_and_floodgates_source(
    bootstrap: str,
) -> None:
    topic = f"compare.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, None)})
    _produce(bootstrap, topic)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": json.dumps({topic: {"0": -2, "1": 2}}),
        "maxOffsetsPerTrigger": "5",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
    }
    result = compare(options)
    spark = result["kafka"]
    assert len(spark["rows"]) == 23 - 2  # partition 1 from offset 2
    assert result["floodgate_kafka"]["schema"] == spark["schema"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.mark.apache_kafka
def test_one_batch_query_reads_the_same_rows_from_sparks_connector_and_the_jvm_source(
    bootstrap: str,
) -> None:
    """``spark.read`` with Spark's ``startingOffsets`` and ``endingOffsets`` JSON (-2
    earliest, -1 latest, given offsets), as Spark's guide backfills a topic."""
    topic = f"compare.batch.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, None)})
    _produce(bootstrap, topic)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": json.dumps({topic: {"0": -2, "1": 2}}),
        "endingOffsets": json.dumps({topic: {"0": 10, "1": -1}}),
        "includeHeaders": "true",
        "failOnDataLoss": "true",
    }
    result = compare(options, mode="batch")
    spark = result["kafka"]
    assert [(r["partition"], r["offset"]) for r in spark["rows"]] == [
        *((0, o) for o in range(10)),
        *((1, o) for o in range(2, 8)),
    ]
    assert result["floodgate_kafka"]["schema"] == spark["schema"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.mark.apache_kafka
def test_a_query_of_two_subscribed_topics_reads_the_same_rows_from_both(bootstrap: str) -> None:
    """``subscribe`` of two topics, ``startingOffsets`` JSON over both (Spark: every
    topic-partition named) and one ``maxOffsetsPerTrigger`` budget over the three
    topic-partitions; each row's ``topic`` is its own."""
    run = uuid.uuid4().hex[:8]
    first, second = f"compare.two.a.{run}", f"compare.two.b.{run}"
    ensure_topics(bootstrap, {first: (2, None), second: (1, None)})
    _produce(bootstrap, first)
    _produce(bootstrap, second, count=9, partitions=1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": f"{second}, {first}",
        "startingOffsets": json.dumps({first: {"0": -2, "1": 2}, second: {"0": 4}}),
        "maxOffsetsPerTrigger": "5",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
    }
    result = compare(options)
    spark = result["kafka"]
    assert {r["topic"] for r in spark["rows"]} == {first, second}
    assert len(spark["rows"]) == (23 - 2) + (9 - 4)
    assert result["floodgate_kafka"]["schema"] == spark["schema"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.mark.apache_kafka
def test_a_query_of_partitions_of_two_topics_assigned_reads_the_same_rows_from_both(
    bootstrap: str,
) -> None:
    """``assign`` of partitions of two topics, ``startingOffsets`` naming exactly them."""
    run = uuid.uuid4().hex[:8]
    first, second = f"compare.assign.a.{run}", f"compare.assign.b.{run}"
    ensure_topics(bootstrap, {first: (2, None), second: (1, None)})
    _produce(bootstrap, first)
    _produce(bootstrap, second, count=9, partitions=1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "assign": json.dumps({second: [0], first: [1]}),
        "startingOffsets": json.dumps({first: {"1": -2}, second: {"0": 3}}),
        "includeHeaders": "true",
    }
    result = compare(options)
    spark = result["kafka"]
    assert {(r["topic"], r["partition"]) for r in spark["rows"]} == {(first, 1), (second, 0)}
    assert len(spark["rows"]) == 8 + (9 - 3)  # first's partition 1 holds every third tuple
    assert result["floodgate_kafka"]["schema"] == spark["schema"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.mark.apache_kafka
def test_a_query_of_a_pattern_reads_the_same_rows_from_both(bootstrap: str) -> None:
    """``subscribePattern``: the topics whose name matches, from earliest. Anchored
    (``^...$``), as the design's whole-name match (Kafka's consumer,
    ``Pattern.matcher(name).matches()``) and Spark's own Admin-based strategy (a match
    anywhere, ``findFirstIn``) read the same topics only then: without the anchors
    Spark's connector reads ``x.compare...`` too, Floodgate's source does not
    (docs/reference/spark-kafka-options.md)."""
    run = uuid.uuid4().hex[:8]
    matching = [f"compare.pattern.{run}.{n}" for n in ("eu", "us")]
    other = f"x.compare.pattern.{run}.eu"
    ensure_topics(bootstrap, {matching[0]: (2, None), matching[1]: (1, None), other: (1, None)})
    for topic, partitions in ((matching[0], 2), (matching[1], 1), (other, 1)):
        _produce(bootstrap, topic, count=7, partitions=partitions)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"^compare\.pattern\.{run}\.[a-z]+$",
        "startingOffsets": "earliest",
        "includeHeaders": "true",
    }
    result = compare(options)
    spark = result["kafka"]
    assert {r["topic"] for r in spark["rows"]} == set(matching)
    assert len(spark["rows"]) == 14
    assert result["floodgate_kafka"]["schema"] == spark["schema"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.mark.apache_kafka
def test_a_batch_query_of_two_topics_reads_the_same_rows_from_both(bootstrap: str) -> None:
    """``spark.read`` of two subscribed topics, ``startingOffsets`` and
    ``endingOffsets`` JSON naming every topic-partition of both."""
    run = uuid.uuid4().hex[:8]
    first, second = f"compare.batch.two.a.{run}", f"compare.batch.two.b.{run}"
    ensure_topics(bootstrap, {first: (2, None), second: (1, None)})
    _produce(bootstrap, first)
    _produce(bootstrap, second, count=9, partitions=1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": f"{first},{second}",
        "startingOffsets": json.dumps({first: {"0": -2, "1": 2}, second: {"0": 1}}),
        "endingOffsets": json.dumps({first: {"0": 10, "1": -1}, second: {"0": 6}}),
        "includeHeaders": "true",
    }
    result = compare(options, mode="batch")
    spark = result["kafka"]
    assert [(r["topic"], r["partition"], r["offset"]) for r in spark["rows"]] == [
        *((first, 0, o) for o in range(10)),
        *((first, 1, o) for o in range(2, 8)),
        *((second, 0, o) for o in range(1, 6)),
    ]
    assert result["floodgate_kafka"]["schema"] == spark["schema"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.mark.apache_kafka
def test_a_batch_query_of_a_pattern_reads_the_same_rows_from_both(bootstrap: str) -> None:
    """``spark.read`` with ``subscribePattern``: every matching topic from earliest to
    latest."""
    run = uuid.uuid4().hex[:8]
    matching = [f"compare.batch.pattern.{run}.{n}" for n in ("eu", "us")]
    ensure_topics(bootstrap, {matching[0]: (2, None), matching[1]: (1, None)})
    _produce(bootstrap, matching[0], count=7)
    _produce(bootstrap, matching[1], count=7, partitions=1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"^compare\.batch\.pattern\.{run}\..*",
        "includeHeaders": "true",
    }
    result = compare(options, mode="batch")
    spark = result["kafka"]
    assert len(spark["rows"]) == 14
    assert result["floodgate_kafka"]["rows"] == spark["rows"]


@pytest.fixture(scope="module")
def loss(bootstrap: str) -> dict[str, Any]:
    """Every data-loss scenario (``connector_compare.loss_scenarios``) on Spark's
    connector and the JVM source, in one session of their own: ``{scenario: {format:
    result}}``. They run on both engines (noida-db deletes topics too)."""
    return compare({}, mode="loss", bootstrap=bootstrap)


def test_a_restart_before_the_first_micro_batch_was_committed_replans_it_from_the_same_offsets(
    loss: dict[str, Any],
) -> None:
    """Micro-batch 0 logged (``offsets/0``) and not committed (``commits/0`` removed, as
    a driver dying in between leaves it), the log start moved past its first offsets
    meanwhile: the restart runs micro-batch 0 again from the first offsets the
    checkpoint keeps (``startingOffsets = earliest`` is not asked again) and finds them
    gone: both fail on the data loss, where a source that planned ``earliest`` again
    would skip offsets 0 and 1 unseen."""
    result = loss["restart_before_commit"]
    for fmt in ("kafka", "floodgate_kafka"):
        assert result[fmt]["first"] == [[0, o] for o in range(5)], (fmt, result[fmt])
        assert "failOnDataLoss" in result[fmt].get("error", ""), (fmt, result[fmt])
    assert "data loss on topic" in result["floodgate_kafka"]["error"]


def test_a_topic_deleted_and_created_again_fails_the_query_naming_the_offsets(
    loss: dict[str, Any],
) -> None:
    """``failOnDataLoss`` (the default): the offsets went back from 5 to 0; both fail,
    naming the partition's old and new offsets."""
    result = loss["topic_created_again_fail"]
    for fmt in ("kafka", "floodgate_kafka"):
        error = result[fmt].get("error", "")
        assert "offset was changed from 5 to 0" in error, (fmt, result[fmt])
        assert "failOnDataLoss" in error, (fmt, error)


def test_a_topic_deleted_and_created_again_is_read_on_without_fail_on_data_loss(
    loss: dict[str, Any],
) -> None:
    """``failOnDataLoss = false``: both go on and read the new topic's tuples."""
    result = loss["topic_created_again_skip"]
    assert sorted(result["kafka"]["offsets"]) == [0, 0, 1, 1, 2, 2, 3, 4]
    assert sorted(result["floodgate_kafka"]["offsets"]) == sorted(result["kafka"]["offsets"])


def test_a_batch_dataframe_collected_twice_reads_latest_at_each_collect(
    loss: dict[str, Any],
) -> None:
    """``spark.read`` with ``endingOffsets`` latest: the second collect reads the two
    tuples written after the first, as Spark's connector does."""
    result = loss["collected_twice"]
    assert result["kafka"]["collects"] == [[0, 1, 2], [0, 1, 2, 3, 4]]
    assert result["floodgate_kafka"] == result["kafka"]


def compare(
    options: dict[str, str],
    *,
    mode: str = "stream",
    formats: list[str] | None = None,
    bootstrap: str | None = None,
) -> dict[str, Any]:
    """Run ``connector_compare`` in a process of its own (the connector's jars on the
    class path of its JVM): per format, the schema and the rows (``formats``: only
    those); mode ``loss``: the data-loss scenarios on ``bootstrap``."""
    jars = jars_spark_lacks(fetch_connector(), Path(pyspark.__file__).parent / "jars")
    request = {
        "options": options,
        "jars": jars,
        "mode": mode,
        "formats": formats,
        "bootstrap": bootstrap,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.spark.connector_compare", json.dumps(request)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-5000:]
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))
