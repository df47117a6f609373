"""One partitionable 3-node Apache Kafka cluster for the module's tests.

Each broker runs in a network namespace of its own, on an address of its own
(``ip netns exec``: :class:`~pipeline.brokers.apache_kafka.ApacheKafkaCluster` with
``node_hosts`` and ``node_command_prefixes``); the test process, and so the query
group's driver in the session's SparkSession with its local-mode executors, is a
spoke from the root namespace; the producer is a process in a namespace of its own
(:mod:`tests.integration.faults.network.producer`), so that cutting the driver leaves
it writing. A partition is a blackhole rule of the hub (:mod:`.netns`).

Teardown, whatever the tests did: every partition healed, the brokers stopped by
their PIDs, then every namespace and link removed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from tests.integration.faults.network.netns import Host, PrivateNetwork


@dataclass
class Lab:
    """The network and the cluster in it.

    Attributes:
        network: the namespaces and their partitions.
        cluster: the 3-node cluster (each node in its broker's namespace).
        driver: the root namespace's spoke (the test process, the driver).
        producer: the producer's namespace.
        brokers: the brokers' spokes by ``node.id``.
    """

    network: PrivateNetwork
    cluster: ApacheKafkaCluster
    driver: Host
    producer: Host
    brokers: dict[int, Host]

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def producer_command(self, *args: str) -> list[str]:
        """``python -m tests.integration.faults.network.producer <args>`` in the
        producer's namespace."""
        module = "tests.integration.faults.network.producer"
        return self.producer.command([sys.executable, "-m", module, *args])


#: Broker settings of the lab over the 3-node defaults: the coordinator looks for
#: transactions past their timeout every second instead of every 10 s
#: (``transaction.abort.timed.out.transaction.cleanup.interval.ms``), so that the test
#: of a partition longer than the transaction timeout need not wait for the sweep.
OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    network = PrivateNetwork()
    cluster: ApacheKafkaCluster | None = None
    try:
        driver = network.add("driver", root=True)
        producer = network.add("producer")
        brokers = {i: network.add(f"k{i}") for i in (1, 2, 3)}
        cluster = ApacheKafkaCluster(
            nodes=3,
            data_dir=Path(tmp_path_factory.mktemp("partitions")) / "cluster",
            node_hosts=[brokers[i].address for i in (1, 2, 3)],
            node_command_prefixes=[brokers[i].command([]) for i in (1, 2, 3)],
            overrides=OVERRIDES,
        )
        cluster.start()
        yield Lab(network, cluster, driver, producer, brokers)
    finally:
        try:
            network.heal()
            if cluster is not None:
                cluster.stop()
        finally:
            network.close()
