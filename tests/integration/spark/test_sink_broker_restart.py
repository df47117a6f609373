"""A micro-batch's output transaction across a broker restart: written once, never lost.

noida-db 0.2.3, restarted in the middle of a transaction, aborts the records it had and
then lets the producer commit the input offsets without the records retried after the
restart (see :meth:`pipeline.spark.sink.KafkaTransactionalSink._transaction`). The sink
must notice and write the batch again with a new producer.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

import pipeline.spark.sink
from pipeline.brokers.local import LocalBroker
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.sink import KafkaTransactionalSink

KEY = ["carrier", "flight", "time_hour"]


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    ended: set[int] = set()
    while len(ended) < partitions:
        msg = consumer.poll(10.0)
        assert msg is not None, f"no end of partition reached; read {len(values)}"
        if msg.error() is None:
            values.append(msg.value())  # type: ignore[arg-type]
        else:
            ended.add(msg.partition())  # type: ignore[arg-type]
    consumer.close()
    return values


def test_a_broker_restart_mid_transaction_writes_the_batch_again_once(
    tmp_path: Path,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    new_broker: Callable[..., LocalBroker],
) -> None:
    tuples = flights[:3_000]
    broker = new_broker(data_dir=tmp_path / "broker").start()
    try:
        bootstrap = broker.bootstrap_servers
        ensure_topics(bootstrap, {"in": (1, 1), "out": (2, 1)})
        codec = StreamCodec("flights", schemas.get("flight"), schemas)
        sink = KafkaTransactionalSink(
            query_group="g",
            query="copy",
            codec=codec,
            topic="out",
            key_columns=KEY,
            input_topics=["in"],
            group_id="g.copy",
            checkpoint_dir=str(tmp_path / "checkpoint"),
            bootstrap_servers=bootstrap,
        )
        restarts: list[int] = []

        def restart_once(name: str, batch_id: int) -> None:
            if name == "mid-transaction" and not restarts:
                restarts.append(batch_id)
                broker.stop(remove_data=False)
                broker.start()

        monkeypatch.setattr(pipeline.spark.sink, "_failpoint", restart_once)
        sink.write(tuples, 0, [TopicPartition("in", 0, 42)])
        assert restarts == [0]
        sink.close()

        # noida-db aborts the first producer's stray records only at its next start
        # (an operator's kafka-transactions.sh abort on Kafka).
        broker.stop(remove_data=False)
        broker.start()
        written = Counter(read_committed(bootstrap, "out", 2))
        want = Counter(
            codec.encode({n: r.get(n) for n in codec.schema.field_names}) for r in tuples
        )
        assert written == want  # every tuple once: none lost, none twice
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g.copy"})
        (committed,) = consumer.committed([TopicPartition("in", 0)], timeout=10)
        consumer.close()
        assert committed.offset == 42
        assert sink.transactions_renewed >= 1
    finally:
        broker.stop()


def test_a_broker_gone_while_the_sink_waits_leaves_no_hanging_transaction(
    tmp_path: Path,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    new_broker: Callable[..., LocalBroker],
) -> None:
    """The broker stops while the sink serves its producer (as its ``flush`` does) and
    starts again: the abandoned producer's records are purged when the broker goes
    away, so none is retried into a transaction no producer will end. noida-db 0.2.3
    took them into one (the soak's hanging transactions): without the purge, its
    last stable offset stayed below the high watermark until its next start.
    Apache Kafka aborts them either way (the new producer's epoch fences the old)."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import AdminClient, OffsetSpec

    tuples = flights[:3_000]
    broker = new_broker(data_dir=tmp_path / "broker").start()
    try:
        bootstrap = broker.bootstrap_servers
        ensure_topics(bootstrap, {"in": (1, 1), "out": (2, 1)})
        codec = StreamCodec("flights", schemas.get("flight"), schemas)
        sink = KafkaTransactionalSink(
            query_group="g",
            query="copy",
            codec=codec,
            topic="out",
            key_columns=KEY,
            input_topics=["in"],
            group_id="g.copy",
            checkpoint_dir=str(tmp_path / "checkpoint"),
            bootstrap_servers=bootstrap,
            # The batch's records still queued in the producer when the broker stops.
            client={"linger.ms": 2_000},
        )
        restarts: list[int] = []

        def restart_while_serving(name: str, batch_id: int, *args: Any) -> None:
            if name == "mid-transaction" and not restarts:
                restarts.append(batch_id)
                producer = sink._producer
                assert producer is not None
                broker.stop(remove_data=False)
                # The sink's flush serves error_cb while the broker is away.
                deadline = time.monotonic() + 30
                while not sink._broker_gone and time.monotonic() < deadline:
                    producer.poll(0.1)
                assert sink._broker_gone, "librdkafka never reported the broker gone"
                broker.start()

        monkeypatch.setattr(pipeline.spark.sink, "_failpoint", restart_while_serving)
        sink.write(tuples, 0, [TopicPartition("in", 0, 42)])
        assert restarts == [0]
        sink.close()

        # No second restart: every transaction must be ended already.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        parts = [TopicPartition("out", p) for p in range(2)]

        def ends(isolation: Any) -> dict[int, int]:
            asked = admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in parts}, isolation_level=isolation
            )
            return {tp.partition: f.result().offset for tp, f in asked.items()}

        deadline = time.monotonic() + 30  # Apache Kafka writes its abort markers apace
        while (stable := ends(IsolationLevel.READ_COMMITTED)) != (
            high := ends(IsolationLevel.READ_UNCOMMITTED)
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert stable == high, f"a transaction left open: last stable {stable}, high {high}"
        written = Counter(read_committed(bootstrap, "out", 2))
        want = Counter(
            codec.encode({n: r.get(n) for n in codec.schema.field_names}) for r in tuples
        )
        assert written == want  # every tuple once: none lost, none twice
        assert sink.transactions_renewed >= 1
    finally:
        broker.stop()
