"""The Python source (``floodgate_kafka_python``) reading several topics
(docs/reference/spark-kafka-options.md, "Several topics"): ``subscribe`` of two
topics, ``subscribePattern`` with a topic created after the query started, commits
per topic-partition, a dead letter naming its own topic; and the same rows as
Spark's own ``format("kafka")`` for both, in a process of its own
(:mod:`tests.integration.spark.connector_compare`'s query).

The JVM source's tests of the same behaviour are ``test_jvm_several_topics.py``,
``test_spark_connector_compare.py`` and the JUnit tests."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyspark
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.brokers.spark_connector import fetch_connector, jars_spark_lacks
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import PYTHON_SOURCE_NAME
from pipeline.spark.source import KafkaStreamDataSource
from tests.integration.helpers import wait_until

ROOT = Path(__file__).resolve().parents[3]


def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    """``count`` Kafka records, round-robin over ``partitions``, values naming the
    topic and their number; every other one with a header."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"{topic}/{i}".encode(),
            partition=i % partitions,
            headers=[("n", str(i).encode())] if i % 2 else None,
        )
    assert producer.flush(30) == 0


def _session(spark: Any) -> Any:
    """A session of its own with the source registered (a second registration in one
    session is an error)."""
    session = spark.newSession()
    session.dataSource.register(KafkaStreamDataSource)
    return session


def _start(
    spark: Any, options: dict[str, str], checkpoint: str, seen: list[Any], **trigger: Any
) -> Any:
    """A query of the Python source on ``options`` from ``checkpoint``, each
    micro-batch's rows appended to ``seen`` (``foreachBatch``: the memory sink cannot
    resume from a checkpoint)."""

    def collect(batch: Any, _batch_id: int) -> None:
        seen.extend(batch.collect())

    df = _session(spark).readStream.format(PYTHON_SOURCE_NAME).options(**options).load()
    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
    return (writer.trigger(**trigger) if trigger else writer).start()


def _available_now(spark: Any, options: dict[str, str], checkpoint: str) -> list[Any]:
    """Rows of ``options`` read to the end under Trigger.AvailableNow from
    ``checkpoint``, by topic, partition and offset."""
    seen: list[Any] = []
    query = _start(spark, options, checkpoint, seen, availableNow=True)
    try:
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    return sorted(seen, key=lambda r: (r.topic, r.partition, r.offset))


