"""The JVM source (``jvm/``, ``io.floodgate.spark.FloodgateKafkaProvider``) reads a stream
in the Confluent wire format against a real Schema Registry: tuples Floodgate's
``ConfluentCodec`` wrote, and tuples an older writer schema of the subject wrote, read as
the stream's rows; a tuple that is not Confluent-framed and one naming an id the
registry does not know go to the dead-letter topic with their reasons and original bytes;
a registry that does not answer fails the query and dead-letters nothing.

It runs in the test session's shared SparkSession, which loads the package's jar
(:func:`pipeline.spark.session.build_spark_session`), in a session of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.brokers.engines import free_port
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import epoch_ms
from pipeline.serde.confluent import stream_codec
from pipeline.serde.schemas import SchemaRepository

#: Fields an older writer schema of the stream lacks (nullable in the stream's schema,
#: default null: Avro's resolution fills them in).
DROPPED = ("tailnum", "air_time")

#: The query run over the source's rows (time as epoch milliseconds, so no
#: time zone is involved).
QUERY = """
SELECT carrier, flight, origin, tailnum, unix_millis(time_hour) AS time_hour_ms,
       _partition, _offset
FROM src
"""


def _identity(row: dict[str, Any]) -> tuple[Any, ...]:
    when = row["time_hour_ms"] if "time_hour_ms" in row else row["time_hour"]
    when_ms = when if isinstance(when, int) else epoch_ms(when)
    return row["carrier"], row["flight"], row["origin"], row["tailnum"], when_ms


def _older(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "fields": [f for f in schema["fields"] if f["name"] not in DROPPED]}


def read_with_jvm_source(shared: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Run :data:`QUERY` over the JVM source to the end of the topic (Trigger.AvailableNow)
    in a session of its own of the shared SparkSession ``shared``: once with
    ``request["options"]``, once with ``request["outage_options"]``.

    Returns:
        ``{"rows": [<row>, ...] by partition and offset, "outage": <the second query's
        error, or None>}``, through JSON as a driver would report them.
    """
    from pipeline.spark.options import SOURCE_NAME

    spark = shared.newSession()

    def run(name: str, options: dict[str, str]) -> str | None:
        df = spark.readStream.format(SOURCE_NAME).options(**options).load()
        df.createOrReplaceTempView("src")
        query = (
            spark.sql(QUERY)
            .writeStream.format("memory")
            .queryName(name)
            .trigger(availableNow=True)
            .option("checkpointLocation", f"{request['checkpoint']}/{name}")
            .start()
        )
        try:
            query.awaitTermination(300)
        except Exception as exc:  # the query's own failure, raised by awaitTermination
            return str(exc)
        return None if query.exception() is None else str(query.exception())

    failed = run("jvm_confluent", request["options"])
    if failed is not None:
        raise RuntimeError(f"the query failed: {failed}")
    rows = spark.sql("SELECT * FROM jvm_confluent ORDER BY _partition, _offset").collect()
    result = {
        "rows": [row.asDict() for row in rows],
        "outage": run("jvm_confluent_outage", request["outage_options"]),
    }
    return dict(json.loads(json.dumps(result)))


def test_the_jvm_source_reads_the_confluent_wire_format(
    bootstrap: str,
    registry_url: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    spark: Any,
) -> None:
    topic, dead_topic = f"flights.jvm-confluent.{run_id}", f"dead.jvm-confluent.{run_id}"
    outage_dead_topic = f"{dead_topic}.outage"
    ensure_topics(bootstrap, {topic: (2, 1), dead_topic: (1, 1), outage_dead_topic: (1, 1)})
    flight = schemas.get("flight")
    codec = stream_codec(
        "flights",
        flight,
        schemas,
        encoding="confluent",
        topic=topic,
        registry={"url": registry_url},
    )
    current, older = flights[:300], flights[300:340]
    registry = SchemaRegistryClient({"url": registry_url})
    older_serializer = AvroSerializer(
        registry,
        json.dumps(_older(flight.schema)),
        conf={"auto.register.schemas": True, "subject.name.strategy": topic_subject_name_strategy},
    )
    context = SerializationContext(topic, MessageField.VALUE)

    producer = Producer({"bootstrap.servers": bootstrap})
    for i, record in enumerate(current):
        producer.produce(topic, key=str(i).encode(), value=codec.encode(record))
    assert producer.flush(30) == 0
    for record in older:
        value = older_serializer(
            {k: v for k, v in codec.normalise(record).items() if k not in DROPPED}, context
        )
        producer.produce(topic, key=b"older", value=value)
    subject = f"{topic}-value"
    written_ids = {
        int(registry.get_version(subject, v).schema_id or 0) for v in registry.get_versions(subject)
    }
    assert len(written_ids) == 2  # the stream's schema and the older one
    unknown_id = max(written_ids) + 10_000
    bad = {
        # Single-object encoding on a Confluent stream: marker C3 01, not magic byte 0.
        "bad-magic-byte": b"\xc3\x01" + flight.fingerprint + b"\x00",
        "unknown-schema-id": SchemaId("AVRO", schema_id=unknown_id).id_to_bytes() + b"\x02\x04",
    }
    for reason, value in bad.items():
        producer.produce(topic, key=reason.encode(), value=value)
    assert producer.flush(30) == 0

    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "stream": "flights",
        "startingOffsets": "earliest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "deadLetterTopic": dead_topic,
        "encoding": "confluent",
        "schemaRegistry.url": registry_url,
    }
    # The same topic with a registry nobody answers at: the query fails, nothing is
    # dead-lettered (an outage is no refusal of a tuple).
    dead_url = f"http://127.0.0.1:{free_port()}"
    request = {
        "checkpoint": str(tmp_path / "checkpoint"),
        "options": options,
        "outage_options": {
            **options,
            "deadLetterTopic": outage_dead_topic,
            "schemaRegistry.url": dead_url,
            "schemaRegistry.max.retries": "0",
        },
    }
    answer = read_with_jvm_source(spark, request)
    rows = answer["rows"]

    expected = [dict(codec.normalise(r)) for r in current] + [
        {**codec.normalise(r), **dict.fromkeys(DROPPED)} for r in older
    ]
    assert sorted(map(_identity, rows)) == sorted(map(_identity, expected))

    dead = {}
    for message in read_all(bootstrap, dead_topic):
        headers = {k: v.decode() for k, v in message.headers()}
        dead[headers["floodgate.reason"]] = (headers, message.value())
    assert set(dead) == set(bad)
    for reason, (headers, value) in dead.items():
        assert value == bad[reason]  # the original bytes, kept for replay
        assert headers["floodgate.topic"] == topic
        assert headers["floodgate.stream"] == "flights"
    unknown_error = dead["unknown-schema-id"][0]["floodgate.error"]
    assert str(unknown_id) in unknown_error and registry_url in unknown_error

    outage = answer["outage"]
    assert outage is not None, "the query read on with no registry to ask"
    assert f"the Schema Registry at {dead_url} could not be asked" in outage, outage
    assert read_all(bootstrap, outage_dead_topic) == []
