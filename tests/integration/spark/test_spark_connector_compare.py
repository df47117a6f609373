"""One query text, the same options, two sources: Spark's own Kafka connector
(``format("kafka")``, the JVM connector from Maven Central) and Floodgate's
(``format("floodgate_kafka")``) read the same topic to the same rows.

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
the broker's jars anyway. The data-loss scenarios (a restart before micro-batch 0 was
committed, a topic deleted and created again, a batch DataFrame collected twice) run on
both engines. Every comparison of a run is made in one session (fixture ``compared``):
each test's topics are written first, then one child process reads them all, as a
session costs a JVM's start.

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
import time
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


#: One comparison: ``{"mode": "stream" or "batch", "options": {...}}``, and what its test
#: checks the rows against (``"topics"``).
Case = dict[str, Any]


def _one_query(bootstrap: str, run: str) -> Case:
    topic = f"compare.{run}"
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
    return {"mode": "stream", "options": options}


def _one_batch(bootstrap: str, run: str) -> Case:
    topic = f"compare.batch.{run}"
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
    return {"mode": "batch", "options": options}


def _two_subscribed(bootstrap: str, run: str) -> Case:
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
    return {"mode": "stream", "options": options, "topics": [first, second]}


def _two_assigned(bootstrap: str, run: str) -> Case:
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
    return {"mode": "stream", "options": options, "topics": [first, second]}


def _pattern(bootstrap: str, run: str) -> Case:
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
    return {"mode": "stream", "options": options, "topics": matching}


def _batch_two_topics(bootstrap: str, run: str) -> Case:
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
    return {"mode": "batch", "options": options, "topics": [first, second]}


def _batch_pattern(bootstrap: str, run: str) -> Case:
    matching = [f"compare.batch.pattern.{run}.{n}" for n in ("eu", "us")]
    ensure_topics(bootstrap, {matching[0]: (2, None), matching[1]: (1, None)})
    _produce(bootstrap, matching[0], count=7)
    _produce(bootstrap, matching[1], count=7, partitions=1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"^compare\.batch\.pattern\.{run}\..*",
        "includeHeaders": "true",
    }
    return {"mode": "batch", "options": options}


def _produce_timed(bootstrap: str, topic: str, base_ms: int) -> None:
    """Twenty tuples over two partitions, tuple ``i`` at Kafka timestamp ``base_ms + 1000
    * i`` (CreateTime): partition 0 holds the even ones, partition 1 the odd ones."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(
            topic,
            key=f"key-{i}".encode(),
            value=f"value-{i}".encode(),
            partition=i % 2,
            timestamp=base_ms + 1000 * i,
        )
    assert producer.flush(30) == 0


def _option_cases(bootstrap: str, run: str) -> dict[str, Case]:
    """Spark's options by timestamp and of range splitting: a topic of two partitions,
    tuples one second apart (:func:`_produce_timed`) from ``base`` (each case's
    ``"base"``)."""
    topic = f"compare.options.{run}"
    ensure_topics(bootstrap, {topic: (2, None)})
    # a minute back: timestamps older than the topic's retention would be deleted at once
    base = int(time.time() * 1000) - 60_000
    _produce_timed(bootstrap, topic, base)
    common = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "includeHeaders": "true"}
    return {
        # tuple 5 (partition 1) on: partition 0 from tuple 6, partition 1 from tuple 5
        "starting_timestamp": {
            "mode": "stream",
            "options": {**common, "startingTimestamp": str(base + 5000), "minPartitions": "5"},
        },
        # partition 0 from tuple 12; partition 1 past its last tuple: latest (nothing)
        "by_timestamp_latest": {
            "mode": "stream",
            "options": {
                **common,
                "startingOffsetsByTimestamp": json.dumps(
                    {topic: {"0": base + 11_500, "1": base + 60_000}}
                ),
                "startingOffsetsByTimestampStrategy": "latest",
                "startingOffsets": "earliest",  # hidden by the timestamps, as in Spark
            },
        },
        # tuples 2 to 14 (ending timestamp excluded), parts of at most 3 offsets
        "batch_timestamps": {
            "mode": "batch",
            "options": {
                **common,
                "startingTimestamp": str(base + 2000),
                "endingTimestamp": str(base + 15_000),
                "maxRecordsPerPartition": "3",
            },
        },
        "batch_min_partitions": {
            "mode": "batch",
            "options": {**common, "startingOffsets": "earliest", "minPartitions": "7"},
        },
    }


