"""Faults of a 3-node Apache Kafka cluster (replication factor 3,
``min.insync.replicas=2``) under a running query group, one cluster for the module.

Each test runs the group in the test session's SparkSession while a producer writes
through the back-pressure client, and hurts one node with a real signal:

* SIGKILL of the leader of the input topic's partitions;
* SIGKILL of the output topic's leader under a group in Spark's Real-Time Mode
  (``delivery = "at-least-once"``): nothing lost, the replays counted;
* SIGKILL of the transaction coordinator of the copy query's write tasks (the leader of
  their ``transactional.id``'s ``__transaction_state`` partition), and of the group
  coordinator of the consumer groups their transactions commit their batch markers to
  (``sendOffsetsToTransaction``), each while a batch stands at the JVM sink's
  ``before-commit`` failpoint: its records delivered and its marker sent in the open
  transaction, its commit not yet asked;
* SIGKILL of the active KRaft controller mid-stream;
* SIGSTOP of an output partition's leader for longer than the transaction timeout (the
  coordinator alive), then SIGCONT.

A killed node is restarted once the cluster has fenced it (it leads nothing and is in
no ISR), and counts as back only when it is in the ISR of every partition it
replicates again (:meth:`ApacheKafkaCluster.wait_in_sync`). Each test then checks that
the group ran through the fault, every tuple is in the output exactly once by key
(``read_committed``), no transaction is left open on an output topic (the last stable
offset reached the high watermark), the ledger balances, and no put failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.brokers.apache_kafka.cluster import coordinator_partition
from pipeline.brokers.apache_kafka.config import KafkaNode
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.errors import QueryGroupError
from pipeline.kafka.topics import ensure_topics
from pipeline.names import sink_transactional_id, task_transactional_id
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from pipeline.spark.states import QueryGroupState
from tests.integration.faults.checks import (
    Producing,
    check_delivery,
    check_exactly_once,
    open_transactions,
    output_tuples,
    wait_until,
)
from tests.integration.faults.kafka.faults import (
    FIRST,
    GROUP,
    TRANSACTION,
    TUPLES,
    PausedCommit,
    find_coordinator,
    group_config,
)
from tests.integration.helpers import flights_raw_config, real_time

pytestmark = pytest.mark.apache_kafka

#: How long a killed node may take to be fenced, to start again, and to be back in
#: every ISR, seconds: generous (three JVMs beside Spark on 2 cores).
NODE_WAIT_S = 240.0

#: The copy query's sink's transaction timeout in the SIGSTOP test, ms (librdkafka's
#: ``transaction.timeout.ms``, default 60 000): short, so that the stop outlasts it.
SHORT_TRANSACTION_TIMEOUT_MS = 10_000

#: The clients' request timeout in the SIGSTOP test, ms (Kafka's default: 30 000). A
#: stopped node neither answers nor closes its connections, so each request to it, the
#: task's batch marker read from a group coordinator it held included, waits this long
#: before the client turns to the node's successor.
SHORT_REQUEST_TIMEOUT_MS = 10_000

#: The test cluster's brokers, beside Floodgate's defaults for a local cluster: the
#: transaction coordinator looks for timed-out transactions every second (Kafka's
#: ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, default 10 s), which
#: the SIGSTOP test waits for.
CLUSTER_OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    """One 3-node cluster for the module's tests, its internal topics made (a
    transactional producer's and a consumer group's first coordinator lookup creates
    ``__transaction_state`` and ``__consumer_offsets``)."""
    three = ApacheKafkaCluster(
        nodes=3, data_dir=tmp_path_factory.mktemp("cluster"), overrides=CLUSTER_OVERRIDES
    )
    try:
        three.start()
        bootstrap = three.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "warm-up"})
        producer.init_transactions(120)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "warm-up"})
        try:  # NOT_COORDINATOR while the new group's coordinator loads it
            wait_until(
                lambda: consumer.committed([TopicPartition("warm-up", 0)], timeout=10) != [],
                180,
                "a consumer group's coordinator",
            )
        finally:
            consumer.close()

        def led(topic: str) -> bool:
            return min(three.partition_leaders(topic).values()) > 0

        for topic in ("__transaction_state", "__consumer_offsets"):
            wait_until(partial(led, topic), 120, f"{topic} to have a leader for every partition")
        yield three
    finally:
        three.stop()


@pytest.fixture
def cluster(shared_cluster: ApacheKafkaCluster) -> Iterator[ApacheKafkaCluster]:
    """The module's cluster with every node running and in sync, and each partition led
    by its preferred replica again (a restarted node leads nothing until an election,
    Kafka's ``auto.leader.rebalance`` only every 5 minutes; the tests place their
    coordinators by leader); what a test stopped or killed is resumed or started again
    after it."""
    for node in shared_cluster.nodes:
        if node.pid is None:
            shared_cluster.start_node(node, timeout_s=NODE_WAIT_S)
        shared_cluster.wait_in_sync(node, timeout_s=NODE_WAIT_S)
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap_servers})
    with contextlib.suppress(KafkaException):  # ELECTION_NOT_NEEDED for some
        admin.elect_leaders(ElectionType.PREFERRED).result(timeout=60)
    yield shared_cluster
    for node in shared_cluster.nodes:
        if node.pid is not None:
            os.kill(node.pid, signal.SIGCONT)
        else:
            shared_cluster.start_node(node, timeout_s=NODE_WAIT_S)


def wait_for_topics(cluster: ApacheKafkaCluster, config: QueryGroupConfig) -> None:
    """Wait until each broker's metadata lists the group's topics, each partition with
    3 replicas (KRaft brokers learn new topics from the metadata log, not at once: a
    broker that lagged answered a query group's start that its output topic did not
    exist)."""
    for node in cluster.nodes:
        admin = AdminClient({"bootstrap.servers": f"{cluster.host}:{node.port}"})

        def listed(admin: AdminClient = admin) -> bool:
            metadata = admin.list_topics(timeout=10)
            return all(
                topic in metadata.topics
                and all(len(p.replicas) == 3 for p in metadata.topics[topic].partitions.values())
                for topic in config.topics()
            )

        wait_until(listed, 60, f"node {node.node_id} to list the group's topics, 3 replicas each")


def fenced(cluster: ApacheKafkaCluster, node: KafkaNode) -> bool:
    """Whether the cluster no longer counts ``node``: it leads no partition and is in
    no partition's ISR."""
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=5)
    return not any(
        p.leader == node.node_id or node.node_id in p.isrs
        for topic in metadata.topics.values()
        for p in topic.partitions.values()
    )


