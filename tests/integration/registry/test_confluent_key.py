"""Keys in the Confluent wire format (``key_encoding = "confluent"``) against a real Schema
Registry: Floodgate's client writes each tuple's key fields as an Avro record under the
subject ``<topic>-key``, which Confluent's own deserializer reads; the ``floodgate_kafka``
source gives rows whose ``key`` column is a struct of the key fields equal to those
fields of the tuple, and dead-letters a key that does not decode (``bad-key``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import epoch_ms
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import Drained, flights_raw_config

#: The key fields of ``conf/flights.toml``'s input stream.
KEY = ["carrier", "flight", "time_hour"]

QUERY = """
SELECT key.carrier AS key_carrier, key.flight AS key_flight,
       unix_millis(key.time_hour) AS key_time_hour_ms,
       carrier, flight, unix_millis(time_hour) AS time_hour_ms, _key IS NULL AS no_key,
       _partition, _offset
FROM src
"""


@pytest.fixture
def keyed(
    bootstrap: str,
    registry_url: str,
    produce: Any,
    flights: list[dict[str, Any]],
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
) -> tuple[QueryGroupConfig, dict[str, bytes], bytes]:
    """A flights stream with Confluent values and keys: 300 tuples through the client,
    then two records whose keys do not decode (``{name: key}``), with one good value."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    stream = raw["input_streams"]["flights"]
    stream["encoding"] = "confluent"
    stream["key_encoding"] = "confluent"
    assert stream["key"] == KEY
    raw["schema_registry"] = {"url": registry_url}
    config = parse_query_group(raw, env={})
    produce(config, flights[:300])
    topic = config.input_streams["flights"].topic
    value = config.stream_codec("input", "flights", schemas).encode(flights[0])
    bad = {
        "raw": b"UA|1545|1357016400000",  # a raw key on a Confluent-keyed stream
        "unknown-id": SchemaId("AVRO", schema_id=2_000_000_000).id_to_bytes() + b"\x04UA",
    }
    producer = Producer({"bootstrap.servers": bootstrap})
    for key in bad.values():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    return config, bad, value


def test_the_client_writes_keys_confluents_deserializer_reads(
    bootstrap: str,
    registry_url: str,
    keyed: tuple[QueryGroupConfig, dict[str, bytes], bytes],
    flights: list[dict[str, Any]],
) -> None:
    config, bad, _ = keyed
    topic = config.input_streams["flights"].topic
    registry = SchemaRegistryClient({"url": registry_url})
    assert {f"{topic}-key", f"{topic}-value"} <= set(registry.get_subjects())
    key_schema = json.loads(registry.get_latest_version(f"{topic}-key").schema.schema_str)
    assert key_schema["name"] == "FlightKey" and [f["name"] for f in key_schema["fields"]] == KEY
    deserialize = AvroDeserializer(registry)
    context = SerializationContext(topic, MessageField.KEY)
    keys = [
        deserialize(m.key(), context)
        for m in read_all(bootstrap, topic)
        if m.key() not in bad.values()
    ]
    expected = sorted((f["carrier"], f["flight"], f["time_hour"]) for f in flights[:300])
    got = sorted((k["carrier"], k["flight"], epoch_ms(k["time_hour"])) for k in keys)
    assert got == expected


def read_with(spark: Any, options: dict[str, str], checkpoint: Path) -> list[Any]:
    """:data:`QUERY` over the source to the end of the topic (Trigger.AvailableNow)."""
    name = f"confluent_key_{SOURCE_NAME}"
    df = spark.readStream.format(SOURCE_NAME).options(**options).load()
    df.createOrReplaceTempView("src")
    query = (
        spark.sql(QUERY)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint / name))
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return [
        r.asDict()
        for r in spark.sql(f"SELECT * FROM {name} ORDER BY _partition, _offset").collect()
    ]


def test_the_key_column_is_decoded_and_bad_keys_are_dead_lettered(
    bootstrap: str,
    registry_url: str,
    keyed: tuple[QueryGroupConfig, dict[str, bytes], bytes],
    schemas: SchemaRepository,
    spark: Any,
    tmp_path: Path,
) -> None:
    config, _, value = keyed
    topic = config.input_streams["flights"].topic
    dead_topic = f"{topic}.dead.{SOURCE_NAME}"
    ensure_topics(bootstrap, {dead_topic: (1, 1)})
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "stream": "flights",
        "startingOffsets": "earliest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "deadLetterTopic": dead_topic,
        "encoding": "confluent",
        "keyEncoding": "confluent",
        "keyFields": ",".join(KEY),
        "keyRequired": "true",
        "schemaRegistry.url": registry_url,
    }
    got = read_with(spark.newSession(), options, tmp_path)
    dead = read_all(bootstrap, dead_topic)
    reasons = [dict(m.headers())["floodgate.reason"].decode() for m in dead]
    assert reasons == ["bad-key", "bad-key"]
    assert all(m.value() == value for m in dead)  # the original value, kept
    errors = [dict(m.headers())["floodgate.error"].decode() for m in dead]
    assert any("bad-magic-byte" in e for e in errors), errors
    assert any("unknown-schema-id" in e for e in errors), errors
    assert len(got) == 300
    for row in got:
        assert not row["no_key"]
        assert (row["key_carrier"], row["key_flight"], row["key_time_hour_ms"]) == (
            row["carrier"],
            row["flight"],
            row["time_hour_ms"],
        )


def test_a_query_group_reads_a_confluent_keyed_stream(
    bootstrap: str,
    registry_url: str,
    produce: Any,
    drain: Callable[[QueryGroupConfig], Drained],
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    """The query group passes ``key_encoding`` on to its source (``keyEncoding``,
    ``keyFields``, the registry): every tuple is read, and a raw key is dead-lettered."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["input_streams"]["flights"]["key_encoding"] = "confluent"
    raw["schema_registry"] = {"url": registry_url}
    config = parse_query_group(raw, env={})
    produce(config, flights[:200])
    producer = Producer({"bootstrap.servers": bootstrap})
    first = read_all(bootstrap, config.input_streams["flights"].topic)[0]
    producer.produce(first.topic(), key=b"UA|1545|1357016400000", value=first.value())
    assert producer.flush(30) == 0

    assert drain(config).stats["copy"].input_tuples == 200
    dead = read_all(bootstrap, config.dead_letter_topic)
    assert [dict(m.headers())["floodgate.reason"] for m in dead] == [b"bad-key"]
