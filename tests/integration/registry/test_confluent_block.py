"""The Confluent block decoder (:class:`pipeline.serde.confluent_block.ConfluentBlockDecoder`)
against a real Schema Registry: a micro-batch decoded through it gives the rows, the
order and the dead letters of the per-tuple path, with several schema ids in one batch
(the stream's schema registered twice, an older writer schema) and malformed tuples."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import DeserializationError
from pipeline.serde.confluent import ConfluentCodec, stream_codec
from pipeline.serde.confluent_block import ConfluentBlockDecoder, block_decoder
from pipeline.serde.schemas import SchemaRepository

#: Fields an older writer schema of the stream lacks (nullable, default null).
DROPPED = ("tailnum", "air_time")


class Writers:
    """One topic's tuples in three writer schemas of the subject ``<topic>-value``: the
    stream's (``same``), the stream's with another ``doc`` (``twin``: another id, the
    same bytes) and one without :data:`DROPPED` (``older``)."""

    def __init__(self, url: str, schemas: SchemaRepository, flights: list[dict[str, Any]]):
        self.topic = f"flights.block.{uuid.uuid4().hex[:8]}"
        made = stream_codec(
            "flights",
            schemas.get("flight"),
            schemas,
            encoding="confluent",
            topic=self.topic,
            registry={"url": url},
        )
        assert isinstance(made, ConfluentCodec)
        self.codec = made
        schema = schemas.get("flight").schema
        registry = SchemaRegistryClient({"url": url})
        conf = {"auto.register.schemas": True, "subject.name.strategy": topic_subject_name_strategy}
        twin = {**schema, "doc": "the stream's schema, registered again"}
        older = {**schema, "fields": [f for f in schema["fields"] if f["name"] not in DROPPED]}
        context = SerializationContext(self.topic, MessageField.VALUE)
        twin_writer = AvroSerializer(registry, json.dumps(twin), conf=conf)
        older_writer = AvroSerializer(registry, json.dumps(older), conf=conf)
        normal = [dict(made.normalise(f)) for f in flights]
        self.values = {
            "same": [made.encode(f) for f in normal],
            "twin": [twin_writer(f, context) for f in normal],
            "older": [
                older_writer({k: v for k, v in f.items() if k not in DROPPED}, context)
                for f in normal
            ],
        }
        ids = {kind: v[0][1:5] for kind, v in self.values.items()}
        assert len(set(ids.values())) == 3, ids  # three schema ids


@pytest.fixture(scope="module")
def writers(registry_url: str, schemas: SchemaRepository, flights: list[dict[str, Any]]) -> Writers:
    return Writers(registry_url, schemas, flights[:200])


def per_tuple(codec: ConfluentCodec, values: list[bytes]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The per-tuple path: ``(rows, dead letters as (index, reason))``."""
    rows, dead = [], []
    for index, value in enumerate(values):
        try:
            rows.append(codec.decode(value, logical=False))
        except DeserializationError as exc:
            dead.append((index, exc.reason))
    return rows, dead


def through_block(decoder: ConfluentBlockDecoder, values: list[bytes]) -> tuple[Any, list[Any]]:
    """What the source does (``PartitionReader._convert``): the block, else tuple by tuple."""
    table = decoder.decode(values)
    if table is None:
        rows, dead = per_tuple(decoder.codec, values)
        return rows, dead
    return table.to_pylist(), []


def spoil(value: bytes, how: str) -> bytes:
    return {
        "truncated": value[:-3],
        "trailing": value + b"\x00",
        "no-body": value[:5],
        "magic-1": b"\x01" + value[1:],
        "unknown-id": b"\x00\x7f\xff\xff\xf0" + value[5:],
        "empty": b"",
    }[how]


def test_a_batch_of_two_ids_of_the_streams_schema_is_one_block_each(writers: Writers) -> None:
    same, twin = writers.values["same"], writers.values["twin"]
    values = [v for pair in zip(same, twin, strict=True) for v in pair]  # interleaved ids
    decoder = block_decoder(writers.codec)
    assert isinstance(decoder, ConfluentBlockDecoder)
    table = decoder.decode(values)
    assert table is not None, "two ids of one schema were not decoded as blocks"
    rows, dead = per_tuple(writers.codec, values)
    assert dead == []
    assert table.equals(pa.Table.from_pylist(rows, schema=table.schema))


def test_an_older_writer_schema_or_a_bad_tuple_sends_the_batch_tuple_by_tuple(
    writers: Writers,
) -> None:
    decoder = block_decoder(writers.codec)
    assert isinstance(decoder, ConfluentBlockDecoder)
    same = writers.values["same"][:20]
    assert decoder.decode([*same, writers.values["older"][0]]) is None
    for how in ("truncated", "trailing", "no-body", "magic-1", "unknown-id", "empty"):
        assert decoder.decode([*same[:5], spoil(same[5], how), *same[6:]]) is None, how


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    picks=st.lists(
        st.tuples(
            st.sampled_from(["same", "twin", "older"]),
            st.integers(0, 199),
            st.sampled_from(
                [None] * 12 + ["truncated", "trailing", "no-body", "magic-1", "unknown-id", "empty"]
            ),
        ),
        min_size=1,
        max_size=150,
    )
)
def test_the_block_path_gives_the_rows_order_and_dead_letters_of_the_per_tuple_path(
    writers: Writers, picks: list[tuple[str, int, str | None]]
) -> None:
    values = [
        writers.values[kind][i] if how is None else spoil(writers.values[kind][i], how)
        for kind, i, how in picks
    ]
    decoder = block_decoder(writers.codec)
    assert isinstance(decoder, ConfluentBlockDecoder)
    got_rows, got_dead = through_block(decoder, values)
    rows, dead = per_tuple(writers.codec, values)
    assert got_dead == dead
    assert got_rows == rows
    if all(kind != "older" and how is None for kind, _, how in picks):
        assert decoder.decode(values) is not None  # well-formed, the stream's schema: a block