def kill_and_restart(cluster: ApacheKafkaCluster, node: KafkaNode) -> None:
    """SIGKILL ``node``, then :func:`restart_once_fenced`."""
    cluster.kill_node(node)
    restart_once_fenced(cluster, node)


def restart_once_fenced(cluster: ApacheKafkaCluster, node: KafkaNode) -> None:
    """Wait until the cluster has fenced the dead ``node``, start it again on its data,
    and wait until it is back in every ISR."""
    wait_until(lambda: fenced(cluster, node), NODE_WAIT_S, f"node {node.node_id} to be fenced")
    cluster.start_node(node, timeout_s=NODE_WAIT_S)
    cluster.wait_in_sync(node, timeout_s=NODE_WAIT_S)


def transactional_ids(config: QueryGroupConfig, query: str) -> list[str]:
    """The ``transactional.id`` of each of a query's write tasks, one per partition of
    the pass-through query's input stream: ``<prefix>.<task>``, the prefix
    :func:`pipeline.names.sink_transactional_id` (checked against the running sink). A
    task's batch markers go to the consumer group of the same name."""
    prefix = sink_transactional_id(config.consumer_group(query))
    return [
        task_transactional_id(prefix, p) for p in range(config.input_settings("flights").partitions)
    ]


def placed_run(
    cluster: ApacheKafkaCluster,
    tmp_path: Path,
    fits: Callable[[int, int, int | None], bool],
    **config: Any,
) -> QueryGroupConfig:
    """The pass-through group's config under a run id whose copy query's coordinators
    fit: ``fits(transaction coordinator, group coordinator, active controller)``, node
    ids, of its first write task (the other tasks' fall where they may). (A run id is the
    test's own name for its topics and groups; this picks one whose coordinators fall
    where the test needs them.)"""
    controller = cluster.active_controller()
    transactions = cluster.partition_leaders("__transaction_state")
    groups = cluster.partition_leaders("__consumer_offsets")
    for _ in range(200):
        raw = flights_raw_config(
            uuid.uuid4().hex[:10],
            tmp_path / "checkpoints",
            only_passthrough=True,
            max_tuples_per_trigger=200,
        )
        raw.update(config)
        candidate = parse_query_group(raw, env={})
        first = transactional_ids(candidate, "copy")[0]
        txn = transactions[coordinator_partition(first, len(transactions))]
        group = groups[coordinator_partition(first, len(groups))]
        if fits(txn, group, controller):
            return candidate
    raise AssertionError(
        f"no run id placed the coordinators as needed (controller {controller}, leaders of "
        f"__transaction_state {transactions}, of __consumer_offsets {groups})"
    )


