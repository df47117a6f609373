"""Tuples that decode but must not reach the queries go to the dead-letter topic with their
reason: a record without a key on a keyed stream, an event time far
ahead of its record's timestamp (which would move the watermark on), and -- for the
query that aggregates over event-time windows, the one that would drop it -- an event
time whose window closed before the watermark. Nothing else is lost or blocked, and
Spark drops nothing silently."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from pipeline.config import QueryGroupConfig
from pipeline.demo.reception import read_all
from pipeline.queues.ledger import reconcile
from pipeline.serde.codec import StreamCodec, TupleKey
from pipeline.serde.schemas import SchemaRepository
from tests.integration.helpers import Drained

YEAR_MS = 365 * 86_400_000


def test_keyless_future_and_late_tuples_are_dead_lettered_and_the_rest_flows(
    bootstrap: str,
    drain: Callable[[QueryGroupConfig], Drained],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    flights_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
) -> None:
    # The watermark the first drain reached is written by a micro-batch after its last
    # one with data: a no-data micro-batch (without it, the restarted query starts from
    # the older watermark and the late tuple is aggregated; see no_data_micro_batches).
    config = flights_config(passthrough=True, no_data_micro_batches=True)
    stream = config.input_streams["flights"]
    assert stream.watermark == "2 hours" and stream.key
    first, second = flights[:2_000], flights[2_000:3_000]
    produce(config, first)
    drain(config)
    # The watermark is now the latest event time read, less 2 hours.
    watermark = max(f["time_hour"] for f in first) - 2 * 3_600_000
    assert flights[0]["time_hour"] + 3_600_000 <= watermark  # its hour has closed

    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    key = TupleKey(stream.key)
    now_ms = int(time.time() * 1000)
    refused = {
        "null-key": (None, dict(first[5])),
        "future-event-time": (None, dict(first[6], time_hour=now_ms + 10 * YEAR_MS)),
        "late": (None, dict(first[7], time_hour=flights[0]["time_hour"])),
    }
    # Only the hourly window aggregation drops late tuples; the pass-through copy and
    # the per-day aggregation (grouped by a date, not an event-time window) keep them.
    refused_by = {
        "copy": {"null-key", "future-event-time"},
        "delays_by_carrier_day": {"null-key", "future-event-time"},
        "delays_by_origin_hour": {"null-key", "future-event-time", "late"},
    }
    where: dict[str, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap})  # bypasses the client's checks
    for reason, (_, flight) in refused.items():
        producer.produce(
            stream.topic,
            key=None if reason == "null-key" else key(flight),
            value=codec.encode(flight),
            on_delivery=lambda err, msg, r=reason: where.__setitem__(
                r, (msg.partition(), msg.offset())
            ),
        )
    assert producer.flush(30) == 0
    produce(config, second)
    drained = drain(config)

    assert {q: s.dropped_by_watermark for q, s in drained.stats.items()} == dict.fromkeys(
        config.queries, 0
    )
    copies = read_all(bootstrap, config.output_streams["flights_copy"].topic)
    assert len(copies) == len(first) + len(second) + 1  # the late tuple too

    dead: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    for message in read_all(bootstrap, config.dead_letter_topic):
        headers = {k: v.decode() for k, v in message.headers()}
        dead[headers["floodgate.query"]][headers["floodgate.reason"]] = headers
    assert set(dead) == set(config.queries)  # each query dead-letters what it refused
    for query, by_reason in dead.items():
        assert set(by_reason) == refused_by[query], query
        for reason, headers in by_reason.items():
            partition, offset = where[reason]
            assert (int(headers["floodgate.partition"]), int(headers["floodgate.offset"])) == (
                partition,
                offset,
            )
    assert "the stream is keyed" in dead["copy"]["null-key"]["floodgate.error"]
    assert "max_event_time_ahead_ms" in dead["copy"]["future-event-time"]["floodgate.error"]
    assert "before the watermark" in dead["delays_by_origin_hour"]["late"]["floodgate.error"]

    # The far-future tuple did not move the watermark: the second part's hours were
    # aggregated, its last hour included.
    hours = read_all(bootstrap, config.output_streams["delays_by_origin_hour"].topic)
    out = StreamCodec("delays_by_origin_hour", schemas.get("delays_by_origin_hour"), schemas).decode
    last_hour = max(f["time_hour"] for f in second)
    assert any(out(m.value())["hour_start"].timestamp() * 1000 == last_hour for m in hours)

    # The ledger balances: the refused tuples are counted as dead-lettered.
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(r.balanced for r in rows)
    assert sum(r.dead_lettered for r in rows) == len(refused)
    assert sum(r.processed for r in rows) == len(first) + len(second)
