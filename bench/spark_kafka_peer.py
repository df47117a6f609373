"""The Spark-native peer of ``bench/bench_spark_kafka.py``: the two queries of
``conf/flights.toml`` (or the pass-through's one, ``--workload passthrough``) written
the way a PySpark user would, with Spark's own JVM Kafka source and sink and its Avro
module.

Runs in ``bench/.venv-spark-kafka`` (``pyspark==4.2.0``, the newest PySpark whose Kafka
connector Maven Central serves; ``bench/requirements-spark-kafka.txt``), never in the
project's ``.venv``: it imports PySpark, confluent-kafka and the standard library only,
not Floodgate. The connector's jars (``pipeline/brokers/spark_connector/pom.xml``) come
in ``--jars``.

Per query, as a user would write it:

* **input**: ``spark.readStream.format("kafka")`` on the flights topic,
  ``startingOffsets=earliest``, ``maxOffsetsPerTrigger`` = Floodgate's
  ``max_tuples_per_trigger``; Floodgate writes Avro *single-object encoding* (``C3 01``,
  an 8-byte schema fingerprint, then the Avro body), which ``from_avro`` does not read,
  so the 10-byte header is cut off in SQL (``substring(value, 11)``) and the body
  decoded with ``from_avro`` and the writer schema's JSON; ``event_time`` is
  ``time_hour``, with the group's watermark; the query's SQL from ``conf/flights.toml``
  over that view; the query's output mode (``update`` for the aggregations,
  ``append`` for the pass-through), ``Trigger.AvailableNow``.
* **output**, each output tuple encoded in the JVM with ``to_avro`` (the output
  schema's fields, in its order, from the columns of those names) behind the output
  stream's single-object header (the fingerprint of the schema the benchmark sends),
  keyed like Floodgate's (``origin|hour start in epoch ms``, ``carrier|day in epoch
  days``; the pass-through like the input, ``carrier|flight|time_hour in epoch ms``), so
  that one reception reads both systems' output alike; one of:

  - ``kafka_sink``: Spark's Kafka sink, ``writeStream.format("kafka")`` (at least
    once: a replayed micro-batch is written again);
  - ``foreach_batch``: ``foreachBatch`` writing each micro-batch in **one Kafka
    transaction** (confluent-kafka transactional producer), with the batch's input end
    offsets (read from the checkpoint's offset log) committed to a consumer group in
    the same transaction (``send_offsets_to_transaction``) with the batch id as
    metadata, and a batch already committed skipped: effectively once for
    ``read_committed`` readers, as Floodgate's sink, without its output stream
    queue bound or its broker-restart handling.

Protocol (the benchmark drives this process): one JSON command a line on stdin; one
JSON answer a line on stdout, behind the marker ``@@bench`` (the JVM may print on
stdout too). Commands: ``prepare`` (a run's settings: topics, schemas, SQL, output
modes, variant, checkpoint), ``run`` (start the queries, wait until each has processed
all input available now and terminated: answers rows read, micro-batches and
the seconds of each of Spark's micro-batch phases per query), ``stop`` (stop the
queries still running and drop the run's producers), ``quit``.

Latency mode (``bench/bench_latency.py``): ``start`` (``trigger_ms``: start both
queries with ``Trigger.ProcessingTime(trigger_ms)``, 0 as fast as possible, and
answer once each has run its first trigger on the empty topic), then, once the
benchmark has produced everything, ``drain`` (``processAllAvailable`` on both:
answers the figures of ``run`` and, per micro-batch with data, its rows and
``durationMs`` phases in ms), then ``stop``.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MARKER = "@@bench "
#: Seconds a transaction step may take.
TRANSACTION_TIMEOUT_S = 60.0


def answer(**fields: Any) -> None:
    """Write one answer line for the benchmark."""
    sys.stdout.write(MARKER + json.dumps(fields) + "\n")
    sys.stdout.flush()


def start_spark(conf: dict[str, str], jars: list[str]) -> Any:
    """A ``local[2]`` SparkSession with ``conf`` (the same settings Floodgate's
    session has) and the connector's ``jars``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("bench-spark-kafka-peer").master("local[2]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def end_offsets(checkpoint: str, batch_id: int) -> dict[str, dict[str, int]]:
    """The input end offsets of micro-batch ``batch_id`` from the query's offset log:
    ``{topic: {partition: offset}}`` (the Kafka source's offsets, the file's third line)."""
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    return json.loads(lines[2])


