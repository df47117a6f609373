"""The planning's event-time probe on a real broker: it reads the event time at an
offset (the next tuple's past a transaction marker), at one offset of each of several
partitions in one fetch, caches what a fetch brought, and leaves no partition
assigned between plannings, so its consumer does not fetch in the background (an
assigned partition is prefetched until unassigned)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.errors import BrokerError
from pipeline.kafka.topics import ensure_topics
from pipeline.spark.alignment import EventTimeProbe
from pipeline.spark.options import SourceOptions

BASE_MS = 1_356_998_400_000  # 2013-01-01T00:00:00Z
HOUR_MS = 3_600_000


def kafka_time(message: Any) -> int | None:
    """The record's Kafka timestamp, as the source reads it with ``timestampField`` unset."""
    return int(message.timestamp()[1])


def test_probe_reads_event_times_and_leaves_nothing_assigned(bootstrap: str) -> None:
    topic = f"probe-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, 1)})
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(200):  # an hour apart, in event-time order, partition by parity
        producer.produce(topic, b"x", partition=i % 2, timestamp=BASE_MS + i * HOUR_MS)
    producer.commit_transaction(30)  # a marker after the last tuple of each partition
    # The planning probes offsets below the last stable offset it planned against;
    # Apache Kafka writes the commit markers after commit_transaction returns, so wait
    # until read_committed readers see the tuples (the LSO past the markers, 101).
    committed = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-lso",
            "isolation.level": "read_committed",
        }
    )
    try:
        deadline = time.monotonic() + 30
        while any(
            committed.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            < 101
            for p in (0, 1)
        ):
            assert time.monotonic() < deadline, "the commit markers were not written"
            time.sleep(0.05)
    finally:
        committed.close()
    options = SourceOptions.parse(
        {
            "bootstrap.servers": bootstrap,
            "topic": topic,
            "schema": "flight",
            "schemas": "{}",
            "group.id": f"{topic}-group",
        }
    )
    probe = EventTimeProbe(options.consumer_config(), kafka_time, timeout_s=10.0)
    first, second = (topic, 0), (topic, 1)
    try:
        # Partition 0 holds tuples 0, 2, 4, ...: the one at offset k is tuple 2k.
        assert probe(first, 0) == BASE_MS
        assert probe(first, 37) == BASE_MS + 74 * HOUR_MS
        reads = probe.reads
        assert probe(first, 38) == BASE_MS + 76 * HOUR_MS  # brought by the same fetch
        assert probe.reads == reads
        assert probe(second, 99) == BASE_MS + 199 * HOUR_MS
        # Both partitions at once: one fetch answers them (one round trip a planning step).
        reads = probe.reads
        assert probe.many({first: 80, second: 10}) == {
            first: BASE_MS + 160 * HOUR_MS,
            second: BASE_MS + 21 * HOUR_MS,
        }
        assert probe.reads == reads + 1
        assert probe.many({first: 81, second: 11}) == {
            first: BASE_MS + 162 * HOUR_MS,
            second: BASE_MS + 23 * HOUR_MS,
        }
        assert probe.reads == reads + 1  # both brought by that fetch
        # Offset 100 of each partition is the commit marker: no tuple there or after.
        assert probe(second, 100) is None
        # Nothing stays assigned, so nothing is fetched between plannings.
        assert all(c.assignment() == [] for c in probe._consumers.values())
        time.sleep(0.5)
        assert all(c.assignment() == [] for c in probe._consumers.values())
    finally:
        probe.close()


def test_probe_fails_planning_by_name_when_the_broker_does_not_answer() -> None:
    """A partition the broker does not answer for (here, a port nobody listens on) is
    asked again until the patience is spent, then the read raises ``FG-SOURCE-005``
    naming it; it is never answered "no event time" (which lets a partition hold nobody
    back: tuples came late after a broker's kill -9), and nothing is cached for it."""
    config = {"bootstrap.servers": "127.0.0.1:9", "group.id": "probe-unanswered"}
    probe = EventTimeProbe(config, kafka_time, timeout_s=0.3, patience_s=1.0)
    wanted = {("probe-unanswered", 0): 5, ("probe-unanswered", 9): 7}
    started = time.monotonic()
    try:
        with pytest.raises(
            BrokerError,
            match=r"^FG-SOURCE-005 .*\{'probe-unanswered\[0\]': 5, 'probe-unanswered\[9\]': 7\}",
        ):
            probe.many(wanted)
        assert time.monotonic() - started >= 1.0
        assert probe.reads >= 2, f"read {probe.reads} time(s)"
        assert probe.known(wanted) == {}
    finally:
        probe.close()