#: The row comparisons, by case name: each writes its topics and returns its case.
ROW_CASES = {
    "one_query": _one_query,
    "one_batch": _one_batch,
    "two_subscribed": _two_subscribed,
    "two_assigned": _two_assigned,
    "pattern": _pattern,
    "batch_two_topics": _batch_two_topics,
    "batch_pattern": _batch_pattern,
}


@pytest.fixture(scope="module")
def compared(bootstrap: str, kafka_engine_name: str) -> dict[str, Any]:
    """Every comparison of this module in one session of Spark's connector and the JVM
    source: ``{"cases": {case: {format: result}}, "loss": {scenario: {format: result}},
    "given": {case: case}}``. The row and option comparisons on Apache Kafka (the
    reference; their tests are marked ``apache_kafka``), the data-loss scenarios on
    both engines (noida-db deletes topics and records too)."""
    given: dict[str, Case] = {}
    if kafka_engine_name == "apache-kafka":
        run = uuid.uuid4().hex[:8]
        given = {name: make(bootstrap, run) for name, make in ROW_CASES.items()}
        given.update(_option_cases(bootstrap, run))
    out = compare(given, bootstrap=bootstrap)
    out["given"] = given
    return out


def _same_rows(compared: dict[str, Any], name: str) -> dict[str, Any]:
    """Spark's result of case ``name``, after checking the JVM source's schema and rows
    are the same."""
    result = compared["cases"][name]
    spark = result["kafka"]
    assert "error" not in spark, spark["error"]
    assert result["floodgate_kafka"].get("schema") == spark["schema"], result["floodgate_kafka"]
    assert result["floodgate_kafka"]["rows"] == spark["rows"]
    return dict(spark)


@pytest.mark.apache_kafka
def test_one_query_reads_the_same_rows_from_sparks_connector_and_floodgates_source(
    compared: dict[str, Any],
) -> None:
    spark = _same_rows(compared, "one_query")
    assert len(spark["rows"]) == 23 - 2  # partition 1 from offset 2


@pytest.mark.apache_kafka
def test_one_batch_query_reads_the_same_rows_from_sparks_connector_and_the_jvm_source(
    compared: dict[str, Any],
) -> None:
    """``spark.read`` with Spark's ``startingOffsets`` and ``endingOffsets`` JSON (-2
    earliest, -1 latest, given offsets), as Spark's guide backfills a topic."""
    spark = _same_rows(compared, "one_batch")
    assert [(r["partition"], r["offset"]) for r in spark["rows"]] == [
        *((0, o) for o in range(10)),
        *((1, o) for o in range(2, 8)),
    ]


@pytest.mark.apache_kafka
def test_a_query_of_two_subscribed_topics_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``subscribe`` of two topics, ``startingOffsets`` JSON over both (Spark: every
    topic-partition named) and one ``maxOffsetsPerTrigger`` budget over the three
    topic-partitions; each row's ``topic`` is its own."""
    first, second = compared["given"]["two_subscribed"]["topics"]
    spark = _same_rows(compared, "two_subscribed")
    assert {r["topic"] for r in spark["rows"]} == {first, second}
    assert len(spark["rows"]) == (23 - 2) + (9 - 4)