def _committed(
    bootstrap: str, group: str, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answered = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
        return {(tp.topic, tp.partition): tp.offset for tp in answered}
    finally:
        consumer.close()


def test_two_subscribed_topics_are_read_under_one_budget_and_committed_per_topic_partition(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """Spark hands a micro-batch's end to the source to commit when it plans the next
    one (``MicroBatchExecution.commitSources``): the group holds the first run's ends
    once a second run from the checkpoint plans a micro-batch of a new tuple."""
    run = uuid.uuid4().hex[:8]
    first, second = f"topics.{run}.a", f"topics.{run}.b"
    ensure_topics(bootstrap, {first: (2, None), second: (1, None)})
    _produce(bootstrap, first, 6, 2)
    _produce(bootstrap, second, 5, 1)
    group = f"topics.{run}.group"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": f" {second}, {first},{second} ",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "4",
        "kafka.group.id": group,
    }
    checkpoint = str(tmp_path / "checkpoint")
    rows = _available_now(spark, options, checkpoint)
    assert [(r.topic, r.partition, r.offset) for r in rows] == [
        *((first, p, o) for p in (0, 1) for o in range(3)),
        *((second, 0, o) for o in range(5)),
    ]
    # Each row carries its own topic, and the value written to that topic.
    assert all(bytes(r.value).decode().startswith(f"{r.topic}/") for r in rows)
    ends = {(first, 0): 3, (first, 1): 3, (second, 0): 5}
    _produce(bootstrap, second, 1, 1)
    (more,) = _available_now(spark, options, checkpoint)
    assert (more.topic, more.partition, more.offset) == (second, 0, 5)
    assert _committed(bootstrap, group, list(ends)) == ends


def _deleted(bootstrap: str, before: TopicPartition) -> bool:
    """Delete the records before ``before``; False while its leader is not known."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for future in admin.delete_records([before]).values():
            future.result(30)
    except KafkaException:
        return False
    return True


def test_a_pattern_reads_a_topic_created_after_the_query_started_from_its_earliest_offset(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """A running query (``startingOffsets = latest``) reads every row of a topic created
    since that its pattern matches: it starts at the topic's earliest offset, not at
    its latest. A topic created while the query is stopped and whose first records were
    deleted starts where the broker's log starts (not 0, which would fail the query)."""
    run = uuid.uuid4().hex[:8]
    old, new, later = f"pattern.{run}.old", f"pattern.{run}.new", f"pattern.{run}.later"
    other = f"patternx.{run}.other"  # matches in part only
    ensure_topics(bootstrap, {old: (1, None), other: (1, None)})
    _produce(bootstrap, old, 3, 1)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"pattern\.{run}\..*",
        "startingOffsets": "latest",
        "failOnDataLoss": "true",
    }
    checkpoint = str(tmp_path / "checkpoint")
    rows: list[Any] = []
    query = _start(spark, options, checkpoint, rows)

    def seen() -> list[tuple[str, int, int]]:
        return sorted((r.topic, r.partition, r.offset) for r in rows)

    try:
        query.processAllAvailable()
        assert seen() == []  # started at the latest offsets
        _produce(bootstrap, old, 2, 1)
        ensure_topics(bootstrap, {new: (2, None)})
        _produce(bootstrap, new, 4, 2)
        _produce(bootstrap, other, 2, 1)
        query.processAllAvailable()
        wait_until(lambda: len(seen()) >= 6, 60, "the new topic's rows")
        assert seen() == [
            (new, 0, 0),
            (new, 0, 1),
            (new, 1, 0),
            (new, 1, 1),
            (old, 0, 3),
            (old, 0, 4),
        ]
        assert query.exception() is None
    finally:
        query.stop()

    ensure_topics(bootstrap, {later: (1, None)})
    _produce(bootstrap, later, 8, 1)
    wait_until(lambda: _deleted(bootstrap, TopicPartition(later, 0, 5)), 30, "records deleted")
    again = _available_now(spark, options, checkpoint)
    assert [(r.topic, r.offset) for r in again] == [(later, 5), (later, 6), (later, 7)]


def test_a_pattern_that_matches_nothing_yet_plans_empty_micro_batches_until_it_does(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """No topic matches: the offsets are ``{}`` and no micro-batch reads anything, with
    no error (as Spark); the first topic that comes to match is read from its start."""
    run = uuid.uuid4().hex[:8]
    topic = f"empty.{run}.first"
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": rf"empty\.{run}\..*",
        "startingOffsets": "latest",
    }
    rows: list[Any] = []
    query = _start(spark, options, str(tmp_path / "checkpoint"), rows)
    try:
        query.processAllAvailable()
        assert rows == [] and query.exception() is None
        ensure_topics(bootstrap, {topic: (1, None)})
        _produce(bootstrap, topic, 3, 1)
        query.processAllAvailable()
        assert sorted((r.topic, r.offset) for r in rows) == [(topic, o) for o in range(3)]
    finally:
        query.stop()