def start_writing(
    cluster: ApacheKafkaCluster,
    config: QueryGroupConfig,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    schemas: SchemaRepository,
    records: list[dict[str, Any]],
    *,
    pace_s: float,
) -> tuple[QueryGroup, Producing]:
    bootstrap = cluster.bootstrap_servers
    ensure_topics(bootstrap, config.topics())  # the cluster's default replication: 3
    wait_for_topics(cluster, config)
    group = running_group(config, bootstrap)
    prefix = group.sinks()["copy"].transactional_id
    assert [task_transactional_id(prefix, p) for p in range(2)] == transactional_ids(
        config, "copy"
    )[:2]
    return group, Producing(bootstrap, config, schemas, records, first=FIRST, pace_s=pace_s).start()


def finish(
    cluster: ApacheKafkaCluster,
    config: QueryGroupConfig,
    schemas: SchemaRepository,
    group: QueryGroup,
    producing: Producing,
    records: list[dict[str, Any]],
) -> None:
    producing.join(timeout_s=400)
    assert not producing.retries, "\n\n".join(producing.retries)
    check_exactly_once(cluster.bootstrap_servers, config, schemas, records, group=group)


def leader_node(cluster: ApacheKafkaCluster, topic: str) -> int:
    """The broker id that leads most of ``topic``'s partitions, among the nodes that
    are not the active KRaft controller (its kill has a test of its own)."""
    controller = cluster.active_controller()
    leaders = [b for b in cluster.partition_leaders(topic).values() if b != controller]
    assert leaders, f"every partition of {topic} is led by the active controller {controller}"
    return max(set(leaders), key=leaders.count)


