"""One query text run on Spark's own Kafka connector (``format("kafka")``) and on
Floodgate's two sources (``format("floodgate_kafka")``, on the JVM, and
``format("floodgate_kafka_python")``) with the same options, in a
SparkSession of its own: Spark's connector jars must be on the JVM's class path when
it starts (``--jars``), and the test session's JVM started without them.

Run by ``test_spark_connector_compare.py`` as
``python -m tests.integration.spark.connector_compare <request JSON>``; prints one
line, ``RESULT <JSON>``: per format, the source's schema and the query's rows.
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

#: The formats compared: streaming queries, and batch queries (``spark.read``: the JVM
#: source alone; the Python one reads streams only).
FORMATS = ("kafka", "floodgate_kafka", "floodgate_kafka_python")
BATCH_FORMATS = ("kafka", "floodgate_kafka")


def run(spark: Any, fmt: str, options: dict[str, str]) -> dict[str, Any]:
    """``QUERY`` over ``format(fmt)`` with ``options``, run to the end of the topic
    (Trigger.AvailableNow) into a memory table.

    Returns:
        ``{"schema": <the source's schema as DDL>, "rows": [<row as a list>, ...]}``,
        rows by topic, partition and offset.
    """
    df = spark.readStream.format(fmt).options(**options).load()
    df.createOrReplaceTempView("src")
    table = f"compare_{fmt}"
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
        As :func:`run`.
    """
    df = spark.read.format(fmt).options(**options).load()
    df.createOrReplaceTempView("src")
    rows = spark.sql(f"SELECT * FROM ({QUERY}) ORDER BY topic, partition, offset").collect()
    return {
        "schema": df.schema.simpleString(),
        "rows": [json.loads(json.dumps(row.asDict(recursive=True), default=str)) for row in rows],
    }


def main(request: dict[str, Any]) -> dict[str, Any]:
    """Run every format of :data:`FORMATS` (of :data:`BATCH_FORMATS` when
    ``request["mode"]`` is ``batch``; only those of ``request["formats"]`` when it
    names some) with ``request["options"]``; the session's
    JVM starts with ``request["jars"]`` (Spark's connector) given to ``--jars`` in
    ``PYSPARK_SUBMIT_ARGS``, as ``spark-submit --jars`` would: a ``spark.jars`` set
    once the JVM runs does not reach the class path data sources are looked up in."""
    from pipeline.spark.session import build_spark_session
    from pipeline.spark.source import KafkaStreamDataSource

    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(request['jars'])} pyspark-shell"
    spark = build_spark_session(app_name="floodgate-connector-compare", master="local[2]")
    try:
        spark.dataSource.register(KafkaStreamDataSource)
        wanted = request.get("formats")
        if request.get("mode") == "batch":
            formats = [f for f in BATCH_FORMATS if wanted is None or f in wanted]
            return {fmt: run_batch(spark, fmt, request["options"]) for fmt in formats}
        formats = [f for f in FORMATS if wanted is None or f in wanted]
        return {fmt: run(spark, fmt, request["options"]) for fmt in formats}
    finally:
        spark.stop()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