class TransactionalWriter:
    """``foreachBatch`` function: a micro-batch's output and its input end offsets in
    one Kafka transaction; a batch whose commit the consumer group already holds is
    skipped (its state stores still commit it, through the ``noop`` sink).

    Args:
        bootstrap: the Kafka cluster.
        topic: the output topic.
        group_id: the consumer group that holds the committed input offsets.
        checkpoint: the query's checkpoint location (its offset log is read).
    """

    def __init__(self, bootstrap: str, topic: str, group_id: str, checkpoint: str) -> None:
        from confluent_kafka import Consumer, Producer

        self.topic = topic
        self.checkpoint = checkpoint
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"{group_id}.sink",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(TRANSACTION_TIMEOUT_S)
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False}
        )
        self.written = 0

    def __call__(self, df: Any, batch_id: int) -> None:
        from confluent_kafka import TopicPartition

        offsets = [
            TopicPartition(topic, int(p), int(o))
            for topic, per_partition in end_offsets(self.checkpoint, batch_id).items()
            for p, o in sorted(per_partition.items(), key=lambda kv: int(kv[0]))
        ]
        committed = self.consumer.committed(
            [TopicPartition(tp.topic, tp.partition) for tp in offsets], timeout=30
        )
        done = [int(json.loads(tp.metadata or "{}").get("batch", -1)) for tp in committed]
        if done and all(b >= batch_id for b in done):
            df.write.format("noop").mode("append").save()  # replayed: state only
            return
        rows = df.collect()
        marker = json.dumps({"batch": batch_id})
        self.producer.begin_transaction()
        for i, row in enumerate(rows):
            while True:
                try:
                    self.producer.produce(self.topic, key=row.key.encode(), value=bytes(row.value))
                    break
                except BufferError:
                    self.producer.poll(0.05)
            if i % 10_000 == 0:
                self.producer.poll(0)
        self.producer.send_offsets_to_transaction(
            [TopicPartition(tp.topic, tp.partition, tp.offset, metadata=marker) for tp in offsets],
            self.consumer.consumer_group_metadata(),
            TRANSACTION_TIMEOUT_S,
        )
        self.producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        self.written += len(rows)

    def close(self) -> None:
        self.producer.flush(10)
        self.consumer.close()


