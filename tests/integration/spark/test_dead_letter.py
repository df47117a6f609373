"""Tuples that do not decode go to the dead-letter topic with their reason; the rest flows."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

import fastavro
from confluent_kafka import Producer

from pipeline.config import QueryGroupConfig
from pipeline.demo.reception import read_all
from pipeline.serde.schemas import MAGIC, SchemaRepository
from tests.integration.helpers import Drained


def test_malformed_unknown_fingerprint_and_overflowing_tuples_are_dead_lettered(
    bootstrap: str,
    drain: Callable[[QueryGroupConfig], Drained],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    flights_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
) -> None:
    config = flights_config(only_passthrough=True)
    topic = config.input_streams["flights"].topic
    good = flights[:1_000]
    produce(config, good[:500])

    # A producer that bypassed our codec: Avro int fields hold a 40-bit varint.
    overflow = dict(good[0], distance=2**40)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schemas.get("flight").parsed(logical=False), overflow)
    bad = {
        "bad-marker": b"this is not avro",
        "unknown-fingerprint": MAGIC + os.urandom(8) + b"\x00\x02",
        "bad-value": MAGIC + schemas.get("flight").fingerprint + body.getvalue(),
    }
    where: dict[str, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap})
    for reason, value in bad.items():
        producer.produce(
            topic,
            key=reason.encode(),
            value=value,
            on_delivery=lambda err, msg, r=reason: where.__setitem__(
                r, (msg.partition(), msg.offset())
            ),
        )
    assert producer.flush(30) == 0
    produce(config, good[500:])

    drained = drain(config)
    stats = drained.stats["copy"]

    assert stats.input_tuples == len(good)
    assert len(read_all(bootstrap, config.output_streams["flights_copy"].topic)) == len(good)

    dead = read_all(bootstrap, config.dead_letter_topic)
    by_reason = {}
    for message in dead:
        headers = {k: v.decode() for k, v in message.headers()}
        by_reason[headers["floodgate.reason"]] = (headers, message)
    assert set(by_reason) == set(bad)
    for reason, (headers, message) in by_reason.items():
        partition, offset = where[reason]
        assert headers["floodgate.topic"] == topic
        assert (int(headers["floodgate.partition"]), int(headers["floodgate.offset"])) == (
            partition,
            offset,
        )
        assert headers["floodgate.stream"] == "flights"
        assert headers["floodgate.query"] == "copy"
        assert message.value() == bad[reason]  # the original bytes, kept for replay
        assert f"offset {offset}" in headers["floodgate.error"]

    # Counted by the query group, once per tuple, by reason (alert FloodgateDeadLetters).
    for reason in bad:
        labels = {"query_group": config.name, "stream": "flights", "reason": reason}
        assert (
            drained.registry.get_sample_value(
                "floodgate_input_stream_dead_lettered_tuples_total", labels
            )
            == 1
        ), reason
    # Every good tuple processed (committed), and none of the three counted as such twice.
    assert drained.registry.get_sample_value(
        "floodgate_input_stream_processed_tuples_total",
        {"query_group": config.name, "stream": "flights"},
    ) == len(good) + len(bad)