@pytest.mark.apache_kafka
def test_a_query_of_partitions_of_two_topics_assigned_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``assign`` of partitions of two topics, ``startingOffsets`` naming exactly them."""
    first, second = compared["given"]["two_assigned"]["topics"]
    spark = _same_rows(compared, "two_assigned")
    assert {(r["topic"], r["partition"]) for r in spark["rows"]} == {(first, 1), (second, 0)}
    assert len(spark["rows"]) == 8 + (9 - 3)  # first's partition 1 holds every third tuple


@pytest.mark.apache_kafka
def test_a_query_of_a_pattern_reads_the_same_rows_from_both(compared: dict[str, Any]) -> None:
    """``subscribePattern``: the topics whose name matches, from earliest. Both
    connectors find the pattern anywhere in a topic's name (Spark's Admin-based
    strategy's ``findFirstIn``, Floodgate's ``Matcher.find()``), so both would read
    ``x.compare...`` too without the anchors (``^...$``), which keep it out
    (docs/reference/spark-kafka-options.md)."""
    spark = _same_rows(compared, "pattern")
    assert {r["topic"] for r in spark["rows"]} == set(compared["given"]["pattern"]["topics"])
    assert len(spark["rows"]) == 14


@pytest.mark.apache_kafka
def test_a_batch_query_of_two_topics_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``spark.read`` of two subscribed topics, ``startingOffsets`` and
    ``endingOffsets`` JSON naming every topic-partition of both."""
    first, second = compared["given"]["batch_two_topics"]["topics"]
    spark = _same_rows(compared, "batch_two_topics")
    assert [(r["topic"], r["partition"], r["offset"]) for r in spark["rows"]] == [
        *((first, 0, o) for o in range(10)),
        *((first, 1, o) for o in range(2, 8)),
        *((second, 0, o) for o in range(1, 6)),
    ]


@pytest.mark.apache_kafka
def test_a_batch_query_of_a_pattern_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``spark.read`` with ``subscribePattern``: every matching topic from earliest to
    latest."""
    spark = _same_rows(compared, "batch_pattern")
    assert len(spark["rows"]) == 14


def _read(result: dict[str, Any]) -> list[tuple[int, str]]:
    """``(partition, value)`` of each row, in the order read; the query's error fails."""
    assert "error" not in result, result["error"]
    return [(r["partition"], r["value"]) for r in result["rows"]]


@pytest.mark.apache_kafka
def test_starting_timestamp_reads_the_same_rows_from_both(compared: dict[str, Any]) -> None:
    """``startingTimestamp`` (with ``minPartitions`` splitting the ranges): every
    partition from its first tuple at or after it."""
    result = compared["cases"]["starting_timestamp"]
    assert sorted(v for _, v in _read(result["kafka"])) == sorted(
        f"value-{i}" for i in range(5, 20)
    )
    assert _read(result["floodgate_kafka"]) == _read(result["kafka"])
    assert result["floodgate_kafka"]["rows"] == result["kafka"]["rows"]


@pytest.mark.apache_kafka
def test_starting_offsets_by_timestamp_with_strategy_latest_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``startingOffsetsByTimestamp`` wins over ``startingOffsets``; a partition with no
    tuple at or after its timestamp starts at latest
    (``startingOffsetsByTimestampStrategy = latest``)."""
    result = compared["cases"]["by_timestamp_latest"]
    assert _read(result["kafka"]) == [(0, f"value-{i}") for i in range(12, 20, 2)]
    assert _read(result["floodgate_kafka"]) == _read(result["kafka"])
    assert result["floodgate_kafka"]["rows"] == result["kafka"]["rows"]


@pytest.mark.apache_kafka
def test_a_batch_between_two_timestamps_split_by_max_records_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``spark.read`` from ``startingTimestamp`` to ``endingTimestamp`` (the first offset
    at or after it, not read), ranges of at most ``maxRecordsPerPartition`` offsets."""
    result = compared["cases"]["batch_timestamps"]
    assert sorted(v for _, v in _read(result["kafka"])) == sorted(
        f"value-{i}" for i in range(2, 15)
    )
    assert _read(result["floodgate_kafka"]) == _read(result["kafka"])
    assert result["floodgate_kafka"]["rows"] == result["kafka"]["rows"]
    # partition 0 offsets [1, 8): 3 parts; partition 1 [1, 7): 2 parts
    assert result["kafka"]["tasks"] == 5
    assert result["floodgate_kafka"]["tasks"] == result["kafka"]["tasks"]


