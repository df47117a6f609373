"""An Apache Kafka broker whose log directory fills mid-stream (docs/runbook.md, "Full
disks").

One KRaft node whose ``log.dirs`` (the topics' logs and the ``__cluster_metadata``
log) is a tmpfs of 64 MiB. While the flights group runs in the test session's
SparkSession and a producer puts through the back-pressure client, the disk is
filled to the last byte. Apache Kafka takes a log directory where a write fails
with an ``IOException`` offline; with its only log directory (and the metadata
log's) offline, the broker halts. Expected, and checked:

* the broker exits by itself, its log naming ``No space left on device``;
* meanwhile the producer's puts wait or are refused with ``BrokerError`` and are put
  again (the test's producer does what the client's errors ask), and the query
  group waits for the broker, as after a ``kill -9``
  (``tests/integration/faults/kafka/test_single_broker.py``): each broker step of a micro-batch
  is retried for up to 60 s, so the group goes on if the broker is back by then,
  and fails by name (a ``QueryGroupError`` naming the ``KafkaError``) if it is not;
* with the filler removed and the broker started again on the same data (and the
  group too, if it failed), every tuple is in the copy's output (by key), and the
  tuple ledger balances. A tuple is there twice only if its put was reported back
  and put again: a broker that fails mid-append can answer with an error for a batch
  it wrote (``UNKNOWN_SERVER_ERROR`` after a fault in its memory-mapped index, seen in
  CI), and no producer can tell that batch from one it did not write.

Apache Kafka only: the embedded broker keeps its topics in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.errors import QueryGroupError
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from pipeline.spark.states import QueryGroupState
from tests.integration.faults.checks import (
    Producing,
    check_exactly_once,
    committed_all,
    output_tuples,
    wait_until,
)
from tests.integration.faults.disk.conftest import SmallDisk
from tests.integration.faults.disk.faults import group_config

pytestmark = pytest.mark.apache_kafka

TUPLES = 2_000


@pytest.fixture
def full_broker(
    small_disk: Callable[[Path, int], SmallDisk], tmp_path: Path
) -> Iterator[tuple[ApacheKafkaCluster, SmallDisk]]:
    """A one-node cluster whose log directory is a 64 MiB tmpfs (mounted before the
    broker formats it; unmounted after the broker stops)."""
    cluster = ApacheKafkaCluster(nodes=1, data_dir=tmp_path / "broker")
    disk = small_disk(cluster.nodes[0].directory / "logs", 64 << 20)
    try:
        yield cluster.start(), disk
    finally:
        cluster.stop()


def test_a_full_log_dir_stops_the_broker_and_after_a_restart_nothing_is_lost(
    full_broker: tuple[ApacheKafkaCluster, SmallDisk],
    spark: Any,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    broker, disk = full_broker
    node = broker.nodes[0]
    bootstrap = broker.bootstrap_servers
    config = group_config(run_id, tmp_path / "checkpoints")
    ensure_topics(bootstrap, config.topics())
    records = flights[:TUPLES]
    group = QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas)
    producing = Producing(bootstrap, config, schemas, records, first=400, pace_s=0.3).start()
    try:
        group.start()
        wait_until(lambda: output_tuples(bootstrap, config) > 0, 180, "the first output")
        producing.go()
        assert node.process is not None
        disk.fill()
        wait_until(lambda: node.process.poll() is not None, 120, "the broker to halt")  # type: ignore[union-attr]
        assert producing.put_count < TUPLES, "the producer finished before the fault"
        log = node.log_path.read_text(errors="replace")
        assert "No space left on device" in log, broker.output_tail(node)
        print("broker exit", node.process.returncode, broker.output_tail(node, lines=5))
        # Down: the group waits for the broker (each broker step of a micro-batch is
        # retried for up to BROKER_WAIT_S, 60 s), it does not fail at once.
        time.sleep(3.0)
        assert group.state != QueryGroupState.FAILED, group.state
        disk.unfill()
        broker.start()
        producing.join(timeout_s=400)
        print(f"producer retries: {len(producing.retries)}: {producing.retries[:3]}")
        # A broker back within that bound is invisible to the group; one that took
        # longer to restart (a busy machine) failed it by name. Then, as the runbook
        # says, the group is started again on its checkpoint and loses nothing.
        wait_until(
            lambda: group.state == QueryGroupState.FAILED or committed_all(bootstrap, config),
            300,
            "every query to commit its input, or the group to fail",
            tolerate=True,
        )
        if group.state == QueryGroupState.FAILED:
            with pytest.raises(QueryGroupError) as failed:
                group.check()
            assert "KafkaError{" in str(failed.value), failed.value
            print(f"the group failed while the broker was down: {failed.value}")
            group.stop()
            group = QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas)
            group.start()
        check_exactly_once(bootstrap, config, schemas, records, reput=producing.reput)
        assert group.state not in (QueryGroupState.FAILED, QueryGroupState.STOPPED), group.state
    finally:
        group.stop()
