"""Apache Kafka's own broker, run by Floodgate: one KRaft node, or a 3-node cluster.

Each node is one JVM running ``kafka.Kafka`` with ``process.roles=broker,controller``
(KRaft combined mode) on loopback (or, with ``node_hosts``, each on an address of its
own, e.g. in a network namespace of its own), its controller quorum fixed by
``controller.quorum.voters``. A node's log directory is formatted with Kafka's
``StorageTool`` on its first start and kept across restarts. Clients reach the
cluster at :attr:`ApacheKafkaCluster.bootstrap_servers`; every node is stopped by its
PID.

Layout of the data directory::

    <data_dir>/cluster.json          cluster id and ports, reused by a restart
    <data_dir>/node-<id>/server.properties
    <data_dir>/node-<id>/broker.log  what the JVM printed
    <data_dir>/node-<id>/logs/       the node's log directory (log.dirs)

Every file and folder in it is ours alone (the log directories hold every
tuple): the folders 0700, the files Floodgate writes 0600
(:func:`pipeline.state.files.private_file`), and the JVMs (``StorageTool``, each
node) run with umask 077, so what Kafka writes is 0600 too. An existing data folder
that others can enter is set to 0700; one others can write to, or another user owns,
is refused (:func:`pipeline.brokers.engines.private_data_dir`).

Broker settings (:func:`broker_properties`) are Kafka's defaults but for what a test
machine of 2 cores needs, each said where it is set. With ``sasl_users`` the client
listener is ``SASL_PLAINTEXT`` with mechanism ``PLAIN`` (KIP-43; Kafka's
``PlainLoginModule``), so a client must authenticate as one of those users
(:meth:`ApacheKafkaCluster.client_config`); with ``sasl_mechanism`` SCRAM the
clients authenticate with SCRAM (KIP-84), the users' credentials written by
``StorageTool format --add-scram`` (KIP-900), while the brokers keep PLAIN among
themselves. The KRaft controller listener stays PLAINTEXT on loopback. A 3-node
cluster creates topics with replication factor 3 and ``min.insync.replicas=2`` by
default, so a producer with ``acks=all`` keeps writing while any one node is down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.brokers.apache_kafka.artifacts import APACHE_KAFKA_VERSION, java_command
from pipeline.brokers.apache_kafka.config import (
    INTER_BROKER_USER,
    SASL_MECHANISMS,
    KafkaNode,
    SaslMechanism,
    broker_properties,
    check_sasl_users,
    new_cluster_id,
    plan_nodes,
    properties_text,
    sasl_client_config,
    save_layout,
    saved_layout,
    scram_arguments,
)
from pipeline.brokers.apache_kafka.processes import (
    KafkaJvm,
    active_controller,
    check_alive,
    output_tail,
    signal_and_wait,
)
from pipeline.brokers.engines import private_data_dir
from pipeline.errors import BrokerError, ConfigError
from pipeline.kafka.clients import kafka_settings
from pipeline.state.files import write_private_text

log = logging.getLogger(__name__)

#: How long a cluster may take to format and start, seconds, after its jars are cached.
#: A single node answers in 5-10 s here; three JVMs on 2 cores take 20-40 s.
START_TIMEOUT_S = 90.0

#: The JVM's heap per node, MiB. Kafka's own scripts default to 1 GiB; half is plenty
#: for a test cluster and keeps three nodes beside Spark on one machine.
HEAP_MB = 512


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: ``s[0]*31^(n-1) + ... + s[n-1]`` over
    its UTF-16 code units, as a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of an internal topic that holds consumer group or transactional id
    ``key``: ``Utils.abs(key.hashCode()) % partitions``, as Kafka's
    ``GroupCoordinator.partitionFor`` (``__consumer_offsets``) and
    ``TransactionStateManager.partitionFor`` (``__transaction_state``) compute it
    (``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0). Its leader is the key's coordinator.
    """
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class ApacheKafkaCluster:
    """An Apache Kafka cluster of ``nodes`` KRaft nodes, run as child processes.

    Args:
        nodes: 1 (a single broker) or more (3 for a replicated cluster).
        data_dir: where the nodes keep their logs; ``None``: a new temporary
            directory, removed on :meth:`stop`. A directory an earlier cluster used
            restarts that cluster (same cluster id, node ids and ports).
        port: the first node's broker port; ``None``: a free loopback port (or the
            one an earlier run on ``data_dir`` used).
        host: the address to bind and advertise (loopback by default).
        version: the Apache Kafka release (fetched by :func:`kafka_libs`).
        heap_mb: each JVM's heap, MiB.
        overrides: ``server.properties`` entries over :func:`broker_properties`.
        sasl_users: ``{name: password}``: clients must authenticate with SASL/PLAIN
            as one of them (:meth:`client_config`); ``None``: a PLAINTEXT listener.
        sasl_mechanism: the clients' SASL mechanism with ``sasl_users``: ``PLAIN``
            (default), ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (the users' SCRAM
            credentials are written when a node is formatted).
        node_hosts: each node's own address, one per node (e.g. each in a network
            namespace of its own, where ``host`` is not local); every node then
            listens on ``port`` (default 9092) and its controller on 9093. ``None``:
            every node on ``host``, on ports of its own.
        node_command_prefixes: words run before each node's JVM command, one tuple
            per node (:attr:`KafkaNode.command_prefix`), e.g. ``ip netns exec <ns>``.

    Raises:
        ValueError: ``nodes`` < 1, or ``node_hosts`` / ``node_command_prefixes`` not
            one per node.
        ConfigError: a SASL user or password Kafka cannot take
            (:func:`check_sasl_users`), or a mechanism not in :data:`SASL_MECHANISMS`.
    """

    engine: Literal["apache-kafka"] = "apache-kafka"

    def __init__(
        self,
        *,
        nodes: int = 1,
        data_dir: str | Path | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        version: str = APACHE_KAFKA_VERSION,
        heap_mb: int = HEAP_MB,
        overrides: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_mechanism: SaslMechanism = "PLAIN",
        node_hosts: Sequence[str] | None = None,
        node_command_prefixes: Sequence[Sequence[str]] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be 1 or more, got {nodes}")
        if node_hosts is not None and len(node_hosts) != nodes:
            raise ValueError(f"node_hosts: one per node ({nodes}), got {len(node_hosts)}")
        if node_command_prefixes is not None and len(node_command_prefixes) != nodes:
            raise ValueError(
                f"node_command_prefixes: one per node ({nodes}), got {len(node_command_prefixes)}"
            )
        if sasl_users is not None:
            check_sasl_users(sasl_users)
        if sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"sasl_mechanism {sasl_mechanism!r} is not one Floodgate's broker runs",
                key="sasl_mechanism",
                value=sasl_mechanism,
                allowed=", ".join(SASL_MECHANISMS),
            )
        #: The clients' SASL mechanism (with :attr:`sasl_users`).
        self.sasl_mechanism: SaslMechanism = sasl_mechanism
        #: ``{name: password}`` of the SASL/PLAIN listener, the brokers' own user
        #: included (a random password, new at each start of this object); ``None``:
        #: a PLAINTEXT listener.
        self.sasl_users: dict[str, str] | None = (
            {**sasl_users, INTER_BROKER_USER: secrets.token_urlsafe(24)}
            if sasl_users is not None
            else None
        )
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="floodgate-kafka-"))
        )
        self.host = host
        self.version = version
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})
        saved = saved_layout(self.data_dir)
        if saved and len(saved["nodes"]) != nodes:
            raise BrokerError(
                f"{self.data_dir} holds a {len(saved['nodes'])}-node cluster; "
                f"asked for {nodes} nodes"
            )
        self.cluster_id: str = saved["cluster_id"] if saved else new_cluster_id()
        self.nodes: list[KafkaNode] = plan_nodes(
            nodes,
            self.data_dir,
            saved=saved,
            host=host,
            port=port,
            node_hosts=node_hosts,
            node_command_prefixes=node_command_prefixes,
        )

    # -- addresses and processes ------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every node's broker listener."""
        return ",".join(self.address(node) for node in self.nodes)

    def address(self, node: KafkaNode) -> str:
        """``host:port`` of ``node``'s broker listener."""
        return f"{node.host or self.host}:{node.port}"

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """The librdkafka properties a client needs besides ``bootstrap.servers``
        (:func:`~pipeline.brokers.apache_kafka.config.sasl_client_config` of ``user``,
        default: the first SASL user given; none for a PLAINTEXT listener).

        Raises:
            KeyError: ``user`` is not one of the cluster's SASL users.
        """
        return sasl_client_config(self.sasl_users, self.sasl_mechanism, user)

    @property
    def pid(self) -> int | None:
        """The first running node's PID (``None`` when no node runs)."""
        return next((node.pid for node in self.nodes if node.pid is not None), None)

    @property
    def pids(self) -> list[int | None]:
        """Each node's PID, ``None`` for a node that is not running."""
        return [node.pid for node in self.nodes]

    def node_of_broker(self, broker_id: int) -> KafkaNode:
        """The node whose ``node.id`` is ``broker_id`` (a partition leader's id).

        Raises:
            KeyError: no such node.
        """
        for node in self.nodes:
            if node.node_id == broker_id:
                return node
        raise KeyError(broker_id)

    def active_controller(self) -> int | None:
        """The ``node.id`` of the KRaft quorum's active controller, as the running nodes
        last logged it (:func:`~pipeline.brokers.apache_kafka.processes.active_controller`),
        or ``None`` if none did."""
        return active_controller(self.nodes)

    # -- coordinators and replicas -------------------------------------------

    def _admin(self, bootstrap_servers: str | None = None) -> AdminClient:
        """An admin client of the cluster (or of ``bootstrap_servers``, some of its
        nodes), as the brokers' own user on a SASL listener."""
        user = INTER_BROKER_USER if self.sasl_users else None
        return AdminClient(
            kafka_settings(
                bootstrap_servers or self.bootstrap_servers,
                {"socket.timeout.ms": 2000, **self.client_config(user)},
            )
        )

    def partition_leaders(self, topic: str, *, timeout_s: float = 10.0) -> dict[int, int]:
        """``{partition: leader's node.id}`` of ``topic`` in the metadata a client sees
        (``-1``: no leader now).

        Raises:
            KafkaException: the metadata request failed.
            KeyError: the cluster has no such topic.
        """
        metadata = self._admin().list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise KeyError(topic)
        return {p.id: p.leader for p in described.partitions.values()}

    def _coordinator(self, internal_topic: str, key: str) -> int:
        leaders = self.partition_leaders(internal_topic)
        return leaders[coordinator_partition(key, len(leaders))]

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The ``node.id`` of the transaction coordinator of ``transactional_id``: the
        leader of its partition of ``__transaction_state`` (Kafka's
        ``TransactionStateManager.partitionFor``, :func:`coordinator_partition`).

        Raises:
            KeyError: ``__transaction_state`` does not exist yet (no transactional
                producer has started on this cluster).
            KafkaException: the metadata request failed.
        """
        return self._coordinator("__transaction_state", transactional_id)

    def group_coordinator(self, group_id: str) -> int:
        """The ``node.id`` of the group coordinator of consumer group ``group_id``: the
        leader of its partition of ``__consumer_offsets`` (Kafka's
        ``GroupCoordinator.partitionFor``, :func:`coordinator_partition`).

        Raises:
            KeyError: ``__consumer_offsets`` does not exist yet (no group has
                committed on this cluster).
            KafkaException: the metadata request failed.
        """
        return self._coordinator("__consumer_offsets", group_id)

    def out_of_sync(self, node: KafkaNode, *, timeout_s: float = 10.0) -> list[str]:
        """The partitions (``topic/partition``, internal topics included) that have
        ``node`` among their replicas but not in their in-sync replica set (ISR), in
        the metadata a client sees; empty when ``node`` is in sync everywhere.

        Raises:
            KafkaException: the metadata request failed.
        """
        metadata = self._admin().list_topics(timeout=timeout_s)
        return sorted(
            f"{topic.topic}/{p.id}"
            for topic in metadata.topics.values()
            for p in topic.partitions.values()
            if node.node_id in p.replicas and node.node_id not in p.isrs
        )

    def wait_in_sync(self, node: KafkaNode, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until ``node`` is back in the ISR of every partition it replicates
        (:meth:`out_of_sync` empty): a restarted broker is registered at once
        (:meth:`start_node`), but rejoins a partition's ISR only once its follower has
        fetched up to the leader's high watermark (Kafka's ``replica.lag.time.max.ms``
        rule); until then one more node lost leaves a partition below
        ``min.insync.replicas``.

        Raises:
            BrokerError: the node exited, or it was not in sync within ``timeout_s``
                (names the partitions still out of sync).
        """
        deadline = time.monotonic() + timeout_s
        behind: list[str] = ["(no metadata yet)"]
        while True:
            self._check_alive(node)
            with contextlib.suppress(KafkaException):  # a node coming back
                behind = self.out_of_sync(node, timeout_s=2.0)
            if not behind:
                return
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"Apache Kafka node {node.node_id} was not back in the ISR within "
                    f"{timeout_s:.0f} s; out of sync: {', '.join(behind[:10])}",
                    output=self.output_tail(node),
                )
            time.sleep(0.2)

    # -- start ----------------------------------------------------------------

    def _write_properties(self, node: KafkaNode) -> None:
        private_data_dir(node.directory)
        properties = broker_properties(
            node,
            self.nodes,
            host=self.host,
            overrides=self.overrides,
            sasl_users=self.sasl_users,
            sasl_mechanism=self.sasl_mechanism,
        )
        # With SASL users: their passwords; a private file.
        write_private_text(node.properties_path, properties_text(properties))

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> ApacheKafkaCluster:
        """Format what is new, start every node that is not running, and wait until
        every broker is registered in the cluster's metadata.

        The jars are fetched first if they are not cached (:func:`kafka_libs`); that
        time does not count against ``timeout_s``.

        Raises:
            BrokerError: Java or Maven is missing, the fetch failed, a node exited,
                or the cluster did not answer in time (names the command and the tail
                of each node's output). Nodes this call started are stopped again.
            ConfigError: the data folder (or a node's) is another user's, or others
                can write to it (:func:`~pipeline.brokers.engines.private_data_dir`);
                nothing started.
        """
        private_data_dir(self.data_dir)  # refused before anything is fetched or started
        jvm = self._jvm()
        jvm.classpath()  # fetch before the clock starts
        save_layout(self.data_dir, self.cluster_id, self.version, self.nodes)
        for node in self.nodes:
            self._write_properties(node)
        scram = scram_arguments(self.sasl_users, self.sasl_mechanism)
        for node in self.nodes:
            jvm.format(node, self.cluster_id, scram)
        started = [node for node in self.nodes if node.pid is None]
        for node in started:
            jvm.spawn(node)
        try:
            self.wait_ready(timeout_s=timeout_s)
        except BrokerError:
            for node in started:
                signal_and_wait(node, signal.SIGKILL, 10.0)
            raise
        log.info(
            "Apache Kafka %s up at %s (pids %s)",
            self.version,
            self.bootstrap_servers,
            ", ".join(str(p) for p in self.pids),
        )
        return self

    def _jvm(self) -> KafkaJvm:
        return KafkaJvm(java_command(), self.version, self.heap_mb)

    def start_node(self, node: KafkaNode, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start one stopped node again on its data (after :meth:`kill_node`), and wait
        until the cluster's metadata lists it.

        Raises:
            BrokerError: it exited or did not register in time.
        """
        if node.pid is None:
            self._jvm().spawn(node)
        self.wait_ready(timeout_s=timeout_s)

    def wait_ready(self, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until every running node's broker is in the metadata a client sees.

        Raises:
            BrokerError: a node exited, or the brokers did not register in time.
        """
        deadline = time.monotonic() + timeout_s
        running = [node for node in self.nodes if node.process is not None]
        for node in running:  # the port first: librdkafka logs every refused connection
            while True:
                self._check_alive(node)
                try:
                    socket.create_connection((node.host or self.host, node.port), 0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise self._not_ready(timeout_s) from None
                    time.sleep(0.1)
        wanted = {node.node_id for node in running}
        admin = self._admin(",".join(self.address(n) for n in running))
        while True:
            for node in running:
                self._check_alive(node)
            try:
                brokers = set(admin.list_topics(timeout=2.0).brokers)
                if wanted <= brokers:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise self._not_ready(timeout_s)
            time.sleep(0.2)

    def _not_ready(self, timeout_s: float) -> BrokerError:
        return BrokerError(
            f"Apache Kafka at {self.bootstrap_servers} did not register every broker "
            f"within {timeout_s:.0f} s",
            output=output_tail(self.nodes),
        )

    def _check_alive(self, node: KafkaNode) -> None:
        check_alive(node, self.nodes)

    def output_tail(self, node: KafkaNode | None = None, lines: int = 20) -> str:
        """What a node printed that tells why it failed (default: every node's):
        :func:`~pipeline.brokers.apache_kafka.processes.output_tail`."""
        return output_tail(self.nodes, node, lines)

    # -- stop -----------------------------------------------------------------

    def kill_node(self, node: KafkaNode, *, sig: int = signal.SIGKILL) -> None:
        """Signal one node (``SIGKILL`` by default: a crash) and wait for it to exit."""
        signal_and_wait(node, sig, 60.0)

    def stop(self, *, timeout_s: float = 30.0, remove_data: bool | None = None) -> None:
        """Stop every node by its PID: SIGTERM to all (Kafka's controlled shutdown,
        which flushes the logs), then SIGKILL after ``timeout_s`` to what is left.

        Args:
            remove_data: remove the data directory; default: only if it was a
                temporary one made by this object.
        """
        remove = remove_data if remove_data is not None else self._own_dir
        for node in self.nodes:
            if node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            signal_and_wait(node, None, max(0.1, deadline - time.monotonic()))
        if remove:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