class Peer:
    """The peer's queries over one run's settings (the ``prepare`` command)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.settings: dict[str, Any] = {}
        self.writers: list[TransactionalWriter] = []
        self.queries: dict[str, Any] = {}

    def input_view(self, query: str) -> Any:
        """The flights as a user reads them with Spark's Kafka source and ``from_avro``,
        with ``event_time`` and the watermark; registered as the view ``flights``."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        s = self.settings
        df = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", s["bootstrap"])
            .option("subscribe", s["topic"])
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(s["max_offsets_per_trigger"]))
            .load()
        )
        flights = (
            df.select(from_avro(F.expr("substring(value, 11)"), s["input_schema"]).alias("f"))
            .select("f.*")
            .withColumn("event_time", F.col(s["timestamp_field"]))
            .withWatermark("event_time", s["watermark"])
        )
        flights.createOrReplaceTempView(s["view"])
        return flights

    def encoded(self, query: str) -> Any:
        """The query's output as ``key`` (string) and ``value`` (single-object Avro)."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import to_avro

        out = self.settings["queries"][query]
        result = self.spark.sql(out["sql"])
        schema = json.loads(out["schema"])
        columns = [f["name"] for f in schema["fields"]]
        header = bytes.fromhex(out["header_hex"])
        return result.select(
            F.expr(out["key_sql"]).alias("key"),
            F.concat(F.lit(header), to_avro(F.struct(*columns), out["schema"])).alias("value"),
        )

    def start_queries(self, trigger_ms: int | None) -> dict[str, Any]:
        """Start the queries: ``Trigger.AvailableNow`` for ``None``, else
        ``Trigger.ProcessingTime(trigger_ms)`` (0: as fast as possible).

        Returns:
            ``{query name: StreamingQuery}``.
        """
        s = self.settings
        queries = {}
        for name, out in s["queries"].items():
            checkpoint = str(Path(s["checkpoint"]) / name)
            self.input_view(name)
            writer = (
                self.encoded(name)
                .writeStream.queryName(name)
                .outputMode(out.get("output_mode", "update"))
                .option("checkpointLocation", checkpoint)
            )
            if trigger_ms is None:
                writer = writer.trigger(availableNow=True)
            else:
                writer = writer.trigger(processingTime=f"{int(trigger_ms)} milliseconds")
            if s["variant"] == "kafka_sink":
                writer = (
                    writer.format("kafka")
                    .option("kafka.bootstrap.servers", s["bootstrap"])
                    .option("topic", out["topic"])
                )
            else:
                sink = TransactionalWriter(
                    s["bootstrap"], out["topic"], f"{s['group']}.{name}", checkpoint
                )
                self.writers.append(sink)
                writer = writer.foreachBatch(sink)
            queries[name] = writer.start()
        return queries

    @staticmethod
    def figures(queries: dict[str, Any], per_batch: bool = False) -> dict[str, Any]:
        """Per query, from its progress: ``input_rows`` (tuples), ``batches``
        (micro-batches with data), ``durations_s`` (each ``durationMs`` phase in
        seconds, summed over micro-batches) and, with ``per_batch``, ``per_batch``: a
        ``{"rows": tuples, "ms": {phase: ms}}`` per micro-batch with data, in order
        (as many as ``spark.sql.streaming.numRecentProgressUpdates`` keeps)."""
        out = {}
        for name, q in queries.items():
            progress = [p for p in q.recentProgress if p is not None]
            durations: dict[str, float] = {}
            for p in progress:
                for phase, ms in p["durationMs"].items():
                    durations[phase] = durations.get(phase, 0.0) + ms / 1000
            out[name] = {
                "input_rows": sum(int(p["numInputRows"]) for p in progress),
                "batches": sum(1 for p in progress if int(p["numInputRows"]) > 0),
                "durations_s": durations,
            }
            if per_batch:
                out[name]["per_batch"] = [
                    {
                        "rows": int(p["numInputRows"]),
                        "ms": {k: int(v) for k, v in dict(p["durationMs"]).items()},
                    }
                    for p in progress
                    if int(p["numInputRows"]) > 0
                ]
        return out

    def run(self) -> dict[str, Any]:
        """Start the queries, wait until they have processed all input and terminated."""
        started = time.monotonic()
        queries = self.start_queries(None)
        start_s = time.monotonic() - started
        for q in queries.values():
            q.awaitTermination()
        run_s = time.monotonic() - started
        return {"start_s": start_s, "run_s": run_s, "queries": self.figures(queries)}

    def start(self, trigger_ms: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Latency mode: start both queries with ``Trigger.ProcessingTime(trigger_ms)``
        and wait (at most ``timeout_s``) until each has run its first trigger, so that
        producing starts against running queries, as Floodgate's demo does.

        Returns:
            ``start_s``: seconds until then.

        Raises:
            RuntimeError: a query failed or did not get that far in time.
        """
        started = time.monotonic()
        self.queries = self.start_queries(trigger_ms)
        deadline = started + timeout_s
        while True:
            for name, q in self.queries.items():
                if q.exception() is not None:
                    raise RuntimeError(f"query {name} failed: {q.exception()}")
            waiting = "Waiting for data to arrive"
            if all(
                q.lastProgress is not None or q.status.get("message") == waiting
                for q in self.queries.values()
            ):
                return {"start_s": time.monotonic() - started}
            if time.monotonic() > deadline:
                raise RuntimeError(f"the queries did not run a first trigger in {timeout_s} s")
            time.sleep(0.1)

    def drain(self) -> dict[str, Any]:
        """Latency mode: wait until both queries have processed all input available
        now (``processAllAvailable``); answer their figures, per micro-batch too."""
        started = time.monotonic()
        for q in self.queries.values():
            q.processAllAvailable()
        return {
            "drain_s": time.monotonic() - started,
            "queries": self.figures(self.queries, per_batch=True),
        }

    def stop(self) -> None:
        for q in self.spark.streams.active:
            q.stop()
        for w in self.writers:
            w.close()
        self.writers = []
        self.queries = {}


def main() -> None:
    hello = json.loads(sys.stdin.readline())
    spark = start_spark(hello["conf"], hello["jars"])
    import pyspark

    answer(
        ready=True,
        versions={
            "pyspark": pyspark.__version__,
            "java": str(spark.sparkContext._jvm.java.lang.System.getProperty("java.version")),
        },
    )
    peer = Peer(spark)
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["cmd"] == "prepare":
                peer.settings = command
                answer(ok=True)
            elif command["cmd"] == "run":
                answer(ok=True, **peer.run())
            elif command["cmd"] == "start":
                answer(ok=True, **peer.start(int(command["trigger_ms"])))
            elif command["cmd"] == "drain":
                answer(ok=True, **peer.drain())
            elif command["cmd"] == "stop":
                peer.stop()
                answer(ok=True)
            elif command["cmd"] == "quit":
                break
        except Exception as exc:  # reported to the benchmark, which fails the run
            answer(ok=False, error=f"{exc!r}", traceback=traceback.format_exc()[-4000:])
    spark.stop()


if __name__ == "__main__":
    main()