@pytest.mark.apache_kafka
def test_a_batch_split_by_min_partitions_reads_the_same_rows_from_both(
    compared: dict[str, Any],
) -> None:
    """``spark.read`` of the whole topic with ``minPartitions`` above its partitions."""
    result = compared["cases"]["batch_min_partitions"]
    assert len(_read(result["kafka"])) == 20
    assert _read(result["floodgate_kafka"]) == _read(result["kafka"])
    assert result["floodgate_kafka"]["rows"] == result["kafka"]["rows"]
    # two ranges of 10 offsets, each round(10 / 20 * 7) = 4 parts
    assert result["kafka"]["tasks"] == 8
    assert result["floodgate_kafka"]["tasks"] == result["kafka"]["tasks"]


def test_a_restart_before_the_first_micro_batch_was_committed_replans_it_from_the_same_offsets(
    compared: dict[str, Any],
) -> None:
    """Micro-batch 0 logged (``offsets/0``) and not committed (``commits/0`` removed, as
    a driver dying in between leaves it), the log start moved past its first offsets
    meanwhile: the restart runs micro-batch 0 again from the first offsets the
    checkpoint keeps (``startingOffsets = earliest`` is not asked again) and finds them
    gone: both fail on the data loss, where a source that planned ``earliest`` again
    would skip offsets 0 and 1 unseen."""
    result = compared["loss"]["restart_before_commit"]
    for fmt in ("kafka", "floodgate_kafka"):
        assert result[fmt]["first"] == [[0, o] for o in range(5)], (fmt, result[fmt])
        assert "failOnDataLoss" in result[fmt].get("error", ""), (fmt, result[fmt])
    assert "data loss on topic" in result["floodgate_kafka"]["error"]


def test_a_topic_deleted_and_created_again_fails_the_query_naming_the_offsets(
    compared: dict[str, Any],
) -> None:
    """``failOnDataLoss`` (the default): the offsets went back from 5 to 0; both fail,
    naming the partition's old and new offsets."""
    result = compared["loss"]["topic_created_again_fail"]
    for fmt in ("kafka", "floodgate_kafka"):
        error = result[fmt].get("error", "")
        assert "offset was changed from 5 to 0" in error, (fmt, result[fmt])
        assert "failOnDataLoss" in error, (fmt, error)


def test_a_topic_deleted_and_created_again_is_read_on_without_fail_on_data_loss(
    compared: dict[str, Any],
) -> None:
    """``failOnDataLoss = false``: both go on and read the new topic's tuples."""
    result = compared["loss"]["topic_created_again_skip"]
    assert sorted(result["kafka"]["offsets"]) == [0, 0, 1, 1, 2, 2, 3, 4]
    assert sorted(result["floodgate_kafka"]["offsets"]) == sorted(result["kafka"]["offsets"])


def test_a_batch_dataframe_collected_twice_reads_latest_at_each_collect(
    compared: dict[str, Any],
) -> None:
    """``spark.read`` with ``endingOffsets`` latest: the second collect reads the two
    tuples written after the first, as Spark's connector does."""
    result = compared["loss"]["collected_twice"]
    assert result["kafka"]["collects"] == [[0, 1, 2], [0, 1, 2, 3, 4]]
    assert result["floodgate_kafka"] == result["kafka"]


def compare(cases: dict[str, Case], *, bootstrap: str | None = None) -> dict[str, Any]:
    """Run ``connector_compare`` in a process of its own (the connector's jars on the
    class path of its JVM): each of ``cases`` (``connector_compare.cases``) and, with
    ``bootstrap``, the data-loss scenarios on it (``connector_compare.loss_scenarios``)."""
    jars = jars_spark_lacks(fetch_connector(), Path(pyspark.__file__).parent / "jars")
    request = {"jars": jars, "bootstrap": bootstrap, "cases": cases}
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.spark.connector_compare", json.dumps(request)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-5000:]
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))