def test_kill_9_of_the_input_leader_is_invisible_to_the_group(
    cluster: ApacheKafkaCluster,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    # (The output topic's leader is killed under the real-time group below; a
    # micro-batch's output side meets the coordinators' kills and the SIGSTOP.)
    config = group_config(run_id, tmp_path)  # both aggregations and the copy
    records = flights[:TUPLES]
    group, producing = start_writing(cluster, config, running_group, schemas, records, pace_s=1.5)
    wait_until(lambda: output_tuples(cluster.bootstrap_servers, config) > 0, 180, "first output")
    producing.go()
    assert producing.put_count < TUPLES, "the producer finished before the fault"
    topic = config.input_streams["flights"].topic
    kill_and_restart(cluster, cluster.node_of_broker(leader_node(cluster, topic)))
    finish(cluster, config, schemas, group, producing, records)


def test_kill_9_of_the_output_leader_under_a_real_time_group_loses_nothing(
    cluster: ApacheKafkaCluster,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    config = parse_query_group(real_time(raw), env={})
    records = flights[:TUPLES]
    group, producing = start_writing(cluster, config, running_group, schemas, records, pace_s=1.0)
    wait_until(lambda: output_tuples(cluster.bootstrap_servers, config) > 0, 180, "first output")
    producing.go()
    assert producing.put_count < TUPLES, "the producer finished before the fault"
    topic = config.output_streams["flights_copy"].topic
    kill_and_restart(cluster, cluster.node_of_broker(leader_node(cluster, topic)))
    producing.join(timeout_s=400)
    assert not producing.retries, "\n\n".join(producing.retries)
    # At least once: a batch cut short by the fault is written again, its tuples twice.
    replays = check_delivery(
        cluster.bootstrap_servers, config, schemas, records, group=group, at_least_once=True
    )
    assert sum(replays.values()) <= TUPLES, replays


def kill_coordinator_before_commit(
    cluster: ApacheKafkaCluster,
    config: QueryGroupConfig,
    victim: int,
    key: tuple[str, int],
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    paused: PausedCommit,
    schemas: SchemaRepository,
    records: list[dict[str, Any]],
) -> None:
    """Run the group until batch ``paused.batch_id`` stands before its commit, SIGKILL
    node ``victim``, the coordinator of ``key`` (``(key, FindCoordinator key type)``:
    asked of the broker first), and let the batch commit at once (its coordinator
    dead); restart the node; then the checks."""
    group, producing = start_writing(cluster, config, running_group, schemas, records, pace_s=1.0)
    paused.wait_reached(timeout_s=180)
    producing.go()
    node = cluster.node_of_broker(victim)
    address = f"{cluster.host}:{node.port}"
    assert find_coordinator(address, *key) == victim, f"{key}'s coordinator is not {victim}"
    cluster.kill_node(node)
    paused.release()
    restart_once_fenced(cluster, node)
    finish(cluster, config, schemas, group, producing, records)


def test_kill_9_of_the_transaction_coordinator_before_commit_loses_and_duplicates_nothing(
    cluster: ApacheKafkaCluster,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    pause_before_commit: Callable[[int], PausedCommit],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    # Its own node: neither the group coordinator nor the controller.
    config = placed_run(cluster, tmp_path, lambda t, g, c: t not in (g, c))
    key = transactional_ids(config, "copy")[0]
    victim = cluster.transaction_coordinator(key)
    kill_coordinator_before_commit(
        cluster,
        config,
        victim,
        (key, TRANSACTION),
        running_group,
        pause_before_commit(2),
        schemas,
        flights[:1_500],
    )


def test_kill_9_of_the_group_coordinator_before_commit_loses_and_duplicates_nothing(
    cluster: ApacheKafkaCluster,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    pause_before_commit: Callable[[int], PausedCommit],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    # Its own node: neither the transaction coordinator nor the controller.
    config = placed_run(cluster, tmp_path, lambda t, g, c: g not in (t, c))
    key = transactional_ids(config, "copy")[0]  # its batch markers' consumer group
    victim = cluster.group_coordinator(key)
    kill_coordinator_before_commit(
        cluster,
        config,
        victim,
        (key, GROUP),
        running_group,
        pause_before_commit(2),
        schemas,
        flights[:1_500],
    )


def test_kill_9_of_the_active_controller_mid_stream_loses_and_duplicates_nothing(
    cluster: ApacheKafkaCluster,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> None:
    config = group_config(run_id, tmp_path, only_passthrough=True)
    records = flights[:1_500]
    group, producing = start_writing(cluster, config, running_group, schemas, records, pace_s=1.0)
    wait_until(lambda: output_tuples(cluster.bootstrap_servers, config) > 0, 180, "first output")
    producing.go()
    controller = cluster.active_controller()
    assert controller is not None, "no node logged the active controller"
    node = cluster.node_of_broker(controller)
    cluster.kill_node(node)
    wait_until(
        lambda: cluster.active_controller() not in (None, controller),
        NODE_WAIT_S,
        f"a controller other than node {controller} to be elected",
    )
    restart_once_fenced(cluster, node)
    finish(cluster, config, schemas, group, producing, records)


def test_sigstop_of_an_output_leader_past_the_transaction_timeout_loses_and_duplicates_nothing(
    cluster: ApacheKafkaCluster,
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    pause_before_commit: Callable[[int], PausedCommit],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    # The transaction coordinator lives: not the node stopped, nor the controller.
    config = placed_run(
        cluster,
        tmp_path,
        lambda t, g, c: t != c,
        kafka={
            "client": {
                "transaction.timeout.ms": SHORT_TRANSACTION_TIMEOUT_MS,
                "request.timeout.ms": SHORT_REQUEST_TIMEOUT_MS,
            }
        },
    )
    coordinator = cluster.transaction_coordinator(transactional_ids(config, "copy")[0])
    controller = cluster.active_controller()
    paused = pause_before_commit(2)
    records = flights[:1_500]
    group, producing = start_writing(cluster, config, running_group, schemas, records, pace_s=1.0)
    output = config.output_streams["flights_copy"].topic
    leaders = cluster.partition_leaders(output)
    stopped = next(
        (b for b in sorted(set(leaders.values())) if b not in (coordinator, controller)), None
    )
    assert stopped is not None, f"{output}'s leaders {leaders} are all coordinator or controller"
    paused.wait_reached(timeout_s=180)
    producing.go()
    node = cluster.node_of_broker(stopped)
    assert node.pid is not None
    os.kill(node.pid, signal.SIGSTOP)
    try:
        # The cluster fences the stopped node (broker.session.timeout.ms) and elects
        # new leaders; the coordinator aborts the open transaction past its timeout
        # and writes the abort markers to them: then no transaction is open.
        wait_until(lambda: fenced(cluster, node), NODE_WAIT_S, f"node {stopped} to be fenced")
        wait_until(
            lambda: not open_transactions(cluster.bootstrap_servers, [output]),
            NODE_WAIT_S,
            "the coordinator to abort the paused batch's transaction",
        )
        sink = group.sinks()["copy"]
        written = sink.batches_written
        paused.release()
        wait_until(
            lambda: sink.batches_written > written or group.state == QueryGroupState.FAILED,
            NODE_WAIT_S,
            "the paused batch to be written, or its query to fail",
        )
    finally:
        os.kill(node.pid, signal.SIGCONT)
    cluster.wait_in_sync(node, timeout_s=NODE_WAIT_S)
    if group.state == QueryGroupState.FAILED:
        # The coordinator fenced the paused task's producer when it aborted the
        # transaction (a bumped epoch); Spark retries the task with a new producer, and
        # the query fails only when every attempt did (each met the stopped node). The
        # error is on the query's sink, and a restart replays the batch from the
        # checkpoint.
        assert isinstance(sink.last_error, QueryGroupError), repr(sink.last_error)
        assert (sink.last_error.query_group, sink.last_error.query) == (config.name, "copy")
        group.stop()
        group = running_group(config, cluster.bootstrap_servers)
    finish(cluster, config, schemas, group, producing, records)
