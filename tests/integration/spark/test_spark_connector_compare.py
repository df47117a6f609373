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

Marked ``apache_kafka``: it runs on the second CI pass, on Apache Kafka's own broker
(the reference), where Maven -- which fetches the connector on first use into
``~/.cache/floodgate/spark-kafka-4.2.0`` -- is there for the broker's jars anyway.

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


def _produce(bootstrap: str, topic: str) -> None:
    """Tuples as producers write them: keyed and not, with headers and without, a
    header without a value, a tombstone (no value); two partitions, uneven."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(23):
        producer.produce(
            topic,
            key=None if i % 7 == 3 else f"key-{i}".encode(),
            value=None if i == 11 else f"value-{i}".encode(),
            partition=0 if i % 3 else 1,
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
    for source in ("floodgate_kafka", "floodgate_kafka_python"):
        assert result[source]["schema"] == spark["schema"], source
        assert result[source]["rows"] == spark["rows"], source


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


def compare(options: dict[str, str], *, mode: str = "stream") -> dict[str, Any]:
    """Run ``connector_compare`` in a process of its own (the connector's jars on the
    class path of its JVM): per format, the schema and the rows."""
    jars = jars_spark_lacks(fetch_connector(), Path(pyspark.__file__).parent / "jars")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.spark.connector_compare",
            json.dumps({"options": options, "jars": jars, "mode": mode}),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-5000:]
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))
