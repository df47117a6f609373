"""Streams in the Confluent wire format, against a real Schema Registry: what Floodgate
writes, Confluent's own deserializer reads (as Kafka Connect or ksqlDB would); what it
cannot read goes to the dead-letter topic with the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.serde.codec import epoch_ms
from pipeline.serde.schemas import SchemaRepository
from tests.integration.helpers import Drained, flights_raw_config


def _identity(flight: dict[str, Any]) -> tuple[Any, ...]:
    when = flight["time_hour"]
    when_ms = when if isinstance(when, int) else epoch_ms(when)
    return flight["carrier"], flight["flight"], flight["origin"], when_ms


def test_a_query_group_reads_and_writes_the_confluent_wire_format(
    bootstrap: str,
    registry_url: str,
    drain: Callable[[QueryGroupConfig], Drained],
    produce: Callable[..., None],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["input_streams"]["flights"]["encoding"] = "confluent"
    raw["output_streams"]["flights_copy"]["encoding"] = "confluent"
    raw["schema_registry"] = {"url": registry_url}
    config = parse_query_group(raw, env={})
    topic = config.input_streams["flights"].topic
    out_topic = config.output_streams["flights_copy"].topic
    good = flights[:600]
    produce(config, good[:300])  # through Floodgate's client: registers <topic>-value

    registry = SchemaRegistryClient({"url": registry_url})
    written_id = registry.get_latest_version(f"{topic}-value").schema_id
    unknown_id = written_id + 10_000
    bad = {
        # Single-object encoding on a Confluent stream: marker C3 01, not magic byte 0.
        "bad-magic-byte": b"\xc3\x01" + schemas.get("flight").fingerprint + b"\x00",
        "unknown-schema-id": SchemaId("AVRO", schema_id=unknown_id).id_to_bytes() + b"\x02\x04",
    }
    producer = Producer({"bootstrap.servers": bootstrap})
    for reason, value in bad.items():
        producer.produce(topic, key=reason.encode(), value=value)
    assert producer.flush(30) == 0
    produce(config, good[300:])

    stats = drain(config).stats["copy"]
    assert stats.input_tuples == len(good)

    # The output, read as Kafka Connect's AvroConverter would: Confluent's deserializer,
    # the writer schema fetched by the id in each record.
    deserialize = AvroDeserializer(registry)
    context = SerializationContext(out_topic, MessageField.VALUE)
    output = [deserialize(m.value(), context) for m in read_all(bootstrap, out_topic)]
    assert sorted(map(_identity, output)) == sorted(map(_identity, good))
    subjects = set(registry.get_subjects())
    assert {f"{topic}-value", f"{out_topic}-value"} <= subjects

    # Floodgate's own reception reads it too.
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        reception = connector.open_stream_output(config.name, "flights_copy")
        got: list[dict[str, Any]] = []
        while batch := reception.get(max_tuples=1_000, timeout_s=2.0):
            got.extend(batch)
    assert sorted(map(_identity, got)) == sorted(map(_identity, good))

    dead = {}
    for message in read_all(bootstrap, config.dead_letter_topic):
        headers = {k: v.decode() for k, v in message.headers()}
        dead[headers["floodgate.reason"]] = (headers, message.value())
    assert set(dead) == set(bad)
    for reason, (headers, value) in dead.items():
        assert value == bad[reason]  # the original bytes, kept for replay
        assert headers["floodgate.topic"] == topic
    assert str(unknown_id) in dead["unknown-schema-id"][0]["floodgate.error"]
