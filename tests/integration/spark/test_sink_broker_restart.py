"""A write task's transaction across a broker restart: written once, never lost, and no
transaction left open.

noida-db 0.2.3, restarted in the middle of a transaction, aborts the records it had and
then lets the producer commit the rest of the transaction (its batch marker) without
them; and it takes records a producer retries after the restart into a transaction its
coordinator does not know, which no producer ends. The JVM sink must therefore never
commit a transaction across a broker loss: the task fails, its producer is closed
without a retry, and Spark's retry writes the partition again with a new producer
(docs/spark-source.md, "The sink"). Apache Kafka aborts such a transaction itself; the
tests hold on both engines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.brokers.local import LocalBroker
from pipeline.serde.schemas import SchemaRepository
from tests.integration.spark.sink_pipeline import (
    FLIGHTS,
    Pipeline,
    expected_records,
    written,
)


def stable_is_high(bootstrap: str, topic: str, partitions: int) -> tuple[bool, str]:
    """Whether every partition's last stable offset is its high watermark (no open
    transaction), and both, for a message."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = [TopicPartition(topic, p) for p in range(partitions)]

    def ends(isolation: Any) -> dict[int, int]:
        asked = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in parts}, isolation_level=isolation
        )
        return {tp.partition: f.result().offset for tp, f in asked.items()}

    stable, high = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
    return stable == high, f"last stable {stable}, high {high}"


@pytest.mark.parametrize("failpoint_name", ["mid-transaction", "records-sent"])
def test_a_broker_restart_in_a_task_s_transaction_writes_its_partition_again_once(
    failpoint_name: str,
    spark: Any,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
    new_broker: Callable[..., LocalBroker],
    failpoint: Callable[[str | None], None],
) -> None:
    """The broker restarts while micro-batch 1's tasks stand at ``failpoint_name``: their
    records handed to the producer (``mid-transaction``, some still queued: linger 2 s) or
    acknowledged in the open transaction (``records-sent``). Every tuple is written once,
    the input offsets end in the consumer group, and no transaction is left open."""
    broker = new_broker(data_dir=tmp_path / "broker").start()
    try:
        pipeline = Pipeline(spark, broker.bootstrap_servers, schemas, tmp_path)
        pipeline.produce(flights[:FLIGHTS])
        release = tmp_path / "release"
        failpoint(f"{failpoint_name}:1:wait={release}")
        restarted = threading.Event()

        def restart_at_failpoint() -> None:
            reached = Path(f"{release}.reached")
            deadline = time.monotonic() + 120
            while not reached.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            broker.stop(remove_data=False)
            broker.start()
            restarted.set()
            release.touch()

        restarter = threading.Thread(target=restart_at_failpoint, daemon=True)
        restarter.start()
        query = pipeline.run(**{"kafka.linger.ms": "2000"})
        restarter.join(timeout=180)
        assert restarted.is_set(), "the failpoint was never reached"
        assert query.exception() is None, query.exception()

        def settled() -> bool:
            return stable_is_high(broker.bootstrap_servers, pipeline.output, 3)[0]

        deadline = time.monotonic() + 30  # Apache Kafka writes its abort markers apace
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.5)
        ok, ends = stable_is_high(broker.bootstrap_servers, pipeline.output, 3)
        assert ok, f"a transaction left open: {ends}"
        assert written(pipeline.output_records()) == expected_records(
            pipeline.codec, flights[:FLIGHTS]
        )
        assert pipeline.committed() == [FLIGHTS // 2, FLIGHTS // 2]
    finally:
        broker.stop()