def test_a_dead_letter_from_the_second_topic_names_that_topic(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    first, second, dead = f"dead.{run}.a", f"dead.{run}.b", f"dead.{run}.letters"
    ensure_topics(bootstrap, {first: (1, None), second: (2, None), dead: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for f in flights[:3]:
        producer.produce(first, key=b"k", value=codec.encode(f))
    for f in flights[3:5]:
        producer.produce(second, key=b"k", value=codec.encode(f), partition=0)
    where: list[tuple[int, int]] = []
    producer.produce(
        second,
        key=b"bad",
        value=b"this is not avro",
        partition=1,
        on_delivery=lambda _err, msg: where.append((msg.partition(), msg.offset())),
    )
    assert producer.flush(30) == 0
    rows = _available_now(
        spark,
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": f"{first},{second}",
            "startingOffsets": "earliest",
            "schema": "flight",
            "schemas": schemas.as_json(),
            "stream": "flights",
            "query": "q",
            "deadLetterTopic": dead,
        },
        str(tmp_path / "checkpoint"),
    )
    assert [(r.topic, r.carrier, r.flight) for r in rows] == [
        *((first, f["carrier"], f["flight"]) for f in flights[:3]),
        *((second, f["carrier"], f["flight"]) for f in flights[3:5]),
    ]
    (letter,) = read_all(bootstrap, dead)
    headers = {k: v.decode() for k, v in letter.headers()}
    assert headers["floodgate.reason"] == "bad-marker"
    assert headers["floodgate.topic"] == second
    assert (int(headers["floodgate.partition"]), int(headers["floodgate.offset"])) == where[0]
    assert headers["floodgate.stream"] == "flights"
    assert letter.value() == b"this is not avro"


#: The child process of :func:`_compare`: :mod:`tests.integration.spark.connector_compare`'s
#: query on ``format("kafka")`` and the Python source alone (the JVM source's comparison
#: is ``test_spark_connector_compare.py``).
_COMPARE = """
import json, os, sys
from tests.integration.spark.connector_compare import run
from pipeline.spark.session import build_spark_session
from pipeline.spark.source import KafkaStreamDataSource

request = json.loads(sys.argv[1])
os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(request['jars'])} pyspark-shell"
spark = build_spark_session(app_name="floodgate-python-compare", master="local[2]")
try:
    spark.dataSource.register(KafkaStreamDataSource)
    result = {fmt: run(spark, fmt, request["options"]) for fmt in request["formats"]}
finally:
    spark.stop()
print("RESULT " + json.dumps(result), flush=True)
"""


def _compare(options: dict[str, str]) -> dict[str, Any]:
    """Spark's connector and the Python source run on ``options`` in a process of its
    own (the connector's jars on its JVM's class path): per format, the schema and the
    rows, sorted by topic, partition and offset."""
    jars = jars_spark_lacks(fetch_connector(), Path(pyspark.__file__).parent / "jars")
    request = {"options": options, "jars": jars, "formats": ["kafka", PYTHON_SOURCE_NAME]}
    done = subprocess.run(
        [sys.executable, "-c", _COMPARE, json.dumps(request)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-5000:]
    result = dict(json.loads(lines[-1].removeprefix("RESULT ")))
    for read in result.values():
        read["rows"].sort(key=lambda r: (r["topic"], r["partition"], r["offset"]))
    return result


@pytest.mark.apache_kafka
def test_two_topics_and_a_pattern_read_the_same_rows_as_sparks_connector(
    bootstrap: str,
) -> None:
    run = uuid.uuid4().hex[:8]
    first, second = f"compare.{run}.a", f"compare.{run}.b"
    ensure_topics(bootstrap, {first: (2, None), second: (1, None), f"comparex.{run}.c": (1, None)})
    _produce(bootstrap, first, 9, 2)
    _produce(bootstrap, second, 4, 1)
    _produce(bootstrap, f"comparex.{run}.c", 2, 1)
    common = {
        "kafka.bootstrap.servers": bootstrap,
        "maxOffsetsPerTrigger": "5",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
    }
    subscribed = _compare(
        {
            **common,
            "subscribe": f"{first},{second}",
            "startingOffsets": json.dumps({first: {"0": -2, "1": 1}, second: {"0": -2}}),
        }
    )
    spark = subscribed["kafka"]
    assert len(spark["rows"]) == 9 + 4 - 1  # the first topic's partition 1 from offset 1
    assert subscribed[PYTHON_SOURCE_NAME] == spark
    matched = _compare(
        {**common, "subscribePattern": rf"compare\.{run}\..*", "startingOffsets": "earliest"}
    )
    assert len(matched["kafka"]["rows"]) == 9 + 4
    assert matched[PYTHON_SOURCE_NAME] == matched["kafka"]
