"""The JVM source's task metrics (docs/spark-source.md, "Source metrics"): what the
tasks of a micro-batch count is in the scan node's SQL metrics, as Spark's SQL tab
shows them, summed over the tasks by the metric classes the source declares; the
query's progress keeps the planning's metrics (lag, Spark's offsets behind latest)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import wait_until

#: The SQL tab's name of each task metric (its description) by the metric's name.
SHOWN_AS = {
    "rowsRead": "rows read",
    "deadLettered": "tuples sent to the dead-letter topic",
    "sweptRead": "tuples read back from swept BLOBs",
    "offsetOutOfRange": "estimated number of fetched offsets out of range",
    "dataLoss": "number of data loss error",
}


def status_store(spark: Any) -> Any:
    """Spark's SQL status store (what the SQL tab shows)."""
    return spark._jsparkSession.sharedState().statusStore()


#: The newest SQL executions walked for a query's: a micro-batch is one, and a whole
#: test run leaves up to Spark's retained 1 000 in the shared session's store.
NEWEST = 200


def last_execution(spark: Any) -> int:
    """The id of the newest SQL execution in Spark's status store, -1 for none."""
    store = status_store(spark)
    count = int(store.executionsCount())
    convert = spark._jvm.scala.jdk.javaapi.CollectionConverters
    newest = list(convert.asJava(store.executionsList(max(0, count - 1), 1))) if count else []
    return int(newest[0].executionId()) if newest else -1


def scan_metrics(spark: Any, topic: str, after: int) -> dict[str, int]:
    """The task metrics of the scans of ``topic`` in Spark's SQL status store (what the
    SQL tab shows), summed over the SQL executions (the micro-batches) that ran one,
    by metric name; only the executions newer than ``after`` (:func:`last_execution`
    before the query) are walked, not the session's earlier ones."""
    jvm = spark._jvm
    store = status_store(spark)
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    names = {shown: name for name, shown in SHOWN_AS.items()}
    out = dict.fromkeys(SHOWN_AS, 0)
    count = int(store.executionsCount())
    newest = convert.asJava(store.executionsList(max(0, count - NEWEST), NEWEST))
    for execution in [e for e in newest if int(e.executionId()) > after]:
        values = dict(convert.asJava(store.executionMetrics(execution.executionId())).items())
        for node in convert.asJava(store.planGraph(execution.executionId()).allNodes()):
            if f"floodgate_kafka[{topic}]" not in node.desc():
                continue
            for metric in convert.asJava(node.metrics()):
                name = names.get(metric.name())
                if name is not None and metric.accumulatorId() in values:
                    out[name] += int(values[metric.accumulatorId()])
    return out


def test_a_micro_batchs_task_counts_are_the_scans_sql_metrics(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead = f"taskmetrics.{run}", f"taskmetrics.{run}.dead"
    ensure_topics(bootstrap, {topic: (2, None), dead: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, flight in enumerate(flights[:5]):
        producer.produce(topic, value=codec.encode(flight), partition=i % 2)
    producer.produce(topic, value=b"this is not avro", partition=1)
    assert producer.flush(30) == 0
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "deadLetterTopic": dead,
    }
    before = last_execution(spark)
    query = (
        spark.readStream.format(SOURCE_NAME)
        .options(**options)
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None

    expected = {
        "rowsRead": 5,
        "deadLettered": 1,
        "sweptRead": 0,
        "offsetOutOfRange": 0,
        "dataLoss": 0,
    }
    # Spark's status store takes the tasks' values from its listener bus, after the query.
    wait_until(
        lambda: scan_metrics(spark, topic, before) == expected,
        60,
        f"the scan's SQL metrics {expected}",
    )
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(progress) == 1, query.recentProgress
    metrics = progress[0]["sources"][0]["metrics"]
    assert {k: metrics[k] for k in ("lag", "offsetOutOfRange", "dataLoss")} == {
        "lag": "0",
        "offsetOutOfRange": "0",
        "dataLoss": "0",
    }
    assert metrics["maxOffsetsBehindLatest"] == "0"
    assert "rowsRead" not in metrics
